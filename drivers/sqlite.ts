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
import type { StatsGroup } from '../src/maintenance.js';
import { assertDriverUrl, sqliteDriver } from './registry.js';
import { checkSqlOptions, sqlStore, type SqlRow } from './sql-store.js';
import { adapterFrom, assertOneSource } from './utils.js';

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

type Query = (sql: string, params: unknown[]) => Promise<SqlRow[]>;

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
  const SCHEMA = [
    `CREATE TABLE IF NOT EXISTS ${quoted} (
      key TEXT PRIMARY KEY,
      state TEXT NOT NULL CHECK (state IN ('processing', 'completed')),
      fingerprint TEXT NOT NULL,
      token TEXT NOT NULL,
      created_at INTEGER NOT NULL,
      expires_at INTEGER NOT NULL,
      status INTEGER,
      headers TEXT,
      body BLOB
    ) WITHOUT ROWID`,
    `CREATE INDEX IF NOT EXISTS "${table}_expires_at_idx" ON ${quoted} (expires_at)`,
  ];
  const CLAIM = `INSERT INTO ${quoted} (key, state, fingerprint, token, created_at, expires_at)
VALUES (?, 'processing', ?, ?, ?, ?)
ON CONFLICT (key) DO UPDATE
  SET state = 'processing', fingerprint = excluded.fingerprint, token = excluded.token,
      created_at = excluded.created_at, expires_at = excluded.expires_at,
      status = NULL, headers = NULL, body = NULL
  WHERE ${quoted}.expires_at <= ?
RETURNING ${COLUMNS}`;
  const GET = `SELECT ${COLUMNS} FROM ${quoted} WHERE key = ? AND expires_at > ?`;
  const OWNED = `key = ? AND token = ? AND state = 'processing' AND expires_at > ?`;
  const COMPLETE = `UPDATE ${quoted} SET state = 'completed', expires_at = ?, status = ?, headers = ?, body = ?
WHERE ${OWNED} RETURNING 1 AS n`;
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
  const statements = new Map<string, sqlite3.Statement>();
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
      for (const sql of [CLAIM, GET, COMPLETE, RELEASE, EXTEND, SWEEP]) {
        statements.set(
          sql,
          await new Promise<sqlite3.Statement>((resolve, reject) => {
            const prepared: sqlite3.Statement = db.prepare(sql, (error: Error | null) => (error ? reject(error) : resolve(prepared)));
          }),
        );
      }
      run = (sql, params) =>
        new Promise((resolve, reject) => {
          const done = (error: Error | null, rows: SqlRow[]) => (error ? reject(error) : resolve(rows));
          const prepared = statements.get(sql);
          // The hot statements are prepared once; maintenance (delete, stats) runs as it comes.
          if (prepared) prepared.all(params, done);
          else db.all(sql, params, done);
        });
    }
    query = run;
  };
  const closeDatabase = async (): Promise<void> => {
    const db = database;
    database = undefined;
    if (db === undefined) return;
    await Promise.all([...statements.values()].map((statement) => new Promise((resolve) => statement.finalize(() => resolve(undefined)))));
    statements.clear();
    await new Promise((resolve) => db.close(() => resolve(undefined)));
  };
  const exec: Query = (sql, params) => query!(sql, params);
  const changed = async (sql: string, params: unknown[]) => (await exec(sql, params)).length === 1;

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
        // A key already live is answered by a read, which WAL runs beside the writer: losers
        // (duplicates) never queue for the write lock that owners need for their completions.
        // The read is a committed snapshot, so the answer is as atomic as the upsert's.
        const [live] = await exec(GET, [key, Date.now()]);
        if (live) return { claimed: false, row: live };
        const now = Date.now();
        const [row] = await exec(CLAIM, [key, request.fingerprint, request.token, request.createdAt, now + leaseMs, now]);
        // Lost: the shared shape reads the live record (SQLite is in-process, no round trip).
        return row ? { claimed: true, row } : { claimed: false };
      },
      async get(key) {
        const [row] = await exec(GET, [key, Date.now()]);
        return row;
      },
      complete(key, token, completion) {
        const now = Date.now();
        return changed(COMPLETE, [now + completion.ttlMs, completion.status, completion.headers, completion.body, key, token, now]);
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
