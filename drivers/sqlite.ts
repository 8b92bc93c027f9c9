/**
 * SQLite store over `@keyv/sqlite`: one row per record, atomic claims with
 * `INSERT … ON CONFLICT … DO UPDATE … WHERE <expired> RETURNING`, compare-and-set by
 * token. WAL mode and a busy timeout make it safe for several processes sharing one file
 * on one host (S5); use Redis or PostgreSQL across hosts.
 * @module
 * @example
 * import { sqliteStore } from 'idempotency-kit/drivers/sqlite';
 * const store = sqliteStore({ url: 'sqlite://./.data/idempotency.sqlite' });
 */
import { createHash } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import KeyvSqlite from '@keyv/sqlite';
import type { Keyv } from 'keyv';
import {
  recordFromRow,
  type ClaimRequest,
  type ClaimResult,
  type IdempotencyRecord,
  type IdempotencyStore,
  type MaintenanceOptions,
  type ProcessingRecord,
  type StoreStats,
  type StoredResponse,
} from '../src/store.js';
import { statsFromGroups, type StatsGroup } from '../src/maintenance.js';
import { startSweeper } from '../src/timers.js';
import { adapterFrom, assertOneSource } from './keyv-input.js';
import { assertInteger } from '../src/validate.js';

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
   * (SQLite `busy_timeout`), in ms. S6.
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

interface Row {
  state: 'processing' | 'completed';
  fingerprint: string;
  token: string;
  created_at: number;
  expires_at: number;
  status: number | null;
  headers: string | null;
  body: Buffer | null;
}

type Query = (sql: string, params: unknown[]) => Promise<Row[]>;

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

/**
 * The file path in a `sqlite://` URL. Not parsed with `URL`: `sqlite://:memory:` and
 * relative paths are not valid URLs.
 */
export function sqlitePathFromUrl(url: unknown): string {
  if (typeof url !== 'string' || !url.startsWith('sqlite://')) {
    throw new TypeError(
      `Expected \`url\` to be sqlite://relative/path.db, sqlite:///absolute/path.db or sqlite://:memory:, got ${JSON.stringify(url) ?? String(url)}`,
    );
  }
  const file = url.slice('sqlite://'.length);
  if (file === '' || file === '/') {
    throw new TypeError(
      `Expected a file after sqlite:// in ${JSON.stringify(url)}: sqlite://relative/path.db, sqlite:///absolute/path.db or sqlite://:memory:`,
    );
  }
  return file;
}

function isSqliteAdapter(value: unknown): value is KeyvSqlite {
  const candidate = value as { query?: unknown; opts?: { dialect?: unknown } } | null;
  return typeof candidate === 'object' && candidate !== null && typeof candidate.query === 'function' && candidate.opts?.dialect === 'sqlite';
}

const toRecord = (row: Row): IdempotencyRecord =>
  recordFromRow({ ...row, headers: row.headers === null ? null : (JSON.parse(row.headers) as Record<string, string | string[]>) });

