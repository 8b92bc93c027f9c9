/**
 * How duplicates waitMs: in memory behind a request of the same process, on the
 * store's wake-ups across processes, polling only without them. Two store objects over one
 * Map stand for two processes sharing a store; a small bus gives them the optional
 * `subscribe` capability the Redis and PostgreSQL drivers implement (tested for real in
 * test/stores/*).
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { memoryStore } from '../../drivers/memory.js';
import { Engine } from '../../src/engine.js';
import type { EngineOptions } from '../../src/options.js';
import { RequestInProgressError, KeyReusedError } from '../../src/errors.js';
import type { IdempotencyRecord, IdempotencyStore, SettleListener, StoredResponse } from '../../src/store.js';

const response = (status = 201): StoredResponse => ({ status, headers: {}, body: new Uint8Array([7]) });

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date', 'performance'] });
});
afterEach(() => {
  vi.useRealTimers();
});

/** Store calls by operation, and the largest number of `get`s in flight at once. */
interface Counted {
  store: IdempotencyStore;
  calls: Record<string, number>;
  maxGetsInFlight: number;
}

/** A real memory store over `map`, counting calls; with `bus`, it also has `subscribe`. */
function counted(map: Map<string, IdempotencyRecord>, bus?: Set<SettleListener>, claimAnswerDelayMs = 0, sendRecords = false): Counted {
  const inner = memoryStore({ map, sweepIntervalMs: 0 });
  const result: Counted = { store: undefined as unknown as IdempotencyStore, calls: {}, maxGetsInFlight: 0 };
  let getsInFlight = 0;
  const count = (op: string) => (result.calls[op] = (result.calls[op] ?? 0) + 1);
  const publish = (key: string, record?: IdempotencyRecord | null) =>
    bus && queueMicrotask(() => bus.forEach((l) => l.settled(key, sendRecords ? record : undefined)));
  result.store = {
    name: 'counted-memory',
    async claim(...a) {
      count('claim');
      const result = await inner.claim(...a);
      // The answer travels back while the store moves on (another process may settle the key).
      if (claimAnswerDelayMs > 0) await new Promise((r) => setTimeout(r, claimAnswerDelayMs));
      return result;
    },
    async get(key) {
      count('get');
      getsInFlight++;
      result.maxGetsInFlight = Math.max(result.maxGetsInFlight, getsInFlight);
      await new Promise((r) => setTimeout(r, 1)); // a round trip
      getsInFlight--;
      return inner.get(key);
    },
    async complete(key, ...a) {
      count('complete');
      const ok = await inner.complete(key, ...a);
      if (ok) publish(key, await inner.get(key));
      return ok;
    },
    async release(key, token) {
      count('release');
      const ok = await inner.release(key, token);
      if (ok) publish(key, null);
      return ok;
    },
    extend: (...a) => (count('extend'), inner.extend(...a)),
    close: async () => {},
    ...(bus
      ? {
          subscribe(listener: SettleListener) {
            bus.add(listener);
            queueMicrotask(() => listener.ready());
            return () => bus.delete(listener);
          },
        }
      : {}),
  };
  return result;
}

const engine = (store: IdempotencyStore, options: Partial<EngineOptions> = {}) => new Engine({ store, waitMs: 2000, ...options });

