/**
 * PostgreSQL store: one row per record in its own table, atomic claims with
 * `INSERT … ON CONFLICT … DO UPDATE … WHERE <expired> RETURNING`, compare-and-set by
 * token with conditional `UPDATE` / `DELETE`. Every operation is one statement (no
 * transaction is held open while a handler runs). Safe across processes and hosts (S5).
 * @module
 * @example
 * import { postgresStore } from 'idempotency-kit/drivers/postgres';
 * const store = postgresStore({ url: 'postgres://app@db.internal:5432/app' });
 */
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import type { Keyv } from 'keyv';
import type KeyvPostgres from '@keyv/postgres';
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
import { startSweeper, withTimeout } from '../src/timers.js';
import { adapterFrom, assertOneSource } from './keyv-input.js';
import { assertInteger } from '../src/validate.js';
import type { TransactionalStore } from '../src/transaction.js';
import {
  createTransaction,
  type ClientOf,
  type PostgresClient,
  type PostgresPool,
  type PostgresTransactionOptions,
} from './postgres-transaction.js';

export type { ClientOf, IsolationLevel, PostgresClient, PostgresPool, PostgresTransactionOptions } from './postgres-transaction.js';

/**
 * A PostgreSQL store made from `url` or `pool`: it can also run a handler in a transaction
 * that completes the record before it commits (`idempotent(fn, { transaction: true })`,
 * `inTransaction(req, work)`; see docs/transactions.md).
 */
export type PostgresStore<Client = PostgresClient> = TransactionalStore<Client>;

