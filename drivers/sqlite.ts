/**
 * SQLite store over `@keyv/sqlite`: one row per record, atomic claims with
 * `INSERT … ON CONFLICT … DO UPDATE … WHERE <expired> RETURNING`, compare-and-set by
 * token. WAL mode and a busy timeout make it safe for several processes sharing one file
 * on one host; use Redis or PostgreSQL across hosts.
 * @module
 * @example
 * import { sqliteStore } from 'idempotency-kit/drivers/sqlite';
 * const store = sqliteStore({ url: 'sqlite://./.data/idempotency.sqlite' });
 */
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
// The documented install is `keyv @keyv/sqlite`; the adapter brings the `sqlite3` module
// this driver's own connection uses, and a missing one gets the same install hint.
import '@keyv/sqlite';
import type KeyvSqlite from '@keyv/sqlite';
import type { Keyv } from 'keyv';
import sqlite3 from 'sqlite3';
import type { IdempotencyStore } from '../src/store.js';
import { assertDriverUrl } from './definition.js';
import { sqliteDriver } from './sqlite-definition.js';
import { checkSqlOptions, sqlStore, type SqlRow, type SqlScanRow, type StatsGroup } from './sql-store.js';
import { adapterFrom, assertOneSource, sqliteRecordsSchema } from './utils.js';

export interface SqliteStoreOptions {
  /**
   * The database file: `sqlite://relative/path.db` (relative to the working directory),
   * `sqlite:///absolute/path.db`, or `sqlite://:memory:` (one process only). Missing
   * parent directories are created. Ignored when `adapter` or `keyv` is given.
   * @default undefined (one of `url`, `adapter`, `keyv` is required)
   */
  url?: string;
  /**
   * An existing `@keyv/sqlite` adapter: statements run on its connection, which the
   * store leaves open on `close()`. The store switches the file to WAL mode and sets a
   * busy timeout on that connection.
   * @default undefined
   */
  adapter?: KeyvSqlite;
  /**
   * A `Keyv` instance whose store is a `@keyv/sqlite` adapter (same as passing `adapter`).
   * @default undefined
   */
  keyv?: Keyv;
  /**
   * Table holding the records, created with its index on first use (letters, digits, `_`).
   * @default 'idempotency_kit_records'
   */
  table?: string;
  /**
   * How long a statement waits for another process's write lock before failing
   * (SQLite `busy_timeout`), in ms: no call hangs.
   * @default 2000
   */
  timeoutMs?: number;
  /**
   * How often expired rows are deleted, in ms, on an unref'd timer stopped by `close()`.
   * 0 disables the sweep (rows then stay until a claim reuses their key).
   * @default 60000
   */
  sweepIntervalMs?: number;
  /**
   * Most rows one sweep statement deletes; a sweep runs at most 10 such batches.
   * @default 1000
   */
  sweepBatchSize?: number;
  /**
   * When a commit reaches the disk (SQLite `PRAGMA synchronous`, in WAL mode).
   * `'normal'`: a commit is written to the WAL file without waiting for the disk; a
   * crash of the process loses nothing, a power cut or OS crash may lose the last
   * commits before the next checkpoint (the file stays consistent). `'full'`: every
   * commit waits for an fsync, so it survives a power cut, at roughly a fifth of the
   * throughput. See docs/drivers/sqlite.md#durability.
   * @default 'normal'
   */
  synchronous?: 'normal' | 'full';
}

/** `keep`: prepare the statement on first use and keep it (the multi-row forms). */
type Query = (sql: string, params: unknown[], keep?: boolean) => Promise<SqlRow[]>;

/**
 * The file path in a `sqlite://` URL. Not parsed with `URL`: `sqlite://:memory:` and
 * relative paths are not valid URLs.
 */
export function sqlitePathFromUrl(url: unknown): string {
  assertDriverUrl(sqliteDriver, url, '');
  return url.slice('sqlite://'.length);
}

