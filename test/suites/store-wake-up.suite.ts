/**
 * The optional wake-up capability of a store (`subscribe`, SPEC H8): a complete or release
 * that took effect wakes the duplicates waiting on another store object (another process).
 * Run by the test file of each store that offers it.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { IdempotencyRecord, IdempotencyStore, StoredResponse } from '../../src/store.js';

export interface StoreWakeUpSuiteOptions {
  /** Own cases, inside the suite's describe: `writer()` and `reader()` are its two store objects (reader subscribed). */
  extra?: (context: { writer: () => IdempotencyStore; reader: () => IdempotencyStore }) => void;
}

const key = () => `settle-${randomUUID()}`;
const claimOf = (token: string, fingerprint = 'fp-1') => ({ token, fingerprint, createdAt: Date.now() });
const response = (status = 201, text = 'hello'): StoredResponse => ({
  status,
  headers: { 'content-type': 'text/plain', location: '/x/1', link: ['<a>; rel=a', '<b>; rel=b'] },
  body: new Uint8Array(Buffer.from(text)),
});

/**
 * Two store objects from `create` on one backend stand for two processes. `create`
 * undefined registers the suite as skipped (the store's server is not reachable).
 */
export function storeWakeUpSuite(
  name: string,
  create: (() => Promise<IdempotencyStore>) | undefined,
  { extra }: StoreWakeUpSuiteOptions = {},
): void {
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
    /**
     * The writer claims `k`; the reader's claim then finds it processing, as a duplicate
     * that will wait does (a store may publish only settles that a claim waited for).
     */
    const claimWaited = async (k: string, token: string) => {
      expect((await writer.claim(k, claimOf(token), 5000)).claimed).toBe(true);
      const duplicate = await reader.claim(k, claimOf(`dup-${token}`), 5000);
      expect(duplicate).toMatchObject({ claimed: false, record: { state: 'processing', token } });
    };

    it('H8: a complete that took effect wakes another store object on the same backend, with the key', async () => {
      const k = key();
      await claimWaited(k, 't1');
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
        await claimWaited(k, `t${i}`);
        const stored = { status: 200 + i, headers: { 'content-type': 'application/json', link: ['<a>', '<b>'] }, body };
        expect(await writer.complete(k, `t${i}`, stored, 60_000)).toBe(true);
        await reported(k);
        const record = brought.get(k);
        if (record !== undefined) expect(record).toEqual(await reader.get(k));
      }
    });

    it('H8: a release that took effect wakes it too', async () => {
      const k = key();
      await claimWaited(k, 't1');
      expect(await writer.release(k, 't1')).toBe(true);
      await reported(k);
      expect([null, undefined]).toContain(brought.get(k));
    });

    it('S7: any key text comes back exactly as given', async () => {
      for (const k of [`${key()}ключ\u0000\r\n"'`, `${key()}${'x'.repeat(2000)}`]) {
        await claimWaited(k, 't1');
        expect(await writer.release(k, 't1')).toBe(true);
        await reported(k);
      }
    });

    it('H8: a refused complete or release publishes nothing (messages arrive in order)', async () => {
      const refused = key();
      const marker = key();
      await claimWaited(refused, 'owner');
      expect(await writer.complete(refused, 'intruder', response(), 60_000)).toBe(false);
      expect(await writer.release(refused, 'intruder')).toBe(false);
      await claimWaited(marker, 't');
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
      await claimWaited(k, 't');
      await writer.release(k, 't');
      await reported(k);
      expect(mine).toContain(k);
      detach();
      const after = key();
      await claimWaited(after, 't');
      await writer.release(after, 't');
      await reported(after);
      expect(mine).not.toContain(after);
    });

    extra?.({ writer: () => writer, reader: () => reader });
  });
}
