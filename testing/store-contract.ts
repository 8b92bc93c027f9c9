/**
 * `idempotency-kit/testing`: the store contract every built-in store passes, for your
 * own store. Atomic claims under concurrency, compare-and-set by token, expiry, and
 * failures that reject in bounded time; see docs/writing-a-store.md.
 * @module
 * @example
 * import { afterAll, beforeAll, describe, expect, it } from 'vitest';
 * import { storeContract } from 'idempotency-kit/testing';
 * import { dynamoStore } from '../src/dynamo-store.js';
 *
 * storeContract('dynamodb', {
 *   create: async () => dynamoStore({ table: `idem-test-${Date.now()}` }),
 *   broken: async () => ({ store: dynamoStore({ endpoint: 'http://127.0.0.1:1' }), failingKey: 'k', allOperations: true }),
 * }, { describe, it, expect, beforeAll, afterAll });
 */
import { randomUUID } from 'node:crypto';
import type { IdempotencyStore, StoredResponse } from '../src/store.js';

/** What the contract runs against. */
export interface ContractTarget {
  /** A fresh store on a working backend. */
  create: () => Promise<IdempotencyStore>;
  /**
   * A store whose backend fails (unreachable server, full memory): every call must
   * reject with an error (never answer "not found"), and within a bounded time.
   */
  broken: () => Promise<{
    store: IdempotencyStore;
    failingKey: string;
    /** Network and file stores: get, complete, release and extend must reject too. */
    allOperations?: boolean;
  }>;
  /**
   * Your own cases for this store, registered inside the contract's `describe` after its
   * own (with the runner's `it`). `store()` is the contract's store: created before the
   * first case, closed after the last.
   */
  extra?: (context: { store: () => IdempotencyStore }) => void;
}

/** `expect` as vitest and Jest give it; its matchers are the runner's own. */
type Expect = (actual: unknown, message?: string) => any;

/**
 * The test functions the contract registers its tests with. Vitest's (pass them, or
 * enable its `globals`), Jest's globals, or any runner with the same names.
 */
export interface ContractRunner {
  describe: ((name: string, body: () => void) => void) & { skip: (name: string, body: () => void) => void };
  it: (name: string, body: () => Promise<void>, timeoutMs?: number) => void;
  expect: Expect;
  beforeAll: (body: () => Promise<void>, timeoutMs?: number) => void;
  afterAll: (body: () => Promise<void>, timeoutMs?: number) => void;
}

