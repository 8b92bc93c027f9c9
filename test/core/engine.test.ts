import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { memoryStore } from '../../drivers/memory.js';
import { Engine } from '../../src/engine.js';
import type { IdempotencyEvent } from '../../src/events.js';
import { storageKey } from '../../src/key.js';
import { newToken } from '../../src/lease.js';
import {
  RequestInProgressError,
  KeyReusedError,
  ResponseNotReplayableError,
  StoreUnavailableError,
} from '../../src/errors.js';
import type { IdempotencyStore, StoredResponse } from '../../src/store.js';

const response = (status = 201): StoredResponse => ({ status, headers: { location: '/p/1' }, body: new Uint8Array([1, 2, 3]) });

// Fake timers drive the clock, the lease renewal interval and the waiters' backoff: no sleeps.
beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date', 'performance'] });
});
afterEach(() => {
  vi.useRealTimers();
});

function setup(options: Partial<ConstructorParameters<typeof Engine>[0]> = {}) {
  const events: IdempotencyEvent[] = [];
  const store = options.store ?? memoryStore({ sweepIntervalMs: 0 });
  const engine = new Engine({ store, onEvent: (e) => events.push(e), ...options });
  return { engine, store, events, types: () => events.map((e) => e.type) };
}

describe('engine', () => {
  it('H6/H7: the first call executes, a repeat replays the stored response', async () => {
    const { engine, types } = setup();
    const first = await engine.acquire('k', undefined, 'fp');
    expect(first.type).toBe('execute');
    if (first.type !== 'execute') return;
    expect(await first.lease.complete(response())).toBe(true);
    const second = await engine.acquire('k', undefined, 'fp');
    expect(second.type).toBe('replay');
    expect(second.type === 'replay' && second.record.response).toEqual(response());
    expect(types()).toEqual(['claimed', 'completed', 'replayed']);
  });

  it('H6/H18: with nothing observing events, a release and a completion leave the lease not lost (events are skipped, not the outcome)', async () => {
    const engine = new Engine({ store: memoryStore({ sweepIntervalMs: 0 }), telemetry: false });
    const released = await engine.acquire('r', undefined, 'fp');
    if (released.type !== 'execute') throw new Error('expected execute');
    expect(await released.lease.release()).toBe(true);
    expect(released.lease.lost).toBe(false);
    const completed = await engine.acquire('c', undefined, 'fp');
    if (completed.type !== 'execute') throw new Error('expected execute');
    expect(await completed.lease.complete(response())).toBe(true);
    expect(completed.lease.lost).toBe(false);
    expect((await engine.acquire('r', undefined, 'fp')).type).toBe('execute'); // released: runs again
  });

  it('H14: a different fingerprint is a mismatch, while processing and after completion, and changes nothing', async () => {
    const { engine, store } = setup();
    const first = await engine.acquire('k', undefined, 'fp');
    await expect(engine.acquire('k', undefined, 'other')).rejects.toBeInstanceOf(KeyReusedError);
    if (first.type === 'execute') await first.lease.complete(response());
    await expect(engine.acquire('k', undefined, 'other')).rejects.toBeInstanceOf(KeyReusedError);
    expect((await store.get(storageKey(undefined, 'k')))?.fingerprint).toBe('fp');
  });

  it('H8: wait 0 answers conflict at once and changes nothing in the store', async () => {
    const { engine, store, types } = setup({ waitMs: 0 });
    const first = await engine.acquire('k', undefined, 'fp');
    const before = await store.get(storageKey(undefined, 'k'));
    const error = await engine.acquire('k', undefined, 'fp').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RequestInProgressError);
    expect((error as RequestInProgressError).retryAfterSeconds).toBe(1);
    expect((error as RequestInProgressError).retryable).toBe(true);
    expect(await store.get(storageKey(undefined, 'k'))).toEqual(before);
    expect(types()).toEqual(['claimed', 'conflict']);
    if (first.type === 'execute') await first.lease.release();
  });

  it('H8: a duplicate waits, polling, and gets the replay when the first completes in time', async () => {
    const { engine } = setup({ waitMs: 2000 });
    const first = await engine.acquire('k', undefined, 'fp');
    const duplicate = engine.acquire('k', undefined, 'fp');
    await vi.advanceTimersByTimeAsync(500);
    if (first.type === 'execute') await first.lease.complete(response());
    await vi.advanceTimersByTimeAsync(300);
    const result = await duplicate;
    expect(result.type).toBe('replay');
  });

  it('H8: a duplicate that waits past `wait` gets a conflict', async () => {
    const { engine } = setup({ waitMs: 1000 });
    await engine.acquire('k', undefined, 'fp');
    const duplicate = engine.acquire('k', undefined, 'fp').catch((e: unknown) => e);
    await vi.advanceTimersByTimeAsync(1300);
    expect(await duplicate).toBeInstanceOf(RequestInProgressError);
  });

  it('H8/H10: when the first is released, the waiting duplicate claims and executes', async () => {
    const { engine } = setup({ waitMs: 2000 });
    const first = await engine.acquire('k', undefined, 'fp');
    const duplicate = engine.acquire('k', undefined, 'fp');
    await vi.advanceTimersByTimeAsync(200);
    if (first.type === 'execute') await first.lease.release();
    await vi.advanceTimersByTimeAsync(300);
    expect((await duplicate).type).toBe('execute');
  });

  it('H9: of 50 concurrent acquires exactly one executes; the rest replay once it completes', async () => {
    const { engine } = setup({ waitMs: 5000 });
    const all = Array.from({ length: 50 }, () => engine.acquire('k', undefined, 'fp'));
    await vi.advanceTimersByTimeAsync(10);
    const winner = await Promise.race(all.map((p) => p.then((r) => (r.type === 'execute' ? r : new Promise<never>(() => {})))));
    await winner.lease.complete(response());
    await vi.advanceTimersByTimeAsync(1000);
    const results = await Promise.all(all);
    expect(results.filter((r) => r.type === 'execute')).toHaveLength(1);
    expect(results.filter((r) => r.type === 'replay')).toHaveLength(49);
  });

  it('H12: a record completed without a body answers not-replayable, never a second execution', async () => {
    const { engine } = setup();
    const first = await engine.acquire('k', undefined, 'fp');
    if (first.type === 'execute') await first.lease.complete({ status: 200, headers: {}, body: null });
    await expect(engine.acquire('k', undefined, 'fp')).rejects.toBeInstanceOf(ResponseNotReplayableError);
  });

  it('H15: the same key in two scopes is two records', async () => {
    const { engine } = setup({ waitMs: 0 });
    const a = await engine.acquire('k', 'tenant-a', 'fp');
    const b = await engine.acquire('k', 'tenant-b', 'other-fp');
    expect(a.type).toBe('execute');
    expect(b.type).toBe('execute');
    expect(storageKey('tenant-a', 'k')).not.toBe(storageKey('tenant-b', 'k'));
    expect(storageKey(undefined, 'k')).not.toBe(storageKey('', 'k'));
  });

  it('H17: the lease is renewed every leaseMs/3 while the handler runs', async () => {
    const { engine } = setup({ leaseMs: 3000, waitMs: 0 });
    const first = await engine.acquire('k', undefined, 'fp');
    await vi.advanceTimersByTimeAsync(10_000); // more than three leases
    await expect(engine.acquire('k', undefined, 'fp')).rejects.toBeInstanceOf(RequestInProgressError);
    if (first.type === 'execute') expect(await first.lease.complete(response())).toBe(true);
  });

  it('H17: a crashed owner (no renewal) frees the key after leaseMs; a retry then executes', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const crashed = new Engine({ store, leaseMs: 3000 });
    expect((await crashed.acquire('k', undefined, 'fp')).type).toBe('execute');
    // Simulate the crash: the owner's renewal stops (its process is gone).
    vi.clearAllTimers();
    const { engine } = setup({ store, waitMs: 0 });
    await expect(engine.acquire('k', undefined, 'fp')).rejects.toBeInstanceOf(RequestInProgressError);
    await vi.advanceTimersByTimeAsync(3001);
    expect((await engine.acquire('k', undefined, 'fp')).type).toBe('execute');
  });

  it('H18: an owner whose lease was taken over cannot complete; lease-lost is emitted', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const { engine: slow, events } = setup({ store, leaseMs: 3000 });
    const first = await slow.acquire('k', undefined, 'fp');
    vi.clearAllTimers(); // the slow owner is paused: no renewal
    await vi.advanceTimersByTimeAsync(3001);
    const { engine: other } = setup({ store });
    const second = await other.acquire('k', undefined, 'fp');
    expect(second.type).toBe('execute');
    if (first.type !== 'execute') return;
    expect(await first.lease.complete(response(200))).toBe(false);
    expect(first.lease.lost).toBe(true);
    expect(events.map((e) => e.type)).toContain('lease-lost');
    if (second.type === 'execute') expect(await second.lease.complete(response(201))).toBe(true);
    const replay = await other.acquire('k', undefined, 'fp');
    expect(replay.type === 'replay' && replay.record.response.status).toBe(201);
  });

  it('H18: every claim gets its own fencing token of 128 random bits, across refills of the random pool', () => {
    const tokens = Array.from({ length: 1000 }, () => newToken());
    expect(new Set(tokens).size).toBe(tokens.length);
    for (const token of tokens) expect(Buffer.from(token, 'base64url')).toHaveLength(16);
  });

  it('H18: a renewal refused by token stops renewing and emits lease-lost', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const { engine, events } = setup({ store, leaseMs: 300 });
    const first = await engine.acquire('k', undefined, 'fp');
    if (first.type !== 'execute') return;
    await store.release(storageKey(undefined, 'k'), first.lease.token); // someone else's doing
    await vi.advanceTimersByTimeAsync(150);
    expect(first.lease.lost).toBe(true);
    expect(events.find((e) => e.type === 'lease-lost')).toMatchObject({ operation: 'extend', key: 'k' });
  });

  it('H16/H18: a completion that fails is retried in the background within the lease, so the retry replays', async () => {
    const inner = memoryStore({ sweepIntervalMs: 0 });
    let failures = 2;
    const flaky: IdempotencyStore = {
      ...inner,
      complete: async (...args) => {
        if (failures-- > 0) throw new Error('connection terminated');
        return inner.complete(...args);
      },
    };
    const { engine, types } = setup({ store: flaky, leaseMs: 3000 });
    const first = await engine.acquire('k', undefined, 'fp');
    if (first.type !== 'execute') throw new Error(first.type);
    await expect(first.lease.complete(response())).rejects.toBeInstanceOf(StoreUnavailableError);
    await vi.advanceTimersByTimeAsync(500);
    expect(types()).toContain('completed');
    await vi.advanceTimersByTimeAsync(5000); // long after the lease
    const again = await engine.acquire('k', undefined, 'fp');
    expect(again.type).toBe('replay');
  });

  it('H16: a completion that landed although its call failed is recognised by token, not reported as lost', async () => {
    const inner = memoryStore({ sweepIntervalMs: 0 });
    let first = true;
    const lateWrite: IdempotencyStore = {
      ...inner,
      complete: async (...args) => {
        const ok = await inner.complete(...args);
        if (first) {
          first = false;
          throw new Error('reply lost after the write');
        }
        return ok;
      },
    };
    const { engine, types } = setup({ store: lateWrite, leaseMs: 3000 });
    const claim = await engine.acquire('k', undefined, 'fp');
    if (claim.type !== 'execute') throw new Error(claim.type);
    await expect(claim.lease.complete(response())).rejects.toBeInstanceOf(StoreUnavailableError);
    await vi.advanceTimersByTimeAsync(500);
    expect(types()).toContain('completed');
    expect(types()).not.toContain('lease-lost');
  });

  it('H18: when the store stays down past the lease, the background completion gives up with lease-lost', async () => {
    const down: IdempotencyStore = {
      ...memoryStore({ sweepIntervalMs: 0 }),
      complete: async () => {
        throw new Error('down');
      },
    };
    const { engine, types } = setup({ store: down, leaseMs: 1000 });
    const claim = await engine.acquire('k', undefined, 'fp');
    if (claim.type !== 'execute') throw new Error(claim.type);
    await expect(claim.lease.complete(response())).rejects.toBeInstanceOf(StoreUnavailableError);
    await vi.advanceTimersByTimeAsync(2000);
    expect(types().filter((t) => t === 'lease-lost')).toHaveLength(1);
    expect(types()).not.toContain('completed');
  });

  it('H20: after ttl the key is new again', async () => {
    const { engine } = setup({ ttlMs: 1000 });
    const first = await engine.acquire('k', undefined, 'fp');
    if (first.type === 'execute') await first.lease.complete(response());
    await vi.advanceTimersByTimeAsync(1001);
    expect((await engine.acquire('k', undefined, 'other')).type).toBe('execute');
  });

  it('H16/S4: a failing store surfaces as StoreUnavailableError with a store-error event', async () => {
    const failing: IdempotencyStore = {
      ...memoryStore({ sweepIntervalMs: 0 }),
      claim: async () => {
        throw new Error('ECONNREFUSED');
      },
    };
    const { engine, events } = setup({ store: failing });
    const error = await engine.acquire('k', undefined, 'fp').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect((error as StoreUnavailableError).cause).toBeInstanceOf(Error);
    expect(events[0]).toMatchObject({ type: 'store-error', operation: 'claim' });
  });

  it('S6: a store call that hangs fails after storeTimeoutMs', async () => {
    const hanging: IdempotencyStore = { ...memoryStore({ sweepIntervalMs: 0 }), claim: () => new Promise(() => {}) };
    const { engine } = setup({ store: hanging, storeTimeoutMs: 500 });
    const result = engine.acquire('k', undefined, 'fp').catch((e: unknown) => e);
    await vi.advanceTimersByTimeAsync(501);
    const error = await result;
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect((error as Error).message).toMatch(/timed out after 500 ms/);
  });

  it('S7: the store only ever sees a hash of (scope, key), never the client text', async () => {
    const seen: string[] = [];
    const inner = memoryStore({ sweepIntervalMs: 0 });
    const recording: IdempotencyStore = {
      ...inner,
      claim: (key, request, leaseMs) => {
        seen.push(key);
        return inner.claim(key, request, leaseMs);
      },
    };
    const { engine } = setup({ store: recording });
    const hostile = "k'; DROP TABLE records; -- *?[] \"";
    await engine.acquire(hostile, 'tenant', 'fp');
    expect(seen).toHaveLength(1);
    expect(seen[0]).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(seen[0]).not.toContain('DROP');
  });

  it('events: a throwing listener never changes the outcome', async () => {
    const engine = new Engine({
      store: memoryStore({ sweepIntervalMs: 0 }),
      onEvent: () => {
        throw new Error('listener bug');
      },
    });
    expect((await engine.acquire('k', undefined, 'fp')).type).toBe('execute');
  });

  it('options: bad values throw precise TypeErrors at creation', () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    expect(() => new Engine({ store, leaseMs: -1 })).toThrow('Expected `leaseMs` to be a positive integer, got -1');
    expect(() => new Engine({ store, waitMs: 1.5 })).toThrow('Expected `waitMs` to be a non-negative integer, got 1.5');
    expect(() => new Engine({ store, ttlMs: 0 })).toThrow('Expected `ttlMs` to be a positive integer, got 0');
    expect(() => new Engine({ store, storeTimeoutMs: Number.NaN })).toThrow(TypeError);
    expect(() => new Engine({ store, onStoreError: 'ignore' as never })).toThrow("Expected `onStoreError` to be one of 'fail', 'continue', got \"ignore\"");
    expect(() => new Engine({ store, onEvent: 'x' as never })).toThrow('Expected `onEvent` to be a function');
    expect(() => new Engine({ store: 'redis://localhost' as never })).toThrow(/pass `createStore\(url\)`/);
    expect(() => new Engine({ store: {} as never })).toThrow(/Expected `store` to be an idempotency store/);
  });
});
