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
import type { Keyv } from 'keyv';
import type KeyvPostgres from '@keyv/postgres';
import type { IdempotencyStore, StoredResponse } from '../src/store.js';
import { withTimeout } from '../src/timers.js';
import { assertInteger } from '../src/validate.js';
import type { TransactionalStore } from '../src/transaction.js';
import {
  createTransaction,
  type ClientOf,
  type PostgresClient,
  type PostgresPool,
  type PostgresTransactionOptions,
} from './postgres-transaction.js';
import { assertDriverUrl, postgresDriver } from './registry.js';
import { checkSqlOptions, sqlStore, type SqlRow } from './sql-store.js';
import { adapterFrom, assertOneSource, bodyBuffer, requireVia, sqlKey } from './utils.js';

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

type Row = SqlRow & { claimed?: boolean; n?: number };

type Query = (text: string, values: unknown[], name?: string) => Promise<Row[]>;
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
  const { table, timeoutMs, sweepIntervalMs, sweepBatchSize } = checkSqlOptions(options, true);
  const poolSize = options.poolSize ?? 10;
  assertInteger('poolSize', poolSize, 1);
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
    assertDriverUrl(postgresDriver, options.url, 'postgres://user@127.0.0.1:5432/app');
    const url = options.url;
    let pool: PgPool | undefined;
    const open = () => {
      if (!pool) {
        // `pg` as installed with @keyv/postgres (its dependency).
        const pg = requireVia<PgModule>('postgres', postgresDriver.packages, '@keyv/postgres', 'pg');
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
    const adapter = adapterFrom<KeyvPostgres>(options, postgresDriver.adapter!.is, '@keyv/postgres', 'new KeyvPostgres({ uri })');
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
  const tableTag = createHash('sha1').update(table).digest('hex').slice(0, 12);
  const statement = (op: string) => `idempotency_kit_${op}_${tableTag}`;
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

  let closed = false;
  let schema: Promise<void> | undefined;
  // The table, created once (also for a transaction that comes before any other call).
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
  const exec = run;
  const changed = async (text: string, values: unknown[], op: string) => (await exec(text, values, statement(op))).length === 1;
  const completeValues = (k: string, token: string, response: StoredResponse, ttlMs: number) => [
    k,
    token,
    ttlMs,
    response.status,
    JSON.stringify(response.headers),
    bodyBuffer(response.body),
  ];

  const store = sqlStore(
    {
      name: 'postgres',
      label: 'PostgreSQL',
      setUp: ensureSchema,
      async claim(key, request, leaseMs) {
        // A loser whose conflicting row was committed after this statement's snapshot sees
        // no row in the same round trip; the shared shape then reads it.
        const [row] = await exec(CLAIM, [key, request.fingerprint, request.token, request.createdAt, leaseMs], statement('claim'));
        return row ? { claimed: row.claimed === true, row } : { claimed: false };
      },
      async get(key) {
        const [row] = await exec(GET, [key], statement('get'));
        return row;
      },
      complete: (key, token, completion) =>
        changed(COMPLETE, [key, token, completion.ttlMs, completion.status, completion.headers, completion.body], 'complete'),
      release: (key, token) => changed(RELEASE, [key, token], 'release'),
      extend: (key, token, leaseMs) => changed(EXTEND, [key, token, leaseMs], 'extend'),
      async sweep(limit) {
        const [row] = await exec(SWEEP, [limit], statement('sweep'));
        return row?.n ?? 0;
      },
      close: async () => {
        closed = true;
        await end?.();
      },
    },
    { sweepIntervalMs, sweepBatchSize },
  );

  // Where a handler's transaction runs: on the store's own pool or the application's.
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
        // Keys in their stored form, as the store's own statements use them.
        hash: sqlKey,
        timeoutMs,
      })
    : undefined;
  return transaction ? Object.assign(store, { transaction }) : store;
}
