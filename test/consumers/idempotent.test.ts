/**
 * `idempotent()` (SPEC §4, C1–C4), run against every store that is available: memory
 * always; Redis, PostgreSQL and SQLite through `createStore()`.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import vm from 'node:vm';
import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, expectTypeOf, it } from 'vitest';
import { createStore } from '../../drivers/create-store.js';
import { memoryStore } from '../../drivers/memory.js';
import type { IdempotencyEvent } from '../../src/events.js';
import {
  RequestInProgressError,
  IdempotencyError,
  IdempotencyKeyError,
  KeyInvalidError,
  KeyMissingError,
  ScopeRequiredError,
  KeyReusedError,
  ResponseNotReplayableError,
  ResultNotStorableError,
  StoreUnavailableError,
  isIdempotencyError,
} from '../../src/errors.js';
import { idempotent, type IdempotentOptions } from '../../src/idempotent.js';
import { deserializeResult, serializeResult } from '../../src/serialize.js';
import type { IdempotencyStore } from '../../src/store.js';
import { POSTGRES_URL, REDIS_URL, serviceAvailable } from '../helpers/services.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function deferred<T = void>() {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** A counting fn: how often it ran, and what it returns. */
function counted<A extends unknown[], R>(body: (...args: A) => R | Promise<R>) {
  const calls: A[] = [];
  const fn = async (...args: A): Promise<R> => {
    calls.push(args);
    return body(...args);
  };
  return { fn, calls };
}

const settle = <T>(promise: Promise<T>) => promise.then(
  (value) => ({ ok: true as const, value }),
  (error: unknown) => ({ ok: false as const, error }),
);

interface StoreTarget {
  name: string;
  create: () => Promise<IdempotencyStore>;
}

const sqliteFile = join(tmpdir(), `idempotent-test-${process.pid}-${randomUUID().slice(0, 8)}.db`);
const stores: StoreTarget[] = [
  { name: 'memory', create: async () => memoryStore({ sweepIntervalMs: 0 }) },
  { name: 'sqlite', create: async () => createStore(`sqlite://${sqliteFile}`, { namespace: 'idempotent_test' }) },
];
for (const [name, url] of [['redis', REDIS_URL], ['postgres', POSTGRES_URL]] as const) {
  if (await serviceAvailable(name, url)) {
    stores.push({ name, create: async () => createStore(url, { namespace: 'idempotent_test' }) });
  }
}
afterAll(() => {
  for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(`${sqliteFile}${suffix}`, { force: true });
});