describe('waiting in the same process', () => {
  it('H8: duplicates wait on the local owner in memory (no store call) and replay the moment it completes', async () => {
    const s = counted(new Map());
    const a = engine(s.store);
    const b = engine(s.store); // another engine on the same store object coalesces too
    const first = await a.acquire('k', undefined, 'fp');
    expect(first.type).toBe('execute');
    const settledAt: number[] = [];
    const duplicates = [a, a, b, b].map((e) => e.acquire('k', undefined, 'fp').then((r) => (settledAt.push(Date.now()), r)));
    await vi.advanceTimersByTimeAsync(1500);
    expect(s.calls).toEqual({ claim: 1 });
    const completedAt = Date.now();
    if (first.type === 'execute') await first.lease.complete(response());
    const results = await Promise.all(duplicates);
    expect(results.map((r) => r.type)).toEqual(['replay', 'replay', 'replay', 'replay']);
    expect(Math.max(...settledAt)).toBe(completedAt); // no backoff sleep after the record settled
    expect(s.calls).toEqual({ claim: 1, complete: 1 });
  });

  it('H8/H9: simultaneous identical calls make one claim; the rest follow it', async () => {
    const s = counted(new Map());
    const e = engine(s.store);
    const all = Array.from({ length: 8 }, () => e.acquire('k', undefined, 'fp'));
    await vi.advanceTimersByTimeAsync(5);
    const owner = (await Promise.race(all.map((p) => p.then((r) => (r.type === 'execute' ? r : new Promise<never>(() => {})))))) as Extract<
      Awaited<(typeof all)[number]>,
      { type: 'execute' }
    >;
    await owner.lease.complete(response());
    const results = await Promise.all(all);
    expect(results.filter((r) => r.type === 'execute')).toHaveLength(1);
    expect(results.filter((r) => r.type === 'replay')).toHaveLength(7);
    expect(s.calls).toEqual({ claim: 1, complete: 1 });
  });

  it('H8/H10: when the local owner releases, exactly one follower claims and runs; the others follow it', async () => {
    const s = counted(new Map());
    const e = engine(s.store);
    const first = await e.acquire('k', undefined, 'fp');
    const duplicates = Array.from({ length: 4 }, () => e.acquire('k', undefined, 'fp'));
    await vi.advanceTimersByTimeAsync(100);
    if (first.type === 'execute') await first.lease.release(500);
    await vi.advanceTimersByTimeAsync(5);
    const runs = await Promise.race(duplicates.map((p) => p.then((r) => (r.type === 'execute' ? r : new Promise<never>(() => {})))));
    if (runs.type === 'execute') await runs.lease.complete(response(201));
    const results = await Promise.all(duplicates);
    expect(results.map((r) => r.type).sort()).toEqual(['execute', 'replay', 'replay', 'replay']);
    expect(s.calls).toEqual({ claim: 2, release: 1, complete: 1 });
  });

  it('H14: a different request for a key owned here is a mismatch at once, without a store call', async () => {
    const s = counted(new Map());
    const e = engine(s.store);
    const first = await e.acquire('k', undefined, 'fp');
    await expect(e.acquire('k', undefined, 'other')).rejects.toBeInstanceOf(KeyReusedError);
    expect(s.calls).toEqual({ claim: 1 });
    if (first.type === 'execute') await first.lease.complete(response());
  });

  it('H8: `wait` still bounds a local wait (409), and `waitMs: 0` answers at once', async () => {
    const s = counted(new Map());
    const first = await engine(s.store).acquire('k', undefined, 'fp');
    await expect(engine(s.store, { waitMs: 0 }).acquire('k', undefined, 'fp')).rejects.toBeInstanceOf(RequestInProgressError);
    const late = engine(s.store, { waitMs: 1000 }).acquire('k', undefined, 'fp').catch((e: unknown) => e);
    await vi.advanceTimersByTimeAsync(999);
    let settled = false;
    void late.then(() => (settled = true));
    await vi.advanceTimersByTimeAsync(0);
    expect(settled).toBe(false);
    await vi.advanceTimersByTimeAsync(2);
    expect(await late).toBeInstanceOf(RequestInProgressError);
    expect(s.calls).toEqual({ claim: 1 });
    if (first.type === 'execute') await first.lease.complete(response());
  });
});

