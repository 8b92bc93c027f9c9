/**
 * PostgreSQL store: one row per record in its own table, atomic claims with
 * `INSERT … ON CONFLICT … DO UPDATE … WHERE <expired> RETURNING`, compare-and-set by
 * token with conditional `UPDATE` / `DELETE`. Every operation is one statement (no
 * transaction is held open while a handler runs). Safe across processes and hosts.
 * @module
 * @example
 * import { postgresStore } from 'idempotency-kit/drivers/postgres';
 * const store = postgresStore({ url: 'postgres://app@db.internal:5432/app' });
 */
import { createHash } from 'node:crypto';
import type { Keyv } from 'keyv';
import type KeyvPostgres from '@keyv/postgres';
import type { IdempotencyRecord, IdempotencyStore, SettleListener, StoredResponse } from '../src/store.js';
import { withTimeout } from '../src/timers.js';
import { assertInteger } from '../src/validate.js';
import type { TransactionalStore, TransactionRunner } from '../src/transaction.js';
import {
  createTransaction,
  type ClientOf,
  type PostgresClient,
  type PostgresPool,
  type PostgresTransactionOptions,
} from './postgres-transaction.js';
import { assertDriverUrl } from './definition.js';
import { postgresDriver } from './postgres-definition.js';
import { runnerTransaction } from './transaction-runner.js';
import { decodeRecord } from './record-json.js';
import { checkSqlOptions, sqlStore, type SqlRow, type SqlScanRow, type StatsGroup } from './sql-store.js';
import { adapterFrom, assertOneSource, bodyBuffer, reconnectingFeed, requireVia, sqlKey } from './utils.js';

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
   * Transactions opened by your ORM (`drizzleTransactions(db)` from
   * `idempotency-kit/transactions/drizzle`, Kysely, Knex, TypeORM, Prisma, MikroORM) on
   * this same database: the handler gets the ORM's own transaction object, and the record
   * is completed on that transaction's connection before it commits. See docs/transactions.md.
   * @default undefined (transactions on `pool`, or on the store's own pool from `url`)
   */
  transactions?: TransactionRunner<unknown>;
  /**
   * Table holding the records, created with its index on first use. A plain SQL
   * identifier (letters, digits, `_`), optionally schema-qualified (`idem.records`).
   * @default 'idempotency_kit_records'
   */
  table?: string;
  /**
   * Longest wait, in ms, for a connection or for one statement (`connectionTimeoutMillis`,
   * `statement_timeout` and `query_timeout` of the pool the store opens): no call hangs.
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
  Client: new (config: Record<string, unknown>) => PgClient;
}
/** The dedicated LISTEN connection. */
interface PgClient {
  connect(): Promise<unknown>;
  query(text: string): Promise<unknown>;
  end(): Promise<void>;
  on(event: 'notification', listener: (message: { channel: string; payload?: string }) => void): unknown;
  on(event: 'error' | 'end', listener: (error?: Error) => void): unknown;
  /** pg's socket, unref'd so that the listener never keeps a process alive. */
  connection?: { stream?: { unref?: () => unknown } };
}

type Row = SqlRow & { claimed?: boolean; expired?: boolean; waiters?: boolean; n?: number };

type Query = (text: string, values: unknown[], name?: string) => Promise<Row[]>;
const rowsOf = (result: PgResult): Row[] => result.rows;
const one = (rows: Row[]): boolean => rows.length === 1;
/** Create a PostgreSQL store whose transactions your ORM opens: the handler gets the ORM's transaction object. */
export function postgresStore<Tx>(options: PostgresStoreOptions & { transactions: TransactionRunner<Tx> }): PostgresStore<Tx>;
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
  // How to open the LISTEN connection: the pool's settings, one connection of its own.
  let listenConfig: Record<string, unknown> | undefined;
  if (options.pool !== undefined) {
    const pool = options.pool;
    if (typeof pool !== 'object' || pool === null || typeof pool.connect !== 'function' || typeof pool.query !== 'function') {
      throw new TypeError(`Expected \`pool\` to be a pg Pool (new pg.Pool({ connectionString })), got ${String(pool)}`);
    }
    query = (text, values, name) => pool.query(name ? { name, text, values } : { text, values }).then(rowsOf);
    connect = () => pool.connect();
    const settings = (pool as { options?: Record<string, unknown> }).options;
    if (settings && typeof settings === 'object') listenConfig = { ...settings };
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
    query = (text, values, name) => open().query(name ? { name, text, values } : { text, values }).then(rowsOf);
    listenConfig = { connectionString: url };
    connect = () => open().connect();
    end = async () => {
      await pool?.end();
    };
  } else {
    const adapter = adapterFrom<KeyvPostgres>(options, postgresDriver.adapter!);
    query = (text, values) => (adapter.query as (sql: string, values: unknown[]) => Promise<Row[]>)(text, values);
    const { uri, table: _table, keySize: _keySize, schema: _schema, dialect: _dialect, iterationLimit: _limit, useUnloggedTable: _unlogged, ...pool } =
      (adapter.opts ?? {}) as Record<string, unknown>;
    if (typeof uri === 'string' || typeof pool.connectionString === 'string' || typeof pool.host === 'string') {
      listenConfig = { ...pool, ...(typeof uri === 'string' ? { connectionString: uri } : {}) };
    }
  }
  const late = `idempotency-kit: PostgreSQL did not answer within ${timeoutMs} ms`;
  const run: Query = (text, values, name) => withTimeout(query(text, values, name), timeoutMs, late);

  const quoted = table
    .split('.')
    .map((part) => `"${part}"`)
    .join('.');
  const indexName = `"${table.split('.').pop()!.slice(0, 50)}_sweep_at_idx"`;
  // Statement names are per connection; the table is part of them so that two stores
  // with different tables on one pool never share a plan.
  const tableTag = createHash('sha1').update(table).digest('hex').slice(0, 12);
  const statement = (op: string) => `idempotency_kit_${op}_${tableTag}`;
  const CLAIM_NAME = statement('claim');
  const CLAIM_LOCKED_NAME = statement('claim_locked');
  const GET_NAME = statement('get');
  const COMPLETE_NAME = statement('complete');
  const RELEASE_NAME = statement('release');
  const EXTEND_NAME = statement('extend');
  // The database clock, in epoch ms: one clock for every host, so leases are fair.
  // date_part is float8 arithmetic (extract is numeric since PostgreSQL 14, slower).
  const NOW = `(date_part('epoch', statement_timestamp()) * 1000)::bigint`;
  const COLUMNS = 'state, fingerprint, token, created_at, expires_at, status, headers, body';
  // The table has no CHECK on state (only these statements write it): PostgreSQL would
  // parse and plan a CHECK's expression again in every statement that writes a row.
  // A lock id derived from the table name serialises concurrent first-use DDL across
  // processes (CREATE TABLE IF NOT EXISTS alone can fail on pg_type's unique index).
  const lockId = createHash('sha1').update(`idempotency-kit:${table}`).digest().readInt32BE(0);

  const ddl = `DO $$
BEGIN
  PERFORM pg_advisory_xact_lock(${lockId});
  IF to_regclass('${quoted.replaceAll("'", "''")}') IS NULL THEN
    CREATE TABLE ${quoted} (
      key text PRIMARY KEY,
      state text NOT NULL,
      fingerprint text NOT NULL,
      token text NOT NULL,
      created_at bigint NOT NULL,
      expires_at bigint NOT NULL,
      status integer,
      headers jsonb,
      body bytea,
      waiters boolean NOT NULL DEFAULT false,
      sweep_at bigint NOT NULL DEFAULT 0
    ) WITH (fillfactor = 90);
    CREATE INDEX ${indexName} ON ${quoted} (sweep_at);
  ELSE
    -- A table made by an earlier version: the columns it lacks, added once (no rewrite, a
    -- brief lock). Its index on expires_at stays (earlier versions sweep with it), and so
    -- does this version's sweep, until an operator moves it (docs/drivers/postgres.md).
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('${quoted.replaceAll("'", "''")}') AND attname = 'waiters' AND NOT attisdropped) THEN
      ALTER TABLE ${quoted} ADD COLUMN waiters boolean NOT NULL DEFAULT false;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('${quoted.replaceAll("'", "''")}') AND attname = 'sweep_at' AND NOT attisdropped) THEN
      ALTER TABLE ${quoted} ADD COLUMN sweep_at bigint NOT NULL DEFAULT 0;
    END IF;
  END IF;
END $$`;
  // Whether the table's sweep index is on sweep_at (made by this version) or on expires_at
  // (made by an earlier one): the sweep walks the index there is.
  const SWEEP_INDEX = `SELECT EXISTS (
  SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
  WHERE i.indrelid = to_regclass($1) AND a.attname = 'sweep_at'
) AS n`;

  // A claim first looks without a lock: insert the key, or read the row there. That settles
  // it when the key was free (claimed), or the row is live and needs no write: completed (a
  // replay is that one read) or processing and already marked waited for. The read sees the
  // statement's snapshot, which may predate a row the insert waited for (no row comes back)
  // or a change committed since; those, an expired row, and a processing row not marked
  // yet go on to the claim under the row lock below.
  const CLAIM = `WITH claimed AS (
  INSERT INTO ${quoted} AS r (key, state, fingerprint, token, created_at, expires_at, sweep_at)
  VALUES ($1, 'processing', $2, $3, $4, ${NOW} + $5::bigint, ${NOW} + $5::bigint + $6::bigint)
  ON CONFLICT (key) DO NOTHING
  RETURNING true AS claimed, false AS expired, r.waiters, ${COLUMNS}
)
SELECT * FROM claimed
UNION ALL
SELECT false, expires_at <= ${NOW}, waiters, ${COLUMNS} FROM ${quoted} WHERE key = $1 AND NOT EXISTS (SELECT 1 FROM claimed)`;
  // The claim under the row lock, when the look found something to write or nothing to
  // trust: it takes a new key or one whose lease or replay window ended. A claim that finds
  // the key processing marks the row `waiters` (once: later ones find it marked and write
  // nothing), so that the owner's completion notifies only when another process waits.
  // ON CONFLICT sees the latest committed row under its lock, even one committed after the
  // statement's snapshot, so a waiter's mark and the owner's completion are ordered by the
  // row lock: the completion either sees the mark or the waiter sees the completed row.
  // A takeover keeps the mark of a processing row whose lease ended: its waiters still wait.
  // A loser reads the live row FOR SHARE: the latest committed version (the row lock
  // ON CONFLICT took), never the statement's older snapshot, where a completion that
  // committed meanwhile (unmarked, so it notified nobody) would still look processing.
  const EXPIRED = `r.expires_at <= ${NOW}`;
  const fresh = (column: string, value: string) => `${column} = CASE WHEN ${EXPIRED} THEN ${value} ELSE r.${column} END`;
  const CLAIM_LOCKED = `WITH claimed AS (
  INSERT INTO ${quoted} AS r (key, state, fingerprint, token, created_at, expires_at, sweep_at)
  VALUES ($1, 'processing', $2, $3, $4, ${NOW} + $5::bigint, ${NOW} + $5::bigint + $6::bigint)
  ON CONFLICT (key) DO UPDATE
    SET ${[
      fresh('state', `'processing'`),
      fresh('fingerprint', 'EXCLUDED.fingerprint'),
      fresh('token', 'EXCLUDED.token'),
      fresh('created_at', 'EXCLUDED.created_at'),
      fresh('expires_at', 'EXCLUDED.expires_at'),
      fresh('sweep_at', 'EXCLUDED.sweep_at'),
      fresh('status', 'NULL'),
      fresh('headers', 'NULL'),
      fresh('body', 'NULL'),
    ].join(',\n        ')},
        waiters = NOT ${EXPIRED} OR (r.waiters AND r.state = 'processing')
    WHERE ${EXPIRED} OR (r.state = 'processing' AND NOT r.waiters)
  RETURNING r.token = $3 AS claimed, r.state, r.fingerprint, r.token, r.created_at, r.expires_at, r.status, r.headers, r.body
)
SELECT * FROM claimed
UNION ALL
SELECT * FROM (
  SELECT false, ${COLUMNS} FROM ${quoted}
  WHERE key = $1 AND expires_at > ${NOW} AND NOT EXISTS (SELECT 1 FROM claimed)
  FOR SHARE
) live`;
  const GET = `SELECT ${COLUMNS} FROM ${quoted} WHERE key = $1 AND expires_at > ${NOW}`;
  const OWNED = `key = $1 AND token = $2 AND state = 'processing' AND expires_at > ${NOW}`;
  // Completes and releases that took effect notify waiters in other processes in the same
  // statement (delivered on commit), and only when a claim marked the row as waited for: a
  // notifying commit takes a lock that serialises every notifying transaction of the
  // server, which a completion nobody waits for should not pay. Channel per table. The
  // notification carries the completed record when it fits a payload (waiters then need
  // no read), the key alone otherwise; encodeRecord()'s JSON shape. It is built in
  // RETURNING, from the updated row, only when a waiter marked it.
  const channel = `idempotency_kit_${createHash('sha1').update(table).digest('hex').slice(0, 16)}`;
  const WAKE = `json_build_object('k', $7::text, 'r', json_build_object(
    's', 'c', 'f', fingerprint, 't', token, 'c', created_at, 'e', expires_at,
    'r', json_build_object('s', $4::integer, 'h', $5::jsonb, 'b', translate(encode($6::bytea, 'base64'), E'\\n', ''))
  ))::text`;
  const COMPLETE = `UPDATE ${quoted}
SET state = 'completed', expires_at = ${NOW} + $3::bigint, sweep_at = greatest(sweep_at, ${NOW} + $3::bigint), status = $4, headers = $5::jsonb, body = $6
WHERE ${OWNED}
RETURNING 1 AS n, CASE WHEN waiters THEN pg_notify('${channel}', CASE WHEN octet_length(${WAKE}) <= 7900 THEN ${WAKE} ELSE json_build_object('k', $7::text)::text END) END`;
  const RELEASE = `DELETE FROM ${quoted} WHERE ${OWNED}
RETURNING 1 AS n, CASE WHEN waiters THEN pg_notify('${channel}', json_build_object('k', $3::text, 'r', null)::text) END`;
  const EXTEND = `UPDATE ${quoted} SET expires_at = ${NOW} + $3::bigint, sweep_at = greatest(sweep_at, ${NOW} + $3::bigint) WHERE ${OWNED} RETURNING 1 AS n`;
  // SKIP LOCKED: sweeps on several hosts never wait on each other or on a claim; the
  // outer condition re-checks each row, so a row taken over meanwhile is kept. The
  // background sweep walks the index on sweep_at (or, on a table made by an earlier
  // version, on expires_at); a row whose sweep_at passed is deleted only once its
  // expires_at passed too. The maintenance sweep (`store.sweep()`) takes every expired
  // row, in the table's order when no index on expires_at serves it.
  const sweepSql = (walk: 'sweep_at' | 'expires_at' | 'table') => `WITH swept AS (
  DELETE FROM ${quoted} WHERE key IN (
    SELECT key FROM ${quoted} WHERE ${walk === 'sweep_at' ? `sweep_at <= ${NOW} AND ` : ''}expires_at <= ${NOW}
    ${walk === 'table' ? '' : `ORDER BY ${walk} `}LIMIT $1 FOR UPDATE SKIP LOCKED
  ) AND expires_at <= ${NOW}
  RETURNING 1
)
SELECT count(*)::int AS n FROM swept`;
  let SWEEP = sweepSql('expires_at');
  let SWEEP_ALL = SWEEP;
  let SWEEP_NAME = statement('sweep');
  const SWEEP_ALL_NAME = statement('sweep_all');
  // The longest ttl this store completed a record with: a claim sets sweep_at that far past
  // its lease end, so that its completion (whose expiry then stays below sweep_at) leaves
  // every indexed column as it was and the row is updated in place (a heap-only update:
  // no new index entries). A row is then swept at most that long after it expired; a
  // completion past it moves sweep_at (an ordinary update).
  let sweepSlackMs = 0;
  const slack = (ttlMs: number) => {
    if (ttlMs > sweepSlackMs) sweepSlackMs = ttlMs;
  };

  let closed = false;
  let schema: Promise<void> | undefined;
  // The table, created once (also for a transaction that comes before any other call).
  const ensureSchema = (): Promise<void> => {
    schema ??= run(ddl, [])
      .then(async () => {
        const [index] = await run(SWEEP_INDEX, [quoted]);
        if ((index as { n?: unknown } | undefined)?.n === true) {
          SWEEP = sweepSql('sweep_at');
          SWEEP_NAME = statement('sweep_bound');
          SWEEP_ALL = sweepSql('table');
        }
      })
      .catch((error: unknown) => {
        schema = undefined; // try again on the next call (the server may be back)
        throw error;
      });
    return schema;
  };
  const exec = run;
  const changed = (text: string, values: unknown[], name: string) => exec(text, values, name).then(one);
  // For the transaction path: `key` as the store's methods receive it (not hashed).
  const completeValues = (key: string, token: string, response: StoredResponse, ttlMs: number) => {
    slack(ttlMs);
    return [
      sqlKey(key),
      token,
      ttlMs,
      response.status,
      JSON.stringify(response.headers),
      bodyBuffer(response.body),
      notifyPayload(key),
    ];
  };

  const feed = listenConfig ? listenFeed(listenConfig, channel, timeoutMs) : undefined;
  const store = sqlStore(
    {
      name: 'postgres',
      label: 'PostgreSQL',
      setUp: ensureSchema,
      // A loser whose row went between the conflict and its read (a release) sees no row;
      // the shared shape then reads again.
      async claim(key, request, leaseMs) {
        const values = [key, request.fingerprint, request.token, request.createdAt, leaseMs, sweepSlackMs];
        const [row] = await exec(CLAIM, values, CLAIM_NAME);
        if (row?.claimed === true) return { claimed: true, row };
        if (row && row.expired !== true && (row.state === 'completed' || row.waiters === true)) return { claimed: false, row };
        // A loser whose row went between the conflict and its read (a release) sees no row;
        // the shared shape then reads again.
        const [locked] = await exec(CLAIM_LOCKED, values, CLAIM_LOCKED_NAME);
        return locked ? { claimed: locked.claimed === true, row: locked } : { claimed: false };
      },
      get: (key) => exec(GET, [key], GET_NAME).then(([row]) => row),
      complete: (key, token, completion) => {
        slack(completion.ttlMs);
        return changed(
          COMPLETE,
          [key, token, completion.ttlMs, completion.status, completion.headers, completion.body, notifyPayload(completion.storageKey)],
          COMPLETE_NAME,
        );
      },
      release: (key, token, storageKey) => changed(RELEASE, [key, token, notifyPayload(storageKey)], RELEASE_NAME),
      extend: (key, token, leaseMs) => changed(EXTEND, [key, token, leaseMs], EXTEND_NAME),
      async sweep(limit, everything) {
        const [row] = await (everything ? exec(SWEEP_ALL, [limit], SWEEP_ALL === SWEEP ? SWEEP_NAME : SWEEP_ALL_NAME) : exec(SWEEP, [limit], SWEEP_NAME));
        return row?.n ?? 0;
      },
      // Maintenance (the command line): any state, any owner.
      delete: async (key) => (await exec(`DELETE FROM ${quoted} WHERE key = $1 RETURNING 1 AS n`, [key])).length === 1,
      stats: async () =>
        (await exec(
          `SELECT CASE WHEN expires_at <= ${NOW} THEN 'expired' ELSE state END AS state, count(*)::bigint AS n, min(expires_at) AS oldest
FROM ${quoted} GROUP BY 1`,
          [],
        )) as unknown as StatsGroup[],
      scan: async (after, limit) =>
        (await exec(`SELECT key, ${COLUMNS} FROM ${quoted} WHERE key > $1 AND expires_at > ${NOW} ORDER BY key LIMIT $2`, [after, limit])) as unknown as SqlScanRow[],
      replaceResponse: async (key, token, response) =>
        (
          await exec(
            `UPDATE ${quoted} SET status = $3, headers = $4::jsonb, body = $5 WHERE key = $1 AND token = $2 AND state = 'completed' AND expires_at > ${NOW} RETURNING 1 AS n`,
            [key, token, response.status, response.headers, response.body],
          )
        ).length === 1,
      close: async () => {
        closed = true;
        await feed?.close();
        await end?.();
      },
      ...(feed ? { subscribe: feed.subscribe } : {}),
    },
    { sweepIntervalMs, sweepBatchSize },
  );

  // Waits for a transaction holding the row to end (a COMMIT whose answer was lost).
  const LOCKED_READ = `SELECT state, token FROM ${quoted} WHERE key = $1 FOR SHARE`;
  if (options.transactions !== undefined && options.isolationLevel !== undefined) {
    throw new TypeError('`isolationLevel` applies to the store\'s own transactions: with `transactions`, give it to the runner (drizzleTransactions(db, { isolationLevel }))');
  }
  // Where a handler's transaction runs: opened by the application's ORM, on the store's
  // own pool, or on the application's.
  const transaction = options.transactions
    ? runnerTransaction(options.transactions, options, {
        dialect: 'postgres',
        label: 'PostgreSQL',
        ready: async () => {
          if (closed) throw new Error('idempotency-kit: the PostgreSQL store is closed');
          await ensureSchema();
        },
        completion: (key, token, response, ttlMs) => ({ dialect: 'postgres', text: COMPLETE, values: completeValues(key, token, response, ttlMs) }),
        committed: async (key, token) => {
          const [row] = await exec(LOCKED_READ, [sqlKey(key)]);
          return row?.state === 'completed' && row.token === token;
        },
        timeoutMs,
      })
    : connect
    ? createTransaction(options, {
        connect,
        ready: async () => {
          if (closed) throw new Error('idempotency-kit: the PostgreSQL store is closed');
          await ensureSchema();
        },
        query: (text, values) => exec(text, values),
        completeSql: COMPLETE,
        completeValues,
        lockedReadSql: LOCKED_READ,
        // Keys in their stored form, as the store's own statements use them.
        hash: sqlKey,
        timeoutMs,
      })
    : undefined;
  return transaction ? Object.assign(store, { transaction }) : store;
}

