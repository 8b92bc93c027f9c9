/**
 * MySQL / MariaDB store: one row per record in its own InnoDB table, atomic claims with
 * `INSERT … ON DUPLICATE KEY UPDATE` whose every assignment is conditional on the
 * existing row having expired, compare-and-set by token with conditional `UPDATE` /
 * `DELETE`. Every operation is one autocommit statement (no transaction is held open
 * while a handler runs), timed by the database clock. Safe across processes and hosts.
 * @module
 * @example
 * import { mysqlStore } from 'idempotency-kit/drivers/mysql';
 * const store = mysqlStore({ url: 'mysql://app:secret@db.internal:3306/app' });
 */
import type { Keyv } from 'keyv';
import type KeyvMysql from '@keyv/mysql';
import type { IdempotencyStore } from '../src/store.js';
import type { TransactionalStore, TransactionRunner } from '../src/transaction.js';
import { withTimeout } from '../src/timers.js';
import { assertInteger } from '../src/validate.js';
import { assertDriverUrl } from './definition.js';
import { mysqlDriver } from './mysql-definition.js';
import { checkSqlOptions, sqlStore, type SqlClaim, type SqlRow, type SqlScanRow, type StatsGroup } from './sql-store.js';
import { runnerTransaction } from './transaction-runner.js';
import { adapterFrom, assertOneSource, bodyBuffer, requireVia, sqlKey } from './utils.js';

/**
 * A MySQL store whose transactions your ORM opens (`transactions`): `inTransaction(req,
 * work)` and `idempotent(fn, { transaction: true })` hand the handler the ORM's own
 * transaction object; see docs/transactions.md.
 */
export type MysqlStore<Tx> = TransactionalStore<Tx>;

export interface MysqlStoreOptions {
  /**
   * `mysql://user:password@host:port/database`, for MySQL and MariaDB alike. Ignored
   * when `adapter` or `keyv` is given.
   * @default undefined (one of `url`, `adapter`, `keyv` is required)
   */
  url?: string;
  /**
   * An existing `@keyv/mysql` adapter: statements run through its `query()` (its own
   * pool), which the store leaves open on `close()`.
   * @default undefined
   */
  adapter?: KeyvMysql;
  /**
   * A `Keyv` instance whose store is a `@keyv/mysql` adapter (same as passing `adapter`).
   * @default undefined
   */
  keyv?: Keyv;
  /**
   * Transactions opened by your ORM or driver (`drizzleTransactions(db)` from
   * `idempotency-kit/transactions/drizzle`, Kysely, Knex, TypeORM, Prisma, or a `mysql2`
   * pool with `mysql2Transactions(pool)`) on this same database: the handler gets the
   * ORM's own transaction object, and the record is completed on that transaction's
   * connection before it commits. See docs/transactions.md.
   * @default undefined (no transactions)
   */
  transactions?: TransactionRunner<unknown>;
  /**
   * How many times a transaction (`transactions`) runs when InnoDB aborts it with a
   * deadlock; then TransactionConflictError.
   * @default 3
   */
  transactionAttempts?: number;
  /**
   * Table holding the records, created on first use (letters, digits, `_`), in the
   * URL's database.
   * @default 'idempotency_kit_records'
   */
  table?: string;
  /**
   * Longest wait, in ms, for a connection or for one statement: no call hangs.
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

/** The parts of `mysql2` the store uses (types kept local: it is reached through @keyv/mysql). */
interface ResultHeader {
  affectedRows: number;
}
type Result = SqlRow[] | ResultHeader;
interface MysqlPool {
  query(sql: string, values: unknown[]): Promise<[Result, unknown]>;
  end(): Promise<void>;
  on(event: 'error', listener: (error: Error) => void): unknown;
}
interface Mysql2 {
  format(sql: string, values: unknown[]): string;
  createPool(config: Record<string, unknown>): {
    promise(): MysqlPool;
    on(event: 'connection', listener: (connection: { query(sql: string, callback: () => void): unknown }) => void): unknown;
  };
}

type Query = (sql: string, values: unknown[]) => Promise<Result>;

/** InnoDB reports a deadlock to one of the statements involved; it was rolled back whole. */
const DEADLOCK = 1213;

/** Create a MySQL / MariaDB store whose transactions your ORM opens: the handler gets the ORM's transaction object. */
export function mysqlStore<Tx>(options: MysqlStoreOptions & { transactions: TransactionRunner<Tx> }): MysqlStore<Tx>;
/** Create a MySQL / MariaDB store. */
export function mysqlStore(options: MysqlStoreOptions): IdempotencyStore;
export function mysqlStore(options: MysqlStoreOptions): IdempotencyStore {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError('Expected options with a `url`, `adapter` or `keyv`, e.g. mysqlStore({ url: "mysql://…" })');
  }
  const { table, timeoutMs, sweepIntervalMs, sweepBatchSize } = checkSqlOptions(options, false);
  const poolSize = options.poolSize ?? 10;
  assertInteger('poolSize', poolSize, 1);
  assertOneSource(options);

