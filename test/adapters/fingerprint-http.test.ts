/**
 * The fingerprint over HTTP on every adapter (H14): the query is canonical but keeps the
 * order of a repeated name's values, a text body cannot spell the JSON or the empty-body
 * branch (regressions: Fastify parses text/plain to a string, Koa's parser keeps rawBody),
 * and `fingerprint: { exclude }` / `{ include }` leave fields out of JSON bodies.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { bodyParser } from '@koa/bodyparser';
import Koa from 'koa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { idempotency as koaIdempotency } from '../../adapters/koa.js';
import { memoryStore } from '../../drivers/memory.js';
import { ADAPTERS, startApp, type AppOptions, type RunningApp } from './apps.js';
import { expectProblem, send } from './client.js';

let n = 0;
const key = () => `fp-http-${process.pid}-${n++}`;

function suite(adapter: (typeof ADAPTERS)[number], options: Partial<AppOptions>, run: (app: () => RunningApp) => void) {
  const store = memoryStore();
  let app: RunningApp;
  beforeAll(async () => {
    app = await startApp(adapter, { store, ...options });
  });
  afterAll(async () => {
    await app?.close();
    await store.close();
  });
  run(() => app);
}

for (const adapter of ADAPTERS) {
  describe(`${adapter}: the fingerprint over HTTP`, () => {
    suite(adapter, {}, (app) => {
      it('H14: the query in another order replays; a repeated name’s values in another order is 422', async () => {
        const k = key();
        const first = await send(app().url, { path: '/payments?a=1&b=2&ids=1&ids=2', key: k, body: { amount: 1 } });
        const again = await send(app().url, { path: '/payments?ids=1&b=2&ids=2&a=1', key: k, body: { amount: 1 } });
        expect(again.headers['idempotent-replayed']).toBe('true');
        expect(again.body.equals(first.body)).toBe(true);
        expectProblem(await send(app().url, { path: '/payments?a=1&b=2&ids=2&ids=1', key: k, body: { amount: 1 } }), 422, 'key-reused');
      });

      it('H14: a text body spelling the JSON branch (`\\0json{...}`) or the empty one (`\\0none`) is 422, not the other request’s replay', async () => {
        const k = key();
        expect((await send(app().url, { path: '/echo-body', key: k, body: { amount: 1 } })).status).toBe(200);
        expectProblem(await send(app().url, { path: '/echo-body', key: k, body: '\u0000json{"amount":1}' }), 422, 'key-reused');
        const empty = key();
        expect((await send(app().url, { path: '/payments', key: empty })).status).toBe(201);
        expectProblem(await send(app().url, { path: '/payments', key: empty, body: '\u0000none' }), 422, 'key-reused');
      });
    });

    suite(adapter, { fingerprint: { exclude: ['metadata.sent_at'] } }, (app) => {
      it('H14: fingerprint: { exclude } leaves a changing field out; the rest still counts', async () => {
        const k = key();
        const first = await send(app().url, { path: '/payments', key: k, body: { amount: 3, metadata: { sent_at: 1, order: 'o' } } });
        const again = await send(app().url, { path: '/payments', key: k, body: { metadata: { order: 'o', sent_at: 2 }, amount: 3 } });
        expect(again.headers['idempotent-replayed']).toBe('true');
        expect(again.body.equals(first.body)).toBe(true);
        expectProblem(await send(app().url, { path: '/payments', key: k, body: { amount: 4, metadata: { sent_at: 1, order: 'o' } } }), 422, 'key-reused');
      });
    });

    suite(adapter, { fingerprint: { include: ['amount'] } }, (app) => {
      it('H14: fingerprint: { include } counts only the paths', async () => {
        const k = key();
        await send(app().url, { path: '/payments', key: k, body: { amount: 3, note: 'a' } });
        expect((await send(app().url, { path: '/payments', key: k, body: { amount: 3, note: 'b' } })).headers['idempotent-replayed']).toBe('true');
        expectProblem(await send(app().url, { path: '/payments', key: k, body: { amount: 4, note: 'a' } }), 422, 'key-reused');
      });
    });
  });
}

describe('koa: after @koa/bodyparser (rawBody)', () => {
  let server: http.Server;
  let url: string;
  const store = memoryStore();
  beforeAll(async () => {
    const app = new Koa();
    app.use(bodyParser({ enableTypes: ['json', 'form', 'text'] }));
    app.use(koaIdempotency({ store, scope: 'shared' }));
    app.use((ctx) => {
      ctx.status = 201;
      ctx.body = { body: (ctx.request as { body?: unknown }).body ?? null };
    });
    server = http.createServer(app.callback());
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
    await store.close();
  });

  it('H14: a urlencoded body whose raw text spells the JSON branch is 422 after a JSON request with the key', async () => {
    const k = key();
    expect((await send(url, { path: '/p', key: k, body: { amount: 1 } })).status).toBe(201);
    expectProblem(await send(url, { path: '/p', key: k, body: '\u0000json{"amount":1}', contentType: 'application/x-www-form-urlencoded' }), 422, 'key-reused');
  });

  it('H14: a urlencoded body in another order replays from rawBody', async () => {
    const k = key();
    const first = await send(url, { path: '/p', key: k, body: 'b=2&a=1', contentType: 'application/x-www-form-urlencoded' });
    const again = await send(url, { path: '/p', key: k, body: 'a=1&b=2', contentType: 'application/x-www-form-urlencoded' });
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body.equals(first.body)).toBe(true);
  });
});

describe('fingerprint paths are checked when the middleware is created', () => {
  it('a bad path is a TypeError from the adapter factory, before any request', async () => {
    const { idempotency } = await import('../../adapters/express.js');
    const store = memoryStore();
    expect(() => idempotency({ store, scope: 'shared', fingerprint: { exclude: ['metadata..sent_at'] } })).toThrow(
      "Expected `fingerprint.exclude[0]` to be a dotted path such as 'metadata.sent_at', got \"metadata..sent_at\"",
    );
    expect(() => idempotency({ store, scope: 'shared', fingerprint: 'amount' as never })).toThrow('Expected `fingerprint` to be a function or { include: [...paths] } or { exclude: [...paths] }');
    await store.close();
  });
});
