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
import Koa3 from 'koa';
import Koa2 from 'koa2';
import { idempotency as expressIdempotency } from '../../adapters/express.js';
import { idempotency as fastifyIdempotency } from '../../adapters/fastify.js';
import { idempotency as koaIdempotency } from '../../adapters/koa/index.js';
import { withIdempotency, type IdempotentRequest } from '../../adapters/node.js';
import type { IdempotencyOptions } from '../../src/http.js';
import { fetchServer } from './fetch-server.js';
import { Calls, HttpError, answers as webAnswers, fetchWebApp, honoWebApp, query, sleep, type WebAppOptions } from './web-apps.js';

export { Calls };

/** The adapters whose apps are built here (see `AppBuilder`). */
export const ADAPTERS = ['node', 'express', 'express4', 'fastify', 'koa', 'koa2', 'fetch', 'hono'] as const;
export type AdapterName = (typeof ADAPTERS)[number];

/** Options as every adapter takes them; `scope` / `fingerprint` read `.headers`, which all requests have. */
export type AppOptions = IdempotencyOptions<{ headers: http.IncomingHttpHeaders }>;

/**
 * How a test file builds its adapter's app (the routes above, written the framework's way):
 * a server not yet listening, or one listening with its own `close`. Each adapter's test
 * file passes its builder to the conformance suite; `APPS` holds the builders more than one
 * test file uses (two Express majors, two Koa majors, the fingerprint upgrade test).
 */
export type AppBuilder = (options: AppOptions, calls: Calls) => http.Server | Promise<{ server: http.Server; close: () => Promise<void> }>;

export interface RunningApp {
  adapter: string;
  url: string;
  port: number;
  /** How many times each route's handler ran. */
  calls: Calls;
  close(): Promise<void>;
}

/** What the routes answer, the same on every adapter; a streamed body is a Node stream here. */
const answers = { ...webAnswers, stream: (n: number) => Readable.from(webAnswers.stream(n)) };

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

// ---------------------------------------------------------------- fetch and Hono (./web-apps.ts)

const fetchApp = (options: AppOptions, calls: Calls): http.Server => fetchServer(fetchWebApp(options as WebAppOptions, calls));

const honoApp = (options: AppOptions, calls: Calls): http.Server =>
  createAdaptorServer({ fetch: honoWebApp(options as WebAppOptions, calls).fetch }) as http.Server;

// ---------------------------------------------------------------- start

export const APPS: Record<AdapterName, AppBuilder> = {
  node: nodeApp,
  express: (options, calls) => expressApp(express5, options, calls),
  express4: (options, calls) => expressApp(express4, options, calls),
  fastify: fastifyApp,
  koa: (options, calls) => koaApp(Koa3, options, calls),
  koa2: (options, calls) => koaApp(Koa2, options, calls),
  fetch: fetchApp,
  hono: honoApp,
};

/** Start `adapter`'s app, built by `build` (one of `APPS` unless given). */
export async function startApp(adapter: string, appOptions: AppOptions, build: AppBuilder = APPS[adapter as AdapterName]): Promise<RunningApp> {
  if (build === undefined) throw new Error(`no app builder for the ${adapter} adapter: pass one`);
  // These apps have no users: one key space unless a test sets `scope` (`undefined`
  // included, to test the default of each adapter).
  const options: AppOptions = 'scope' in appOptions ? appOptions : { scope: 'shared', ...appOptions };
  const calls = new Calls();
  const built = await build(options, calls);
  const server = built instanceof http.Server ? built : built.server;
  const close = built instanceof http.Server ? undefined : built.close;
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