  const mysql2 = () => requireVia<Mysql2>('mysql', mysqlDriver.packages, '@keyv/mysql', 'mysql2');
  let query: Query;
  let end: (() => Promise<void>) | undefined;
  if (options.url !== undefined) {
    assertDriverUrl(mysqlDriver, options.url, 'mysql://app:secret@127.0.0.1:3306/app');
    const uri = options.url;
    let pool: MysqlPool | undefined;
    const open = () => {
      // Not the adapter's pool: @keyv/mysql keeps one module-wide pool that its
      // disconnect() ends for every user in the process.
      if (pool) return pool;
      const raw = mysql2().createPool({
        uri,
        connectionLimit: poolSize,
        connectTimeout: timeoutMs,
        waitForConnections: true,
        enableKeepAlive: true,
        idleTimeout: 30_000,
        charset: 'utf8mb4',
        // Plain numbers for BIGINT columns: epoch ms fit in a double.
        supportBigNumbers: true,
        bigNumberStrings: false,
      });
      // The server bounds lock waits too (whole seconds), so a statement stuck behind a
      // lock gives up by itself rather than running long after the store stopped waiting.
      const lockWaitS = Math.max(1, Math.ceil(timeoutMs / 1000));
      raw.on('connection', (connection) => {
        connection.query(`SET SESSION innodb_lock_wait_timeout = ${lockWaitS}, lock_wait_timeout = ${lockWaitS}`, () => undefined);
      });
      pool = raw.promise();
      return pool;
    };
    query = async (sql, values) => (await open().query(sql, values))[0];
    end = async () => {
      // A connection still opening to a dead or silent server fails as the pool ends
      // (mysql2 reports its connect timeout to end()): the pool is closed either way.
      await pool?.end().catch(() => undefined);
    };
  } else {
    const adapter = adapterFrom<KeyvMysql>(options, mysqlDriver.adapter!);
    // The adapter's query() takes finished SQL text: values are escaped by mysql2.format.
    query = async (sql, values) => (await adapter.query<Result>(mysql2().format(sql, values))) as Result;
  }
  const run: Query = (sql, values) => withTimeout(query(sql, values), timeoutMs, `idempotency-kit: MySQL did not answer within ${timeoutMs} ms`);
  const rows = async (sql: string, values: unknown[]) => (await run(sql, values)) as SqlRow[];
  const changed = async (sql: string, values: unknown[]) => ((await run(sql, values)) as ResultHeader).affectedRows === 1;

