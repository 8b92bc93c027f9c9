/**
 * D1 store for Cloudflare Workers, on the shared SQL store shape (SQLite dialect): one row
 * per record. A claim is one upsert that inserts, or takes over a row whose lease or
 * replay window ended (the WHERE of its ON CONFLICT clause), sent in one batch with the
 * read of the live row, so a claim is one round trip whether it wins or loses. Times are
 * the database's clock. The table is created when a statement first finds it missing.
 * @module
 * @example
 * import { env } from 'cloudflare:workers';
 * import { createStore } from 'idempotency-kit';
 *
 * // wrangler.toml: [[d1_databases]] binding = "DB", database_name = "app", database_id = "…"
 * const store = createStore(env.DB); // or d1Store({ database: env.DB, table: 'idempotency_kit_records' })
 */
import type { IdempotencyStore } from '../src/store.js';
import { fitsInRow, isD1Database, isDurableObjectNamespace, refuseKv, type D1DatabaseLike, type D1StatementLike } from './cloudflare-bindings.js';
import { withTimeout } from '../src/timers.js';
import { checkSqlOptions, sqlStore, type SqlRow, type SqlScanRow, type StatsGroup } from './sql-store.js';
import { sqliteRecordsSchema } from './utils.js';

export interface D1StoreOptions {
  /** The D1 database binding (`env.DB` with `[[d1_databases]] binding = "DB"`). */
  database: D1DatabaseLike;
  /**
   * Table holding the records (letters, digits, `_`), created with its index when a
   * statement first finds it missing (or by your migration: docs/drivers/cloudflare.md).
   * @default 'idempotency_kit_records'
   */
  table?: string;
  /**
   * Longest wait for one D1 call, in ms; then it rejects (the store never hangs).
   * @default 2000
   */
  timeoutMs?: number;
  /**
   * How often, per isolate, a claim also deletes up to `sweepBatchSize` expired rows, in
   * the same batch (no timer: a Worker has none between requests, and the extra
   * statement costs no round trip). 0 disables it; `store.sweep()` from a Cron Trigger
   * then keeps the table small.
   * @default 60000
   */
  sweepIntervalMs?: number;
  /**
   * Most expired rows one such claim (or one statement of `store.sweep()`) deletes.
   * @default 100
   */
  sweepBatchSize?: number;
}

/**
 * The database clock in epoch ms. julianday('now') rather than unixepoch('subsec'), which
 * older SQLite versions lack; 'now' is fixed for the whole statement.
 */
const NOW = `CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)`;

/** Whether a D1 error says the table does not exist yet. */
const missingTable = (error: unknown): boolean => /no such table/i.test(String((error as Error | null)?.message ?? error));

/**
 * The body as D1 binds a BLOB: an ArrayBuffer of exactly its bytes. The shared shape passes
 * a Buffer over part of a larger buffer (whose own `slice` is no copy): copied out.
 */
const blob = (body: Uint8Array | null): ArrayBuffer | null => (body === null ? null : new Uint8Array(body).buffer);