describe.each(stores)('idempotent() on the $name store', ({ create }) => {
  let store: IdempotencyStore;
  beforeAll(async () => {
    store = await create();
  });
  afterAll(async () => {
    await store?.close();
  });
  const key = () => `job-${randomUUID()}`;

  it('C1/C2: the same key runs fn once; a repeat gets the same result and fn is not called', async () => {
    const { fn, calls } = counted((msg: { id: string; amount: number }) => ({ charged: msg.amount, id: msg.id }));
    const handle = idempotent(fn, { store, key: (msg) => msg.id });
    const msg = { id: key(), amount: 42 };
    const first = await handle(msg);
    const second = await handle(msg);
    const third = await handle({ ...msg, amount: 99 }); // no fingerprint: only the key counts
    expect(first).toEqual({ charged: 42, id: msg.id });
    expect(second).toEqual(first);
    expect(third).toEqual(first);
    expect(calls).toHaveLength(1);
  });

  it('C1: results round-trip faithfully: Date, Buffer, Uint8Array, undefined, nested, Map, Set, bigint, special numbers', async () => {
    const when = new Date('2024-02-29T12:34:56.789Z');
    const value = {
      when,
      invalidDate: new Date(Number.NaN),
      buffer: Buffer.from([0, 1, 2, 255]),
      bytes: new Uint8Array([9, 8, 7]),
      missing: undefined,
      nested: { deep: [1, 'two', null, undefined, { three: [when] }], empty: {}, list: [] },
      map: new Map<unknown, unknown>([['a', 1], [2, new Date(0)], [{ k: 1 }, new Set([1])]]),
      set: new Set(['x', 'y']),
      big: 12345678901234567890123n,
      negativeBig: -1n,
      numbers: [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, -0, 0, 1.5, Number.MAX_SAFE_INTEGER],
      text: 'unicode ✓ \u0000 \ud83d\ude00',
      // Keys a naive encoder would mistake for its own tags or for the prototype.
      ['\u0000t']: 'tag-like key',
      tagLike: { ['\u0000t']: 'd', v: '2020-01-01T00:00:00.000Z' },
      ...JSON.parse('{"__proto__": {"polluted": true}}'),
    };
    const results: unknown[] = [value, undefined, null, 0, '', false, [undefined], when, Buffer.from('raw'), 7n];
    for (const result of results) {
      const { fn, calls } = counted(() => result);
      const k = key();
      const handle = idempotent(fn, { store, key: () => k });
      expect(await handle()).toBe(result); // the first caller gets fn's own value
      expect(await handle()).toStrictEqual(result);
      expect(calls).toHaveLength(1);
    }
    const k = key();
    const handle = idempotent(async () => value, { store, key: () => k });
    await handle();
    const replay = (await handle()) as typeof value;
    expect(replay).toStrictEqual(value);
    expect(replay.when).toBeInstanceOf(Date);
    expect(Buffer.isBuffer(replay.buffer)).toBe(true);
    expect(Buffer.isBuffer(replay.bytes)).toBe(false);
    expect(replay.bytes).toBeInstanceOf(Uint8Array);
    expect('missing' in replay).toBe(true);
    expect(Object.is(replay.numbers[3], -0)).toBe(true);
    expect(Object.getPrototypeOf(replay)).toBe(Object.prototype);
    expect(Object.getOwnPropertyDescriptor(replay, '__proto__')?.value).toEqual({ polluted: true });
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(replay.tagLike).toEqual({ ['\u0000t']: 'd', v: '2020-01-01T00:00:00.000Z' });
  });

  it('C2/H9: 25 concurrent calls with one key run fn once; all get the same result', async () => {
    const gate = deferred();
    const { fn, calls } = counted(async (id: string) => {
      await gate.promise;
      return { id, at: new Date() };
    });
    const handle = idempotent(fn, { store, key: (id) => id, waitMs: 5000 });
    const k = key();
    const all = Array.from({ length: 25 }, () => handle(k));
    await sleep(50);
    gate.resolve();
    const results = await Promise.all(all);
    expect(calls).toHaveLength(1);
    for (const r of results) expect(r).toStrictEqual(results[0]);
  });

  it('H15: the same key in two scopes is two executions', async () => {
    const { fn, calls } = counted((tenant: string, id: string) => `${tenant}:${id}`);
    const handle = idempotent(fn, { store, key: (_t, id) => id, scope: (tenant) => tenant });
    const k = key();
    expect(await handle('a', k)).toBe(`a:${k}`);
    expect(await handle('b', k)).toBe(`b:${k}`);
    expect(await handle('a', k)).toBe(`a:${k}`);
    expect(calls).toHaveLength(2);
  });

  it('C3: a different fingerprint throws KeyReusedError (key-reused), while processing and after completion; the record is untouched', async () => {
    const gate = deferred();
    const events: IdempotencyEvent[] = [];
    const { fn, calls } = counted(async (msg: { id: string; body: Buffer }) => {
      await gate.promise;
      return msg.body.toString();
    });
    const handle = idempotent(fn, {
      store,
      key: (msg) => msg.id,
      fingerprint: (msg) => msg.body,
      waitMs: 0,
      onEvent: (e) => events.push(e),
    });
    const id = key();
    const first = handle({ id, body: Buffer.from('pay 10') });
    await sleep(20);
    const during = await settle(handle({ id, body: Buffer.from('pay 99') }));
    gate.resolve();
    expect(await first).toBe('pay 10');
    const after = await settle(handle({ id, body: Buffer.from('pay 99') }));
    for (const outcome of [during, after]) {
      expect(outcome.ok).toBe(false);
      const error = (outcome as { error: KeyReusedError }).error;
      expect(error).toBeInstanceOf(KeyReusedError);
      expect(error).toMatchObject({ code: 'key-reused', retryable: false, status: 422 });
    }
    // Same bytes, a new Buffer: the same fingerprint, so a replay.
    expect(await handle({ id, body: Buffer.from('pay 10') })).toBe('pay 10');
    expect(calls).toHaveLength(1);
    expect(events.filter((e) => e.type === 'mismatch')).toHaveLength(2);
  });

  it('C3/H8: in flight elsewhere with wait 0 -> RequestInProgressError at once (retryable, request-in-progress)', async () => {
    const gate = deferred();
    const { fn, calls } = counted(async () => {
      await gate.promise;
      return 'done';
    });
    const k = key();
    const handle = idempotent(fn, { store, key: () => k, waitMs: 0 });
    const first = handle();
    await sleep(20);
    const started = Date.now();
    const error = await handle().catch((e: unknown) => e);
    expect(Date.now() - started).toBeLessThan(1000);
    expect(error).toBeInstanceOf(RequestInProgressError);
    expect(error).toMatchObject({ code: 'request-in-progress', retryable: true, status: 409, retryAfterSeconds: 1 });
    expect(isIdempotencyError(error)).toBe(true);
    gate.resolve();
    expect(await first).toBe('done');
    expect(await handle()).toBe('done');
    expect(calls).toHaveLength(1);
  });

  it('C3/H8: a duplicate waits up to `wait` ms, then conflicts; fn is not run twice', async () => {
    const gate = deferred();
    const { fn, calls } = counted(async () => {
      await gate.promise;
      return 1;
    });
    const k = key();
    const first = idempotent(fn, { store, key: () => k })();
    await sleep(20);
    const started = Date.now();
    const error = await idempotent(fn, { store, key: () => k, waitMs: 300 })().catch((e: unknown) => e);
    const waited = Date.now() - started;
    expect(error).toBeInstanceOf(RequestInProgressError);
    expect(waited).toBeGreaterThanOrEqual(250);
    expect(waited).toBeLessThan(2000);
    gate.resolve();
    await first;
    expect(calls).toHaveLength(1);
  });

  it('C3/H8: a duplicate that waits gets the first call\'s result when it completes in time', async () => {
    const { fn, calls } = counted(async (id: string) => {
      await sleep(200);
      return { id, finishedAt: new Date() };
    });
    const handle = idempotent(fn, { store, key: (id) => id, waitMs: 3000 });
    const k = key();
    const first = handle(k);
    await sleep(20);
    const second = await handle(k);
    expect(second).toStrictEqual(await first);
    expect(calls).toHaveLength(1);
  });

  it('C3: fn throws -> the record is released and the same error object is rethrown; the next call runs fn again', async () => {
    const boom = new Error('payment gateway timeout');
    let attempt = 0;
    const events: IdempotencyEvent[] = [];
    const { fn, calls } = counted(async () => {
      attempt++;
      if (attempt === 1) throw boom;
      return 'ok on retry';
    });
    const k = key();
    const handle = idempotent(fn, { store, key: () => k, onEvent: (e) => events.push(e) });
    const error = await handle().catch((e: unknown) => e);
    expect(error).toBe(boom); // unchanged, not wrapped
    expect(events.map((e) => e.type)).toEqual(['claimed', 'released']);
    expect(await handle()).toBe('ok on retry');
    expect(await handle()).toBe('ok on retry');
    expect(calls).toHaveLength(2);
  });

  it('C3/H8: a duplicate waiting on a call that throws claims the key and runs fn itself', async () => {
    const gate = deferred();
    let attempt = 0;
    const { fn, calls } = counted(async () => {
      attempt++;
      if (attempt === 1) {
        await gate.promise;
        throw new Error('first attempt fails');
      }
      return `attempt ${attempt}`;
    });
    const k = key();
    const handle = idempotent(fn, { store, key: () => k, waitMs: 3000 });
    const first = settle(handle());
    await sleep(20);
    const second = handle();
    await sleep(50);
    gate.resolve();
    expect((await first).ok).toBe(false);
    expect(await second).toBe('attempt 2');
    expect(calls).toHaveLength(2);
  });

  it('H17: the lease is renewed while a long fn runs (4 leases); a concurrent caller never runs fn', async () => {
    // A lease of 1 s renewed every 333 ms: a loaded machine delays timers and store calls by
    // far less than the 667 ms of slack, where a 300 ms lease was lost under load.
    const LEASE_MS = 1000;
    const { fn, calls } = counted(async () => {
      await sleep(4 * LEASE_MS);
      return 'long job';
    });
    const k = key();
    const events: IdempotencyEvent[] = [];
    const handle = idempotent(fn, { store, key: () => k, leaseMs: LEASE_MS, onEvent: (e) => events.push(e) });
    const impatient = idempotent(fn, { store, key: () => k, leaseMs: LEASE_MS, waitMs: 0 });
    const first = handle();
    const conflicts: unknown[] = [];
    for (let i = 0; i < 10; i++) {
      await sleep((4 * LEASE_MS) / 12);
      conflicts.push(await impatient().catch((e: unknown) => e));
    }
    expect(conflicts.every((e) => e instanceof RequestInProgressError)).toBe(true);
    expect(await first).toBe('long job');
    expect(await impatient()).toBe('long job');
    expect(calls).toHaveLength(1);
    expect(events.map((e) => e.type)).not.toContain('lease-lost');
  });

  /**
   * A store that delegates to the real one, but can hold back `extend` calls: the lease
   * owner looks paused (GC pause, blocked event loop) while the test takes the key over.
   */
  function pausable(inner: IdempotencyStore) {
    let held: Array<() => void> | undefined;
    const wrapped: IdempotencyStore = {
      ...inner,
      name: inner.name,
      claim: (k, r, l) => inner.claim(k, r, l),
      get: (k) => inner.get(k),
      complete: (k, t, r, ttl) => inner.complete(k, t, r, ttl),
      release: (k, t) => inner.release(k, t),
      close: async () => {},
      extend: async (k, t, l) => {
        if (held) await new Promise<void>((resolve) => held!.push(resolve));
        return inner.extend(k, t, l);
      },
    };
    return {
      store: wrapped,
      pause: () => {
        held = [];
      },
      resume: () => {
        const waiting = held ?? [];
        held = undefined;
        for (const go of waiting) go();
      },
    };
  }

  it('H18: a lease taken over while fn was paused -> lease-lost (extend), the late result is not stored, the caller still gets it', async () => {
    const paused = pausable(store);
    const gate = deferred<string>();
    const events: IdempotencyEvent[] = [];
    const k = key();
    const slow = idempotent(() => gate.promise, { store: paused.store, key: () => k, leaseMs: 200, onEvent: (e) => events.push(e) });
    const { fn: fast, calls: fastCalls } = counted(() => 'result of the takeover');
    const other = idempotent(fast, { store, key: () => k, leaseMs: 5000, waitMs: 0 });

    paused.pause();
    const late = slow();
    await sleep(450); // the lease expires: no renewal got through
    expect(await other()).toBe('result of the takeover');
    paused.resume(); // the held renewals reach the store with the old token: refused
    await sleep(100);
    expect(events.find((e) => e.type === 'lease-lost')).toMatchObject({ key: k, operation: 'extend' });
    gate.resolve('late result');
    expect(await late).toBe('late result');
    expect(await other()).toBe('result of the takeover'); // the stored result is the takeover's
    expect(fastCalls).toHaveLength(1);
  });

  it('H18: a late complete() after a takeover is refused by token -> lease-lost (complete), not stored', async () => {
    const paused = pausable(store);
    const gate = deferred<{ n: number }>();
    const events: IdempotencyEvent[] = [];
    const k = key();
    const slow = idempotent(() => gate.promise, { store: paused.store, key: () => k, leaseMs: 200, onEvent: (e) => events.push(e) });
    const other = idempotent(() => ({ n: 2 }), { store, key: () => k, waitMs: 0 });
    paused.pause(); // renewals never get through while fn runs
    const late = slow();
    await sleep(450);
    expect(await other()).toEqual({ n: 2 });
    gate.resolve({ n: 1 });
    expect(await late).toEqual({ n: 1 });
    expect(events.filter((e) => e.type === 'lease-lost')).toMatchObject([{ key: k, operation: 'complete' }]);
    expect(events.map((e) => e.type)).not.toContain('completed');
    expect(await other()).toEqual({ n: 2 });
    paused.resume();
  });

  it('C1 H12: an unstorable result is returned as it is; the key completes without it (result-not-stored, not-storable); a repeat gets ResponseNotReplayableError, fn never runs twice', async () => {
    class Invoice {
      constructor(readonly total: number) {}
    }
    const circular: Record<string, unknown> = { a: 1 };
    circular.self = circular;
    const cases: Array<[string, unknown, RegExp]> = [
      ['a function', { ok: true, callback: () => 1 }, /Cannot store a function at result\.callback/],
      ['a class instance', { invoice: new Invoice(5) }, /instance of Invoice at result\.invoice/],
      ['a cycle', circular, /circular reference at result\.self/],
      ['a symbol', [Symbol('s')], /Cannot store a symbol at result\[0\]/],
      ['an Error', new Error('x'), /instance of Error at result/],
      [
        'a getter that throws',
        Object.defineProperty({}, 'boom', {
          enumerable: true,
          get() {
            throw new Error('boom');
          },
        }),
        /Reading the result to store it failed: boom/,
      ],
    ];
    for (const [, result, message] of cases) {
      const { fn, calls } = counted(() => result);
      const k = key();
      const events: IdempotencyEvent[] = [];
      const handle = idempotent(fn, { store, key: () => k, onEvent: (e) => events.push(e) });
      expect(await handle()).toBe(result);
      expect(events.map((e) => e.type)).toEqual(['claimed', 'result-not-stored', 'completed']);
      const notStored = events[1]!;
      expect(notStored).toMatchObject({ key: k, reason: 'not-storable' });
      expect(notStored.error).toBeInstanceOf(ResultNotStorableError);
      expect((notStored.error as Error).message).toMatch(message);
      const repeat = await handle().catch((e: unknown) => e);
      expect(repeat).toBeInstanceOf(ResponseNotReplayableError);
      expect(repeat).toMatchObject({ code: 'response-not-replayable', retryable: false });
      expect(calls).toHaveLength(1);
    }
  });

  it('C1 H12: a result over maxResultBytes is returned as it is; the key completes without it (result-not-stored, too-large), never runs twice; one at the limit replays', async () => {
    const big = 'x'.repeat(2000);
    const { fn, calls } = counted(() => ({ big }));
    const k = key();
    const events: IdempotencyEvent[] = [];
    const handle = idempotent(fn, { store, key: () => k, maxResultBytes: 1000, onEvent: (e) => events.push(e) });
    expect(await handle()).toEqual({ big });
    expect(events.map((e) => e.type)).toEqual(['claimed', 'result-not-stored', 'completed']);
    expect(events[1]).toMatchObject({ reason: 'too-large' });
    expect((events[1]!.error as Error).message).toMatch(/more than the 1000 bytes allowed/);
    expect(await handle().catch((e: unknown) => e)).toBeInstanceOf(ResponseNotReplayableError);
    expect(calls).toHaveLength(1);

    const exact = serializeResult({ big }).byteLength;
    const k2 = key();
    const atLimit = idempotent(fn, { store, key: () => k2, maxResultBytes: exact });
    expect(await atLimit()).toEqual({ big });
    expect(await atLimit()).toEqual({ big });
    expect(calls).toHaveLength(2);
    expect(() => idempotent(fn, { store, key: () => k, maxResultBytes: -1 })).toThrow(/maxResultBytes/);
  });
});

