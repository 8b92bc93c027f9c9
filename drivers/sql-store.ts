/**
 * Internal: the store shape the SQL drivers (SQLite, PostgreSQL, MySQL) share. A driver
 * gives a dialect (its statements, its connection, its set-up); this module gives the
 * rest the same way for all three: the key form, set-up once (and again after a failure),
 * the claim-retry loop, rows to records, the bounded background sweep, closing.
 * Loads no database client. Not a package entry.
 * @module
 */
import type {
  ClaimRequest,
  ClaimResult,
  IdempotencyRecord,
  IdempotencyStore,
  MaintenanceOptions,
  ProcessingRecord,
  ScanOptions,
  ScanPage,
  StoreStats,
  StoredResponse,
} from '../src/store.js';
import { startSweeper } from '../src/timers.js';
import { assertInteger } from '../src/validate.js';
import { assertTableName, bodyBuffer, checkScanOptions, claimUntilSettled, sqlKey, sweepInBatches } from './utils.js';

/** A record as the SQL drivers store it: one row, one column per field. */
export interface SqlRecordRow {
  state: 'processing' | 'completed';
  fingerprint: string;
  token: string;
  created_at: string | number;
  /** The lease end while processing, the record's end once completed. */
  expires_at: string | number;
  status: number | null;
  /** Parsed by the driver (jsonb or text). */
  headers: Record<string, string | string[]> | null;
  /** SQL NULL marks "completed without a replayable body"; an empty blob is an empty body. */
  body: Uint8Array | null;
}

/** The record behind a row of the SQL drivers' table (the Durable Object's own table too). */
export function recordFromRow(row: SqlRecordRow): IdempotencyRecord {
  const base = { fingerprint: row.fingerprint, token: row.token, createdAt: Number(row.created_at) };
  if (row.state === 'processing') return { state: 'processing', ...base, leaseUntil: Number(row.expires_at) };
  return {
    state: 'completed',
    ...base,
    expiresAt: Number(row.expires_at),
    response: {
      status: row.status ?? 0,
      headers: row.headers ?? {},
      body: row.body === null ? null : new Uint8Array(row.body),
    },
  };
}

/** A row as a dialect reads it: `headers` may still be JSON text (SQLite, MySQL). */
export type SqlRow = Omit<SqlRecordRow, 'headers'> & { headers: SqlRecordRow['headers'] | string };

/** What a claim statement found: won (the new row), or lost (the live row, when it could see it). */
export type SqlClaim = { claimed: true; row: SqlRow } | { claimed: false; row?: SqlRow };

/** A completion as the dialects bind it. */
export interface SqlCompletion {
  status: number;
  /** The headers as JSON text. */
  headers: string;
  /** NULL marks "completed without a replayable body". */
  body: Buffer | null;
  ttlMs: number;
  /** The key as the store's methods received it (not hashed), for wake-up messages. */
  storageKey: string;
}

/**
 * One SQL database's statements. Every method is one short statement (or two for a
 * claim whose loser must read the live row); none holds a transaction open while a
 * handler runs. Keys arrive in their stored form.
 */
export interface SqlDialect {
  /** The store's `name`. */
  name: string;
  /** The database in messages ("the MySQL store is closed"). */
  label: string;
  /** Connect and create the table if needed; called before the first statement, and again after it failed. */
  setUp(): Promise<void>;
  /** Insert, or take over a row whose lease or replay window ended; never touch a live row. */
  claim(key: string, request: ClaimRequest, leaseMs: number): Promise<SqlClaim>;
  /** The live row, if any. */
  get(key: string): Promise<SqlRow | undefined>;
  /** Compare-and-set by token on a live processing row; whether it changed. */
  complete(key: string, token: string, completion: SqlCompletion): Promise<boolean>;
  /** `storageKey`: the key as the store's methods received it, for wake-up messages. */
  release(key: string, token: string, storageKey: string): Promise<boolean>;
  extend(key: string, token: string, leaseMs: number): Promise<boolean>;
  /**
   * Delete up to `limit` expired rows (never one that is live again); how many went.
   * `everything`: the maintenance sweep, which must find every expired row, also those a
   * background sweep may leave for later (PostgreSQL's, which walks an upper bound).
   */
  sweep(limit: number, everything?: boolean): Promise<number>;
  /** Close what the dialect opened itself. */
  close(): Promise<void>;
  /** Maintenance (the command line): delete the row at `key` whatever its state; whether there was one. */
  delete?(key: string): Promise<boolean>;
  /** Maintenance: `SELECT <state, or 'expired' past expires_at>, count(*), min(expires_at) … GROUP BY 1`. */
  stats?(): Promise<StatsGroup[]>;
  /**
   * Maintenance: up to `limit` live rows with a key after `after` ('' for the first), by
   * key: `SELECT key, … WHERE key > ? AND expires_at > <now> ORDER BY key LIMIT ?`.
   */
  scan?(after: string, limit: number): Promise<SqlScanRow[]>;
  /**
   * Maintenance: `UPDATE … SET status, headers, body WHERE key = ? AND token = ? AND
   * state = 'completed' AND expires_at > <now>`; whether it changed the row.
   */
  replaceResponse?(key: string, token: string, response: SqlResponse): Promise<boolean>;
  /** Optional wake-ups for waiting duplicates (see `IdempotencyStore.subscribe`). */
  subscribe?: IdempotencyStore['subscribe'];
}

