/**
 * Internal: the `reseal` command's work, apart from argument parsing so that it runs on
 * any store in-process (the memory store's tests) as well as from the command line.
 * Visits every live record with the store's `scan`, re-seals each completed record that
 * is not under the first key with `resealRecord`, and writes it back with the store's
 * compare-and-set `replaceResponse`. docs/cli.md#reseal.
 * @module
 */
import { resealRecord, type Keyring } from '../src/encryption.js';
import type { IdempotencyStore, ScanPage } from '../src/store.js';

export interface ResealOptions {
  /** Records asked of the store per scan page. */
  batch: number;
  /** Stop after the page in which this many records were visited; undefined: go to the end. */
  limit?: number;
  /** Where a previous run stopped (its cursor); undefined: from the start. */
  from?: string;
  /** Count what would change, write nothing. */
  dryRun?: boolean;
  /** Seal records stored in clear too. */
  encryptPlaintext?: boolean;
  /** Each store call, bounded (the command line's `storeCall`). */
  call?: <T>(what: string, run: () => Promise<T>) => Promise<T>;
  /** After each page, with the totals so far and where to resume. */
  onBatch?: (progress: ResealProgress) => void;
}

export interface ResealProgress {
  /** Live records visited (processing ones included). */
  visited: number;
  /** Re-sealed under the first key (with `dryRun`: that would be). */
  resealed: number;
  /** Already under the first key: skipped. */
  current: number;
  /** Stored in clear and left so (no `encryptPlaintext`). */
  plaintext: number;
  /** Still processing: nothing to seal yet (the engine seals it under the first key when it completes). */
  processing: number;
  /** Changed between the scan and the write (expired, purged, or claimed again): left as it is now. */
  changed: number;
  /** No listed key opens them: left, never deleted. */
  unreadable: number;
  /** The first unreadable records (at most 20): storage key, the key id it names, why. */
  unreadableRecords: Array<{ key: string; keyId: string | null; reason: string }>;
  /** Resume here with `from`; undefined once the store was visited to its end. */
  cursor: string | undefined;
}

const UNREADABLE_LISTED = 20;
/** Writes in flight at once: well under every driver's default pool size. */
const WRITES_AT_ONCE = 8;

/** Re-seal every live completed record under the keyring's first key; resolves the totals. */
export async function resealStore(store: IdempotencyStore, keyring: Keyring, options: ResealOptions): Promise<ResealProgress> {
  if (typeof store.scan !== 'function' || typeof store.replaceResponse !== 'function') {
    throw new TypeError(`the ${store.name} store cannot reseal: it lacks ${typeof store.scan !== 'function' ? 'scan' : 'replaceResponse'} (docs/writing-a-store.md)`);
  }
  const call = options.call ?? (<T>(_what: string, run: () => Promise<T>) => run());
  const progress: ResealProgress = {
    visited: 0,
    resealed: 0,
    current: 0,
    plaintext: 0,
    processing: 0,
    changed: 0,
    unreadable: 0,
    unreadableRecords: [],
    cursor: options.from,
  };
  for (;;) {
    const want = options.limit === undefined ? options.batch : Math.min(options.batch, options.limit - progress.visited);
    const cursor = progress.cursor;
    const page: ScanPage = await call('scan', () => store.scan!({ limit: want, ...(cursor === undefined ? {} : { cursor }) }));
    const writes: Array<() => Promise<void>> = [];
    for (const { key, record } of page.records) {
      progress.visited++;
      if (record.state !== 'completed') {
        progress.processing++;
        continue;
      }
      const outcome = resealRecord(record, key, keyring, { encryptPlaintext: options.encryptPlaintext === true });
      if (outcome.action === 'current') progress.current++;
      else if (outcome.action === 'plaintext') progress.plaintext++;
      else if (outcome.action === 'unreadable') {
        progress.unreadable++;
        if (progress.unreadableRecords.length < UNREADABLE_LISTED) progress.unreadableRecords.push({ key, keyId: outcome.keyId ?? null, reason: outcome.reason });
      } else if (options.dryRun) progress.resealed++;
      // Compare-and-set on the token the scan saw: a record completed again meanwhile
      // (under whatever key its writer has) is never overwritten with this older one.
      else
        writes.push(async () => {
          if (await call('replaceResponse', () => store.replaceResponse!(key, record.token, outcome.response))) progress.resealed++;
          else progress.changed++;
        });
    }
    // A few writes at a time (each one round trip and, on SQL, one commit); the page is
    // finished before its cursor is reported, so a resume never skips a record.
    for (let i = 0; i < writes.length; i += WRITES_AT_ONCE) await Promise.all(writes.slice(i, i + WRITES_AT_ONCE).map((write) => write()));
    progress.cursor = page.cursor;
    options.onBatch?.({ ...progress, unreadableRecords: [...progress.unreadableRecords] });
    if (progress.cursor === undefined || (options.limit !== undefined && progress.visited >= options.limit)) return progress;
  }
}
