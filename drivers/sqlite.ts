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
import KeyvSqlite from '@keyv/sqlite';
import type { Keyv } from 'keyv';
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
  const open = async (): Promise<void> => {
    if (file !== undefined) {
      if (file !== ':memory:' && !file.startsWith('file:')) await mkdir(path.dirname(path.resolve(file)), { recursive: true });
      adapter = new KeyvSqlite({ uri: `sqlite://${file}`, busyTimeout: timeoutMs });
      // The adapter emits open errors; its query() rejects with them too.
      adapter.on('error', () => undefined);
    }
    const connection = adapter!;
    const run: Query = (sql, params) => (connection.query as (sql: string, params: unknown[]) => Promise<SqlRow[]>)(sql, params);
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
    for (const statement of SCHEMA) await setUp(statement);
    query = run;
  };
  const exec: Query = (sql, params) => query!(sql, params);
  const changed = async (sql: string, params: unknown[]) => (await exec(sql, params)).length === 1;

  return sqlStore(
    {
      name: 'sqlite',
      label: 'SQLite',
      setUp: () => {
        const attempt = open();
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
          await adapter?.disconnect().catch(() => undefined);
        }
      },
    },
    { sweepIntervalMs, sweepBatchSize },
  );
}