/** A row as a scan reads it: with its key (text, or the bytes of MySQL's binary column). */
export type SqlScanRow = SqlRow & { key: string | Uint8Array };

/** A response as the dialects bind it (`replaceResponse`). */
export interface SqlResponse {
  status: number;
  /** The headers as JSON text. */
  headers: string;
  body: Buffer | null;
}

/** One row of `SELECT <state or 'expired'>, count(*), min(expires_at) … GROUP BY 1`. */
export interface StatsGroup {
  state: string;
  n: number | string;
  oldest: number | string | null;
}

/** Fold grouped counts (a dialect's, or every Durable Object's) into {@link StoreStats}. */
export function statsFromGroups(groups: StatsGroup[], options: MaintenanceOptions = {}): StoreStats {
  const stats: StoreStats = { processing: 0, completed: 0, expired: 0, oldestExpiresAt: undefined };
  for (const group of groups) {
    if (group.state === 'processing' || group.state === 'completed' || group.state === 'expired') stats[group.state] += Number(group.n);
    const oldest = group.oldest === null ? undefined : Number(group.oldest);
    if (oldest !== undefined && (stats.oldestExpiresAt === undefined || oldest < stats.oldestExpiresAt)) stats.oldestExpiresAt = oldest;
  }
  options.onProgress?.(stats.processing + stats.completed + stats.expired);
  return stats;
}

export interface SqlStoreOptions {
  /** 0 disables the sweep. */
  sweepIntervalMs: number;
  sweepBatchSize: number;
}

/** The options every SQL driver takes, checked, with their defaults. */
export function checkSqlOptions(
  options: { table?: unknown; timeoutMs?: unknown; sweepIntervalMs?: unknown; sweepBatchSize?: unknown },
  schemaQualified: boolean,
): { table: string; timeoutMs: number; sweepIntervalMs: number; sweepBatchSize: number } {
  const table = options.table ?? 'idempotency_kit_records';
  const timeoutMs = options.timeoutMs ?? 2000;
  const sweepIntervalMs = options.sweepIntervalMs ?? 60_000;
  const sweepBatchSize = options.sweepBatchSize ?? 1000;
  assertTableName('`table`', table, schemaQualified);
  assertInteger('timeoutMs', timeoutMs, 1);
  assertInteger('sweepIntervalMs', sweepIntervalMs, 0);
  assertInteger('sweepBatchSize', sweepBatchSize, 1);
  return { table, timeoutMs, sweepIntervalMs, sweepBatchSize };
}

// Rows whose headers arrive parsed (jsonb, or none yet) map as they are, without a copy.
const toRecord = (row: SqlRow): IdempotencyRecord =>
  recordFromRow(
    typeof row.headers === 'string' ? { ...row, headers: JSON.parse(row.headers) as SqlRecordRow['headers'] } : (row as SqlRecordRow),
  );

/** The stored form of `key`, or a rejection for a key that is no string (calls reject, never throw). */
function keyOf(key: string): string | Promise<never> {
  return typeof key === 'string' ? sqlKey(key) : Promise.reject(new TypeError(`Expected the key to be a string, got ${typeof key}`));
}