export interface PostgresStoreOptions extends PostgresTransactionOptions {
  /**
   * `postgres://user:password@host:port/database` (or `postgresql://`), with any
   * libpq-style parameters `pg` understands (`?sslmode=require`, …). Ignored when
   * `adapter` or `keyv` is given.
   * @default undefined (one of `url`, `adapter`, `keyv` is required)
   */
  url?: string;
  /**
   * An existing `@keyv/postgres` adapter: statements run through its `query()` (its own
   * pool), which the store leaves open on `close()`.
   * @default undefined
   */
  adapter?: KeyvPostgres;
  /**
   * A `Keyv` instance whose store is a `@keyv/postgres` adapter (same as passing `adapter`).
   * @default undefined
   */
  keyv?: Keyv;
  /**
   * The application's own `pg` Pool: records live next to its tables, in its database, and
   * a transaction can hold both its writes and the record. The store never ends it, and
   * adds no timeouts of its own to it besides bounding each of its calls by `timeoutMs`.
   * Give it at least 2 connections: the lease renews on another while a transaction runs.
   * @default undefined
   */
  pool?: PostgresPool;
  /**
   * Table holding the records, created with its index on first use. A plain SQL
   * identifier (letters, digits, `_`), optionally schema-qualified (`idem.records`).
   * @default 'idempotency_kit_records'
   */
  table?: string;
  /**
   * Longest wait, in ms, for a connection or for one statement (`connectionTimeoutMillis`,
   * `statement_timeout` and `query_timeout` of the pool the store opens). S6.
   * @default 2000
   */
  timeoutMs?: number;
  /**
   * Most connections in the pool the store opens from `url`.
   * @default 10
   */
  poolSize?: number;
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

/** The parts of `pg` the store uses (types kept local: `pg` is reached through @keyv/postgres). */
interface PgResult {
  rows: Row[];
}
interface PgPool {
  query(config: { text: string; values: unknown[]; name?: string }): Promise<PgResult>;
  connect(): Promise<PostgresClient>;
  end(): Promise<void>;
  on(event: 'error', listener: (error: Error) => void): unknown;
}
interface PgModule {
  Pool: new (config: Record<string, unknown>) => PgPool;
}

interface Row {
  claimed?: boolean;
  state: 'processing' | 'completed';
  fingerprint: string;
  token: string;
  created_at: string | number;
  expires_at: string | number;
  status: number | null;
  headers: Record<string, string | string[]> | null;
  body: Buffer | null;
  n?: number;
}

type Query = (text: string, values: unknown[], name?: string) => Promise<Row[]>;

/**
 * `pg` as installed with `@keyv/postgres` (its dependency), resolved from the adapter's
 * location so that it is found under any package manager layout and never bundled.
 */
function loadPg(): PgModule {
  const here = typeof __filename === 'string' ? __filename : import.meta.url;
  const adapterPath = createRequire(here).resolve('@keyv/postgres');
  return createRequire(adapterPath)('pg') as PgModule;
}

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

function checkTable(table: unknown): asserts table is string {
  const parts = typeof table === 'string' ? table.split('.') : [];
  if (parts.length < 1 || parts.length > 2 || !parts.every((p) => IDENTIFIER.test(p))) {
    throw new TypeError(
      `Expected \`table\` to be an SQL identifier (letters, digits and _, optionally schema.table), got ${JSON.stringify(table)}`,
    );
  }
}

/** The URL as shown in errors: a password never reaches a log. */
function shown(url: unknown): string {
  return typeof url === 'string'
    ? JSON.stringify(url.replace(/^([A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#@:]*:)[^/?#@]*@/, '$1***@'))
    : String(url);
}

function checkPostgresUrl(url: unknown): asserts url is string {
  let parsed: URL | undefined;
  try {
    parsed = typeof url === 'string' ? new URL(url) : undefined;
  } catch {
    parsed = undefined;
  }
  if (!parsed) {
    throw new TypeError(`Expected \`url\` to be a postgres:// or postgresql:// URL, got ${shown(url)}`);
  }
  if (parsed.protocol !== 'postgres:' && parsed.protocol !== 'postgresql:') {
    throw new TypeError(`Expected \`url\` to start with postgres:// or postgresql://, got ${shown(url)}`);
  }
  if (!parsed.hostname && !parsed.searchParams.has('host')) {
    throw new TypeError(`Expected a host in the PostgreSQL URL ${shown(url)}, e.g. postgres://user@127.0.0.1:5432/app`);
  }
}

function isPostgresAdapter(value: unknown): value is KeyvPostgres {
  const candidate = value as { query?: unknown; opts?: { dialect?: unknown } } | null;
  return typeof candidate === 'object' && candidate !== null && typeof candidate.query === 'function' && candidate.opts?.dialect === 'postgres';
}


const toRecord = (row: Row): IdempotencyRecord => recordFromRow(row);

/** Create a PostgreSQL store on the application's own `pg` Pool: its transactions hand out that pool's clients. */
export function postgresStore<P extends PostgresPool>(options: PostgresStoreOptions & { pool: P }): PostgresStore<ClientOf<P>>;
/** Create a PostgreSQL store with a pool of its own. */
export function postgresStore(options: PostgresStoreOptions & { url: string }): PostgresStore;
/** Create a PostgreSQL store. */
export function postgresStore(options: PostgresStoreOptions): IdempotencyStore;
export function postgresStore(options: PostgresStoreOptions): IdempotencyStore {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError('Expected options with a `url`, `adapter` or `keyv`, e.g. postgresStore({ url: "postgres://…" })');
  }
  const table = options.table ?? 'idempotency_kit_records';
  const timeoutMs = options.timeoutMs ?? 2000;
  const poolSize = options.poolSize ?? 10;
  const sweepIntervalMs = options.sweepIntervalMs ?? 60_000;
  const sweepBatchSize = options.sweepBatchSize ?? 1000;
  checkTable(table);
  assertInteger('timeoutMs', timeoutMs, 1);
  assertInteger('poolSize', poolSize, 1);
  assertInteger('sweepIntervalMs', sweepIntervalMs, 0);
  assertInteger('sweepBatchSize', sweepBatchSize, 1);
  if (options.pool === undefined) assertOneSource(options);
  else if (options.url !== undefined || options.adapter !== undefined || options.keyv !== undefined) {
    throw new TypeError('Expected exactly one of `url`, `adapter`, `keyv` or `pool`');
  }

  let query: Query;
  let end: (() => Promise<void>) | undefined;
  // Where a transaction takes its connection: the store's own pool or the application's.
  let connect: (() => Promise<PostgresClient>) | undefined;
  if (options.pool !== undefined) {
    const pool = options.pool;
    if (typeof pool !== 'object' || pool === null || typeof pool.connect !== 'function' || typeof pool.query !== 'function') {
      throw new TypeError(`Expected \`pool\` to be a pg Pool (new pg.Pool({ connectionString })), got ${String(pool)}`);
    }
    query = async (text, values, name) => (await pool.query({ text, values, ...(name ? { name } : {}) })).rows as Row[];
    connect = () => pool.connect();
  } else if (options.url !== undefined) {
    checkPostgresUrl(options.url);
    const url = options.url;
    let pool: PgPool | undefined;
    const open = () => {
      if (!pool) {
        const pg = loadPg();
        pool = new pg.Pool({
          connectionString: url,
          max: poolSize,
          connectionTimeoutMillis: timeoutMs,
          statement_timeout: timeoutMs,
          query_timeout: timeoutMs,
          idleTimeoutMillis: 30_000,
          allowExitOnIdle: true,
          application_name: 'idempotency-kit',
        });
        // An idle connection dropped by the server: the next query reconnects.
        pool.on('error', () => undefined);
      }
      return pool;
    };
    // Named statements are parsed and planned once per connection.
    query = async (text, values, name) => (await open().query({ text, values, ...(name ? { name } : {}) })).rows;
    connect = () => open().connect();
    end = async () => {
      await pool?.end();
    };
  } else {
    const adapter = adapterFrom(options, isPostgresAdapter, '@keyv/postgres', 'new KeyvPostgres({ uri })');
    query = (text, values) => (adapter.query as (sql: string, values: unknown[]) => Promise<Row[]>)(text, values);
  }
  const run: Query = (text, values, name) => withTimeout(query(text, values, name), timeoutMs, `idempotency-kit: PostgreSQL did not answer within ${timeoutMs} ms`);

  const quoted = table
    .split('.')
    .map((part) => `"${part}"`)
    .join('.');
  const indexName = `"${table.split('.').pop()!.slice(0, 50)}_expires_at_idx"`;
  // Statement names are per connection; the table is part of them so that two stores
  // with different tables on one pool never share a plan.
  const statement = (op: string) => `idempotency_kit_${op}_${createHash('sha1').update(table).digest('hex').slice(0, 12)}`;
  // The database clock, in epoch ms: one clock for every host, so leases are fair.
  const NOW = `(extract(epoch from statement_timestamp()) * 1000)::bigint`;
  const COLUMNS = 'state, fingerprint, token, created_at, expires_at, status, headers, body';
  // A lock id derived from the table name serialises concurrent first-use DDL across
  // processes (CREATE TABLE IF NOT EXISTS alone can fail on pg_type's unique index).
  const lockId = createHash('sha1').update(`idempotency-kit:${table}`).digest().readInt32BE(0);

  const ddl = `DO $$
BEGIN
  PERFORM pg_advisory_xact_lock(${lockId});
  IF to_regclass('${quoted.replaceAll("'", "''")}') IS NULL THEN
    CREATE TABLE ${quoted} (
      key text PRIMARY KEY,
      state text NOT NULL CHECK (state IN ('processing', 'completed')),
      fingerprint text NOT NULL,
      token text NOT NULL,
      created_at bigint NOT NULL,
      expires_at bigint NOT NULL,
      status integer,
      headers jsonb,
      body bytea
    );
    CREATE INDEX ${indexName} ON ${quoted} (expires_at);
  END IF;
END $$`;

  let closed = false;
  let schema: Promise<void> | undefined;
  const ensureSchema = (): Promise<void> => {
    schema ??= run(ddl, []).then(
      () => undefined,
      (error: unknown) => {
        schema = undefined; // try again on the next call (the server may be back)
        throw error;
      },
    );
    return schema;
  };
  const exec: Query = async (text, values, name) => {
    if (closed) throw new Error('idempotency-kit: the PostgreSQL store is closed');
    await ensureSchema();
    return run(text, values, name);
  };

  const hash = (key: string) => createHash('sha256').update(key).digest('base64url');

  const CLAIM = `WITH claimed AS (
  INSERT INTO ${quoted} AS r (key, state, fingerprint, token, created_at, expires_at)
  VALUES ($1, 'processing', $2, $3, $4, ${NOW} + $5::bigint)
  ON CONFLICT (key) DO UPDATE
    SET state = 'processing', fingerprint = EXCLUDED.fingerprint, token = EXCLUDED.token,
        created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at,
        status = NULL, headers = NULL, body = NULL
    WHERE r.expires_at <= ${NOW}
  RETURNING true AS claimed, r.state, r.fingerprint, r.token, r.created_at, r.expires_at, r.status, r.headers, r.body
)
SELECT * FROM claimed
UNION ALL
SELECT false, ${COLUMNS} FROM ${quoted}
WHERE key = $1 AND expires_at > ${NOW} AND NOT EXISTS (SELECT 1 FROM claimed)`;
  const GET = `SELECT ${COLUMNS} FROM ${quoted} WHERE key = $1 AND expires_at > ${NOW}`;
  const OWNED = `key = $1 AND token = $2 AND state = 'processing' AND expires_at > ${NOW}`;
  const COMPLETE = `UPDATE ${quoted}
SET state = 'completed', expires_at = ${NOW} + $3::bigint, status = $4, headers = $5::jsonb, body = $6
WHERE ${OWNED} RETURNING 1 AS n`;
  const RELEASE = `DELETE FROM ${quoted} WHERE ${OWNED} RETURNING 1 AS n`;
  const EXTEND = `UPDATE ${quoted} SET expires_at = ${NOW} + $3::bigint WHERE ${OWNED} RETURNING 1 AS n`;
  // SKIP LOCKED: sweeps on several hosts never wait on each other or on a claim; the
  // outer condition re-checks each row, so a row taken over meanwhile is kept (S3).
  const SWEEP = `WITH swept AS (
  DELETE FROM ${quoted} WHERE key IN (
    SELECT key FROM ${quoted} WHERE expires_at <= ${NOW} ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED
  ) AND expires_at <= ${NOW}
  RETURNING 1
)
SELECT count(*)::int AS n FROM swept`;

  const completeValues = (k: string, token: string, response: StoredResponse, ttlMs: number) => [
    k,
    token,
    ttlMs,
    response.status,
    JSON.stringify(response.headers),
    response.body === null ? null : Buffer.from(response.body.buffer, response.body.byteOffset, response.body.byteLength),
  ];
  const transaction = connect
    ? createTransaction(options, {
        connect,
        ready: async () => {
          if (closed) throw new Error('idempotency-kit: the PostgreSQL store is closed');
          await ensureSchema();
        },
        query: (text, values) => exec(text, values),
        completeSql: COMPLETE,
        completeValues,
        lockedReadSql: `SELECT state, token FROM ${quoted} WHERE key = $1 FOR SHARE`,
        hash,
        timeoutMs,
      })
    : undefined;

  const sweep = async () => {
    for (let batch = 0; batch < 10 && !closed; batch++) {
      const [row] = await exec(SWEEP, [sweepBatchSize], statement('sweep'));
      if ((row?.n ?? 0) < sweepBatchSize) return;
    }
  };
  const sweeper = startSweeper(sweepIntervalMs, sweep);

  const store: IdempotencyStore = {
    name: 'postgres',
    async claim(key: string, request: ClaimRequest, leaseMs: number): Promise<ClaimResult> {
      const k = hash(key);
      // A loser whose conflicting row was committed after this statement's snapshot sees
      // no row in the same round trip; it reads again, and claims again if the row went.
      for (let attempt = 0; attempt < 5; attempt++) {
        const [row] = await exec(CLAIM, [k, request.fingerprint, request.token, request.createdAt, leaseMs], statement('claim'));
        if (row) {
          const record = toRecord(row);
          return row.claimed ? { claimed: true, record: record as ProcessingRecord } : { claimed: false, record };
        }
        const [current] = await exec(GET, [k], statement('get'));
        if (current) return { claimed: false, record: toRecord(current) };
      }
      throw new Error('idempotency-kit: PostgreSQL claim did not settle after 5 attempts (the key is churning)');
    },
    async get(key: string) {
      const [row] = await exec(GET, [hash(key)], statement('get'));
      return row ? toRecord(row) : undefined;
    },
    async complete(key: string, token: string, response: StoredResponse, ttlMs: number) {
      const rows = await exec(COMPLETE, completeValues(hash(key), token, response, ttlMs), statement('complete'));
      return rows.length === 1;
    },
    async release(key: string, token: string) {
      return (await exec(RELEASE, [hash(key), token], statement('release'))).length === 1;
    },
    async extend(key: string, token: string, leaseMs: number) {
      return (await exec(EXTEND, [hash(key), token, leaseMs], statement('extend'))).length === 1;
    },
    async close() {
      if (closed) return;
      closed = true;
      await sweeper.stop();
      await end?.();
    },
    async delete(key: string) {
      return (await exec(`DELETE FROM ${quoted} WHERE key = $1 RETURNING 1 AS n`, [hash(key)])).length === 1;
    },
    async stats(options: MaintenanceOptions = {}): Promise<StoreStats> {
      const rows = (await exec(
        `SELECT CASE WHEN expires_at <= ${NOW} THEN 'expired' ELSE state END AS state, count(*)::bigint AS n, min(expires_at) AS oldest
FROM ${quoted} GROUP BY 1`,
        [],
      )) as unknown as StatsGroup[];
      return statsFromGroups(rows, options);
    },
    async sweep(options: MaintenanceOptions = {}) {
      let deleted = 0;
      for (;;) {
        const [row] = await exec(SWEEP, [sweepBatchSize], statement('sweep'));
        const n = row?.n ?? 0;
        deleted += n;
        options.onProgress?.(deleted);
        if (n < sweepBatchSize || closed) return deleted;
      }
    },
  };
  return transaction ? Object.assign(store, { transaction }) : store;
}