describe('waiting across processes (two store objects over one shared map)', () => {
  it('H8: with wake-ups, a waiter makes one claim and one read, however long the owner takes', async () => {
    const map = new Map<string, IdempotencyRecord>();
    const bus = new Set<SettleListener>();
    const here = counted(map, bus);
    const there = counted(map, bus);
    const owner = await engine(here.store, { waitMs: 10_000 }).acquire('k', undefined, 'fp');
    const e = engine(there.store, { waitMs: 10_000 });
    // Warm the subscription up (the first waiter of a process reads once more while it comes up).
    const warm = await engine(here.store).acquire('warm', undefined, 'fp');
    const warmWaiter = e.acquire('warm', undefined, 'fp');
    await vi.advanceTimersByTimeAsync(50);
    if (warm.type === 'execute') await warm.lease.complete(response());
    await vi.advanceTimersByTimeAsync(5);
    expect((await warmWaiter).type).toBe('replay');
    there.calls = {};

    const waiter = e.acquire('k', undefined, 'fp');
    await vi.advanceTimersByTimeAsync(1900);
    expect(there.calls).toEqual({ claim: 1 }); // no polling while the owner works
    const completedAt = Date.now();
    if (owner.type === 'execute') await owner.lease.complete(response());
    await vi.advanceTimersByTimeAsync(1); // the read's round trip
    const result = await waiter;
    expect(result.type).toBe('replay');
    expect(Date.now() - completedAt).toBeLessThanOrEqual(1);
    expect(there.calls).toEqual({ claim: 1, get: 1 });
  });

  it('H8: a wake-up that brings the record spares the read: one store operation per waiting duplicate', async () => {
    const map = new Map<string, IdempotencyRecord>();
    const bus = new Set<SettleListener>();
    const here = counted(map, bus, 0, true);
    const there = counted(map, bus, 0, true);
    const e = engine(there.store, { waitMs: 10_000 });
    const warm = await engine(here.store).acquire('warm', undefined, 'fp');
    const warmWaiter = e.acquire('warm', undefined, 'fp');
    await vi.advanceTimersByTimeAsync(50);
    if (warm.type === 'execute') await warm.lease.complete(response());
    await vi.advanceTimersByTimeAsync(5);
    await warmWaiter;
    there.calls = {};

    const owner = await engine(here.store).acquire('k', undefined, 'fp');
    const waiters = [e.acquire('k', undefined, 'fp'), e.acquire('k', undefined, 'fp')];
    await vi.advanceTimersByTimeAsync(1000);
    if (owner.type === 'execute') await owner.lease.complete(response());
    expect((await Promise.all(waiters)).map((r) => r.type)).toEqual(['replay', 'replay']);
    expect(there.calls).toEqual({ claim: 1 }); // one claim for both: they share it in process

    // A release brings `null`: the waiter claims at once, without reading.
    const second = await engine(here.store).acquire('k2', undefined, 'fp');
    there.calls = {};
    const retry = e.acquire('k2', undefined, 'fp');
    await vi.advanceTimersByTimeAsync(100);
    if (second.type === 'execute') await second.lease.release();
    await vi.advanceTimersByTimeAsync(0);
    expect((await retry).type).toBe('execute');
    expect(there.calls).toEqual({ claim: 2 });
  });

  it('H8: a wake-up that arrives before the claim\'s answer is not missed', async () => {
    const map = new Map<string, IdempotencyRecord>();
    const bus = new Set<SettleListener>();
    const here = counted(map, bus);
    const there = counted(map, bus, 5);
    const e = engine(there.store, { waitMs: 10_000 });
    // Warm the subscription up.
    const warm = await engine(here.store).acquire('warm', undefined, 'fp');
    const warmWaiter = e.acquire('warm', undefined, 'fp');
    await vi.advanceTimersByTimeAsync(50);
    if (warm.type === 'execute') await warm.lease.complete(response());
    await vi.advanceTimersByTimeAsync(5);
    await warmWaiter;

    const owner = await engine(here.store).acquire('k', undefined, 'fp');
    const waiter = e.acquire('k', undefined, 'fp'); // its claim ran; its answer takes 5 ms
    if (owner.type === 'execute') await owner.lease.complete(response()); // published meanwhile
    await vi.advanceTimersByTimeAsync(10);
    expect((await waiter).type).toBe('replay');
  });

  it('H8: the subscription going down switches waiters to polling (a dropped subscription never fails a request)', async () => {
    const map = new Map<string, IdempotencyRecord>();
    const bus = new Set<SettleListener>();
    const here = counted(map, bus);
    const there = counted(map, bus);
    const owner = await engine(here.store).acquire('k', undefined, 'fp');
    const waiter = engine(there.store, { waitMs: 60_000 }).acquire('k', undefined, 'fp');
    await vi.advanceTimersByTimeAsync(100);
    const listeners = [...bus];
    bus.clear(); // messages are lost from now on
    listeners.forEach((l) => l.down());
    await vi.advanceTimersByTimeAsync(1000);
    const polls = there.calls.get ?? 0;
    expect(polls).toBeGreaterThan(3); // polling with backoff (at most 250 ms apart)
    if (owner.type === 'execute') await owner.lease.complete(response());
    await vi.advanceTimersByTimeAsync(600);
    expect((await waiter).type).toBe('replay');
  });

  it('H8: a lost message is caught by the last look when the wait runs out', async () => {
    const map = new Map<string, IdempotencyRecord>();
    const bus = new Set<SettleListener>();
    const there = counted(map, bus);
    const owner = await engine(counted(map).store).acquire('k', undefined, 'fp'); // completes without publishing
    const waiter = engine(there.store, { waitMs: 1500 }).acquire('k', undefined, 'fp');
    await vi.advanceTimersByTimeAsync(200);
    if (owner.type === 'execute') await owner.lease.complete(response());
    await vi.advanceTimersByTimeAsync(1400);
    expect((await waiter).type).toBe('replay');
  });

  it('H8: without wake-ups, waiters poll, and at most 4 reads per store are in flight', async () => {
    const map = new Map<string, IdempotencyRecord>();
    const here = counted(map);
    const there = counted(map);
    const owners = await Promise.all(Array.from({ length: 20 }, (_, i) => engine(here.store).acquire(`k${i}`, undefined, 'fp')));
    const e = engine(there.store);
    const waiters = owners.map((_, i) => e.acquire(`k${i}`, undefined, 'fp'));
    await vi.advanceTimersByTimeAsync(300);
    for (const o of owners) if (o.type === 'execute') await o.lease.complete(response());
    await vi.advanceTimersByTimeAsync(600);
    expect((await Promise.all(waiters)).every((r) => r.type === 'replay')).toBe(true);
    expect(there.maxGetsInFlight).toBe(4);
  });

  it('H17: a local owner that stopped renewing is not trusted past its lease: the key frees', async () => {
    const map = new Map<string, IdempotencyRecord>();
    const s = counted(map);
    const crashed = await engine(s.store, { leaseMs: 3000 }).acquire('k', undefined, 'fp');
    expect(crashed.type).toBe('execute');
    vi.clearAllTimers(); // its renewals stop
    const retry = engine(s.store, { waitMs: 5000 }).acquire('k', undefined, 'fp');
    await vi.advanceTimersByTimeAsync(3002);
    expect((await retry).type).toBe('execute');
  });
});