  const quoted = `\`${table}\``;
  // The database clock, in epoch ms: one clock for every host, so leases are fair. UTC,
  // whatever the session's time zone; fixed for the whole statement, like NOW().
  const NOW = `(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)`;
  // Tokens are compared byte for byte (VARBINARY): no collation folds case or pads spaces.
  const COLUMNS = 'state, fingerprint, CAST(token AS CHAR) AS token, created_at, expires_at, status, headers, body';
  const SCHEMA = `CREATE TABLE IF NOT EXISTS ${quoted} (
  \`key\` VARBINARY(128) NOT NULL PRIMARY KEY,
  state VARCHAR(10) CHARACTER SET ascii NOT NULL,
  fingerprint TEXT CHARACTER SET utf8mb4 NOT NULL,
  token VARBINARY(255) NOT NULL,
  created_at BIGINT NOT NULL,
  expires_at BIGINT NOT NULL,
  status INT NULL,
  headers LONGTEXT CHARACTER SET utf8mb4 NULL,
  body LONGBLOB NULL,
  INDEX \`${table.slice(0, 50)}_expires_at_idx\` (expires_at)
) ENGINE=InnoDB`;
  // A claim inserts the key; when the key is taken, it reads the row without locking it
  // (a replay is that read). IGNORE turns only the duplicate key into "0 rows": every
  // value is checked before (the token's length) or fits its column.
  const INSERT = `INSERT IGNORE INTO ${quoted} (\`key\`, state, fingerprint, token, created_at, expires_at)
VALUES (?, 'processing', ?, ?, ?, ${NOW} + ?)`;
  const READ = `SELECT ${COLUMNS}, expires_at <= ${NOW} AS expired FROM ${quoted} WHERE \`key\` = ?`;
  // The key's lease or replay window ended: take it over. The UPDATE runs on the latest
  // committed row under its exclusive lock, so of concurrent claimers exactly one wins.
  const TAKE_OVER = `UPDATE ${quoted} SET state = 'processing', fingerprint = ?, token = ?, created_at = ?, expires_at = ${NOW} + ?,
  status = NULL, headers = NULL, body = NULL
WHERE \`key\` = ? AND expires_at <= ${NOW}`;
  const EXPIRED = `expires_at <= ${NOW}`;
  const GET = `SELECT ${COLUMNS} FROM ${quoted} WHERE \`key\` = ? AND expires_at > ${NOW}`;
  const OWNED = `\`key\` = ? AND token = ? AND state = 'processing' AND expires_at > ${NOW}`;
  const COMPLETE = `UPDATE ${quoted} SET state = 'completed', expires_at = ${NOW} + ?, status = ?, headers = ?, body = ? WHERE ${OWNED}`;
  const RELEASE = `DELETE FROM ${quoted} WHERE ${OWNED}`;
  const EXTEND = `UPDATE ${quoted} SET expires_at = ${NOW} + ? WHERE ${OWNED}`;
  // Two steps: a plain read finds expired keys without locking a range of the index (so
  // claims never wait on a sweep), and the delete re-checks each row under its lock, so
  // a row taken over in between is kept.
  const EXPIRED_KEYS = `SELECT \`key\` FROM ${quoted} WHERE expires_at <= ${NOW} ORDER BY expires_at LIMIT ?`;
  const SWEEP = `DELETE FROM ${quoted} WHERE \`key\` IN (?) AND expires_at <= ${NOW}`;

  /** Concurrent first inserts of one key can deadlock on InnoDB's gap locks; the victim's statement changed nothing, so it is run again. */
  const retryDeadlocks = async <T>(statement: () => Promise<T>): Promise<T> => {
    for (let attempt = 1; ; attempt++) {
      try {
        return await statement();
      } catch (error) {
        if ((error as { errno?: unknown }).errno !== DEADLOCK || attempt >= 5) throw error;
      }
    }
  };