/**
 * A NOTIFY payload is text under 8000 bytes: the engine's keys (base64url) go as they are,
 * any other key base64url-encoded behind `~`, and a key too long for a payload goes empty
 * (its waiters fall back to the safety poll; a complete never fails for a notification).
 */
function notifyPayload(key: string): string {
  if (/^[A-Za-z0-9_-]{1,1000}$/.test(key)) return key;
  const encoded = `~${Buffer.from(key, 'utf8').toString('base64url')}`;
  return encoded.length <= 7000 ? encoded : '';
}

function keyOfPayload(payload: string): string | undefined {
  if (!payload) return undefined;
  return payload.startsWith('~') ? Buffer.from(payload.slice(1), 'base64url').toString('utf8') : payload;
}

/** A notification: `{"k": key payload, "r"?: record JSON | null}`; undefined when unreadable. */
function parseWake(payload: string | undefined): { key: string; record: IdempotencyRecord | null | undefined } | undefined {
  let parsed: { k?: unknown; r?: unknown };
  try {
    parsed = JSON.parse(payload ?? '') as { k?: unknown; r?: unknown };
  } catch {
    return undefined;
  }
  const key = typeof parsed.k === 'string' ? keyOfPayload(parsed.k) : undefined;
  if (key === undefined) return undefined;
  const { r } = parsed;
  if (r === null || r === undefined) return { key, record: r };
  try {
    return { key, record: decodeRecord(JSON.stringify(r)) };
  } catch {
    return { key, record: undefined }; // the waiter reads it
  }
}