/** Create a D1 store. */
export function d1Store(options: D1StoreOptions): IdempotencyStore {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError('Expected options with a `database`, e.g. d1Store({ database: env.DB })');
  }
  const { database } = options;
  refuseKv(database, 'd1Store({ database })');
  if (!isD1Database(database)) {
    throw new TypeError(
      isDurableObjectNamespace(database)
        ? 'Expected `database` to be a D1 database binding, got a Durable Object namespace: use durableObjectStore({ namespace }) or createStore(env.IDEMPOTENCY)'
        : `Expected \`database\` to be a D1 database binding (env.DB), got ${typeof database === 'object' && database !== null ? 'another object' : String(database)}`,
    );
  }
  const { table, timeoutMs, sweepIntervalMs, sweepBatchSize } = checkSqlOptions({ sweepBatchSize: 100, ...options }, false);

  const quoted = `"${table}"`;
  const SCHEMA = sqliteRecordsSchema(table);
  const COLUMNS = 'state, fingerprint, token, created_at, expires_at, status, headers, body';
  // Insert, or take over a row whose time is up; a live row is left as it is and the
  // statement returns nothing. (An INSERT OR IGNORE would be refused by the primary key
  // while an expired row is still there, until something deleted it.)
  const CLAIM = `INSERT INTO ${quoted} (key, state, fingerprint, token, created_at, expires_at)
VALUES (?1, 'processing', ?2, ?3, ?4, ${NOW} + ?5)
ON CONFLICT (key) DO UPDATE
  SET state = 'processing', fingerprint = excluded.fingerprint, token = excluded.token,
      created_at = excluded.created_at, expires_at = excluded.expires_at,
      status = NULL, headers = NULL, body = NULL
  WHERE ${quoted}.expires_at <= ${NOW}
RETURNING ${COLUMNS}`;
  const GET = `SELECT ${COLUMNS} FROM ${quoted} WHERE key = ?1 AND expires_at > ${NOW}`;
  const OWNED = `key = ?1 AND token = ?2 AND state = 'processing' AND expires_at > ${NOW}`;
  const COMPLETE = `UPDATE ${quoted} SET state = 'completed', expires_at = ${NOW} + ?3, status = ?4, headers = ?5, body = ?6 WHERE ${OWNED}`;
  const RELEASE = `DELETE FROM ${quoted} WHERE ${OWNED}`;
  const EXTEND = `UPDATE ${quoted} SET expires_at = ${NOW} + ?3 WHERE ${OWNED}`;
  const SWEEP = `DELETE FROM ${quoted} WHERE key IN (SELECT key FROM ${quoted} WHERE expires_at <= ${NOW} ORDER BY expires_at LIMIT ?1)`;
  const DELETE = `DELETE FROM ${quoted} WHERE key = ?1`;
  const SCAN = `SELECT key, ${COLUMNS} FROM ${quoted} WHERE key > ?1 AND expires_at > ${NOW} ORDER BY key LIMIT ?2`;
  const REPLACE_RESPONSE = `UPDATE ${quoted} SET status = ?3, headers = ?4, body = ?5 WHERE key = ?1 AND token = ?2 AND state = 'completed' AND expires_at > ${NOW}`;
  const STATS = `SELECT CASE WHEN expires_at <= ${NOW} THEN 'expired' ELSE state END AS state, count(*) AS n, min(expires_at) AS oldest FROM ${quoted} GROUP BY 1`;

  const statement = (sql: string, ...values: unknown[]): D1StatementLike => database.prepare(sql).bind(...values);
  const message = `idempotency-kit: D1 did not answer within ${timeoutMs} ms`;
  const createTable = () => withTimeout(database.batch(SCHEMA.map((sql) => database.prepare(sql)) as never[]), timeoutMs, message);
  /** Run `work` within the time bound; a missing table is created once and the work run again. */
  const run = async <T>(work: () => Promise<T>): Promise<T> => {
    try {
      return await withTimeout(work(), timeoutMs, message);
    } catch (error) {
      if (!missingTable(error)) throw error;
      await createTable();
      return withTimeout(work(), timeoutMs, message);
    }
  };
  const rows = async (sql: string, ...values: unknown[]) => ((await run(() => statement(sql, ...values).all())).results ?? []) as SqlRow[];
  const changed = async (sql: string, ...values: unknown[]) => (await run(() => statement(sql, ...values).run())).meta?.changes === 1;
  // The sweep rides on a claim at most once an interval per isolate (see `sweepIntervalMs`).
  let sweptAt = Date.now();

  return sqlStore(
    {
      name: 'd1',
      label: 'D1',
      // Nothing to do first: the table is made when a statement finds it missing.
      setUp: async () => {},
      async claim(key, request, leaseMs) {
        const batch: D1StatementLike[] = [
          statement(CLAIM, key, request.fingerprint, request.token, request.createdAt, leaseMs),
          // In the same transaction, after the upsert: the live row, ours or the winner's.
          statement(GET, key),
        ];
        const now = Date.now();
        if (sweepIntervalMs > 0 && now - sweptAt >= sweepIntervalMs) {
          sweptAt = now;
          batch.unshift(statement(SWEEP, sweepBatchSize));
        }
        const results = (await run(() => database.batch(batch as never[]))) as Array<{ results?: SqlRow[] }>;
        const [won] = results.at(-2)?.results ?? [];
        if (won !== undefined) return { claimed: true, row: won };
        const [live] = results.at(-1)?.results ?? [];
        return live === undefined ? { claimed: false } : { claimed: false, row: live };
      },
      async get(key) {
        const [row] = await rows(GET, key);
        return row;
      },
      complete: (key, token, completion) => {
        const body = fitsInRow(completion.body, completion.headers) ? blob(completion.body) : null;
        return changed(COMPLETE, key, token, completion.ttlMs, completion.status, completion.headers, body);
      },
      release: (key, token) => changed(RELEASE, key, token),
      extend: (key, token, leaseMs) => changed(EXTEND, key, token, leaseMs),
      sweep: async (limit) => (await run(() => statement(SWEEP, limit).run())).meta?.changes ?? 0,
      delete: (key) => changed(DELETE, key),
      stats: async () => (await rows(STATS)) as unknown as StatsGroup[],
      scan: async (after, limit) => (await rows(SCAN, after, limit)) as SqlScanRow[],
      replaceResponse: (key, token, response) => {
        // complete() keeps an oversized response without its body; here the record already
        // replays, so one that would no longer fit is refused instead.
        if (!fitsInRow(response.body, response.headers)) return Promise.reject(new Error('idempotency-kit: the new response does not fit a D1 row'));
        return changed(REPLACE_RESPONSE, key, token, response.status, response.headers, blob(response.body));
      },
      // The binding is the Worker's: nothing of ours to close.
      async close() {},
    },
    // No background timer in a Worker: the sweep rides on claims (above).
    { sweepIntervalMs: 0, sweepBatchSize },
  );
}