/** Create a SQLite store. */
export function sqliteStore(options: SqliteStoreOptions): IdempotencyStore {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError('Expected options with a `url`, `adapter` or `keyv`, e.g. sqliteStore({ url: "sqlite://./idempotency.db" })');
  }
  const { table, timeoutMs, sweepIntervalMs, sweepBatchSize } = checkSqlOptions(options, false);
  assertOneSource(options);

  let file: string | undefined;
  let adapter: KeyvSqlite | undefined;
  if (options.url !== undefined) {
    file = sqlitePathFromUrl(options.url);
  } else {
    adapter = adapterFrom(options, sqliteDriver.adapter!);
  }
  const owned = adapter === undefined;
  const synchronous = options.synchronous ?? 'normal';
  if (synchronous !== 'normal' && synchronous !== 'full') {
    throw new TypeError(`Expected \`synchronous\` to be 'normal' or 'full', got ${JSON.stringify(synchronous)}`);
  }

  const quoted = `"${table}"`;
  const COLUMNS = 'state, fingerprint, token, created_at, expires_at, status, headers, body';
  const SCHEMA = sqliteRecordsSchema(table);
  // Claims and completions take any number of rows: calls that arrive while one of these
  // statements runs go together in the next (one write lock, one commit); see `batched`.
  const rows = (n: number, row: string) => Array.from({ length: n }, () => row).join(', ');
  const claimSql = (n: number) => `INSERT INTO ${quoted} (key, state, fingerprint, token, created_at, expires_at)
VALUES ${rows(n, "(?, 'processing', ?, ?, ?, ?)")}
ON CONFLICT (key) DO UPDATE
  SET state = 'processing', fingerprint = excluded.fingerprint, token = excluded.token,
      created_at = excluded.created_at, expires_at = excluded.expires_at,
      status = NULL, headers = NULL, body = NULL
  WHERE ${quoted}.expires_at <= ?
RETURNING key`;
  const GET = `SELECT ${COLUMNS} FROM ${quoted} WHERE key = ? AND expires_at > ?`;
  const OWNED = `key = ? AND token = ? AND state = 'processing' AND expires_at > ?`;
  // Each row's key and token must match a live processing row (a primary-key lookup per row).
  const completeSql = (n: number) => `WITH done (k, t, e, s, h, b) AS (VALUES ${rows(n, '(?, ?, ?, ?, ?, ?)')})
UPDATE ${quoted} SET state = 'completed', expires_at = done.e, status = done.s, headers = done.h, body = done.b
FROM done WHERE ${quoted}.key = done.k AND ${quoted}.token = done.t AND ${quoted}.state = 'processing' AND ${quoted}.expires_at > ?
RETURNING key`;
  const claimTexts: string[] = [];
  const completeTexts: string[] = [];
  const CLAIM = (claimTexts[1] = claimSql(1));
  const COMPLETE = (completeTexts[1] = completeSql(1));
  const RELEASE = `DELETE FROM ${quoted} WHERE ${OWNED} RETURNING 1 AS n`;
  const EXTEND = `UPDATE ${quoted} SET expires_at = ? WHERE ${OWNED} RETURNING 1 AS n`;
  // One statement holds the write lock throughout, so a row taken over between the
  // inner SELECT and the DELETE cannot happen.
  const SWEEP = `DELETE FROM ${quoted} WHERE key IN (
  SELECT key FROM ${quoted} WHERE expires_at <= ? ORDER BY expires_at LIMIT ?
) RETURNING 1 AS n`;

  let query: Query | undefined;
  let opening: Promise<unknown> | undefined;
  let database: sqlite3.Database | undefined;
  // Prepared statements by their text: the hot ones, and each multi-row size once used.
  const statements = new Map<string, sqlite3.Statement>();
  const preparing = new Map<string, Promise<sqlite3.Statement>>();
  // Multi-row claims and completions run on the store's own connection (prepared per size).
  let batches = false;
  const open = async (): Promise<void> => {
    let run: Query;
    if (file !== undefined) {
      if (file !== ':memory:' && !file.startsWith('file:')) await mkdir(path.dirname(path.resolve(file)), { recursive: true });
      // Our own connection, with each statement prepared once: @keyv/sqlite's query()
      // prepares and finalises a statement on every call.
      const db = await new Promise<sqlite3.Database>((resolve, reject) => {
        const opened: sqlite3.Database = new sqlite3.Database(file!, (error) => (error ? reject(error) : resolve(opened)));
      });
      database = db;
      db.configure('busyTimeout', timeoutMs);
      run = (sql, params) =>
        new Promise((resolve, reject) => {
          db.all(sql, params, (error: Error | null, rows: SqlRow[]) => (error ? reject(error) : resolve(rows)));
        });
    } else {
      const connection = adapter!;
      run = (sql, params) => (connection.query as (sql: string, params: unknown[]) => Promise<SqlRow[]>)(sql, params);
    }
    await run(`PRAGMA busy_timeout = ${timeoutMs}`, []);
    // Switching the journal mode takes an exclusive lock without calling the busy handler,
    // so several connections opening one new file at once can get SQLITE_BUSY here: retry
    // within the timeout instead of failing the first claim.
    const deadline = Date.now() + timeoutMs;
    const setUp = async (sql: string) => {
      for (let delayMs = 5; ; delayMs = Math.min(delayMs * 2, 100)) {
        try {
          return await run(sql, []);
        } catch (error) {
          if ((error as { code?: string }).code !== 'SQLITE_BUSY' || Date.now() + delayMs > deadline) throw error;
          await new Promise((resolve) => setTimeout(resolve, delayMs));
        }
      }
    };
    // WAL lets readers run beside the writer and makes the busy timeout apply to the
    // lock every claim takes. The mode is persistent, stored in the file.
    const [mode] = await setUp('PRAGMA journal_mode');
    if (String((mode as Record<string, unknown> | undefined)?.journal_mode).toLowerCase() !== 'wal') await setUp('PRAGMA journal_mode = WAL');
    // Per connection, not stored in the file.
    await run(`PRAGMA synchronous = ${synchronous.toUpperCase()}`, []);
    for (const statement of SCHEMA) await setUp(statement);
    if (database !== undefined) {
      const db = database;
      const prepare = (sql: string) => {
        let statement = preparing.get(sql);
        if (statement === undefined) {
          statement = new Promise<sqlite3.Statement>((resolve, reject) => {
            const prepared: sqlite3.Statement = db.prepare(sql, (error: Error | null) => {
              if (error) {
                preparing.delete(sql);
                reject(error);
              } else {
                statements.set(sql, prepared);
                resolve(prepared);
              }
            });
          });
          preparing.set(sql, statement);
        }
        return statement;
      };
      await Promise.all([CLAIM, GET, COMPLETE, RELEASE, EXTEND, SWEEP].map(prepare));
      const all = (statement: sqlite3.Statement, params: unknown[]) =>
        new Promise<SqlRow[]>((resolve, reject) => {
          statement.all(params, (error: Error | null, rows: SqlRow[]) => (error ? reject(error) : resolve(rows)));
        });
      const unprepared = run;
      run = (sql, params, keep) => {
        // The hot statements are prepared once; maintenance (delete, stats) runs as it comes.
        const statement = statements.get(sql);
        if (statement) return all(statement, params);
        return keep ? prepare(sql).then((prepared) => all(prepared, params)) : unprepared(sql, params);
      };
      batches = true;
    }
    query = run;
  };
  const closeDatabase = async (): Promise<void> => {
    const db = database;
    database = undefined;
    if (db === undefined) return;
    batches = false;
    const prepared = await Promise.all([...preparing.values()].map((statement) => statement.catch(() => undefined)));
    preparing.clear();
    statements.clear();
    await Promise.all(prepared.map((statement) => statement && new Promise((resolve) => statement.finalize(() => resolve(undefined)))));
    await new Promise((resolve) => db.close(() => resolve(undefined)));
  };
  const exec: Query = (sql, params, keep) => query!(sql, params, keep);
  const changed = async (sql: string, params: unknown[]) => (await exec(sql, params)).length === 1;
  // Each call's times come from the clock when its statement runs.
  const claimRows = (calls: ClaimCall[]) => {
    const now = Date.now();
    const params: unknown[] = [];
    for (const call of calls) {
      call.expiresAt = now + call.leaseMs;
      params.push(call.key, call.fingerprint, call.token, call.createdAt, call.expiresAt);
    }
    params.push(now);
    return exec((claimTexts[calls.length] ??= claimSql(calls.length)), params, true);
  };
  const completeRows = (calls: CompleteCall[]) => {
    const now = Date.now();
    const params: unknown[] = [];
    for (const call of calls) params.push(call.key, call.token, now + call.ttlMs, call.status, call.headers, call.body);
    params.push(now);
    return exec((completeTexts[calls.length] ??= completeSql(calls.length)), params, true);
  };
  const claimBatched = batched(claimRows, MAX_BATCH);
  const completeBatched = batched(completeRows, MAX_BATCH);

  return sqlStore(
    {
      name: 'sqlite',
      label: 'SQLite',
      setUp: () => {
        // A failed set-up closes what it opened; the next call opens afresh.
        const attempt = open().catch(async (error: unknown) => {
          await closeDatabase();
          throw error;
        });
        opening = attempt;
        return attempt;
      },
      async claim(key, request, leaseMs) {
        // One statement for a first execution. A key already live gets no row back (the
        // upsert's WHERE leaves it untouched) and the shared shape reads the live record:
        // a second statement only on the contended path, in-process (no round trip).
        const call: ClaimCall = { key, fingerprint: request.fingerprint, token: request.token, createdAt: request.createdAt, leaseMs, expiresAt: 0 };
        const won = batches ? await claimBatched(call) : (await claimRows([call])).length === 1;
        if (!won) return { claimed: false };
        // The row as written: every value is one this call bound.
        const row: SqlRow = {
          state: 'processing',
          fingerprint: call.fingerprint,
          token: call.token,
          created_at: call.createdAt,
          expires_at: call.expiresAt,
          status: null,
          headers: null,
          body: null,
        };
        return { claimed: true, row };
      },
      async get(key) {
        const [row] = await exec(GET, [key, Date.now()]);
        return row;
      },
      async complete(key, token, completion) {
        const call: CompleteCall = { key, token, ttlMs: completion.ttlMs, status: completion.status, headers: completion.headers, body: completion.body };
        return batches ? completeBatched(call) : (await completeRows([call])).length === 1;
      },
      release: (key, token) => changed(RELEASE, [key, token, Date.now()]),
      extend(key, token, leaseMs) {
        const now = Date.now();
        return changed(EXTEND, [now + leaseMs, key, token, now]);
      },
      async sweep(limit) {
        return (await exec(SWEEP, [Date.now(), limit])).length;
      },
      // Maintenance (the command line): any state, any owner.
      delete: (key) => changed(`DELETE FROM ${quoted} WHERE key = ? RETURNING 1 AS n`, [key]),
      stats: async () =>
        (await exec(
          `SELECT CASE WHEN expires_at <= ? THEN 'expired' ELSE state END AS state, count(*) AS n, min(expires_at) AS oldest
FROM ${quoted} GROUP BY 1`,
          [Date.now()],
        )) as unknown as StatsGroup[],
      scan: async (after, limit) =>
        (await exec(`SELECT key, ${COLUMNS} FROM ${quoted} WHERE key > ? AND expires_at > ? ORDER BY key LIMIT ?`, [after, Date.now(), limit])) as SqlScanRow[],
      replaceResponse: (key, token, response) =>
        changed(
          `UPDATE ${quoted} SET status = ?, headers = ?, body = ? WHERE key = ? AND token = ? AND state = 'completed' AND expires_at > ? RETURNING 1 AS n`,
          [response.status, response.headers, response.body, key, token, Date.now()],
        ),
      async close() {
        if (owned && opening) {
          await opening.catch(() => undefined);
          await closeDatabase();
        }
      },
    },
    { sweepIntervalMs, sweepBatchSize },
  );
}

