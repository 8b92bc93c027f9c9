import { afterEach, describe, expect, it, vi } from 'vitest';
import { memoryStore } from '../../drivers/memory.js';
import { createStore } from '../../drivers/create-store.js';
import { MemoryStoreInProductionError, isIdempotencyError } from '../../src/errors.js';
import { storeMaintenanceSuite } from '../suites/store-maintenance.suite.js';
import { idempotent } from '../../src/idempotent.js';
import { storeSuite } from '../suites/store.suite.js';
import type { IdempotencyStore } from '../../src/store.js';

storeSuite('memory', {
  create: async () => memoryStore(),
  broken: async () => {
    // A full memory store refuses a new claim: the error must surface (S4), not "not found".
    const store = memoryStore({ maxEntries: 1 });
    await store.claim('occupied', { token: 't', fingerprint: 'f', createdAt: Date.now() }, 60_000);
    return { store, failingKey: 'another' };
  },
});

/**
 * The two forms a memory store keeps completed records in: packed (its own Map, the default)
 * and as record objects (a Map the caller passes). Bounds and eviction hold for both.
 */
type Form = (options: Parameters<typeof memoryStore>[0]) => { store: IdempotencyStore; count: () => Promise<number> };
const FORMS: Form[] = [
  (options) => {
    const store = memoryStore(options);
    return {
      store,
      count: async () => {
        const stats = await store.stats!();
        return stats.processing + stats.completed + stats.expired;
      },
    };
  },
  (options) => {
    const map = new Map();
    const store = memoryStore({ ...options, map });
    return { store, count: async () => map.size };
  },
];

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
    for (const form of FORMS) {
      const { store, count } = form({ maxEntries: 500, sweepIntervalMs: 0 });
      const req = (token: string) => ({ token, fingerprint: 'f', createdAt: Date.now() });
      const response = { status: 201, headers: { 'content-type': 'text/plain' }, body: new TextEncoder().encode('ok') };
      // 10 long-running claims taken first stay processing the whole run.
      for (let i = 0; i < 10; i++) expect((await store.claim(`slow-${i}`, req(`slow-${i}`), 600_000)).claimed).toBe(true);
      let peak = 0;
      for (let i = 0; i < 20_000; i++) {
        expect((await store.claim(`k${i}`, req(`t${i}`), 60_000)).claimed).toBe(true);
        expect(await store.complete(`k${i}`, `t${i}`, response, 600_000)).toBe(true);
        peak = Math.max(peak, await count());
      }
      expect(peak).toBe(500);
      for (let i = 0; i < 10; i++) expect((await store.get(`slow-${i}`))?.state).toBe('processing');
      // The newest 490 completed records are the ones kept, in completion order.
      expect(await store.get('k19509')).toBeUndefined();
      for (const i of [19_510, 19_700, 19_999]) expect((await store.get(`k${i}`))?.state).toBe('completed');
      await store.close();
    }
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
    for (const form of FORMS) {
      const { store, count } = form({ maxBytes: 10_000, sweepIntervalMs: 0 });
      const req = (token: string) => ({ token, fingerprint: 'f', createdAt: Date.now() });
      const body = new Uint8Array(1000);
      await store.claim('held', req('held'), 600_000);
      for (let i = 0; i < 100; i++) {
        await store.claim(`k${i}`, req(`t${i}`), 60_000);
        await store.complete(`k${i}`, `t${i}`, { status: 200, headers: { 'content-type': 'application/octet-stream' }, body }, 600_000);
      }
      // Each counts 1000 + 200 + 36 bytes: 8 fit in 10 000, plus the processing record.
      expect(await count()).toBe(9);
      expect((await store.get('held'))?.state).toBe('processing');
      expect((await store.get('k99'))?.state).toBe('completed');
      expect(await store.get('k91')).toBeUndefined();
      expect(() => memoryStore({ maxBytes: 0 })).toThrow('Expected `maxBytes` to be a positive integer, got 0');
      await store.close();
    }
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
    for (const form of FORMS) {
      const { store, count } = form({ maxEntries: 10, maxBytes: 1_000_000, sweepIntervalMs: 0 });
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
      expect(await count()).toBe(10);
      for (const key of ['b1', 'b2', 'c1']) expect((await store.get(key))?.state, key).toBe('completed');
      expect((await store.get('a29'))?.state).toBe('completed');
      expect(await store.get('a0')).toBeUndefined();
      // Once A holds no more than B, B's oldest can go too.
      for (let i = 0; i < 8; i++) await put(`n${i}`, undefined);
      expect(await count()).toBe(10);
      expect((await store.get('c1'))?.state).toBe('completed');
      await store.close();
    }
  });

  it('maxBytes: records deleted or expired give their bytes back, and a re-completed key counts once', async () => {
    for (const form of FORMS) {
      let t = Date.now();
      const { store, count } = form({ maxBytes: 10_000, sweepIntervalMs: 0, now: () => t });
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
      expect(await count()).toBe(8); // nothing evicted: 8 records fit
      await put('n7', 'n7');
      expect(await count()).toBe(8); // the ninth evicts the oldest live one
      expect(await store.get('again')).toBeUndefined();
      expect((await store.get('n0'))?.state).toBe('completed');
      await store.close();
    }
  });

  it('a completed record reads back exactly in both forms: every byte value, header arrays, any header name, fingerprints and tokens in any script, null and empty bodies, bodies past the packed size', async () => {
    const every = Uint8Array.from({ length: 512 }, (_, i) => i % 256);
    const bodies: (Uint8Array | null)[] = [null, new Uint8Array(), every, new TextEncoder().encode('{"id":"ord_1"}\n'), new Uint8Array(64 * 1024 + 1).fill(10)];
    const headers = { 'content-type': 'application/json', 'set-cookie': ['a=1', 'b=2'], ['__proto__']: 'x', 'x-\n': '"\\' };
    for (const form of FORMS) {
      const { store } = form({ sweepIntervalMs: 0 });
      for (const [i, body] of bodies.entries()) {
        for (const [fingerprint, token] of [['v2:abc', 'tok'], ['指纹 \u2028 \ud83d\ude00', 'jeton\n\u0000\uffff']] as const) {
          const key = `k${i}-${token.length}`;
          await store.claim(key, { fingerprint, token, createdAt: 1234 }, 60_000);
          const source = { status: 201, headers: JSON.parse(JSON.stringify(headers)), body: body === null ? null : body.slice() };
          expect(await store.complete(key, token, source, 600_000)).toBe(true);
          // What the caller passed is copied: changing it later changes nothing stored.
          source.body?.fill(7);
          source.headers['content-type'] = 'changed';
          const read = await store.get(key);
          expect(read?.state).toBe('completed');
          if (read?.state !== 'completed') continue;
          expect(read).toMatchObject({ fingerprint, token, createdAt: 1234 });
          expect(read.expiresAt).toBeGreaterThan(Date.now());
          expect(read.response.status).toBe(201);
          expect(read.response.headers).toEqual(JSON.parse(JSON.stringify(headers)));
          expect(Object.hasOwn(read.response.headers, '__proto__')).toBe(true);
          if (body === null) expect(read.response.body).toBeNull();
          else {
            expect(read.response.body).toBeInstanceOf(Uint8Array);
            expect(Buffer.from(read.response.body!).equals(Buffer.from(body))).toBe(true);
          }
          const again = await store.get(key);
          // The claim of a completed key hands back the same record.
          const claim = await store.claim(key, { fingerprint, token: 'other', createdAt: 1 }, 60_000);
          expect(claim.claimed).toBe(false);
          expect(claim.record).toEqual(again);
          expect((await store.scan!({ limit: 1000 })).records.find((r) => r.key === key)?.record).toEqual(again);
        }
      }
      await store.close();
    }
  });

  it('replaceResponse in both forms: the record keeps its place in the eviction order and its bytes are counted anew, also when the new body is past the packed size', async () => {
    for (const form of FORMS) {
      const { store, count } = form({ maxBytes: 250_000, sweepIntervalMs: 0 });
      const req = (token: string) => ({ token, fingerprint: 'f', createdAt: Date.now() });
      const put = async (key: string, size: number) => {
        expect((await store.claim(key, req(key), 60_000)).claimed).toBe(true);
        expect(await store.complete(key, key, { status: 200, headers: {}, body: new Uint8Array(size) }, 600_000)).toBe(true);
      };
      for (const key of ['a', 'b', 'c']) await put(key, 1000);
      // Read once (a packed record keeps what a read built), then 'a' is re-sealed smaller and
      // 'b' grows past the packed size (70,000 bytes).
      expect((await store.get('a'))?.state === 'completed' && (await store.get('b'))?.state === 'completed').toBe(true);
      expect(await store.replaceResponse!('a', 'a', { status: 0, headers: {}, body: new Uint8Array(900).fill(1) })).toBe(true);
      expect(await store.replaceResponse!('b', 'b', { status: 0, headers: {}, body: new Uint8Array(70_000).fill(2) })).toBe(true);
      expect(await store.replaceResponse!('c', 'wrong', { status: 0, headers: {}, body: null })).toBe(false);
      const a = await store.get('a');
      expect(a?.state === 'completed' && Buffer.from(a.response.body!).equals(Buffer.alloc(900, 1))).toBe(true);
      const b = await store.get('b');
      expect(b?.state === 'completed' && Buffer.from(b.response.body!).equals(Buffer.alloc(70_000, 2))).toBe(true);
      // Counted: a 1,100, b 70,200, c 1,200; then three of 70,200. The third passes 250,000
      // and evicts in completion order: 'a', then 'b' (where it was, not moved by the swap).
      for (const key of ['d', 'e', 'f']) await put(key, 70_000);
      expect(await store.get('a')).toBeUndefined();
      expect(await store.get('b')).toBeUndefined();
      expect((await store.get('c'))?.state).toBe('completed');
      expect(await count()).toBe(4);
      // Deleting what is left gives every byte back: 249,200 and 700 then fit together.
      for (const key of ['c', 'd', 'e', 'f']) expect(await store.delete!(key)).toBe(true);
      await put('g', 249_000);
      await put('h', 500);
      expect(await count()).toBe(2);
      await store.close();
    }
  });

  it('S8: partitions emptied by many short-lived scopes go, and the ones still holding completed records keep their fairness', async () => {
    for (const form of FORMS) {
      const { store, count } = form({ maxEntries: 20, sweepIntervalMs: 0 });
      const req = (token: string) => ({ token, fingerprint: 'f', createdAt: Date.now() });
      const response = { status: 200, headers: {}, body: new Uint8Array(10) };
      const put = async (key: string, partition: string) => {
        expect((await store.claim(key, req(key), 60_000, { partition })).claimed).toBe(true);
        expect(await store.complete(key, key, response, 600_000)).toBe(true);
      };
      // Tenant B holds 3 records; tenant A holds 10.
      for (let i = 0; i < 3; i++) await put(`b${i}`, 'b');
      for (let i = 0; i < 10; i++) await put(`a${i}`, 'a');
      // 500 scopes claim and release one key each: their partitions are emptied and dropped
      // on the way, which must not drop A's or B's (each still counts its completed records).
      for (let i = 0; i < 500; i++) {
        await store.claim(`s${i}`, req(`s${i}`), 60_000, { partition: `scope-${i}` });
        expect(await store.release(`s${i}`, `s${i}`)).toBe(true);
      }
      // A fills the store: each new A record evicts A's oldest, never B's.
      for (let i = 10; i < 40; i++) await put(`a${i}`, 'a');
      expect(await count()).toBe(20);
      for (let i = 0; i < 3; i++) expect((await store.get(`b${i}`))?.state).toBe('completed');
      expect(await store.get('a22')).toBeUndefined();
      expect((await store.get('a23'))?.state).toBe('completed');
      await store.close();
    }
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
