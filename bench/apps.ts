/**
 * The benchmark apps: one framework (node, express, fastify, koa, hono, fetch, nestjs) with one idempotency
 * layer (none, ours, or a peer), all serving `POST /orders` with the same handler
 * (./handler.ts) and `GET /__stats`. Each builder returns a listening server.
 * @module
 */
import { createHash } from 'node:crypto';
import http, { type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { ErrorRequestHandler, RequestHandler } from 'express';
import type { IdempotencyStore } from '../src/store.js';
import { placeOrder, statsSnapshot } from './handler.js';
import { fetchHandler, JSON_TYPE, ordersRoute, webAnswer } from './web-handlers.js';

export { FETCH_STYLES } from './web-handlers.js';

export type Adapter = 'node' | 'express' | 'fastify' | 'koa' | 'hono' | 'fetch' | 'nestjs';

/**
 * How the fetch and Hono handlers read the request and answer (STYLE): the bench runs
 * several, as users write them. Hono: `body` (c.req.json(), c.body: the historical one),
 * `json` (c.req.json(), c.json), `text` (c.req.text(), c.text), `raw` (c.req.raw.text(),
 * new Response(string)), `raw-json` (c.req.raw.json(), Response.json), `stream`
 * (c.req.json(), new Response(stream)), `redirect` (c.req.json(), c.redirect 303), `empty`
 * (c.req.json(), an empty 204). fetch: FETCH_STYLES (bench/web-handlers.ts).
 */
export const HONO_STYLES = ['body', 'json', 'text', 'raw', 'raw-json', 'stream', 'redirect', 'empty'] as const;
export type Impl = 'bare' | 'ours' | 'floor' | 'express-idempotency' | 'node-idempotency';

export interface AppOptions {
  adapter: Adapter;
  impl: Impl;
  /** The handler style (fetch and Hono only, see HONO_STYLES and FETCH_STYLES). */
  style?: string;
  /** Our store (impl 'ours'). */
  store?: IdempotencyStore;
  /** The peer's store kind (peers only): memory or redis. */
  peerStore?: 'memory' | 'redis';
  redisUrl?: string;
  /** Extra figures for /__stats (e.g. counted PostgreSQL queries). */
  extraStats?: () => Record<string, unknown>;
}

export interface RunningApp {
  port: number;
  close(): Promise<void>;
}

function readAll(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

async function jsonBody(req: IncomingMessage): Promise<unknown> {
  const raw = await readAll(req);
  return raw.length === 0 ? undefined : JSON.parse(raw.toString('utf8'));
}

function listen(server: Server): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port));
  });
}

function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections?.();
  });
}

const stats = (o: AppOptions, url = '') =>
  JSON.stringify(statsSnapshot(o.extraStats?.(), new URLSearchParams(url.split('?')[1] ?? '').get('prefix') ?? ''));

/**
 * The floor: the least an idempotency layer does, written only to measure against (no
 * lease, no fencing, no time bound, no canonical JSON, one process): read the body, SHA-256
 * of method, path and raw body, look the key up in a Map (10,000 entries), run the
 * handler, keep its answer, send it. What is left between it and the bare handler is the
 * job itself on this machine.
 */
function floorLayer(): (req: IncomingMessage, res: ServerResponse) => Promise<void> {
  const records = new Map<string, { fingerprint: string; response?: { status: number; body: string } }>();
  return async (req, res) => {
    const key = req.headers['idempotency-key'] as string;
    const raw = await readAll(req);
    const fingerprint = createHash('sha256').update(`${req.method} ${req.url}\0`).update(raw).digest('base64url');
    const found = records.get(key);
    if (found) {
      if (found.fingerprint !== fingerprint) res.writeHead(422).end();
      else if (!found.response) res.writeHead(409).end();
      else res.writeHead(found.response.status, JSON_TYPE).end(found.response.body);
      return;
    }
    const record: { fingerprint: string; response?: { status: number; body: string } } = { fingerprint };
    records.set(key, record);
    if (records.size > 10_000) records.delete(records.keys().next().value!);
    const result = await placeOrder(req.headers, raw.length === 0 ? undefined : JSON.parse(raw.toString('utf8')));
    record.response = result;
    res.writeHead(result.status, JSON_TYPE).end(result.body);
  };
}