  let closed = false;
  const store = sqlStore(
    {
      name: 'mysql',
      label: 'MySQL',
      setUp: async () => {
        await run(SCHEMA, []);
      },
      async claim(key, request, leaseMs) {
        const { fingerprint, token, createdAt } = request;
        if (typeof token !== 'string' || Buffer.byteLength(token) > 255) {
          throw new TypeError(`Expected the token to be a string of at most 255 bytes, got ${typeof token === 'string' ? `${Buffer.byteLength(token)} bytes` : typeof token}`);
        }
        // The claimed record's lease end, by this host's clock (the row's is the database's).
        const won = (): SqlClaim => ({
          claimed: true,
          row: { state: 'processing', fingerprint, token, created_at: createdAt, expires_at: Date.now() + leaseMs, status: null, headers: null, body: null },
        });
        if (await retryDeadlocks(() => changed(INSERT, [key, fingerprint, token, createdAt, leaseMs]))) return won();
        const [row] = (await rows(READ, [key])) as (SqlRow & { expired?: number | boolean })[];
        if (!row) return { claimed: false }; // gone again already: the shared loop retries
        if (!Number(row.expired)) return { claimed: false, row };
        if (await retryDeadlocks(() => changed(TAKE_OVER, [fingerprint, token, createdAt, leaseMs, key]))) return won();
        return { claimed: false }; // another claim took it over first: read again
      },
      async get(key) {
        const [row] = await rows(GET, [key]);
        return row;
      },
      complete: (key, token, completion) =>
        changed(COMPLETE, [completion.ttlMs, completion.status, completion.headers, completion.body, key, token]),
      release: (key, token) => changed(RELEASE, [key, token]),
      extend: (key, token, leaseMs) => changed(EXTEND, [leaseMs, key, token]),
      async sweep(limit) {
        const expired = await rows(EXPIRED_KEYS, [limit]);
        if (expired.length === 0) return 0;
        await run(SWEEP, [expired.map((row) => (row as unknown as { key: Buffer }).key)]);
        return expired.length;
      },
      // Maintenance (the command line): any state, any owner.
      delete: (key) => changed(`DELETE FROM ${quoted} WHERE \`key\` = ?`, [key]),
      stats: async () =>
        (await run(
          `SELECT CASE WHEN ${EXPIRED} THEN 'expired' ELSE state END AS state, count(*) AS n, min(expires_at) AS oldest FROM ${quoted} GROUP BY 1`,
          [],
        )) as unknown as StatsGroup[],
      scan: async (after, limit) =>
        (await run(`SELECT \`key\`, ${COLUMNS} FROM ${quoted} WHERE \`key\` > ? AND expires_at > ${NOW} ORDER BY \`key\` LIMIT ?`, [
          after,
          limit,
        ])) as unknown as SqlScanRow[],
      replaceResponse: (key, token, response) =>
        changed(
          `UPDATE ${quoted} SET status = ?, headers = ?, body = ? WHERE \`key\` = ? AND token = ? AND state = 'completed' AND expires_at > ${NOW}`,
          [response.status, response.headers, response.body, key, token],
        ),
      close: async () => {
        closed = true;
        await end?.();
      },
    },
    { sweepIntervalMs, sweepBatchSize },
  );
  if (options.transactions === undefined) return store;
  let schema: Promise<unknown> | undefined;
  const transaction = runnerTransaction(options.transactions, options, {
    dialect: 'mysql',
    label: 'MySQL',
    ready: async () => {
      if (closed) throw new Error('idempotency-kit: the MySQL store is closed');
      // The table, also for a transaction that comes before any other call.
      schema ??= run(SCHEMA, []).catch((error: unknown) => {
        schema = undefined;
        throw error;
      });
      await schema;
    },
    completion: (key, token, response, ttlMs) => ({
      dialect: 'mysql',
      text: COMPLETE,
      values: [ttlMs, response.status, JSON.stringify(response.headers), bodyBuffer(response.body), sqlKey(key), token],
    }),
    // A locking read waits for a transaction still holding the row (a COMMIT in flight).
    committed: async (key, token) => {
      const [row] = await rows(`SELECT state, CAST(token AS CHAR) AS token FROM ${quoted} WHERE \`key\` = ? LOCK IN SHARE MODE`, [sqlKey(key)]);
      return row?.state === 'completed' && row.token === token;
    },
    timeoutMs,
  });
  return Object.assign(store, { transaction });
}