function globalRunner(): ContractRunner {
  const g = globalThis as Record<string, unknown>;
  const names = ['describe', 'it', 'expect', 'beforeAll', 'afterAll'] as const;
  const missing = names.filter((name) => typeof g[name] !== 'function');
  if (missing.length > 0) {
    throw new TypeError(
      `Expected a test runner: pass { describe, it, expect, beforeAll, afterAll } (e.g. from 'vitest') as storeContract's third argument, or run with test globals; missing ${missing.join(', ')}`,
    );
  }
  return g as unknown as ContractRunner;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const key = () => `contract-${randomUUID()}`;
const claimOf = (token: string, fingerprint = 'fp-1') => ({ token, fingerprint, createdAt: Date.now() });
const response = (status = 201, text = 'hello'): StoredResponse => ({
  status,
  headers: { 'content-type': 'text/plain', location: '/x/1', link: ['<a>; rel=a', '<b>; rel=b'] },
  body: new Uint8Array(Buffer.from(text)),
});

/**
 * Register the store contract's tests for one store. `target` undefined registers them
 * as skipped (e.g. the store's server is not reachable). Each test uses fresh random
 * keys, so one store may serve the whole suite; `create()` is called once, `broken()`
 * once, and both stores are closed at the end.
 *
 * The tests are grouped by the guarantee they check, one `describe` each: claims are
 * atomic; only the token that owns a claim can complete, release or extend it; expired
 * records are never returned; any key text is stored as given; a failing backend rejects
 * every call, in bounded time. docs/writing-a-store.md says why the engine relies on each.
 * `target.extra` adds your own cases inside the contract's `describe`.
 */
export function storeContract(name: string, target: ContractTarget | undefined, runner: ContractRunner = globalRunner()): void {
  const { describe, it, expect, beforeAll, afterAll } = runner;
  (target ? describe : describe.skip)(`store contract: ${name}`, () => {
    let store: IdempotencyStore;
    beforeAll(async () => {
      store = await target!.create();
    });
    afterAll(async () => {
      await store?.close();
    });

    describe('claims are atomic: exactly one concurrent claim wins', () => {
      it('a claim on an absent key wins and writes a processing record', async () => {
        const k = key();
        const result = await store.claim(k, claimOf('t1'), 5000);
        expect(result.claimed).toBe(true);
        const record = await store.get(k);
        expect(record).toMatchObject({ state: 'processing', token: 't1', fingerprint: 'fp-1' });
        expect(record?.state === 'processing' && record.leaseUntil).toBeGreaterThan(Date.now());
      });

      it('of 60 concurrent claimers on one key exactly one wins; losers see the winner', async () => {
        const k = key();
        const results = await Promise.all(
          Array.from({ length: 60 }, (_, i) => store.claim(k, claimOf(`t${i}`), 5000)),
        );
        const winners = results.filter((r) => r.claimed);
        expect(winners).toHaveLength(1);
        const winnerToken = winners[0]!.record.token;
        for (const r of results) expect(r.record.token).toBe(winnerToken);
      });

      it('concurrent claims on 40 different keys all win', async () => {
        const results = await Promise.all(Array.from({ length: 40 }, (_, i) => store.claim(key(), claimOf(`t${i}`), 5000)));
        expect(results.every((r) => r.claimed)).toBe(true);
      });

      it('a live completed record is returned to a claimer, not overwritten', async () => {
        const k = key();
        await store.claim(k, claimOf('t1'), 5000);
        expect(await store.complete(k, 't1', response(), 60_000)).toBe(true);
        const again = await store.claim(k, claimOf('t2', 'fp-2'), 5000);
        expect(again.claimed).toBe(false);
        expect(again.record).toMatchObject({ state: 'completed', token: 't1', fingerprint: 'fp-1' });
      });

      it('after the lease expires exactly one of many claimers takes over with a new token', async () => {
        const k = key();
        await store.claim(k, claimOf('old'), 300);
        expect((await store.claim(k, claimOf('early'), 5000)).claimed).toBe(false);
        await sleep(450);
        const results = await Promise.all(Array.from({ length: 20 }, (_, i) => store.claim(k, claimOf(`new${i}`), 5000)));
        expect(results.filter((r) => r.claimed)).toHaveLength(1);
        expect((await store.get(k))!.token).toMatch(/^new/);
      });
    });

    describe('only the token that owns a claim can complete, release or extend it', () => {
      it('complete stores status, headers and body bytes; only the owner can complete', async () => {
        const k = key();
        await store.claim(k, claimOf('owner'), 5000);
        expect(await store.complete(k, 'intruder', response(), 60_000)).toBe(false);
        expect(await store.complete(k, 'owner', response(201, 'héllo \u0000 bytes'), 60_000)).toBe(true);
        const record = await store.get(k);
        expect(record?.state).toBe('completed');
        if (record?.state !== 'completed') return;
        expect(record.response.status).toBe(201);
        expect(record.response.headers).toEqual(response().headers);
        expect(Buffer.from(record.response.body!).toString()).toBe('héllo \u0000 bytes');
        expect(record.expiresAt).toBeGreaterThan(Date.now() + 50_000);
        // a completed record cannot be completed or released again
        expect(await store.complete(k, 'owner', response(500), 60_000)).toBe(false);
        expect(await store.release(k, 'owner')).toBe(false);
        expect(await store.extend(k, 'owner', 5000)).toBe(false);
      });

      it('a record can complete without a body (a response too large to keep: not replayable)', async () => {
        const k = key();
        await store.claim(k, claimOf('owner'), 5000);
        expect(await store.complete(k, 'owner', { status: 200, headers: {}, body: null }, 60_000)).toBe(true);
        const record = await store.get(k);
        expect(record?.state === 'completed' && record.response.body).toBeNull();
      });

      it('release deletes only for the owner', async () => {
        const k = key();
        await store.claim(k, claimOf('owner'), 5000);
        expect(await store.release(k, 'intruder')).toBe(false);
        expect(await store.get(k)).toBeDefined();
        expect(await store.release(k, 'owner')).toBe(true);
        expect(await store.get(k)).toBeUndefined();
        expect((await store.claim(k, claimOf('next'), 5000)).claimed).toBe(true);
      });

      it('extend pushes the lease only for the owner (lease renewal of a slow handler)', async () => {
        const k = key();
        await store.claim(k, claimOf('owner'), 300);
        expect(await store.extend(k, 'intruder', 5000)).toBe(false);
        expect(await store.extend(k, 'owner', 5000)).toBe(true);
        await sleep(450);
        const record = await store.get(k);
        expect(record).toMatchObject({ state: 'processing', token: 'owner' });
        expect((await store.claim(k, claimOf('thief'), 5000)).claimed).toBe(false);
      });

      it('a fenced-out owner cannot complete, release or extend after a takeover', async () => {
        const k = key();
        await store.claim(k, claimOf('stale'), 250);
        await sleep(400);
        expect((await store.claim(k, claimOf('fresh'), 5000)).claimed).toBe(true);
        expect(await store.complete(k, 'stale', response(), 60_000)).toBe(false);
        expect(await store.release(k, 'stale')).toBe(false);
        expect(await store.extend(k, 'stale', 5000)).toBe(false);
        expect(await store.get(k)).toMatchObject({ state: 'processing', token: 'fresh' });
        expect(await store.complete(k, 'fresh', response(), 60_000)).toBe(true);
      });

      it('an expired lease cannot be extended or completed by its old owner', async () => {
        const k = key();
        await store.claim(k, claimOf('slow'), 250);
        await sleep(400);
        expect(await store.extend(k, 'slow', 5000)).toBe(false);
        expect(await store.complete(k, 'slow', response(), 60_000)).toBe(false);
      });
    });

    describe('expired records are never returned', () => {
      it('get never returns an expired record, and the key is new again after ttl', async () => {
        const k = key();
        await store.claim(k, claimOf('owner'), 5000);
        await store.complete(k, 'owner', response(), 300);
        expect(await store.get(k)).toBeDefined();
        await sleep(450);
        expect(await store.get(k)).toBeUndefined();
        expect((await store.claim(k, claimOf('second'), 5000)).claimed).toBe(true);
      });

      it('get never returns a processing record whose lease ended', async () => {
        const k = key();
        await store.claim(k, claimOf('owner'), 250);
        await sleep(400);
        expect(await store.get(k)).toBeUndefined();
      });
    });

    describe('any key text is stored as given', () => {
      it('SQL, Lua and glob characters, NUL and non-ASCII text: each key is stored opaquely (the core hashes; drivers must not interpret)', async () => {
        for (const k of ["a'; DROP TABLE x; --", 'k*?[]{}', 'redis.call("FLUSHALL")', 'ключ\u0000\r\n']) {
          expect((await store.claim(k, claimOf('t'), 5000)).claimed).toBe(true);
          expect((await store.get(k))?.token).toBe('t');
          expect(await store.release(k, 't')).toBe(true);
        }
      });
    });

    describe('a failing backend rejects every call, in bounded time', () => {
      it('claim (and, for network and file stores, every other call) rejects with an error within 5 s, never "not found"', async () => {
        const { store: broken, failingKey, allOperations } = await target!.broken();
        try {
          const started = Date.now();
          await expect(broken.claim(failingKey, claimOf('t'), 5000)).rejects.toThrow();
          expect(Date.now() - started).toBeLessThan(5000);
          if (allOperations) {
            const calls: Array<[string, () => Promise<unknown>]> = [
              ['get', () => broken.get(failingKey)],
              ['complete', () => broken.complete(failingKey, 't', response(), 60_000)],
              ['release', () => broken.release(failingKey, 't')],
              ['extend', () => broken.extend(failingKey, 't', 5000)],
            ];
            for (const [operation, call] of calls) {
              const t0 = Date.now();
              await expect(call(), `${operation} must reject`).rejects.toThrow();
              expect(Date.now() - t0).toBeLessThan(5000);
            }
          }
        } finally {
          await broken.close().catch(() => undefined);
        }
      });
    });

    describe('optional maintenance: scan and replaceResponse (run when the store has them)', () => {
      it('scan lists every live record exactly once, page by page, with its key as given; never an expired or released one', async () => {
        if (typeof store.scan !== 'function') return; // optional: a store without it still serves requests
        const mark = randomUUID();
        const done = [`${mark}-a`, `${mark}-b`, `${mark}-c`];
        const running = [`${mark}-p1`, `${mark}-p2`];
        for (const k of done) {
          await store.claim(k, claimOf(`t-${k}`), 5000);
          await store.complete(k, `t-${k}`, response(200, k), 60_000);
        }
        // Leases long enough to outlive a slow page-by-page scan of a shared store on a loaded machine.
        for (const k of running) await store.claim(k, claimOf(`t-${k}`), 60_000);
        const gone = `${mark}-gone`;
        await store.claim(gone, claimOf('g'), 5000);
        await store.release(gone, 'g');
        const short = `${mark}-short`;
        await store.claim(short, claimOf('s'), 5000);
        await store.complete(short, 's', response(), 200);
        await sleep(350);
        const seen = new Map<string, number>();
        let cursor: string | undefined;
        let pages = 0;
        do {
          const page = await store.scan({ limit: 4, ...(cursor === undefined ? {} : { cursor }) });
          pages++;
          for (const { key: k, record } of page.records) {
            if (!k.startsWith(mark)) continue;
            seen.set(k, (seen.get(k) ?? 0) + 1);
            expect(record, k).toEqual(await store.get(k));
          }
          cursor = page.cursor;
          expect(pages, 'scan must end').toBeLessThan(100_000);
        } while (cursor !== undefined);
        expect(Object.fromEntries(seen)).toEqual(Object.fromEntries([...done, ...running].map((k) => [k, 1])));
        expect(pages, 'five records of ours in pages of 4 take two pages at least').toBeGreaterThan(1);
        await expect(store.scan({ limit: 0 }), 'limit 0').rejects.toMatchObject({ name: 'TypeError' });
      });

      it('replaceResponse swaps the response only of a live completed record whose token still holds; fingerprint and times stay', async () => {
        if (typeof store.replaceResponse !== 'function') return; // optional
        const k = key();
        await store.claim(k, claimOf('t1'), 5000);
        await store.complete(k, 't1', response(201, 'before'), 60_000);
        const before = await store.get(k);
        const next: StoredResponse = { status: 202, headers: { 'x-next': ['a', 'b'] }, body: new Uint8Array([0, 255, 1, 2]) };
        expect(await store.replaceResponse(k, 'intruder', next)).toBe(false);
        expect(await store.get(k)).toEqual(before);
        expect(await store.replaceResponse(k, 't1', next)).toBe(true);
        const after = await store.get(k);
        expect(after).toMatchObject({ state: 'completed', token: 't1', fingerprint: 'fp-1', createdAt: before!.createdAt });
        if (after?.state !== 'completed' || before?.state !== 'completed') throw new Error('not completed');
        expect(after.expiresAt).toBe(before.expiresAt);
        expect(after.response.status).toBe(202);
        expect(after.response.headers).toEqual({ 'x-next': ['a', 'b'] });
        expect([...after.response.body!]).toEqual([0, 255, 1, 2]);
        expect(await store.replaceResponse(k, 't1', { status: 200, headers: {}, body: null })).toBe(true);
        expect((await store.get(k))?.state === 'completed' && (await store.get(k) as { response: StoredResponse }).response.body).toBeNull();
        // A processing record, an absent key: nothing to replace.
        const p = key();
        await store.claim(p, claimOf('tp'), 5000);
        expect(await store.replaceResponse(p, 'tp', next)).toBe(false);
        expect(await store.get(p)).toMatchObject({ state: 'processing', token: 'tp' });
        expect(await store.replaceResponse(key(), 't1', next)).toBe(false);
      });

      it('replaceResponse with the token a scan saw never overwrites the record that replaced it meanwhile (expired and claimed again)', async () => {
        if (typeof store.replaceResponse !== 'function') return; // optional
        const k = key();
        await store.claim(k, claimOf('seen'), 5000);
        await store.complete(k, 'seen', response(200, 'old'), 200);
        await sleep(350);
        expect(await store.replaceResponse(k, 'seen', response(200, 'resealed')), 'expired').toBe(false);
        expect((await store.claim(k, claimOf('fresh', 'fp-2'), 5000)).claimed).toBe(true);
        await store.complete(k, 'fresh', response(200, 'new'), 60_000);
        expect(await store.replaceResponse(k, 'seen', response(200, 'resealed'))).toBe(false);
        const record = await store.get(k);
        expect(record).toMatchObject({ state: 'completed', token: 'fresh', fingerprint: 'fp-2' });
        expect(record?.state === 'completed' && Buffer.from(record.response.body!).toString()).toBe('new');
      });
    });

    target?.extra?.({ store: () => store });
  });
}