async function nodeApp(o: AppOptions): Promise<RunningApp> {
  let orders: (req: IncomingMessage, res: ServerResponse) => Promise<void>;
  const handler = async (req: IncomingMessage & { body?: unknown }, res: ServerResponse) => {
    // Our adapter has already read the body (to fingerprint it) and set req.body.
    const body = req.body !== undefined ? req.body : await jsonBody(req);
    const result = await placeOrder(req.headers, body);
    res.writeHead(result.status, JSON_TYPE).end(result.body);
  };
  if (o.impl === 'bare') orders = handler;
  else if (o.impl === 'ours') {
    const { withIdempotency } = await import('../adapters/node.js');
    orders = withIdempotency(handler, { store: o.store!, scope: 'shared' });
  } else if (o.impl === 'floor') orders = floorLayer();
  else throw new Error(`${o.impl} runs on express only`);

  const server = http.createServer((req, res) => {
    if (req.method === 'POST' && req.url === '/orders') {
      orders(req, res).catch((error: unknown) => {
        console.error(error);
        if (!res.headersSent) res.writeHead(500).end();
      });
    } else if (req.url?.startsWith('/__stats')) res.writeHead(200, JSON_TYPE).end(stats(o, req.url));
    else res.writeHead(404).end();
  });
  const port = await listen(server);
  return { port, close: () => closeServer(server) };
}

async function expressApp(o: AppOptions): Promise<RunningApp> {
  const { default: express } = await import('express');
  const app = express();
  app.get('/__stats', (req, res) => {
    res.type('application/json').send(stats(o, req.originalUrl));
  });
  const handler: RequestHandler = (req, res, next) => {
    placeOrder(req.headers, req.body).then((r) => res.status(r.status).type('application/json').send(r.body), next);
  };

  if (o.impl === 'bare') app.post('/orders', express.json(), handler);
  else if (o.impl === 'ours') {
    const { idempotency } = await import('../adapters/express.js');
    app.post('/orders', express.json(), idempotency({ store: o.store!, scope: 'shared' }), handler);
  } else if (o.impl === 'express-idempotency') {
    // As its README shows: the middleware, then the route checks isHit().
    if (o.peerStore !== 'memory') throw new Error('express-idempotency ships an in-memory store only');
    const { idempotency, getSharedIdempotencyService } = await import('express-idempotency');
    app.post('/orders', express.json(), idempotency(), (req, res, next) => {
      if (getSharedIdempotencyService().isHit(req)) return;
      handler(req, res, next);
    });
  } else {
    // @node-idempotency/core as its README shows: onRequest before the business logic,
    // onResponse with the result once it completes (awaited before answering, as we do).
    const core = await import('@node-idempotency/core');
    let storage;
    if (o.peerStore === 'redis') {
      const { RedisStorageAdapter } = await import('@node-idempotency/storage-adapter-redis');
      storage = new RedisStorageAdapter({ url: o.redisUrl });
      await storage.connect();
    } else {
      const { MemoryStorageAdapter } = await import('@node-idempotency/storage-adapter-memory');
      storage = new MemoryStorageAdapter();
    }
    const idem = new core.Idempotency(storage, {});
    const status: Record<string, number> = {
      [core.IdempotencyErrorCodes.REQUEST_IN_PROGRESS]: 409,
      [core.IdempotencyErrorCodes.IDEMPOTENCY_FINGERPRINT_MISSMATCH]: 422,
      [core.IdempotencyErrorCodes.IDEMPOTENCY_KEY_LEN_EXEEDED]: 400,
      [core.IdempotencyErrorCodes.IDEMPOTENCY_KEY_MISSING]: 400,
    };
    app.post('/orders', express.json(), async (req, res) => {
      const params = { method: req.method, path: req.path, headers: req.headers, body: req.body as Record<string, unknown> };
      try {
        const cached = await idem.onRequest(params);
        if (cached) {
          res.status(Number(cached.additional?.status ?? 200)).type('application/json').send(cached.body as string);
          return;
        }
      } catch (error) {
        if (error instanceof core.IdempotencyError) {
          res.status(status[error.code] ?? 400).json({ error: error.message });
          return;
        }
        throw error;
      }
      const r = await placeOrder(req.headers, req.body);
      await idem.onResponse(params, { body: r.body, additional: { status: r.status } });
      res.status(r.status).type('application/json').send(r.body);
    });
  }
  // Errors passed to next() (express-idempotency's 409 and 417) answer with their status,
  // without the default handler's stack trace on stderr.
  app.use(((error, _req, res, _next) => {
    const code = res.statusCode >= 400 ? res.statusCode : 500;
    if (code >= 500) console.error(error);
    if (!res.headersSent) res.status(code).json({ error: (error as Error).message });
  }) as ErrorRequestHandler);

  const server = http.createServer(app);
  const port = await listen(server);
  return { port, close: () => closeServer(server) };
}

