/**
 * Per-operation ttlMs: a function of the request and response (HTTP layer) or of the
 * arguments and result (`idempotent()`), validated, with a safe fallback.
 */
import { describe, expect, it } from 'vitest';
import { memoryStore } from '../../drivers/memory.js';
import type { IdempotencyEvent } from '../../src/events.js';
import { storageKey } from '../../src/key.js';
import { createIdempotency, type CapturedResponse, type HttpRequestInfo } from '../../src/http.js';
import { idempotent } from '../../src/idempotent.js';

const HOUR = 3_600_000;
const DAY = 24 * HOUR;

interface FakeReq {
  path: string;
}

const request = (path: string, key: string): HttpRequestInfo<FakeReq> => ({
  method: 'POST',
  url: path,
  headers: { 'content-type': 'application/json' },
  keyHeaderLines: key,
  body: () => ({ q: 1 }),
  raw: { path },
});
const ok = (status = 200): CapturedResponse => ({ status, headers: { 'content-type': 'application/json', 'x-kept-for': '60000' }, body: new Uint8Array(Buffer.from('{}')) });

/** A clock the store and the test share, so expiries are exact. */
function clock() {
  let t = 1_000_000;
  return { now: () => t, advance: (ms: number) => (t += ms) };
}

async function complete(layer: ReturnType<typeof createIdempotency<FakeReq>>, path: string, key: string, response = ok()) {
  const decision = await layer.begin(request(path, key));
  if (decision.type !== 'execute') throw new Error(`expected execute, got ${decision.type}`);
  await decision.claim.finish(response);
}

describe('per-operation ttlMs: HTTP layer (src/http.ts)', () => {
  it('H20: ttl(req, response) sets each record’s expiry: payments 7 days, searches 1 hour', async () => {
    const time = clock();
    const store = memoryStore({ now: time.now, sweepIntervalMs: 0 });
    const seen: [string, number][] = [];
    const layer = createIdempotency<FakeReq>({
      scope: 'shared',
      store,
      now: time.now,
      ttlMs: (req, response) => {
        seen.push([req.path, response.status]);
        return req.path.startsWith('/payments') ? 7 * DAY : HOUR;
      },
    });
    await complete(layer, '/payments', 'pay-1', ok(201));
    await complete(layer, '/search', 'search-1');
    expect(seen).toEqual([
      ['/payments', 201],
      ['/search', 200],
    ]);
    const payment = await store.get(storageKey(undefined, 'pay-1'));
    const search = await store.get(storageKey(undefined, 'search-1'));
    expect(payment?.state === 'completed' && payment.expiresAt).toBe(time.now() + 7 * DAY);
    expect(search?.state === 'completed' && search.expiresAt).toBe(time.now() + HOUR);

    // One hour and a bit later the search key is new again; the payment still replays.
    time.advance(HOUR + 1);
    expect((await layer.begin(request('/search', 'search-1'))).type).toBe('execute');
    expect(await layer.begin(request('/payments', 'pay-1'))).toMatchObject({ type: 'respond', response: { status: 201 } });
  });

  it('the function sees the whole captured response (all headers, the body), not just what is replayed', async () => {
    const time = clock();
    const store = memoryStore({ now: time.now, sweepIntervalMs: 0 });
    const layer = createIdempotency<FakeReq>({ scope: 'shared', store, now: time.now, ttlMs: (_req, response) => Number(response.headers['x-kept-for']) + response.body!.byteLength });
    await complete(layer, '/x', 'k');
    const record = await store.get(storageKey(undefined, 'k'));
    expect(record?.state === 'completed' && record.expiresAt).toBe(time.now() + 60_002);
  });

  it('a bad return (or a throw) keeps the record 24 h, emits ttl-invalid with the reason, and still replays', async () => {
    const cases: [unknown, RegExp][] = [
      [-5, /return a positive integer \(ms\), got -5; the record is kept for 86400000 ms instead/],
      [0, /got 0/],
      [1.5, /got 1.5/],
      [Number.NaN, /got NaN/],
      ['3600000', /got "3600000"/],
      [undefined, /got undefined/],
      [Promise.resolve(HOUR), /a Promise \(the ttl function must be synchronous\)/],
      [new Error('lookup failed'), /it threw lookup failed/],
    ];
    for (const [value, message] of cases) {
      const time = clock();
      const store = memoryStore({ now: time.now, sweepIntervalMs: 0 });
      const events: IdempotencyEvent[] = [];
      const layer = createIdempotency<FakeReq>({
        scope: 'shared',
        store,
        now: time.now,
        onEvent: (event) => events.push(event),
        ttlMs: () => {
          if (value instanceof Error) throw value;
          return value as number;
        },
      });
      await complete(layer, '/x', 'k');
      const invalid = events.filter((e) => e.type === 'ttl-invalid');
      expect(invalid, String(value)).toHaveLength(1);
      expect(invalid[0]!.error).toBeInstanceOf(TypeError);
      expect((invalid[0]!.error as Error).message, String(value)).toMatch(message);
      if (value instanceof Error) expect((invalid[0]!.error as Error).cause).toBe(value);
      const record = await store.get(storageKey(undefined, 'k'));
      expect(record?.state === 'completed' && record.expiresAt).toBe(time.now() + DAY);
      expect((await layer.begin(request('/x', 'k'))).type).toBe('respond');
    }
  });

  it('the fallback is the default 24 h, and a numeric ttl still works as before', async () => {
    const time = clock();
    const store = memoryStore({ now: time.now, sweepIntervalMs: 0 });
    await complete(createIdempotency<FakeReq>({ scope: 'shared', store, now: time.now, ttlMs: 5000 }), '/x', 'numeric');
    const record = await store.get(storageKey(undefined, 'numeric'));
    expect(record?.state === 'completed' && record.expiresAt).toBe(time.now() + 5000);
  });

  it('a ttl that is neither a number nor a function is a precise TypeError', () => {
    expect(() => createIdempotency({ scope: 'shared', store: memoryStore(), ttlMs: '1h' as never })).toThrow(
      'Expected `ttlMs` to be a positive integer (ms) or a function returning one, got "1h"',
    );
    expect(() => createIdempotency({ scope: 'shared', store: memoryStore(), ttlMs: -1 })).toThrow('Expected `ttlMs` to be a positive integer, got -1');
  });

  it('released responses (5xx, not stored) never call the ttl function', async () => {
    let called = 0;
    const layer = createIdempotency<FakeReq>({
      scope: 'shared',
      store: memoryStore(),
      ttlMs: () => {
        called++;
        return HOUR;
      },
    });
    await complete(layer, '/x', 'k', ok(503));
    expect(called).toBe(0);
    expect((await layer.begin(request('/x', 'k'))).type).toBe('execute');
  });
});