describe('idempotent() with a failing store (H16)', () => {
  const failing = (operation: 'claim' | 'complete' | 'release'): IdempotencyStore => {
    const inner = memoryStore({ sweepIntervalMs: 0 });
    return {
      ...inner,
      [operation]: async () => {
        throw new Error(`ECONNRESET during ${operation}`);
      },
    };
  };

  it('H16: the store fails before fn -> StoreUnavailableError (retryable), fn not run', async () => {
    const { fn, calls } = counted(() => 1);
    const error = await idempotent(fn, { store: failing('claim'), key: () => 'k' })().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect(error).toMatchObject({ code: 'store-unavailable', retryable: true });
    expect(calls).toHaveLength(0);
  });

  it("H16: onStoreError 'continue' runs fn unprotected and emits unprotected", async () => {
    const events: IdempotencyEvent[] = [];
    const { fn, calls } = counted(() => 'unprotected result');
    const handle = idempotent(fn, { store: failing('claim'), key: () => 'k', onStoreError: 'continue', onEvent: (e) => events.push(e) });
    expect(await handle()).toBe('unprotected result');
    expect(calls).toHaveLength(1);
    expect(events.map((e) => e.type)).toEqual(['store-error', 'unprotected']);
  });

  it('H16: a store failure after fn ran never hides its result (store-error event)', async () => {
    const events: IdempotencyEvent[] = [];
    const handle = idempotent(async () => ({ ok: 1 }), { store: failing('complete'), key: () => 'k', onEvent: (e) => events.push(e) });
    expect(await handle()).toEqual({ ok: 1 });
    expect(events.find((e) => e.type === 'store-error')).toMatchObject({ operation: 'complete' });
  });

  it('C3: a release that fails still rethrows fn\'s own error (store-error event)', async () => {
    const events: IdempotencyEvent[] = [];
    const boom = new TypeError('fn bug');
    const handle = idempotent(
      async () => {
        throw boom;
      },
      { store: failing('release'), key: () => 'k', onEvent: (e) => events.push(e) },
    );
    expect(await handle().catch((e: unknown) => e)).toBe(boom);
    expect(events.find((e) => e.type === 'store-error')).toMatchObject({ operation: 'release' });
  });
});