async function fastifyApp(o: AppOptions): Promise<RunningApp> {
  const { default: Fastify } = await import('fastify');
  const app = Fastify({ logger: false });
  app.get('/__stats', async (req, reply) => reply.type('application/json').send(stats(o, req.url)));
  if (o.impl === 'ours') {
    const { idempotency } = await import('../adapters/fastify.js');
    await app.register(idempotency, { store: o.store!, scope: 'shared' });
  } else if (o.impl !== 'bare') throw new Error(`${o.impl} runs on express only`);
  app.post('/orders', async (req, reply) => {
    const r = await placeOrder(req.headers, req.body);
    return reply.code(r.status).type('application/json').send(r.body);
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const port = (app.server.address() as AddressInfo).port;
  return { port, close: () => app.close() };
}

async function koaApp(o: AppOptions): Promise<RunningApp> {
  const { default: Koa } = await import('koa');
  const { bodyParser } = await import('@koa/bodyparser');
  const app = new Koa();
  app.use(async (ctx, next) => {
    if (ctx.path === '/__stats') {
      ctx.type = 'application/json';
      ctx.body = stats(o, ctx.url);
      return;
    }
    await next();
  });
  app.use(bodyParser());
  if (o.impl === 'ours') {
    const { idempotency } = await import('../adapters/koa/index.js');
    app.use(idempotency({ store: o.store!, scope: 'shared' }));
  } else if (o.impl !== 'bare') throw new Error(`${o.impl} runs on express only`);
  app.use(async (ctx) => {
    if (ctx.method !== 'POST' || ctx.path !== '/orders') {
      ctx.status = 404;
      return;
    }
    const r = await placeOrder(ctx.request.headers, (ctx.request as { body?: unknown }).body);
    ctx.status = r.status;
    ctx.type = 'application/json';
    ctx.body = r.body;
  });
  const server = http.createServer(app.callback());
  const port = await listen(server);
  return { port, close: () => closeServer(server) };
}

/** Hono on @hono/node-server, as Hono apps are served on Node. */
async function honoApp(o: AppOptions): Promise<RunningApp> {
  const { Hono } = await import('hono');
  const { createAdaptorServer } = await import('@hono/node-server');
  const app = new Hono();
  const style = o.style ?? 'body';
  if (!(HONO_STYLES as readonly string[]).includes(style)) throw new Error(`unknown Hono style ${style}`);
  app.get('/__stats', (c) => c.body(stats(o, c.req.url), 200, JSON_TYPE));
  if (o.impl === 'ours') {
    const { idempotency } = await import('../adapters/hono/index.js');
    app.use('/orders', idempotency({ store: o.store!, scope: 'shared' }));
  } else if (o.impl !== 'bare') throw new Error(`${o.impl} runs on express only`);
  app.post('/orders', async (c) => {
    const headers = { 'idempotency-key': c.req.header('idempotency-key'), 'x-delay-ms': c.req.header('x-delay-ms') };
    switch (style) {
      case 'json': {
        const r = await placeOrder(headers, await c.req.json());
        return c.json(JSON.parse(r.body) as object, r.status as 201);
      }
      case 'text': {
        const r = await placeOrder(headers, JSON.parse(await c.req.text()));
        return c.text(r.body, r.status as 201);
      }
      case 'raw':
        return webAnswer(style, await placeOrder(headers, JSON.parse(await c.req.raw.text())));
      case 'raw-json':
        return webAnswer(style, await placeOrder(headers, await c.req.raw.json()));
      case 'stream':
        return webAnswer(style, await placeOrder(headers, await c.req.json()));
      case 'redirect':
        await placeOrder(headers, await c.req.json());
        return c.redirect('/orders/1', 303);
      case 'empty':
        await placeOrder(headers, await c.req.json());
        return c.body(null, 204);
      default: {
        const r = await placeOrder(headers, await c.req.json());
        return c.body(r.body, r.status as 201, JSON_TYPE);
      }
    }
  });
  const server = createAdaptorServer({ fetch: app.fetch }) as Server;
  const port = await listen(server);
  return { port, close: () => closeServer(server) };
}

/** The fetch adapter around a fetch-style handler, served by @hono/node-server (as a Node bridge serves one). */
async function fetchApp(o: AppOptions): Promise<RunningApp> {
  const { createAdaptorServer } = await import('@hono/node-server');
  const handler = fetchHandler(o.style ?? 'text');
  let orders: (request: Request, env: unknown) => Promise<Response>;
  if (o.impl === 'bare') orders = handler;
  else if (o.impl === 'ours') {
    const { withIdempotency } = await import('../adapters/fetch.js');
    orders = withIdempotency(handler, { store: o.store!, scope: 'shared' });
  } else throw new Error(`${o.impl} runs on express only`);
  const server = createAdaptorServer({
    // The server's second argument ({ incoming, outgoing }) passed on, as `serve({ fetch: withIdempotency(...) })` gets it.
    fetch: ordersRoute(orders, (path) => stats(o, path)),
  }) as Server;
  const port = await listen(server);
  return { port, close: () => closeServer(server) };
}

/**
 * NestJS on @nestjs/platform-express, written as a Nest user writes it: a controller whose
 * handler takes `@Body()` and `@Headers()` and returns the answer (201 by default for a
 * POST, its content type from `@Header()`), Nest's own JSON body parser. Ours:
 * `IdempotencyModule.forRoot({ store })` and `@Idempotent()` on the handler (an
 * interceptor, after the guards; there are none here).
 */
async function nestApp(o: AppOptions): Promise<RunningApp> {
  await import('reflect-metadata');
  const { Body, Controller, Get, Header, Headers, Module, Post, Req } = await import('@nestjs/common');
  const { NestFactory } = await import('@nestjs/core');
  const { ExpressAdapter } = await import('@nestjs/platform-express');
  const imports: unknown[] = [];
  let protect: MethodDecorator = () => undefined;
  if (o.impl === 'ours') {
    const { Idempotent, IdempotencyModule } = await import('../adapters/nestjs/index.js');
    imports.push(IdempotencyModule.forRoot({ store: o.store!, scope: 'shared' }));
    protect = Idempotent();
  } else if (o.impl === 'node-idempotency') {
    // @node-idempotency/nestjs@1.0.4 as its README wires it: the module with the memory
    // storage, `@Idempotent()` on the handler. Installed in bench/nest10 (NestJS 10) only,
    // so named by a variable: the type checker does not look for it.
    const peer = '@node-idempotency/nestjs';
    const { Idempotent, NodeIdempotencyModule } = (await import(peer)) as {
      Idempotent(options?: object): MethodDecorator;
      NodeIdempotencyModule: { forRootAsync(options: object): unknown };
    };
    imports.push(NodeIdempotencyModule.forRootAsync({ storage: { adapter: 'memory' } }));
    protect = Idempotent();
  } else if (o.impl !== 'bare') throw new Error(`${o.impl} runs on express and nestjs only`);

  @Controller()
  class OrdersController {
    @Post('orders')
    @protect
    @Header('Content-Type', 'application/json; charset=utf-8')
    async create(@Body() body: unknown, @Headers() headers: Record<string, string | string[] | undefined>) {
      return (await placeOrder(headers, body)).body;
    }

    @Get('__stats')
    @Header('Content-Type', 'application/json; charset=utf-8')
    stats(@Req() req: { originalUrl: string }) {
      return stats(o, req.originalUrl);
    }
  }
  @Module({ imports: imports as never[], controllers: [OrdersController] })
  class AppModule {}

  const app = await NestFactory.create(AppModule, new ExpressAdapter(), { logger: false });
  await app.listen(0, '127.0.0.1');
  const server = app.getHttpServer() as Server;
  return {
    port: (server.address() as AddressInfo).port,
    close: async () => {
      server.closeAllConnections?.();
      await app.close();
    },
  };
}

export function startApp(o: AppOptions): Promise<RunningApp> {
  switch (o.adapter) {
    case 'node':
      return nodeApp(o);
    case 'express':
      return expressApp(o);
    case 'fastify':
      return fastifyApp(o);
    case 'koa':
      return koaApp(o);
    case 'hono':
      return honoApp(o);
    case 'fetch':
      return fetchApp(o);
    case 'nestjs':
      return nestApp(o);
  }
}
