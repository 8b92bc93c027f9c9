/**
 * A server for the upload memory test, in its own process: one adapter (argv[2]) with a
 * handler that streams the upload to a hash (so that what grows is the layer's, not the
 * handler's), `maxBodyBytes` raised to 32 MiB. It samples `process.memoryUsage()` every
 * millisecond and answers, outside the layer:
 *
 *   POST /baseline   collect garbage, then take the baseline and reset the peaks
 *   GET  /memory     { rss, heap, external }: the peak growth over the baseline, in bytes
 *
 * Run with `node --expose-gc --import tsx`; it prints `listening <port>`.
 */
import { createHash } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { createAdaptorServer } from '@hono/node-server';
import express from 'express';
import fastifyMultipart from '@fastify/multipart';
import Fastify from 'fastify';
import { Hono } from 'hono';
import Koa from 'koa';
import { idempotency as expressIdempotency } from '../../adapters/express.js';
import { idempotency as fastifyIdempotency } from '../../adapters/fastify.js';
import { withIdempotency as withFetch } from '../../adapters/fetch.js';
import { idempotency as honoIdempotency } from '../../adapters/hono/index.js';
import { idempotency as koaIdempotency } from '../../adapters/koa/index.js';
import { withIdempotency } from '../../adapters/node.js';
import { memoryStore } from '../../drivers/memory.js';
import { fetchServer } from './fetch-server.js';

const adapter = process.argv[2];
const options = { store: memoryStore(), scope: 'shared' as const, maxBodyBytes: 32 * 1024 * 1024 };
let runs = 0;

/** Hash a stream of chunks as it flows: the handler keeps nothing. */
async function digest(chunks: AsyncIterable<Uint8Array>): Promise<{ size: number; sha256: string }> {
  const hash = createHash('sha256');
  let size = 0;
  for await (const chunk of chunks) {
    hash.update(chunk);
    size += chunk.byteLength;
  }
  return { size, sha256: hash.digest('hex') };
}
const answer = async (chunks: AsyncIterable<Uint8Array>) => ({ run: ++runs, ...(await digest(chunks)) });

async function app(): Promise<http.Server> {
  switch (adapter) {
    case 'node':
      return http.createServer(withIdempotency(async (req, res) => res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify(await answer(req))), options));
    case 'express': {
      const app = express();
      app.use(expressIdempotency(options));
      app.post('/upload', (req, res, next) => void answer(req).then((body) => res.status(201).json(body), next));
      return http.createServer(app);
    }
    case 'koa': {
      const app = new Koa();
      app.use(koaIdempotency(options));
      app.use(async (ctx) => {
        ctx.status = 201;
        ctx.body = await answer(ctx.req);
      });
      return http.createServer(app.callback());
    }
    case 'fastify': {
      const app = Fastify({ bodyLimit: 64 * 1024 * 1024 });
      await app.register(fastifyIdempotency, options);
      await app.register(fastifyMultipart, { limits: { fileSize: 64 * 1024 * 1024 } });
      app.post('/upload', async (request, reply) => {
        const part = await request.file();
        return reply.code(201).send(await answer(part!.file));
      });
      await app.ready();
      return app.server;
    }
    case 'hono': {
      const app = new Hono();
      app.use(honoIdempotency(options));
      // The bytes the layer read, from Hono's body cache (no copy): the handler's own share is nothing.
      app.post('/upload', async (c) => c.json(await answer([new Uint8Array(await c.req.arrayBuffer())] as unknown as AsyncIterable<Uint8Array>), 201));
      return createAdaptorServer({ fetch: app.fetch }) as http.Server;
    }
    case 'fetch':
      return fetchServer(withFetch(async (request: Request) => Response.json(await answer(request.body! as unknown as AsyncIterable<Uint8Array>), { status: 201 }), options));
    default:
      throw new Error(`unknown adapter ${adapter}`);
  }
}

const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with --expose-gc');
const usage = () => {
  const m = process.memoryUsage();
  return { rss: m.rss, heap: m.heapUsed, external: m.external };
};
let baseline = usage();
let peak = { rss: 0, heap: 0, external: 0 };
setInterval(() => {
  const now = usage();
  peak = { rss: Math.max(peak.rss, now.rss - baseline.rss), heap: Math.max(peak.heap, now.heap - baseline.heap), external: Math.max(peak.external, now.external - baseline.external) };
}, 1);

const inner = await app();
const handler = inner.listeners('request')[0] as http.RequestListener;
inner.removeAllListeners('request');
inner.on('request', (req, res) => {
  if (req.url === '/baseline') {
    gc();
    gc();
    baseline = usage();
    peak = { rss: 0, heap: 0, external: 0 };
    res.writeHead(204).end();
    return;
  }
  if (req.url === '/memory') {
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(peak));
    return;
  }
  handler(req, res);
});
inner.listen(0, '127.0.0.1', () => console.log(`listening ${(inner.address() as AddressInfo).port}`));
