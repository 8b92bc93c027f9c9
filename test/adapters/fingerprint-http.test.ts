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
import { idempotency as koaIdempotency } from '../../adapters/koa/index.js';
import { memoryStore } from '../../drivers/memory.js';
import { expectProblem, send } from './client.js';

let n = 0;
const key = () => `fp-http-koa-${process.pid}-${n++}`;

/**
 * A Koa app on a real server for the block it is called in: `before` (the parser and
 * whatever runs before the layer), the layer on a memory store, and a handler that answers
 * 201 with the body it was given. Returns the server's URL once it listens.
 */
function koaAfterParser(before: (app: Koa) => void): { url: () => string } {
  let server: http.Server;
  let url = '';
  const store = memoryStore();
  beforeAll(async () => {
    const app = new Koa();
    before(app);
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
  return { url: () => url };
}

describe('koa: after @koa/bodyparser (rawBody)', () => {
  const server = koaAfterParser((app) => app.use(bodyParser({ enableTypes: ['json', 'form', 'text'] })));

  it('H14: a urlencoded body whose raw text spells the JSON branch is 422 after a JSON request with the key', async () => {
    const k = key();
    expect((await send(server.url(), { path: '/p', key: k, body: { amount: 1 } })).status).toBe(201);
    expectProblem(await send(server.url(), { path: '/p', key: k, body: '\u0000json{"amount":1}', contentType: 'application/x-www-form-urlencoded' }), 422, 'key-reused');
  });

  it('H14: a urlencoded body in another order replays from rawBody', async () => {
    const k = key();
    const first = await send(server.url(), { path: '/p', key: k, body: 'b=2&a=1', contentType: 'application/x-www-form-urlencoded' });
    const again = await send(server.url(), { path: '/p', key: k, body: 'a=1&b=2', contentType: 'application/x-www-form-urlencoded' });
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body.equals(first.body)).toBe(true);
  });
});

describe('koa: a JSON body after @koa/bodyparser counts by the value the parser made', () => {
  // Between the parser and the layer: the amount made an instance of a class, which is not JSON data.
  class Money {
    readonly #cents: number;
    constructor(cents: number) {
      this.#cents = cents;
    }
    get cents(): number {
      return this.#cents;
    }
  }
  const server = koaAfterParser((app) => {
    app.use(bodyParser());
    app.use(async (ctx, next) => {
      const body = (ctx.request as { body?: Record<string, unknown> }).body;
      if (ctx.path === '/typed' && typeof body?.amount === 'number') body.amount = new Money(body.amount);
      await next();
    });
  });

  it('the text is parsed once (by the parser), and key order and spacing still do not matter', async () => {
    const k = key();
    const text = '{"b":2,"a":{"d":[1,2],"c":"x"}}';
    const parse = JSON.parse;
    let parses = 0;
    JSON.parse = function countingParse(this: unknown, source: string, reviver?: (key: string, value: unknown) => unknown) {
      if (source === text) parses++;
      return parse.call(this, source, reviver) as unknown;
    } as typeof JSON.parse;
    let first;
    try {
      first = await send(server.url(), { path: '/p', key: k, body: text, contentType: 'application/json' });
    } finally {
      JSON.parse = parse;
    }
    expect(first.status).toBe(201);
    expect(parses).toBe(1);
    const again = await send(server.url(), { path: '/p', key: k, body: '{ "a": { "c": "x", "d": [1, 2] }, "b": 2 }', contentType: 'application/json' });
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body.equals(first.body)).toBe(true);
    expectProblem(await send(server.url(), { path: '/p', key: k, body: '{"b":2,"a":{"d":[2,1],"c":"x"}}', contentType: 'application/json' }), 422, 'key-reused');
  });

  it('a value that is no longer JSON data counts by the text: another amount is another request', async () => {
    const k = key();
    expect((await send(server.url(), { path: '/typed', key: k, body: { amount: 100, currency: 'EUR' } })).status).toBe(201);
    const again = await send(server.url(), { path: '/typed', key: k, body: '{ "currency": "EUR", "amount": 100 }', contentType: 'application/json' });
    expect(again.headers['idempotent-replayed']).toBe('true');
    expectProblem(await send(server.url(), { path: '/typed', key: k, body: { amount: 999, currency: 'EUR' } }), 422, 'key-reused');
  });

  it('a number beyond a double counts by its bytes, as it does without a parser', async () => {
    const k = key();
    expect((await send(server.url(), { path: '/p', key: k, body: '{"n":1e400}', contentType: 'application/json' })).status).toBe(201);
    expect((await send(server.url(), { path: '/p', key: k, body: '{"n":1e400}', contentType: 'application/json' })).headers['idempotent-replayed']).toBe('true');
    expectProblem(await send(server.url(), { path: '/p', key: k, body: '{"n":2e400}', contentType: 'application/json' }), 422, 'key-reused');
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