describe('idempotent() options, keys and types', () => {
  const store = memoryStore({ sweepIntervalMs: 0 });
  const fn = async (msg: { id: string }) => msg.id;

  it('bad options throw precise TypeErrors when the wrapper is created', () => {
    const make = (options: unknown, f: unknown = fn) => () => idempotent(f as typeof fn, options as IdempotentOptions<[{ id: string }]>);
    expect(make({ store, key: () => 'k' }, 'not a function')).toThrow('Expected `fn` to be a function, got "not a function"');
    expect(make(undefined)).toThrow('Expected options to be an object, got undefined');
    expect(make({ key: () => 'k' })).toThrow(/Expected `store` to be an idempotency store/);
    expect(make({ store: 'redis://localhost', key: () => 'k' })).toThrow(/pass `createStore\(url\)`/);
    expect(make({ store })).toThrow('Expected `key` to be a function that returns the key from the arguments, e.g. `(msg) => msg.id`, got undefined');
    expect(make({ store, key: 'order-1' })).toThrow(/Expected `key` to be a function .* got "order-1"/);
    expect(make({ store, key: () => 'k', scope: 'tenant' })).toThrow('Expected `scope` to be a function, got "tenant"');
    expect(make({ store, key: () => 'k', fingerprint: true })).toThrow('Expected `fingerprint` to be a function, got true');
    expect(make({ store, key: () => 'k', leaseMs: -1 })).toThrow('Expected `leaseMs` to be a positive integer, got -1');
    expect(make({ store, key: () => 'k', waitMs: 1.5 })).toThrow('Expected `waitMs` to be a non-negative integer, got 1.5');
    expect(make({ store, key: () => 'k', ttlMs: 0 })).toThrow('Expected `ttlMs` to be a positive integer, got 0');
    expect(make({ store, key: () => 'k', onStoreError: 'ignore' })).toThrow(/Expected `onStoreError` to be one of/);
    expect(make({ store, key: () => 'k', onEvent: 1 })).toThrow('Expected `onEvent` to be a function, got 1');
  });

  it('a bad key is refused before fn runs: missing -> key-missing, empty -> key-invalid, not a string -> TypeError', async () => {
    const { fn: f, calls } = counted((k: unknown) => k);
    const handle = idempotent(f, { store, key: (k) => k as string });
    for (const missing of [undefined, null]) {
      const error = await handle(missing).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(IdempotencyKeyError);
      expect(error).toMatchObject({ code: 'key-missing', retryable: false });
    }
    expect(await handle('').catch((e: unknown) => e)).toMatchObject({ code: 'key-invalid', reason: 'empty' });
    await expect(handle(42)).rejects.toThrow(new TypeError('Expected `key()` to return a string, got 42'));
    const throwingKey = new Error('no id on this message');
    const keyThrows = idempotent(f, {
      store,
      key: () => {
        throw throwingKey;
      },
    });
    expect(await keyThrows('x').catch((e: unknown) => e)).toBe(throwingKey);
    expect(calls).toHaveLength(0);
  });

  it("H15: a scope function returning NaN, ±Infinity, '', undefined, null or an object rejects with ScopeRequiredError, fn not run", async () => {
    const { fn: f, calls } = counted((k: string) => k);
    for (const bad of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, '', undefined, null, { id: 1 }]) {
      const handle = idempotent(f, { store, key: (k) => k, scope: () => bad as string });
      const error = await handle('shared-key').catch((e: unknown) => e);
      expect(error, String(bad)).toBeInstanceOf(ScopeRequiredError);
      expect(error).toMatchObject({ code: 'scope-required' });
    }
    expect(calls).toHaveLength(0);
    // A finite number is an identity, as on the HTTP layer.
    expect(await idempotent(f, { store, key: (k) => k, scope: () => 7 })('numbered')).toBe('numbered');
  });

  it('keys are opaque: long, unicode and case-different keys are distinct records (S7 hashing)', async () => {
    const { fn: f, calls } = counted((k: string) => k);
    const handle = idempotent(f, { store, key: (k) => k });
    const keys = ['Order-1', 'order-1', 'x'.repeat(10_000), 'ключ ✓', ' order-1'];
    for (const k of keys) expect(await handle(k)).toBe(k);
    for (const k of keys) expect(await handle(k)).toBe(k);
    expect(calls).toHaveLength(keys.length);
  });

  it('fn receives its arguments and `this` unchanged', async () => {
    const account = {
      balance: 10,
      withdraw: idempotent(
        async function (this: { balance: number }, id: string, amount: number) {
          this.balance -= amount;
          return { id, balance: this.balance };
        },
        { store, key: (id) => id },
      ),
    };
    const id = randomUUID();
    expect(await account.withdraw(id, 3)).toEqual({ id, balance: 7 });
    expect(await account.withdraw(id, 3)).toEqual({ id, balance: 7 });
    expect(account.balance).toBe(7);
  });

  it("C1: the wrapper keeps fn's parameter and return types", () => {
    interface Message {
      id: string;
      body: Buffer;
    }
    const handle = idempotent(async (msg: Message, attempt: number) => ({ ok: true as const, at: new Date(), attempt }), {
      store,
      key: (msg) => msg.id,
      fingerprint: (msg, attempt) => [msg.body, attempt],
    });
    expectTypeOf(handle).parameters.toEqualTypeOf<[Message, number]>();
    expectTypeOf(handle).returns.toEqualTypeOf<Promise<{ ok: true; at: Date; attempt: number }>>();
    const sync = idempotent((a: string) => a.length, { store, key: (a) => a });
    expectTypeOf(sync).toEqualTypeOf<(this: unknown, a: string) => Promise<number>>();
    const nothing = idempotent(async () => {}, { store, key: () => 'k' });
    expectTypeOf(nothing).returns.resolves.toBeVoid();
    // @ts-expect-error the key function gets fn's parameters: Message has no `uuid`
    idempotent(async (msg: Message) => msg.id, { store, key: (msg) => msg.uuid });
    // @ts-expect-error the wrapper keeps fn's parameter types
    void (() => handle('not a message', 1));
    // @ts-expect-error key must return a string
    idempotent(async (msg: Message) => msg.id, { store, key: (msg) => msg.body });
  });
});