/**
 * Wake-ups for waiting duplicates: ONE dedicated connection per store, opened on the first
 * `subscribe`, runs `LISTEN` (the pool's connections never hold it, so a pooled connection
 * is never pinned). It reconnects with backoff when dropped; a failure here only makes
 * waiters poll, it never fails a request. Its socket is unref'd.
 */
function listenFeed(
  config: Record<string, unknown>,
  channel: string,
  timeoutMs: number,
): { subscribe: (listener: SettleListener) => () => void; close: () => Promise<void> } {
  return reconnectingFeed((control) => {
    let client: PgClient;
    try {
      client = new (requireVia<PgModule>('postgres', postgresDriver.packages, '@keyv/postgres', 'pg').Client)({
        ...config,
        connectionTimeoutMillis: timeoutMs,
        keepAlive: true,
        application_name: 'idempotency-kit-listen',
      });
    } catch {
      return undefined; // no usable pg: waiters poll
    }
    client.on('error', control.drop);
    client.on('end', control.drop);
    client.on('notification', (message) => {
      const wake = message.channel === channel ? parseWake(message.payload) : undefined;
      if (wake) control.settled(wake.key, wake.record);
    });
    return {
      ready: (async () => {
        await withTimeout(client.connect(), timeoutMs, `idempotency-kit: PostgreSQL LISTEN connection not open within ${timeoutMs} ms`);
        await withTimeout(client.query(`LISTEN "${channel}"`), timeoutMs, `idempotency-kit: PostgreSQL LISTEN not answered within ${timeoutMs} ms`);
        client.connection?.stream?.unref?.();
      })(),
      end: () => client.end().catch(() => undefined),
    };
  });
}