describe('per-operation ttlMs: idempotent()', () => {
  it('C1/H20: ttl(args, result) sets each result’s expiry; a short-lived result runs again after it', async () => {
    const time = clock();
    const store = memoryStore({ now: time.now, sweepIntervalMs: 0 });
    const runs: string[] = [];
    const handle = idempotent(
      async (msg: { id: string; type: 'payment' | 'search' }) => {
        runs.push(msg.id);
        return { handled: msg.id, cacheable: msg.type === 'search' };
      },
      {
        store,
        now: time.now,
        key: (msg) => msg.id,
        ttlMs: ([msg], result) => (msg.type === 'payment' ? 7 * DAY : result.cacheable ? HOUR : DAY),
      },
    );
    await handle({ id: 'p', type: 'payment' });
    await handle({ id: 's', type: 'search' });
    const payment = await store.get(storageKey(undefined, 'p', 'function'));
    const search = await store.get(storageKey(undefined, 's', 'function'));
    expect(payment?.state === 'completed' && payment.expiresAt).toBe(time.now() + 7 * DAY);
    expect(search?.state === 'completed' && search.expiresAt).toBe(time.now() + HOUR);

    time.advance(HOUR + 1);
    await handle({ id: 's', type: 'search' });
    await handle({ id: 'p', type: 'payment' });
    expect(runs).toEqual(['p', 's', 's']);
  });

  it('a bad return keeps the result 24 h, emits ttl-invalid, and the caller still gets its result', async () => {
    const time = clock();
    const store = memoryStore({ now: time.now, sweepIntervalMs: 0 });
    const events: IdempotencyEvent[] = [];
    let runs = 0;
    const handle = idempotent(async () => ++runs, {
      store,
      now: time.now,
      key: () => 'k',
      onEvent: (event) => events.push(event),
      ttlMs: () => -1,
    });
    expect(await handle()).toBe(1);
    expect(await handle()).toBe(1);
    expect(events.filter((e) => e.type === 'ttl-invalid')).toHaveLength(1);
    const record = await store.get(storageKey(undefined, 'k', 'function'));
    expect(record?.state === 'completed' && record.expiresAt).toBe(time.now() + DAY);
    expect(() => idempotent(async () => 1, { store, key: () => 'k', ttlMs: {} as never })).toThrow(
      'Expected `ttlMs` to be a positive integer (ms) or a function returning one, got an object',
    );
  });

  it('fn throwing releases without calling the ttl function', async () => {
    let called = 0;
    const handle = idempotent(
      async () => {
        throw new Error('boom');
      },
      {
        store: memoryStore(),
        key: () => 'k',
        ttlMs: () => {
          called++;
          return HOUR;
        },
      },
    );
    await expect(handle()).rejects.toThrow('boom');
    expect(called).toBe(0);
  });
});
