/**
 * The same test API on every adapter, each written the way a user of that framework writes
 * it (res.json, reply.send, ctx.body, ...), listening on 127.0.0.1 on an ephemeral port.
 *
 *   POST /payments          201 JSON, Location, Set-Cookie, X-Request-Id (from the body's amount)
 *   PATCH /payments         200 JSON                       GET|PUT /payments   200 JSON
 *   POST /slow?ms=&status=  answers after `ms`             POST /status/:n     answers n
 *   POST /fail-500          answers 500                    POST /throw         throws
 *   POST /throw-400         throws an error with status 400 (the framework's way)
 *   POST /big?bytes=        a large body                   POST /stream        a streamed body
 *   POST /echo-body         the body as the handler finds it (parsed)
 *   POST /off               idempotency turned off for this route, the framework's way
 *
 * The fetch adapter runs behind a small Node bridge (./fetch-server.ts), Hono behind
 * `@hono/node-server`: both as a user serves them on Node.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import { bodyParser } from '@koa/bodyparser';
import Router from '@koa/router';
import { createAdaptorServer } from '@hono/node-server';
import express5 from 'express';
import express4 from 'express4';
import Fastify from 'fastify';
import { Hono } from 'hono';
import { HTTPException } from 'hono/http-exception';
import { stream as honoStream } from 'hono/streaming';
import Koa3 from 'koa';
import Koa2 from 'koa2';
import { idempotency as expressIdempotency } from '../../adapters/express.js';
import { idempotency as fastifyIdempotency } from '../../adapters/fastify.js';
import { withIdempotency as withFetchIdempotency } from '../../adapters/fetch.js';
import { idempotency as honoIdempotency } from '../../adapters/hono.js';
import { idempotency as koaIdempotency } from '../../adapters/koa.js';
import { withIdempotency, type IdempotentRequest } from '../../adapters/node.js';
import type { IdempotencyOptions } from '../../src/http.js';
import { fetchServer } from './fetch-server.js';

export const ADAPTERS = ['node', 'express', 'express4', 'fastify', 'koa', 'koa2', 'fetch', 'hono'] as const;
export type AdapterName = (typeof ADAPTERS)[number];

/** Options as every adapter takes them; `scope` / `fingerprint` read `.headers`, which all requests have. */
export type AppOptions = IdempotencyOptions<{ headers: http.IncomingHttpHeaders }>;

export interface RunningApp {
  adapter: AdapterName;
  url: string;
  port: number;
  /** How many times each route's handler ran. */
  calls: Calls;
  close(): Promise<void>;
}