/** An {@link IdempotencyStore} over a dialect. */
export function sqlStore(dialect: SqlDialect, options: SqlStoreOptions): IdempotencyStore {
  let closed = false;
  let ready: Promise<void> | undefined;
  // Set once the set-up succeeded (cleared if it is redone): calls then skip awaiting it.
  let isSetUp = false;
  const setUp = (): Promise<void> => {
    if (closed) return Promise.reject(new Error(`idempotency-kit: the ${dialect.label} store is closed`));
    ready ??= dialect.setUp().then(
      () => {
        isSetUp = true;
      },
      (error: unknown) => {
        ready = undefined; // the next call tries again (the server may be back, a directory fixed)
        throw error;
      },
    );
    return ready;
  };
  // Not async: once set up, a call is the dialect's own promise (no wrapper's extra ticks).
  const run = <T>(statement: () => Promise<T>): Promise<T> => (isSetUp && !closed ? statement() : setUp().then(statement));

  // Nothing to sweep before this store was used (and no table to create on a timer).
  const sweeper = startSweeper(
    options.sweepIntervalMs,
    () => sweepInBatches(() => run(() => dialect.sweep(options.sweepBatchSize)), options.sweepBatchSize, () => closed),
    () => ready !== undefined,
  );

  return {
    name: dialect.name,
    claim(key: string, request: ClaimRequest, leaseMs: number): Promise<ClaimResult> {
      const k = keyOf(key);
      if (typeof k !== 'string') return k;
      const lost = (row: SqlRow | undefined): ClaimResult | undefined => (row ? { claimed: false, record: toRecord(row) } : undefined);
      const attempt = (): Promise<ClaimResult | undefined> =>
        run(() => dialect.claim(k, request, leaseMs)).then((result) =>
          result.claimed
            ? { claimed: true, record: toRecord(result.row) as ProcessingRecord }
            : result.row
              ? lost(result.row)
              : run(() => dialect.get(k)).then(lost),
        );
      // A loser whose conflicting row was gone by the time it looked (released, or
      // committed after its statement's snapshot) reads again, and claims again if need be.
      return attempt().then((result) => result ?? claimUntilSettled(dialect.label, attempt, 1));
    },
    get(key: string) {
      const k = keyOf(key);
      if (typeof k !== 'string') return k;
      return run(() => dialect.get(k)).then((row) => (row ? toRecord(row) : undefined));
    },
    complete(key: string, token: string, response: StoredResponse, ttlMs: number) {
      const k = keyOf(key);
      if (typeof k !== 'string') return k;
      let completion: SqlCompletion;
      try {
        completion = { status: response.status, headers: JSON.stringify(response.headers), body: bodyBuffer(response.body), ttlMs, storageKey: key };
      } catch (error) {
        return Promise.reject(error); // a bad response rejects like any store failure, never throws
      }
      return run(() => dialect.complete(k, token, completion));
    },
    release(key: string, token: string) {
      const k = keyOf(key);
      if (typeof k !== 'string') return k;
      return run(() => dialect.release(k, token, key));
    },
    extend(key: string, token: string, leaseMs: number) {
      const k = keyOf(key);
      if (typeof k !== 'string') return k;
      return run(() => dialect.extend(k, token, leaseMs));
    },
    async close() {
      if (closed) return;
      closed = true;
      await sweeper.stop();
      await dialect.close();
    },
    ...(dialect.subscribe ? { subscribe: dialect.subscribe } : {}),
    // Maintenance (docs/cli.md): delete and stats when the dialect has them, sweep always.
    ...(dialect.delete ? { delete: (key: string) => run(() => dialect.delete!(sqlKey(key))) } : {}),
    ...(dialect.stats ? { stats: async (opts?: MaintenanceOptions) => statsFromGroups(await run(() => dialect.stats!()), opts) } : {}),
    ...(dialect.scan
      ? {
          async scan(opts: ScanOptions): Promise<ScanPage> {
            const { cursor, limit } = checkScanOptions(opts);
            const rows = await run(() => dialect.scan!(cursor ?? '', limit));
            const records: ScanPage['records'] = [];
            for (const row of rows) {
              const key = typeof row.key === 'string' ? row.key : Buffer.from(row.key).toString('latin1');
              // A key stored as `~` and a hash (one not made by the engine) cannot be given
              // back as the caller wrote it: such rows are passed over.
              if (!key.startsWith('~')) records.push({ key, record: toRecord(row) });
            }
            const last = rows.at(-1)?.key;
            return {
              records,
              cursor: rows.length < limit || last === undefined ? undefined : typeof last === 'string' ? last : Buffer.from(last).toString('latin1'),
            };
          },
        }
      : {}),
    ...(dialect.replaceResponse
      ? {
          replaceResponse(key: string, token: string, response: StoredResponse): Promise<boolean> {
            const k = keyOf(key);
            if (typeof k !== 'string') return k;
            let bound: SqlResponse;
            try {
              bound = { status: response.status, headers: JSON.stringify(response.headers), body: bodyBuffer(response.body) };
            } catch (error) {
              return Promise.reject(error);
            }
            return run(() => dialect.replaceResponse!(k, token, bound));
          },
        }
      : {}),
    async sweep(opts: MaintenanceOptions = {}) {
      // Every expired row, in the store's batches, with progress after each.
      let deleted = 0;
      for (;;) {
        const n = await run(() => dialect.sweep(options.sweepBatchSize, true));
        deleted += n;
        opts.onProgress?.(deleted);
        if (n < options.sweepBatchSize || closed) return deleted;
      }
    },
  };
}