interface ClaimCall {
  key: string;
  fingerprint: string;
  token: string;
  createdAt: number;
  leaseMs: number;
  /** Set when its statement runs. */
  expiresAt: number;
}

interface CompleteCall {
  key: string;
  token: string;
  ttlMs: number;
  status: number;
  headers: string;
  body: Buffer | null;
}

/** Most rows in one multi-row claim or completion (each size is prepared once, when first used). */
const MAX_BATCH = 32;

/**
 * Calls of one kind as multi-row statements, one statement at a time: the first call of a
 * quiet moment runs at once, and calls that arrive while it runs wait and go together in
 * the next (one write lock, one commit for all of them). Keys are distinct within one
 * statement, so that each row's outcome is its own; `run` returns the keys it changed.
 * A call waits at most for the statement before its own, each bounded by the busy timeout.
 */
function batched<T extends { key: string }>(run: (calls: T[]) => Promise<SqlRow[]>, max: number): (call: T) => Promise<boolean> {
  type Waiting = { call: T; resolve: (changed: boolean) => void; reject: (error: unknown) => void };
  let queue: Waiting[] = [];
  let running = false;
  const settle = async (batch: Waiting[]): Promise<void> => {
    try {
      const rows = (await run(batch.map((waiting) => waiting.call))) as unknown as Array<{ key: string }>;
      if (batch.length === 1) {
        batch[0]!.resolve(rows.length === 1);
        return;
      }
      const changed = new Set(rows.map((row) => row.key));
      for (const waiting of batch) waiting.resolve(changed.has(waiting.call.key));
    } catch (error) {
      // A failed statement changed nothing. One bad row must not fail the others: they run
      // alone, unless the file was locked past the busy timeout (they would wait again).
      if (batch.length === 1 || (error as { code?: unknown }).code === 'SQLITE_BUSY') {
        for (const waiting of batch) waiting.reject(error);
      } else {
        await Promise.all(batch.map((waiting) => settle([waiting])));
      }
    }
  };
  const drain = async (): Promise<void> => {
    running = true;
    while (queue.length > 0) {
      let batch = queue;
      queue = [];
      if (batch.length > 1) {
        const keys = new Set<string>();
        const now: Waiting[] = [];
        for (const waiting of batch) {
          if (now.length < max && !keys.has(waiting.call.key)) {
            keys.add(waiting.call.key);
            now.push(waiting);
          } else queue.push(waiting);
        }
        batch = now;
      }
      await settle(batch);
    }
    running = false;
  };
  return (call) =>
    new Promise<boolean>((resolve, reject) => {
      queue.push({ call, resolve, reject });
      if (!running) void drain();
    });
}
