/**
 * Plain `mysql2` transactions for the MySQL store: the handler gets a connection of your
 * pool with a transaction open on it, and the record is completed on that connection
 * before COMMIT, so the handler's writes and the stored response commit together or not
 * at all.
 * @module
 * @example
 * import mysql from 'mysql2/promise';
 * import { mysqlStore } from 'idempotency-kit/drivers/mysql';
 * import { mysql2Transactions } from 'idempotency-kit/transactions/mysql2';
 * const pool = mysql.createPool(process.env.DATABASE_URL!);
 * const store = mysqlStore({ url: process.env.DATABASE_URL, transactions: mysql2Transactions(pool) });
 */
import type { TransactionRunner } from '../../src/transaction.js';
import { statementResult } from '../transaction-runner.js';
import { assertDatabase } from './utils.js';

/** A connection of a `mysql2/promise` pool (`PoolConnection`), or anything with the same calls. */
export interface Mysql2Connection {
  query(sql: string, values?: unknown): Promise<unknown>;
  beginTransaction(): Promise<void>;
  commit(): Promise<void>;
  rollback(): Promise<void>;
  release(): void;
  /** Closes the connection instead of pooling it (after a failure in the middle of a transaction). */
  destroy?(): void;
}

/** A `mysql2/promise` pool (`mysql.createPool(url)`; `pool.promise()` for a callback pool). */
export interface Mysql2Pool<C extends Mysql2Connection = Mysql2Connection> {
  getConnection(): Promise<C>;
}

export interface Mysql2TransactionOptions {
  /** `SET TRANSACTION ISOLATION LEVEL …` before each transaction; the server's default when not given. */
  isolationLevel?: 'READ UNCOMMITTED' | 'READ COMMITTED' | 'REPEATABLE READ' | 'SERIALIZABLE';
}

const LEVELS = new Set(['READ UNCOMMITTED', 'READ COMMITTED', 'REPEATABLE READ', 'SERIALIZABLE']);

/** Transactions on connections of `pool`: BEGIN, the handler, the record, COMMIT. */
export function mysql2Transactions<C extends Mysql2Connection>(pool: Mysql2Pool<C>, options: Mysql2TransactionOptions = {}): TransactionRunner<C> {
  assertDatabase('pool', pool, 'getConnection', 'a mysql2/promise pool (mysql.createPool(url))');
  const { isolationLevel } = options;
  if (isolationLevel !== undefined && !LEVELS.has(isolationLevel)) {
    throw new TypeError(`Expected \`isolationLevel\` to be one of ${[...LEVELS].map((level) => `'${level}'`).join(', ')}, got ${String(isolationLevel)}`);
  }
  return {
    name: 'mysql2',
    dialect: 'mysql',
    async run(body) {
      const connection = await pool.getConnection();
      let healthy = false;
      try {
        if (isolationLevel !== undefined) await connection.query(`SET TRANSACTION ISOLATION LEVEL ${isolationLevel}`);
        await connection.beginTransaction();
        let value;
        try {
          value = await body(connection, async (statement) => statementResult(await connection.query(statement.text, statement.values)));
        } catch (error) {
          await connection.rollback();
          healthy = true;
          throw error;
        }
        await connection.commit();
        healthy = true;
        return value;
      } finally {
        // A connection that failed mid-transaction is closed, never pooled: the server then
        // rolls back whatever it still holds.
        if (healthy || !connection.destroy) connection.release();
        else connection.destroy();
      }
    },
  };
}