/** Create a SQLite store. */
export function sqliteStore(options: SqliteStoreOptions): IdempotencyStore {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError('Expected options with a `url`, `adapter` or `keyv`, e.g. sqliteStore({ url: "sqlite://./idempotency.db" })');
  }
  const table = options.table ?? 'idempotency_kit_records';
  const timeoutMs = options.timeoutMs ?? 2000;
  const sweepIntervalMs = options.sweepIntervalMs ?? 60_000;
  const sweepBatchSize = options.sweepBatchSize ?? 1000;
  if (typeof table !== 'string' || !IDENTIFIER.test(table)) {
    throw new TypeError(`Expected \`table\` to be an SQL identifier (letters, digits and _), got ${JSON.stringify(table)}`);
  }
  assertInteger('timeoutMs', timeoutMs, 1);
  assertInteger('sweepIntervalMs', sweepIntervalMs, 0);
  assertInteger('sweepBatchSize', sweepBatchSize, 1);
  assertOneSource(options);

  let file: string | undefined;
  let adapter: KeyvSqlite | undefined;
  if (options.url !== undefined) {
    file = sqlitePathFromUrl(options.url);
  } else {
    adapter = adapterFrom(options, isSqliteAdapter, '@keyv/sqlite', 'new KeyvSqlite(url)');
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
  // inner SELECT and the DELETE cannot happen (S3).
  const SWEEP = `DELETE FROM ${quoted} WHERE key IN (
  SELECT key FROM ${quoted} WHERE expires_at <= ? ORDER BY expires_at LIMIT ?
) RETURNING 1 AS n`;

  let closed = false;
  let ready: Promise<Query> | undefined;
  const open = async (): Promise<Query> => {
    if (file !== undefined) {
      if (file !== ':memory:' && !file.startsWith('file:')) await mkdir(path.dirname(path.resolve(file)), { recursive: true });
      adapter = new KeyvSqlite({ uri: `sqlite://${file}`, busyTimeout: timeoutMs });
      // The adapter emits open errors; its query() rejects with them too.
      adapter.on('error', () => undefined);
    }
    const connection = adapter!;
    const query: Query = (sql, params) => (connection.query as (sql: string, params: unknown[]) => Promise<Row[]>)(sql, params);
    await query(`PRAGMA busy_timeout = ${timeoutMs}`, []);
    // Switching the journal mode takes an exclusive lock without calling the busy handler,
    // so several connections opening one new file at once can get SQLITE_BUSY here: retry
    // within the timeout instead of failing the first claim.
    const deadline = Date.now() + timeoutMs;
    const setUp = async (sql: string) => {
      for (let delayMs = 5; ; delayMs = Math.min(delayMs * 2, 100)) {
        try {
          return await query(sql, []);
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
    return query;
  };
  const db = (): Promise<Query> => {
    if (closed) return Promise.reject(new Error('idempotency-kit: the SQLite store is closed'));
    ready ??= open().catch((error: unknown) => {
      ready = undefined; // the next call tries again (a directory may have been fixed)
      throw error;
    });
    return ready;
  };
  const exec: Query = async (sql, params) => (await db())(sql, params);
  const hash = (key: string) => createHash('sha256').update(key).digest('base64url');

  const sweep = async () => {
    for (let batch = 0; batch < 10 && !closed; batch++) {
      const rows = await exec(SWEEP, [Date.now(), sweepBatchSize]);
      if (rows.length < sweepBatchSize) return;
    }
  };
  // Nothing to sweep before first use.
  const sweeper = startSweeper(sweepIntervalMs, sweep, () => ready !== undefined);

  return {
    name: 'sqlite',
    async claim(key: string, request: ClaimRequest, leaseMs: number): Promise<ClaimResult> {
      const k = hash(key);
      for (let attempt = 0; attempt < 5; attempt++) {
        const now = Date.now();
        const [row] = await exec(CLAIM, [k, request.fingerprint, request.token, request.createdAt, now + leaseMs, now]);
        if (row) return { claimed: true, record: toRecord(row) as ProcessingRecord };
        // Lost: read the live record (a second statement; SQLite is in-process, no round trip).
        const [current] = await exec(GET, [k, Date.now()]);
        if (current) return { claimed: false, record: toRecord(current) };
      }
      throw new Error('idempotency-kit: SQLite claim did not settle after 5 attempts (the key is churning)');
    },
    async get(key: string) {
      const [row] = await exec(GET, [hash(key), Date.now()]);
      return row ? toRecord(row) : undefined;
    },
    async complete(key: string, token: string, response: StoredResponse, ttlMs: number) {
      const now = Date.now();
      const body = response.body === null ? null : Buffer.from(response.body.buffer, response.body.byteOffset, response.body.byteLength);
      const rows = await exec(COMPLETE, [now + ttlMs, response.status, JSON.stringify(response.headers), body, hash(key), token, now]);
      return rows.length === 1;
    },
    async release(key: string, token: string) {
      return (await exec(RELEASE, [hash(key), token, Date.now()])).length === 1;
    },
    async extend(key: string, token: string, leaseMs: number) {
      const now = Date.now();
      return (await exec(EXTEND, [now + leaseMs, hash(key), token, now])).length === 1;
    },
    async close() {
      if (closed) return;
      closed = true;
      await sweeper.stop();
      if (owned && ready) {
        await ready.catch(() => undefined);
        await adapter?.disconnect().catch(() => undefined);
      }
    },
    async delete(key: string) {
      return (await exec(`DELETE FROM ${quoted} WHERE key = ? RETURNING 1 AS n`, [hash(key)])).length === 1;
    },
    async stats(options: MaintenanceOptions = {}): Promise<StoreStats> {
      // One aggregate over the expires_at index; no batching needed in-process.
      const rows = (await exec(
        `SELECT CASE WHEN expires_at <= ? THEN 'expired' ELSE state END AS state, count(*) AS n, min(expires_at) AS oldest
FROM ${quoted} GROUP BY 1`,
        [Date.now()],
      )) as unknown as StatsGroup[];
      return statsFromGroups(rows, options);
    },
    async sweep(options: MaintenanceOptions = {}) {
      let deleted = 0;
      for (;;) {
        const rows = await exec(SWEEP, [Date.now(), sweepBatchSize]);
        deleted += rows.length;
        options.onProgress?.(deleted);
        if (rows.length < sweepBatchSize || closed) return deleted;
      }
    },
  };
}
