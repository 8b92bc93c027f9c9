/**
 * The fetch and Hono apps of the conformance suite (./apps.ts), with web standards only,
 * so that the same apps run on Node (behind ./fetch-server.ts and @hono/node-server) and
 * inside workerd (test/cloudflare/). Also the routes' answers and the call counts, which
 * every adapter's app shares.
 */
import { Hono } from 'hono';
import { HTTPException } from 'hono/http-exception';
import { stream as honoStream } from 'hono/streaming';
import { withIdempotency as withFetchIdempotency } from '../../adapters/fetch.js';
import { idempotency as honoIdempotency } from '../../adapters/hono/index.js';
import type { IdempotencyOptions } from '../../src/http.js';

/** The suite's options; `scope` / `fingerprint` read `req.headers[name]` (see `viaHeaders`). */
export type WebAppOptions = IdempotencyOptions<{ headers: Record<string, string | string[] | undefined> }>;

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
  /** Every route's count, as plain data (for an app that runs in another process). */
  toJSON(): Record<string, number> {
    return Object.fromEntries(this.#counts);
  }
  /** Take the counts another process reported. */
  load(counts: Record<string, number>): void {
    this.#counts.clear();
    for (const [route, n] of Object.entries(counts)) this.#counts.set(route, n);
  }
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** What the routes answer, the same on every adapter. */
export const answers = {
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
  /** The parts of the streamed body, produced one by one. */
  stream: (n: number) => [`chunk-1;`, `chunk-2;`, `n=${n}`],
};

export const query = (url: string, name: string, fallback: number): number => {
  const value = new URL(url, 'http://x').searchParams.get(name);
  return value === null ? fallback : Number(value);
};

export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/**
 * The suite's `scope` / `fingerprint` read `req.headers[name]`; a `Request` (and Hono's
 * context) keep headers in a `Headers` object: hand them a plain view.
 */
export function viaHeaders<Raw>(options: WebAppOptions, headersOf: (raw: Raw) => Headers): IdempotencyOptions<Raw> {
  const view = (raw: Raw) => ({ headers: Object.fromEntries(headersOf(raw)) });
  const { scope, fingerprint, ...rest } = options;
  return {
    ...rest,
    ...(typeof scope === 'function' ? { scope: (raw: Raw) => scope(view(raw)) } : scope === undefined ? {} : { scope }),
    ...(typeof fingerprint === 'function' ? { fingerprint: (raw: Raw) => fingerprint(view(raw)) } : fingerprint ? { fingerprint } : {}),
  } as IdempotencyOptions<Raw>;
}

export async function jsonOf(request: Request): Promise<unknown> {
  const text = await request.text();
  return text === '' ? undefined : JSON.parse(text);
}

export function fetchWebApp(options: WebAppOptions, calls: Calls): (request: Request, ...platform: unknown[]) => Promise<Response> {
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
          const chunk = chunks.shift();
          if (chunk === undefined) controller.close();
          else controller.enqueue(new TextEncoder().encode(chunk));
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
  const protectedRoutes = withFetchIdempotency<Request, unknown[]>(routes, viaHeaders<Request>(options, (request) => request.headers));
  // `platform`: what the platform passes after the request (a Worker's env and ctx).
  return async function app(request, ...platform) {
    try {
      // An unprotected route is one not wrapped.
      if (new URL(request.url).pathname === '/off') return await routes(request);
      return await protectedRoutes(request, ...platform);
    } catch (error) {
      // The platform's error handling, outside the wrapper.
      return json({ error: String(error) }, error instanceof HttpError ? error.status : 500);
    }
  };
}

export function honoWebApp(options: WebAppOptions, calls: Calls): Hono {
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
      for (const chunk of answers.stream(n)) {
        await out.sleep(5); // produced over time, as a real stream is: recorded as it streams
        await out.write(chunk);
      }
    });
  });
  app.post('/echo-body', async (c) => c.json({ body: await c.req.json(), n: calls.hit('echo-body') }));
  app.onError((error, c) => c.json({ error: String(error) }, error instanceof HTTPException ? error.status : 500));
  return app;
}