describe('serializeResult()', () => {
  it('refuses what cannot round-trip, naming where it was found', () => {
    expect(() => serializeResult({ a: [{ b: () => 1 }] })).toThrow('Cannot store a function at result.a[0].b');
    expect(() => serializeResult(new Map([['k', new (class Point {})()]]))).toThrow(/instance of Point at result<value 0>/);
    let deep: unknown = 1;
    for (let i = 0; i < 100_000; i++) deep = [deep];
    expect(() => serializeResult(deep)).toThrow(new ResultNotStorableError('Cannot store a result nested this deeply'));
  });

  it('keeps shared (non-circular) references as copies and sparse arrays as undefined slots', () => {
    const shared = { n: 1 };
    expect(deserializeResult(serializeResult([shared, shared]))).toEqual([{ n: 1 }, { n: 1 }]);
    // eslint-disable-next-line no-sparse-arrays
    expect(deserializeResult(serializeResult([1, , 3]))).toStrictEqual([1, undefined, 3]);
  });
});

describe('C4: errors across copies of the package', () => {
  // A second copy of src/errors.ts, compiled to CommonJS the way a second install (or
  // the CJS build next to the ESM one) would be: its own classes, its own module state.
  const source = ts.transpileModule(readFileSync(new URL('../../src/errors.ts', import.meta.url), 'utf8'), {
    compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2022 },
  }).outputText;
  const load = (context?: vm.Context) => {
    const module = { exports: {} as Record<string, new (...args: never[]) => Error> };
    const wrapper = `(function (module, exports) {${source}\n})`;
    const fn = context ? vm.runInContext(wrapper, context) : vm.runInThisContext(wrapper);
    (fn as (m: typeof module, e: typeof module.exports) => void)(module, module.exports);
    return module.exports;
  };

  it('C4: an error from a second module instance passes isIdempotencyError, though instanceof fails', () => {
    const copy = load();
    const error = new (copy.RequestInProgressError as unknown as typeof RequestInProgressError)(2);
    expect(error).not.toBeInstanceOf(IdempotencyError);
    expect(isIdempotencyError(error)).toBe(true);
    expect(error).toMatchObject({ code: 'request-in-progress', retryable: true, retryAfterSeconds: 2 });
    // and the other way round: the copy's guard recognises ours
    const copyGuard = copy.isIdempotencyError as unknown as typeof isIdempotencyError;
    expect(copyGuard(new KeyReusedError())).toBe(true);
  });

  it('C4: an error created in another realm (vm context) passes the brand check', () => {
    const context = vm.createContext({});
    const copy = load(context);
    const error = new (copy.KeyReusedError as unknown as typeof KeyReusedError)();
    expect(error instanceof Error).toBe(false); // another realm's Error
    expect(isIdempotencyError(error)).toBe(true);
    expect(error.code).toBe('key-reused');
  });

  it('C4: look-alikes without the brand are not idempotency errors', () => {
    const fake = Object.assign(new Error('x'), { code: 'key-reused', name: 'KeyReusedError' });
    for (const value of [fake, { code: 'request-in-progress' }, null, undefined, 'key-reused', 42]) {
      expect(isIdempotencyError(value)).toBe(false);
    }
  });

  it('C4: codes are stable strings, one per class', () => {
    const codes = [
      new KeyMissingError('m'),
      new KeyInvalidError('too-long', 'm'),
      new KeyReusedError(),
      new RequestInProgressError(),
      new ResponseNotReplayableError(),
      new StoreUnavailableError(new Error('down')),
      new ResultNotStorableError('m'),
    ].map((e) => [e.name, e.code, e.retryable]);
    expect(codes).toEqual([
      ['KeyMissingError', 'key-missing', false],
      ['KeyInvalidError', 'key-invalid', false],
      ['KeyReusedError', 'key-reused', false],
      ['RequestInProgressError', 'request-in-progress', true],
      ['ResponseNotReplayableError', 'response-not-replayable', false],
      ['StoreUnavailableError', 'store-unavailable', true],
      ['ResultNotStorableError', 'result-not-storable', false],
    ]);
  });
});
