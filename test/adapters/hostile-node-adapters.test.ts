/**
 * Hostile responses on the Node-based adapters: a header value Node refuses to write (a
 * newline, from a `?name=`) and a body stream that fails. Each claim settles: the client
 * gets an answer (or a closed connection), never a hang, and the retry runs the handler
 * again, never a 409 or a stored response the first client did not get.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import express from 'express';
import Fastify from 'fastify';
import Koa from 'koa';
import { afterAll, describe, expect, it } from 'vitest';
import { memoryStore } from '../../drivers/memory.js';
import { idempotency as expressIdempotency } from '../../adapters/express.js';
import fastifyIdempotency from '../../adapters/fastify.js';
import { idempotency as koaIdempotency } from '../../adapters/koa/index.js';
import { withIdempotency } from '../../adapters/node.js';
import { send } from './client.js';

const closers: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  await Promise.all(closers.map((close) => close()));
});

const failing = () =>
  new Readable({
    read() {
      this.destroy(new Error('the source failed'));
    },
  });
const BAD = 'attachment; filename="a\nb"';
const options = () => ({ store: memoryStore(), scope: 'shared' as const, leaseMs: 300 });

async function listen(server: http.Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  closers.push(() => new Promise((resolve) => server.close(resolve)));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

type Runs = { header: number; stream: number };

const apps: Record<string, (runs: Runs) => Promise<string>> = {
  async fastify(runs) {
    const app = Fastify();
    await app.register(fastifyIdempotency, options());
    app.post('/header', async (_request, reply) => {
      runs.header++;
      return reply.header('content-disposition', BAD).code(201).send({ ok: true });
    });
    app.post('/stream', async (_request, reply) => {
      runs.stream++;
      return reply.code(201).send(failing());
    });
    closers.push(() => app.close());
    return app.listen({ port: 0, host: '127.0.0.1' });
  },
  async express(runs) {
    const app = express();
    app.use(expressIdempotency(options()));
    app.post('/header', (_req, res) => {
      runs.header++;
      res.set('content-disposition', BAD).status(201).send('x');
    });
    app.post('/stream', (_req, res) => {
      runs.stream++;
      res.status(201);
      failing()
        .on('error', () => res.destroy())
        .pipe(res);
    });
    app.use((_error: unknown, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
      if (res.headersSent) res.destroy();
      else res.status(500).end();
    });
    return listen(http.createServer(app));
  },
  async koa(runs) {
    const app = new Koa();
    app.silent = true;
    app.use(koaIdempotency(options()));
    app.use(async (ctx) => {
      if (ctx.path === '/header') {
        runs.header++;
        ctx.set('content-disposition', BAD);
        ctx.body = 'x';
      } else {
        runs.stream++;
        ctx.status = 201;
        ctx.body = failing();
      }
    });
    return listen(http.createServer(app.callback()));
  },
  async node(runs) {
    const handler = withIdempotency(
      async (req, res) => {
        if (req.url === '/header') {
          runs.header++;
          res.writeHead(201, { 'content-disposition': BAD });
          res.end('x');
        } else {
          runs.stream++;
          res.writeHead(201);
          failing()
            .on('error', () => res.destroy())
            .pipe(res);
        }
      },
      { ...options(), onError: (_error, _req, res) => (res.headersSent ? res.destroy() : res.writeHead(500).end()) },
    );
    return listen(http.createServer(handler));
  },
};

/** The status, or the connection error: bounded, a hang fails the test. */
async function outcome(url: string, path: string, key: string): Promise<number | string> {
  const reply = send(url, { path, key, body: {} }).then(
    (r) => r.status,
    (error: Error) => `closed (${error.message})`,
  );
  const hang = new Promise<string>((resolve) => setTimeout(resolve, 5000, 'no answer within 5 s')).then((v) => v);
  return Promise.race([reply, hang]);
}

describe.each(Object.keys(apps))('%s: a response that cannot be sent settles its claim', (adapter) => {
  it('H17: a header value Node refuses (a newline) is answered 500 and released: the retry runs again', async () => {
    const runs = { header: 0, stream: 0 };
    const url = await apps[adapter]!(runs);
    expect(await outcome(url, '/header', 'header-key')).toBe(500);
    expect(await outcome(url, '/header', 'header-key')).toBe(500);
    expect(runs.header).toBe(2);
  });

  it('H17: a body stream that fails releases the claim: the retry runs again, never a 409', async () => {
    const runs = { header: 0, stream: 0 };
    const url = await apps[adapter]!(runs);
    const first = await outcome(url, '/stream', 'stream-key');
    const retry = await outcome(url, '/stream', 'stream-key');
    expect(first).not.toBe('no answer within 5 s');
    expect(retry).not.toBe(409);
    expect(retry).not.toBe('no answer within 5 s');
    expect(runs.stream).toBe(2);
  });
});
