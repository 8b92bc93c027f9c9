/**
 * The optional maintenance methods of a store (delete, stats, sweep: what the operator CLI
 * uses), written once and run by each driver's own test file (test/stores/<driver>.test.ts).
 * `create` must give a store of its own (a fresh table or namespace): stats counts
 * everything in it.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { IdempotencyStore } from '../../src/store.js';

export interface MaintenanceTarget {
  /** A fresh, empty store; SQL drivers with `sweepBatchSize: 10` and no background sweep. */
  create: () => Promise<IdempotencyStore>;
  /** Redis expires records itself: nothing expired is ever left to count or sweep. */
  nativeExpiry?: boolean;
  /** The store deletes in batches of 10 (SQL drivers): progress comes once per batch. */
  batched?: boolean;
}

export interface StoreMaintenanceSuiteOptions {
  /** Own cases, inside the suite's describe: `store()` is the suite's store (its cases run after the suite's own). */
  extra?: (context: { store: () => IdempotencyStore }) => void;
}

const SHORT_MS = 1500;
const claimOf = (token: string) => ({ token, fingerprint: 'fp', createdAt: Date.now() });
const response = { status: 201, headers: { 'content-type': 'text/plain' }, body: new Uint8Array(Buffer.from('ok')) };

/** Resolves once `check` holds, polling the store (real expiry needs real time). */
async function eventually(check: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not reached in time');
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** `target` undefined registers the suite as skipped (the store's server is not reachable). */
export function storeMaintenanceSuite(name: string, target: MaintenanceTarget | undefined, { extra }: StoreMaintenanceSuiteOptions = {}): void {
  describe.skipIf(!target)(`store maintenance: ${name}`, () => {
    let store: IdempotencyStore;
    beforeAll(async () => {
      store = await target!.create();
    });
    afterAll(async () => {
      await store?.close();
    });

    it('delete removes a completed record so the next claim wins again; absent keys report false', async () => {
      const k = `m-${randomUUID()}`;
      await store.claim(k, claimOf('t1'), 5000);
      expect(await store.complete(k, 't1', response, 60_000)).toBe(true);
      expect(await store.delete!(k)).toBe(true);
      expect(await store.get(k)).toBeUndefined();
      expect((await store.claim(k, claimOf('t2'), 5000)).claimed).toBe(true);
      expect(await store.delete!(`m-${randomUUID()}`)).toBe(false);
    });

    it("S2: delete of a processing record refuses the owner's later complete (fenced by token)", async () => {
      const k = `m-${randomUUID()}`;
      await store.claim(k, claimOf('owner'), 5000);
      expect(await store.delete!(k)).toBe(true);
      expect(await store.complete(k, 'owner', response, 60_000)).toBe(false);
      expect(await store.get(k)).toBeUndefined();
    });

    it('stats counts records by state, the earliest expiry and reports progress; sweep deletes what expired', async () => {
      const before = Date.now();
      const completedKeys = Array.from({ length: 30 }, () => `m-${randomUUID()}`);
      await Promise.all(
        completedKeys.map(async (k, i) => {
          await store.claim(k, claimOf(`c${i}`), 5000);
          await store.complete(k, `c${i}`, response, 600_000);
        }),
      );
      await Promise.all(Array.from({ length: 4 }, (_, i) => store.claim(`m-${randomUUID()}`, claimOf(`p${i}`), 60_000)));
      // 25 short leases that expire and are left behind (SQL) or removed by Redis itself.
      // Long enough that a loaded machine still counts them live in the first stats.
      await Promise.all(Array.from({ length: 25 }, (_, i) => store.claim(`m-${randomUUID()}`, claimOf(`e${i}`), SHORT_MS)));
      const afterClaims = Date.now();

      const progress: number[] = [];
      const fresh = await store.stats!({ onProgress: (n) => progress.push(n) });
      // The two delete tests left one processing record behind (the re-claimed key).
      expect(fresh.completed).toBe(30);
      expect(fresh.processing + fresh.expired).toBe(4 + 1 + 25);
      expect(fresh.oldestExpiresAt).toBeGreaterThanOrEqual(before + SHORT_MS);
      expect(fresh.oldestExpiresAt).toBeLessThanOrEqual(afterClaims + SHORT_MS + 1000);
      expect(progress.length).toBeGreaterThan(0);
      expect(progress.at(-1)).toBe(60);

      await new Promise((r) => setTimeout(r, Math.max(0, fresh.oldestExpiresAt! + 200 - Date.now())));
      await eventually(async () => (await store.stats!()).processing === 5);
      if (target!.nativeExpiry) {
        const after = await store.stats!();
        expect(after).toMatchObject({ completed: 30, processing: 5, expired: 0 });
        expect(await store.sweep!()).toBe(0);
        return;
      }
      const expiredStats = await store.stats!();
      expect(expiredStats).toMatchObject({ completed: 30, processing: 5, expired: 25 });
      const swept: number[] = [];
      expect(await store.sweep!({ onProgress: (n) => swept.push(n) })).toBe(25);
      // Batches of 10: 10, 20, 25.
      expect(swept).toEqual(target!.batched ? [10, 20, 25] : [25]);
      const after = await store.stats!();
      expect(after).toMatchObject({ completed: 30, processing: 5, expired: 0 });
      expect(after.oldestExpiresAt).toBeGreaterThan(Date.now());
      expect(await store.sweep!()).toBe(0);
    });

    it('stats on an empty store: zero counts and no expiry', async () => {
      const empty = await target!.create();
      try {
        expect(await empty.stats!()).toEqual({ processing: 0, completed: 0, expired: 0, oldestExpiresAt: undefined });
      } finally {
        await empty.close();
      }
    });

    extra?.({ store: () => store });
  });
}
