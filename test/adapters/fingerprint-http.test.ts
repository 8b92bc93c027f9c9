/**
 * The fingerprint over HTTP, cases of one framework (what every adapter passes is in
 * ../suites/fingerprint-http.suite.ts, run by each adapter's conformance suite): Koa after
 * @koa/bodyparser, whose rawBody the adapter reads, and bad fingerprint paths refused when
 * the middleware is made.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { bodyParser } from '@koa/bodyparser';
import Koa from 'koa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { idempotency as koaIdempotency } from '../../adapters/koa.js';
import { memoryStore } from '../../drivers/memory.js';
import { expectProblem, send } from './client.js';

let n = 0;
const key = () => `fp-http-koa-${process.pid}-${n++}`;

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
