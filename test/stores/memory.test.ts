import { afterEach, describe, expect, it, vi } from 'vitest';
import { memoryStore } from '../../drivers/memory.js';
import { createStore } from '../../drivers/create-store.js';
import { MemoryStoreInProductionError, isIdempotencyError } from '../../src/errors.js';
import { storeMaintenanceSuite } from '../suites/store-maintenance.suite.js';
import { idempotent } from '../../src/idempotent.js';
import { storeSuite } from '../suites/store.suite.js';

storeSuite('memory', {
  create: async () => memoryStore(),
  broken: async () => {
    // A full memory store refuses a new claim: the error must surface (S4), not "not found".
    const store = memoryStore({ maxEntries: 1 });
    await store.claim('occupied', { token: 't', fingerprint: 'f', createdAt: Date.now() }, 60_000);
    return { store, failingKey: 'another' };
  },
});

describe('memory store specifics', () => {
  afterEach(() => {
    vi.unstubAllEnvs();
  });

  it('S3: the sweep removes expired records; the cap evicts completed records before refusing', async () => {
    let now = 1_000;
    const store = memoryStore({ now: () => now, maxEntries: 2, sweepIntervalMs: 0 });
    const req = (token: string) => ({ token, fingerprint: 'f', createdAt: now });
    await store.claim('a', req('a'), 100);
    await store.complete('a', 'a', { status: 200, headers: {}, body: new Uint8Array() }, 10_000);
    await store.claim('b', req('b'), 100);
    // full: 'a' (completed) is evicted to make room, 'b' (processing) is kept
    expect((await store.claim('c', req('c'), 100)).claimed).toBe(true);
    expect(await store.get('a')).toBeUndefined();
    expect(await store.get('b')).toBeDefined();
    // full of processing records: refuse loudly
    await expect(store.claim('d', req('d'), 100)).rejects.toThrow(/full/);
    now += 101; // both leases expire: room again
    expect((await store.claim('d', req('d'), 100)).claimed).toBe(true);
    await store.close();
  });

  it('bounded: a long first-execution run keeps at most maxEntries records, evicting the oldest completed first, never a processing one', async () => {
    const map = new Map();
    const store = memoryStore({ map, maxEntries: 500, sweepIntervalMs: 0 });
    const req = (token: string) => ({ token, fingerprint: 'f', createdAt: Date.now() });
    const response = { status: 201, headers: { 'content-type': 'text/plain' }, body: new TextEncoder().encode('ok') };
    // 10 long-running claims taken first stay processing the whole run.
    for (let i = 0; i < 10; i++) expect((await store.claim(`slow-${i}`, req(`slow-${i}`), 600_000)).claimed).toBe(true);
    let peak = 0;
    for (let i = 0; i < 20_000; i++) {
      expect((await store.claim(`k${i}`, req(`t${i}`), 60_000)).claimed).toBe(true);
      expect(await store.complete(`k${i}`, `t${i}`, response, 600_000)).toBe(true);
      peak = Math.max(peak, map.size);
    }
    expect(peak).toBe(500);
    for (let i = 0; i < 10; i++) expect((await store.get(`slow-${i}`))?.state).toBe('processing');
    // The newest 490 completed records are the ones kept, in completion order.
    expect(await store.get('k19509')).toBeUndefined();
    for (const i of [19_510, 19_700, 19_999]) expect((await store.get(`k${i}`))?.state).toBe('completed');
    await store.close();
  });

  it('eviction follows completion order, not claim order', async () => {
    const store = memoryStore({ maxEntries: 3, sweepIntervalMs: 0 });
    const req = (token: string) => ({ token, fingerprint: 'f', createdAt: Date.now() });
    const response = { status: 200, headers: {}, body: new Uint8Array() };
    await store.claim('early', req('early'), 60_000);
    await store.claim('late', req('late'), 60_000);
    await store.complete('late', 'late', response, 60_000);
    await store.complete('early', 'early', response, 60_000);
    await store.claim('x', req('x'), 60_000);
    expect((await store.claim('y', req('y'), 60_000)).claimed).toBe(true);
    expect(await store.get('late')).toBeUndefined();
    expect((await store.get('early'))?.state).toBe('completed');
    await store.close();
  });

  it('maxBytes: completed responses past the byte bound evict the oldest completed records', async () => {
    const map = new Map();
    const store = memoryStore({ map, maxBytes: 10_000, sweepIntervalMs: 0 });
    const req = (token: string) => ({ token, fingerprint: 'f', createdAt: Date.now() });
    const body = new Uint8Array(1000);
    await store.claim('held', req('held'), 600_000);
    for (let i = 0; i < 100; i++) {
      await store.claim(`k${i}`, req(`t${i}`), 60_000);
      await store.complete(`k${i}`, `t${i}`, { status: 200, headers: { 'content-type': 'application/octet-stream' }, body }, 600_000);
    }
    // Each counts 1000 + 200 + 36 bytes: 8 fit in 10 000, plus the processing record.
    expect(map.size).toBe(9);
    expect((await store.get('held'))?.state).toBe('processing');
    expect((await store.get('k99'))?.state).toBe('completed');
    expect(await store.get('k91')).toBeUndefined();
    expect(() => memoryStore({ maxBytes: 0 })).toThrow('Expected `maxBytes` to be a positive integer, got 0');
    await store.close();
  });

  it('S8: maxBytes is fair across scopes: 70 responses of 1 MB from one tenant evict its own records, never another tenant\'s; that tenant replays', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 }); // 64 MiB
    const runs: string[] = [];
    const order = idempotent(
      async (tenant: string, id: string, size: number) => {
        runs.push(`${tenant}/${id}`);
        return { id, blob: 'x'.repeat(size) };
      },
      // Results over idempotent()'s 1 MiB default limit: stored here, as eviction is what is tested.
      { store, key: (_tenant, id) => id, scope: (tenant) => tenant, maxResultBytes: 4 * 1024 * 1024 },
    );
    await order('tenant-b', 'order-1', 1000);
    for (let i = 0; i < 70; i++) await order('tenant-a', `bulk-${i}`, 1024 * 1024);
    // Tenant B's retry replays: its one small record was not evicted.
    expect((await order('tenant-b', 'order-1', 1000)).id).toBe('order-1');
    expect(runs.filter((r) => r.startsWith('tenant-b/'))).toEqual(['tenant-b/order-1']);
    // Tenant A's own oldest went instead (and its newest are kept).
    const before = runs.length;
    await order('tenant-a', 'bulk-69', 1024 * 1024);
    await order('tenant-a', 'bulk-0', 1024 * 1024);
    expect(runs.slice(before)).toEqual(['tenant-a/bulk-0']);
    await store.close();
  });

  it('S8: maxEntries and maxBytes evict from the partition that holds the most; records claimed without a partition share one', async () => {
    const map = new Map();
    const store = memoryStore({ map, maxEntries: 10, maxBytes: 1_000_000, sweepIntervalMs: 0 });
    const req = (token: string) => ({ token, fingerprint: 'f', createdAt: Date.now() });
    const response = { status: 200, headers: {}, body: new Uint8Array(10) };
    const put = async (key: string, partition: string | undefined) => {
      expect((await store.claim(key, req(key), 60_000, partition === undefined ? undefined : { partition })).claimed).toBe(true);
      expect(await store.complete(key, key, response, 600_000)).toBe(true);
    };
    await put('b1', 'b');
    await put('b2', 'b');
    await put('c1', 'c');
    for (let i = 0; i < 30; i++) await put(`a${i}`, 'a');
    expect(map.size).toBe(10);
    for (const key of ['b1', 'b2', 'c1']) expect((await store.get(key))?.state, key).toBe('completed');
    expect((await store.get('a29'))?.state).toBe('completed');
    expect(await store.get('a0')).toBeUndefined();
    // Once A holds no more than B, B's oldest can go too.
    for (let i = 0; i < 8; i++) await put(`n${i}`, undefined);
    expect(map.size).toBe(10);
    expect((await store.get('c1'))?.state).toBe('completed');
    await store.close();
  });

  it('maxBytes: records deleted or expired give their bytes back, and a re-completed key counts once', async () => {
    let t = Date.now();
    const map = new Map();
    const store = memoryStore({ map, maxBytes: 10_000, sweepIntervalMs: 0, now: () => t });
    const req = (token: string) => ({ token, fingerprint: 'f', createdAt: t });
    const response = { status: 200, headers: { 'content-type': 'application/octet-stream' }, body: new Uint8Array(1000) };
    const put = async (key: string, token: string, ttl = 600_000) => {
      expect((await store.claim(key, req(token), 60_000)).claimed).toBe(true);
      expect(await store.complete(key, token, response, ttl)).toBe(true);
    };
    // 8 records of 1236 bytes fill 10 000; deleting 4 and expiring 4 frees all of it.
    for (let i = 0; i < 4; i++) await put(`d${i}`, `d${i}`);
    for (let i = 0; i < 4; i++) await put(`e${i}`, `e${i}`, 1000);
    for (let i = 0; i < 4; i++) expect(await store.delete!(`d${i}`)).toBe(true);
    t += 2000;
    expect(await store.sweep!()).toBe(4);
    // The same key completed again after it expired: one record, counted once.
    await put('again', 'a1', 1000);
    t += 2000;
    await put('again', 'a2');
    for (let i = 0; i < 7; i++) await put(`n${i}`, `n${i}`);
    expect(map.size).toBe(8); // nothing evicted: 8 records fit
    await put('n7', 'n7');
    expect(map.size).toBe(8); // the ninth evicts the oldest live one
    expect(await store.get('again')).toBeUndefined();
    expect((await store.get('n0'))?.state).toBe('completed');
    await store.close();
  });

  it('S5: refuses to start when NODE_ENV is production, saying why and what to use instead', async () => {
    vi.stubEnv('NODE_ENV', 'production');
    try {
      for (const make of [() => memoryStore(), () => createStore('memory://'), () => createStore(new Map())]) {
        expect(make).toThrow(/one process only.*restart or deploy forgets every key.*redis:\/\/.*postgres:\/\/.*inProduction: 'warn'/s);
        // One error family: a typed error with a kebab-case code, like every other refusal.
        let caught: unknown;
        try {
          make();
        } catch (error) {
          caught = error;
        }
        expect(caught).toBeInstanceOf(MemoryStoreInProductionError);
        expect(isIdempotencyError(caught)).toBe(true);
        expect((caught as MemoryStoreInProductionError).code).toBe('memory-store-in-production');
      }
      expect(() => memoryStore({ inProduction: 'yes' as never })).toThrow("Expected `inProduction` to be 'refuse', 'warn' or 'allow', got \"yes\"");
      expect(() => memoryStore({ allowInProduction: 'yes' as never })).toThrow('Expected `allowInProduction` to be a boolean, got "yes"');
      expect(() => memoryStore({ inProduction: 'warn', allowInProduction: true })).toThrow(/alone/);
    } finally {
      vi.unstubAllEnvs();
    }
  });

  it("S5: with inProduction: 'warn' it starts in production and warns; 'allow' starts silently", async () => {
    vi.stubEnv('NODE_ENV', 'production');
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    try {
      const store = memoryStore({ inProduction: 'warn' });
      expect(warn).toHaveBeenCalledWith(expect.stringMatching(/one process only/), expect.anything());
      await store.close();
      warn.mockClear();
      const quiet = memoryStore({ inProduction: 'allow' });
      expect(warn).not.toHaveBeenCalled();
      await quiet.close();
      // The deprecated pair still works, and says what replaces it.
      const old = memoryStore({ allowInProduction: true, warnInProduction: false });
      expect(warn).toHaveBeenCalledWith(expect.stringMatching(/allowInProduction.*deprecated.*inProduction/s), expect.objectContaining({ type: 'DeprecationWarning' }));
      expect(warn).not.toHaveBeenCalledWith(expect.stringMatching(/one process only/), expect.anything());
      await old.close();
      // Through createStore: the refusal is at creation, the option reaches the lazily loaded driver.
      const viaUrl = createStore('memory://', { inProduction: 'warn' });
      expect(await viaUrl.claim('k', { token: 't', fingerprint: 'f', createdAt: Date.now() }, 1000)).toMatchObject({ claimed: true });
      await viaUrl.close();
      const viaMap = createStore(new Map(), { inProduction: 'allow' });
      expect(await viaMap.get('k')).toBeUndefined();
      await viaMap.close();
    } finally {
      warn.mockRestore();
      vi.unstubAllEnvs();
    }
  });

  it('S5: outside production (tests, development) it starts without a word', async () => {
    vi.stubEnv('NODE_ENV', 'development');
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    try {
      await memoryStore().close();
      await createStore('memory://').close();
      expect(warn).not.toHaveBeenCalled();
    } finally {
      warn.mockRestore();
      vi.unstubAllEnvs();
    }
  });

  it('rejects bad options with a precise TypeError', () => {
    expect(() => memoryStore({ maxEntries: -1 })).toThrow('Expected `maxEntries` to be a positive integer, got -1');
    expect(() => memoryStore({ sweepIntervalMs: 1.5 })).toThrow(TypeError);
  });
});

// The maintenance methods (delete, stats, sweep), each on a store of its own.
storeMaintenanceSuite('memory', { create: async () => memoryStore({ sweepIntervalMs: 0 }) });
storeMaintenanceSuite('memory via createStore', { create: async () => createStore('memory://') });