export class Calls {
  readonly #counts = new Map<string, number>();
  hit(route: string): number {
    const n = (this.#counts.get(route) ?? 0) + 1;
    this.#counts.set(route, n);
    return n;
  }
  count(route: string): number {
    return this.#counts.get(route) ?? 0;
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** What the routes answer, the same on every adapter. */
const answers = {
  payment: (n: number, body: unknown) => ({
    id: `pay_${n}`,
    amount: (body as { amount?: unknown } | undefined)?.amount ?? null,
    n,
  }),
  paymentHeaders: (n: number) => ({
    location: `/payments/pay_${n}`,
    'set-cookie': `session=s_${n}; Path=/`,
    'x-request-id': `req_${n}`,
  }),
  big: (bytes: number, n: number) => `${n}:`.padEnd(bytes, 'x'),
  stream: (n: number) => Readable.from([`chunk-1;`, `chunk-2;`, `n=${n}`]),
};

const query = (url: string, name: string, fallback: number): number => {
  const value = new URL(url, 'http://x').searchParams.get(name);
  return value === null ? fallback : Number(value);
};

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

// ---------------------------------------------------------------- Node http

async function readAll(req: http.IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

function nodeApp(options: AppOptions, calls: Calls): http.Server {
  const json = (res: http.ServerResponse, status: number, body: unknown, headers: http.OutgoingHttpHeaders = {}) => {
    res.writeHead(status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(body));
  };
  const routes = async (req: IdempotentRequest, res: http.ServerResponse) => {
    const url = req.url ?? '/';
    const path = new URL(url, 'http://x').pathname;
    const route = `${req.method} ${path}`;
    if (route === 'POST /payments') {
      const n = calls.hit('payments');
      return json(res, 201, answers.payment(n, req.body), answers.paymentHeaders(n));
    }
    if (route === 'PATCH /payments') return json(res, 200, answers.payment(calls.hit('payments'), req.body));
    if (path === '/payments') return json(res, 200, { n: calls.hit('list') });
    if (route === 'POST /slow') {
      const n = calls.hit('slow');
      await sleep(query(url, 'ms', 100));
      return json(res, query(url, 'status', 201), { n });
    }
    if (path.startsWith('/status/')) return json(res, Number(path.slice(8)), { n: calls.hit('status') });
    if (route === 'POST /fail-500') return json(res, 500, { n: calls.hit('fail-500') });
    if (route === 'POST /throw') {
      calls.hit('throw');
      throw new Error('boom');
    }
    if (route === 'POST /throw-400') {
      calls.hit('throw-400');
      throw new HttpError(400, 'bad request');
    }
    if (route === 'POST /big') {
      res.writeHead(200, { 'content-type': 'text/plain' });
      return res.end(answers.big(query(url, 'bytes', 4096), calls.hit('big')));
    }
    if (route === 'POST /stream') {
      res.writeHead(201, { 'content-type': 'text/plain' });
      answers.stream(calls.hit('stream')).pipe(res);
      return;
    }
    if (route === 'POST /echo-body') {
      calls.hit('echo-body');
      return json(res, 200, { body: req.body });
    }
    if (route === 'POST /off') return json(res, 201, { n: calls.hit('off') });
    json(res, 404, { error: 'not found' });
  };
  const protectedRoutes = withIdempotency(routes, {
    ...options,
    onError: (error, _req, res) => {
      if (res.headersSent) return void res.destroy();
      json(res, error instanceof HttpError ? error.status : 500, { error: String(error) });
    },
  });
  return http.createServer((req, res) => {
    // The Node adapter wraps a handler: an unprotected route is one not wrapped.
    if (req.url === '/off') return void routes(req, res);
    void protectedRoutes(req, res);
  });
}

// ---------------------------------------------------------------- Express 5 and 4

function expressApp(express: typeof express5, options: AppOptions, calls: Calls): http.Server {
  type Handler = (req: express5.Request, res: express5.Response) => unknown;
  // Express 4 does not catch rejected promises: pass them on as Express 5 does.
  const route =
    (handler: Handler): express5.RequestHandler =>
    (req, res, next) => {
      Promise.resolve()
        .then(() => handler(req, res))
        .catch(next);
    };
  const app = express();
  app.set('env', 'test'); // the default error handler answers without logging
  app.post('/off', route((_req, res) => res.status(201).json({ n: calls.hit('off') })));
  // Before the body parser: the adapter reads the body and leaves it to express.json().
  app.use(expressIdempotency(options));
  app.use(express.json());
  app.post(
    '/payments',
    route((req, res) => {
      const n = calls.hit('payments');
      const headers = answers.paymentHeaders(n);
      res.cookie('session', `s_${n}`, { path: '/' });
      res.status(201).location(headers.location).set('x-request-id', headers['x-request-id']).json(answers.payment(n, req.body));
    }),
  );
  app.patch('/payments', route((req, res) => res.json(answers.payment(calls.hit('payments'), req.body))));
  app.all('/payments', route((_req, res) => res.json({ n: calls.hit('list') })));
  app.post(
    '/slow',
    route(async (req, res) => {
      const n = calls.hit('slow');
      await sleep(query(req.originalUrl, 'ms', 100));
      res.status(query(req.originalUrl, 'status', 201)).json({ n });
    }),
  );
  app.post('/status/:n', route((req, res) => res.status(Number(req.params.n)).json({ n: calls.hit('status') })));
  app.post('/fail-500', route((_req, res) => res.status(500).json({ n: calls.hit('fail-500') })));
  app.post(
    '/throw',
    route(() => {
      calls.hit('throw');
      throw new Error('boom');
    }),
  );
  app.post(
    '/throw-400',
    route(() => {
      calls.hit('throw-400');
      throw Object.assign(new Error('bad request'), { status: 400, expose: true });
    }),
  );
  app.post(
    '/big',
    route((req, res) => res.type('text/plain').send(answers.big(query(req.originalUrl, 'bytes', 4096), calls.hit('big')))),
  );
  app.post(
    '/stream',
    route((_req, res) => {
      res.status(201).type('text/plain');
      answers.stream(calls.hit('stream')).pipe(res);
    }),
  );
  app.post('/echo-body', route((req, res) => res.json({ body: req.body, n: calls.hit('echo-body') })));
  return http.createServer(app);
}

// ---------------------------------------------------------------- Fastify

async function fastifyApp(options: AppOptions, calls: Calls): Promise<{ server: http.Server; close: () => Promise<void> }> {
  const app = Fastify({ logger: false });
  await app.register(fastifyIdempotency, options);
  app.post('/off', { config: { idempotency: false } }, async (_request, reply) => reply.code(201).send({ n: calls.hit('off') }));
  app.post('/payments', async (request, reply) => {
    const n = calls.hit('payments');
    reply.code(201).headers(answers.paymentHeaders(n));
    return answers.payment(n, request.body);
  });
  app.patch('/payments', async (request) => answers.payment(calls.hit('payments'), request.body));
  app.route({ method: ['GET', 'PUT'], url: '/payments', handler: async () => ({ n: calls.hit('list') }) });
  app.post('/slow', async (request, reply) => {
    const n = calls.hit('slow');
    await sleep(query(request.url, 'ms', 100));
    return reply.code(query(request.url, 'status', 201)).send({ n });
  });
  app.post<{ Params: { n: string } }>('/status/:n', async (request, reply) =>
    reply.code(Number(request.params.n)).send({ n: calls.hit('status') }),
  );
  app.post('/fail-500', async (_request, reply) => reply.code(500).send({ n: calls.hit('fail-500') }));
  app.post('/throw', async () => {
    calls.hit('throw');
    throw new Error('boom');
  });
  app.post('/throw-400', async () => {
    calls.hit('throw-400');
    throw Object.assign(new Error('bad request'), { statusCode: 400 });
  });
  app.post('/big', async (request, reply) =>
    reply.type('text/plain').send(answers.big(query(request.url, 'bytes', 4096), calls.hit('big'))),
  );
  app.post('/stream', async (_request, reply) => reply.code(201).type('text/plain').send(answers.stream(calls.hit('stream'))));
  app.post('/echo-body', async (request) => ({ body: request.body, n: calls.hit('echo-body') }));
  await app.listen({ port: 0, host: '127.0.0.1' });
  return { server: app.server, close: () => app.close() };
}

// ---------------------------------------------------------------- Koa 3 and 2

function koaApp(KoaClass: typeof Koa3, options: AppOptions, calls: Calls): http.Server {
  const app = new KoaClass();
  app.silent = true; // errors answered without logging
  app.use(async (ctx, next) => {
    // An unprotected route: answered before the idempotency middleware.
    if (ctx.path !== '/off') return next();
    ctx.status = 201;
    ctx.body = { n: calls.hit('off') };
  });
  // Before the body parser: the adapter reads the body and leaves it to @koa/bodyparser.
  app.use(koaIdempotency(options));
  app.use(bodyParser());
  const router = new Router();
  router.post('/payments', (ctx) => {
    const n = calls.hit('payments');
    ctx.status = 201;
    ctx.set(answers.paymentHeaders(n));
    ctx.body = answers.payment(n, ctx.request.body);
  });
  router.patch('/payments', (ctx) => {
    ctx.body = answers.payment(calls.hit('payments'), ctx.request.body);
  });
  router.get('/payments', (ctx) => {
    ctx.body = { n: calls.hit('list') };
  });
  router.put('/payments', (ctx) => {
    ctx.body = { n: calls.hit('list') };
  });
  router.post('/slow', async (ctx) => {
    const n = calls.hit('slow');
    await sleep(query(ctx.url, 'ms', 100));
    ctx.status = query(ctx.url, 'status', 201);
    ctx.body = { n };
  });
  router.post('/status/:n', (ctx) => {
    ctx.status = Number(ctx.params.n);
    ctx.body = { n: calls.hit('status') };
  });
  router.post('/fail-500', (ctx) => {
    ctx.status = 500;
    ctx.body = { n: calls.hit('fail-500') };
  });
  router.post('/throw', () => {
    calls.hit('throw');
    throw new Error('boom');
  });
  router.post('/throw-400', (ctx) => {
    calls.hit('throw-400');
    ctx.throw(400, 'bad request');
  });
  router.post('/big', (ctx) => {
    ctx.type = 'text/plain';
    ctx.body = answers.big(query(ctx.url, 'bytes', 4096), calls.hit('big'));
  });
  router.post('/stream', (ctx) => {
    ctx.status = 201;
    ctx.type = 'text/plain';
    ctx.body = answers.stream(calls.hit('stream'));
  });
  router.post('/echo-body', (ctx) => {
    ctx.body = { body: ctx.request.body, n: calls.hit('echo-body') };
  });
  app.use(router.routes());
  return http.createServer(app.callback());
}

// ---------------------------------------------------------------- fetch and Hono

/**
 * The suite's `scope` / `fingerprint` read `req.headers[name]`; a `Request` (and Hono's
 * context) keep headers in a `Headers` object: hand them a plain view.
 */
function viaHeaders<Raw>(options: AppOptions, headersOf: (raw: Raw) => Headers): IdempotencyOptions<Raw> {
  const view = (raw: Raw) => ({ headers: Object.fromEntries(headersOf(raw)) });
  const { scope, fingerprint, ...rest } = options;
  return {
    ...rest,
    ...(typeof scope === 'function' ? { scope: (raw: Raw) => scope(view(raw)) } : scope === undefined ? {} : { scope }),
    ...(typeof fingerprint === 'function' ? { fingerprint: (raw: Raw) => fingerprint(view(raw)) } : fingerprint ? { fingerprint } : {}),
  } as IdempotencyOptions<Raw>;
}

async function jsonOf(request: Request): Promise<unknown> {
  const text = await request.text();
  return text === '' ? undefined : JSON.parse(text);
}

function fetchApp(options: AppOptions, calls: Calls): http.Server {
  const json = (body: unknown, status = 200, headers: Record<string, string> = {}) =>
    Response.json(body, { status, headers });
  const routes = async (request: Request): Promise<Response> => {
    const url = new URL(request.url);
    const path = url.pathname;
    const route = `${request.method} ${path}`;
    if (route === 'POST /payments') {
      const n = calls.hit('payments');
      return json(answers.payment(n, await jsonOf(request)), 201, answers.paymentHeaders(n));
    }
    if (route === 'PATCH /payments') return json(answers.payment(calls.hit('payments'), await jsonOf(request)));
    if (path === '/payments') return json({ n: calls.hit('list') });
    if (route === 'POST /slow') {
      const n = calls.hit('slow');
      await sleep(query(request.url, 'ms', 100));
      return json({ n }, query(request.url, 'status', 201));
    }
    if (path.startsWith('/status/')) return json({ n: calls.hit('status') }, Number(path.slice(8)));
    if (route === 'POST /fail-500') return json({ n: calls.hit('fail-500') }, 500);
    if (route === 'POST /throw') {
      calls.hit('throw');
      throw new Error('boom');
    }
    if (route === 'POST /throw-400') {
      calls.hit('throw-400');
      throw new HttpError(400, 'bad request');
    }
    if (route === 'POST /big') {
      const body = answers.big(query(request.url, 'bytes', 4096), calls.hit('big'));
      return new Response(body, { headers: { 'content-type': 'text/plain' } });
    }
    if (route === 'POST /stream') {
      const chunks = answers.stream(calls.hit('stream'));
      const body = new ReadableStream<Uint8Array>({
        async pull(controller) {
          await sleep(5); // produced over time, as a real stream is: recorded as it streams
          const { done, value } = await chunks[Symbol.asyncIterator]().next();
          if (done) controller.close();
          else controller.enqueue(new TextEncoder().encode(value as string));
        },
      });
      return new Response(body, { status: 201, headers: { 'content-type': 'text/plain' } });
    }
    if (route === 'POST /echo-body') {
      calls.hit('echo-body');
      return json({ body: await jsonOf(request) });
    }
    if (route === 'POST /off') return json({ n: calls.hit('off') }, 201);
    return json({ error: 'not found' }, 404);
  };
  const protectedRoutes = withFetchIdempotency(routes, viaHeaders<Request>(options, (request) => request.headers));
  return fetchServer(async (request) => {
    try {
      // An unprotected route is one not wrapped.
      if (new URL(request.url).pathname === '/off') return await routes(request);
      return await protectedRoutes(request);
    } catch (error) {
      // The platform's error handling, outside the wrapper.
      return json({ error: String(error) }, error instanceof HttpError ? error.status : 500);
    }
  });
}

function honoApp(options: AppOptions, calls: Calls): http.Server {
  const app = new Hono();
  // Registered before the middleware: answered before it runs.
  app.post('/off', (c) => c.json({ n: calls.hit('off') }, 201));
  app.use(honoIdempotency(viaHeaders<import('hono').Context>(options, (c) => c.req.raw.headers)));
  const body = async (c: import('hono').Context) => ((await c.req.text()) === '' ? undefined : c.req.json());
  app.post('/payments', async (c) => {
    const n = calls.hit('payments');
    for (const [name, value] of Object.entries(answers.paymentHeaders(n))) c.header(name, value);
    return c.json(answers.payment(n, await body(c)), 201);
  });
  app.patch('/payments', async (c) => c.json(answers.payment(calls.hit('payments'), await body(c))));
  app.on(['GET', 'PUT'], '/payments', (c) => c.json({ n: calls.hit('list') }));
  app.post('/slow', async (c) => {
    const n = calls.hit('slow');
    await sleep(query(c.req.url, 'ms', 100));
    return c.json({ n }, query(c.req.url, 'status', 201) as 201);
  });
  app.post('/status/:n', (c) => c.json({ n: calls.hit('status') }, Number(c.req.param('n')) as 200));
  app.post('/fail-500', (c) => c.json({ n: calls.hit('fail-500') }, 500));
  app.post('/throw', () => {
    calls.hit('throw');
    throw new Error('boom');
  });
  app.post('/throw-400', () => {
    calls.hit('throw-400');
    throw new HTTPException(400, { message: 'bad request' });
  });
  app.post('/big', (c) => c.text(answers.big(query(c.req.url, 'bytes', 4096), calls.hit('big'))));
  app.post('/stream', (c) => {
    const n = calls.hit('stream');
    c.status(201);
    c.header('content-type', 'text/plain');
    return honoStream(c, async (out) => {
      for await (const chunk of answers.stream(n)) {
        await out.sleep(5); // produced over time, as a real stream is: recorded as it streams
        await out.write(chunk as string);
      }
    });
  });
  app.post('/echo-body', async (c) => c.json({ body: await c.req.json(), n: calls.hit('echo-body') }));
  app.onError((error, c) => c.json({ error: String(error) }, error instanceof HTTPException ? error.status : 500));
  return createAdaptorServer({ fetch: app.fetch }) as http.Server;
}

// ---------------------------------------------------------------- start

export async function startApp(adapter: AdapterName, appOptions: AppOptions): Promise<RunningApp> {
  // These apps have no users: one key space unless a test sets `scope` (`undefined`
  // included, to test the default of each adapter).
  const options: AppOptions = 'scope' in appOptions ? appOptions : { scope: 'shared', ...appOptions };
  const calls = new Calls();
  let server: http.Server;
  let close: (() => Promise<void>) | undefined;
  switch (adapter) {
    case 'node':
      server = nodeApp(options, calls);
      break;
    case 'express':
      server = expressApp(express5, options, calls);
      break;
    case 'express4':
      server = expressApp(express4, options, calls);
      break;
    case 'fastify':
      ({ server, close } = await fastifyApp(options, calls));
      break;
    case 'koa':
      server = koaApp(Koa3, options, calls);
      break;
    case 'koa2':
      server = koaApp(Koa2, options, calls);
      break;
    case 'fetch':
      server = fetchApp(options, calls);
      break;
    case 'hono':
      server = honoApp(options, calls);
      break;
  }
  if (!server.listening) await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    adapter,
    port,
    url: `http://127.0.0.1:${port}`,
    calls,
    close: async () => {
      server.closeAllConnections();
      if (close) await close();
      else await new Promise((resolve) => server.close(resolve));
    },
  };
}

export { readAll };
