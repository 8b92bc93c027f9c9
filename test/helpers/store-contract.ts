/**
 * The store contract (SPEC S1–S4, S6, S7), written once and run against every driver.
 * Each driver's test file calls `storeContract()` with a factory.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { IdempotencyRecord, IdempotencyStore, StoredResponse } from '../../src/store.js';

export interface ContractTarget {
  /** A fresh store on a working backend. */
  create: () => Promise<IdempotencyStore>;
  /**
   * A store whose backend fails (unreachable server, full memory): every call must
   * reject (S4), within a bounded time (S6).
   */
  broken: () => Promise<{
    store: IdempotencyStore;
    failingKey: string;
    /** Network and file stores: get, complete, release and extend must reject too. */
    allOperations?: boolean;
  }>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const key = () => `contract-${randomUUID()}`;
const claimOf = (token: string, fingerprint = 'fp-1') => ({ token, fingerprint, createdAt: Date.now() });
const response = (status = 201, text = 'hello'): StoredResponse => ({
  status,
  headers: { 'content-type': 'text/plain', location: '/x/1', link: ['<a>; rel=a', '<b>; rel=b'] },
  body: new Uint8Array(Buffer.from(text)),
});

export function storeContract(name: string, target: ContractTarget | undefined): void {
  describe.skipIf(!target)(`store contract: ${name}`, () => {
    let store: IdempotencyStore;
    beforeAll(async () => {
      store = await target!.create();
    });
    afterAll(async () => {
      await store?.close();
    });

    it('S1: a claim on an absent key wins and writes a processing record', async () => {
      const k = key();
      const result = await store.claim(k, claimOf('t1'), 5000);
      expect(result.claimed).toBe(true);
      const record = await store.get(k);
      expect(record).toMatchObject({ state: 'processing', token: 't1', fingerprint: 'fp-1' });
      expect(record?.state === 'processing' && record.leaseUntil).toBeGreaterThan(Date.now());
    });

    it('S1: of 60 concurrent claimers on one key exactly one wins; losers see the winner', async () => {
      const k = key();
      const results = await Promise.all(
        Array.from({ length: 60 }, (_, i) => store.claim(k, claimOf(`t${i}`), 5000)),
      );
      const winners = results.filter((r) => r.claimed);
      expect(winners).toHaveLength(1);
      const winnerToken = winners[0]!.record.token;
      for (const r of results) expect(r.record.token).toBe(winnerToken);
    });

    it('S1: concurrent claims on 40 different keys all win', async () => {
      const results = await Promise.all(Array.from({ length: 40 }, (_, i) => store.claim(key(), claimOf(`t${i}`), 5000)));
      expect(results.every((r) => r.claimed)).toBe(true);
    });

    it('S1: a live completed record is returned to a claimer, not overwritten', async () => {
      const k = key();
      await store.claim(k, claimOf('t1'), 5000);
      expect(await store.complete(k, 't1', response(), 60_000)).toBe(true);
      const again = await store.claim(k, claimOf('t2', 'fp-2'), 5000);
      expect(again.claimed).toBe(false);
      expect(again.record).toMatchObject({ state: 'completed', token: 't1', fingerprint: 'fp-1' });
    });

    it('S1/H17: after the lease expires exactly one of many claimers takes over with a new token', async () => {
      const k = key();
      await store.claim(k, claimOf('old'), 300);
      expect((await store.claim(k, claimOf('early'), 5000)).claimed).toBe(false);
      await sleep(450);
      const results = await Promise.all(Array.from({ length: 20 }, (_, i) => store.claim(k, claimOf(`new${i}`), 5000)));
      expect(results.filter((r) => r.claimed)).toHaveLength(1);
      expect((await store.get(k))!.token).toMatch(/^new/);
    });

    it('S2: complete stores status, headers and body bytes; only the owner can complete', async () => {
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

    it('S2/H12: a record can complete without a body (not replayable)', async () => {
      const k = key();
      await store.claim(k, claimOf('owner'), 5000);
      expect(await store.complete(k, 'owner', { status: 200, headers: {}, body: null }, 60_000)).toBe(true);
      const record = await store.get(k);
      expect(record?.state === 'completed' && record.response.body).toBeNull();
    });

    it('S2: release deletes only for the owner', async () => {
      const k = key();
      await store.claim(k, claimOf('owner'), 5000);
      expect(await store.release(k, 'intruder')).toBe(false);
      expect(await store.get(k)).toBeDefined();
      expect(await store.release(k, 'owner')).toBe(true);
      expect(await store.get(k)).toBeUndefined();
      expect((await store.claim(k, claimOf('next'), 5000)).claimed).toBe(true);
    });

    it('S2/H17: extend pushes the lease only for the owner', async () => {
      const k = key();
      await store.claim(k, claimOf('owner'), 300);
      expect(await store.extend(k, 'intruder', 5000)).toBe(false);
      expect(await store.extend(k, 'owner', 5000)).toBe(true);
      await sleep(450);
      const record = await store.get(k);
      expect(record).toMatchObject({ state: 'processing', token: 'owner' });
      expect((await store.claim(k, claimOf('thief'), 5000)).claimed).toBe(false);
    });

    it('H18: a fenced-out owner cannot complete, release or extend after a takeover', async () => {
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

    it('S2: an expired lease cannot be extended or completed by its old owner', async () => {
      const k = key();
      await store.claim(k, claimOf('slow'), 250);
      await sleep(400);
      expect(await store.extend(k, 'slow', 5000)).toBe(false);
      expect(await store.complete(k, 'slow', response(), 60_000)).toBe(false);
    });

    it('S3/H20: get never returns an expired record, and the key is new again after ttl', async () => {
      const k = key();
      await store.claim(k, claimOf('owner'), 5000);
      await store.complete(k, 'owner', response(), 300);
      expect(await store.get(k)).toBeDefined();
      await sleep(450);
      expect(await store.get(k)).toBeUndefined();
      expect((await store.claim(k, claimOf('second'), 5000)).claimed).toBe(true);
    });

    it('S3: get never returns a processing record whose lease ended', async () => {
      const k = key();
      await store.claim(k, claimOf('owner'), 250);
      await sleep(400);
      expect(await store.get(k)).toBeUndefined();
    });

    it('S7: any key text is stored opaquely (the core hashes; drivers must not interpret)', async () => {
      for (const k of ["a'; DROP TABLE x; --", 'k*?[]{}', 'redis.call("FLUSHALL")', 'ключ\u0000\r\n']) {
        expect((await store.claim(k, claimOf('t'), 5000)).claimed).toBe(true);
        expect((await store.get(k))?.token).toBe('t');
        expect(await store.release(k, 't')).toBe(true);
      }
    });

    it('S4/S6: a failing backend rejects every call within a bounded time, never "not found"', async () => {
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
}

/**
 * The optional wake-up capability (`subscribe`), for stores that offer it: two store
 * objects on one backend stand for two processes. A store without `subscribe` skips this.
 */
export function settleContract(name: string, create: (() => Promise<IdempotencyStore>) | undefined): void {
  describe.skipIf(!create)(`wake-up contract: ${name}`, () => {
    let writer: IdempotencyStore;
    let reader: IdempotencyStore;
    const seen: string[] = [];
    const brought = new Map<string, IdempotencyRecord | null | undefined>();
    let arrived: (() => void) | undefined;
    let readyCount = 0;
    let stop: (() => void) | undefined;
    /** Resolves once `key` was reported (or rejects after 5 s). */
    const reported = (k: string) =>
      new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no wake-up for ${k} within 5 s; seen ${JSON.stringify(seen)}`)), 5000);
        const check = () => {
          if (!seen.includes(k)) return;
          clearTimeout(timer);
          arrived = undefined;
          resolve();
        };
        arrived = check;
        check();
      });
    beforeAll(async () => {
      writer = await create!();
      reader = await create!();
      expect(typeof reader.subscribe).toBe('function');
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('subscription not ready within 5 s')), 5000);
        stop = reader.subscribe!({
          settled: (k, record) => {
            seen.push(k);
            brought.set(k, record);
            arrived?.();
          },
          ready: () => {
            readyCount++;
            clearTimeout(timer);
            resolve();
          },
          down: () => {},
        });
      });
    });
    afterAll(async () => {
      stop?.();
      await Promise.all([writer?.close(), reader?.close()]);
    });

    it('H8: a complete that took effect wakes another store object on the same backend, with the key', async () => {
      const k = key();
      await writer.claim(k, claimOf('t1'), 5000);
      expect(seen).not.toContain(k);
      expect(await writer.complete(k, 't1', response(), 60_000)).toBe(true);
      await reported(k);
      expect(readyCount).toBe(1);
      // A record sent along must be exactly the stored one (waiters replay it unread).
      const record = brought.get(k);
      if (record !== undefined) expect(record).toEqual(await reader.get(k));
    });

    it('H8: a completed record sent along is exact: no body, empty body, large body', async () => {
      for (const [i, body] of [null, new Uint8Array(), new Uint8Array(Buffer.alloc(3000, 7))].entries()) {
        const k = key();
        await writer.claim(k, claimOf(`t${i}`), 5000);
        const stored = { status: 200 + i, headers: { 'content-type': 'application/json', link: ['<a>', '<b>'] }, body };
        expect(await writer.complete(k, `t${i}`, stored, 60_000)).toBe(true);
        await reported(k);
        const record = brought.get(k);
        if (record !== undefined) expect(record).toEqual(await reader.get(k));
      }
    });

    it('H8: a release that took effect wakes it too', async () => {
      const k = key();
      await writer.claim(k, claimOf('t1'), 5000);
      expect(await writer.release(k, 't1')).toBe(true);
      await reported(k);
      expect([null, undefined]).toContain(brought.get(k));
    });

    it('S7: any key text comes back exactly as given', async () => {
      for (const k of [`${key()}ключ\u0000\r\n"'`, `${key()}${'x'.repeat(2000)}`]) {
        await writer.claim(k, claimOf('t1'), 5000);
        expect(await writer.release(k, 't1')).toBe(true);
        await reported(k);
      }
    });

    it('H8: a refused complete or release publishes nothing (messages arrive in order)', async () => {
      const refused = key();
      const marker = key();
      await writer.claim(refused, claimOf('owner'), 5000);
      expect(await writer.complete(refused, 'intruder', response(), 60_000)).toBe(false);
      expect(await writer.release(refused, 'intruder')).toBe(false);
      await writer.claim(marker, claimOf('t'), 5000);
      await writer.release(marker, 't');
      await reported(marker);
      expect(seen).not.toContain(refused);
      await writer.release(refused, 'owner');
    });

    it('a second listener on the same store gets ready() at once and the same messages; detaching stops them', async () => {
      const mine: string[] = [];
      let detach!: () => void;
      await new Promise<void>((resolve) => {
        detach = reader.subscribe!({ settled: (k) => mine.push(k), ready: () => resolve(), down: () => {} });
      });
      const k = key();
      await writer.claim(k, claimOf('t'), 5000);
      await writer.release(k, 't');
      await reported(k);
      expect(mine).toContain(k);
      detach();
      const after = key();
      await writer.claim(after, claimOf('t'), 5000);
      await writer.release(after, 't');
      await reported(after);
      expect(mine).not.toContain(after);
    });
  });
}
