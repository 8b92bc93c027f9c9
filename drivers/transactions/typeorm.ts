/**
 * TypeORM transactions for the PostgreSQL and MySQL stores: the handler gets TypeORM's own
 * transactional `EntityManager`, and the record is completed on that transaction's
 * connection (its query runner) before TypeORM commits, so the handler's writes and the
 * stored response commit together or not at all.
 * @module
 * @example
 * import { DataSource } from 'typeorm';
 * import { postgresStore } from 'idempotency-kit/drivers/postgres';
 * import { typeormTransactions } from 'idempotency-kit/transactions/typeorm';
 * const dataSource = await new DataSource({ type: 'postgres', url: process.env.DATABASE_URL, entities: [Order] }).initialize();
 * const store = postgresStore({ url: process.env.DATABASE_URL, transactions: typeormTransactions(dataSource) });
 */
import type { DataSource, EntityManager } from 'typeorm';
import type { TransactionRunner } from '../../src/transaction.js';
import { statementResult } from '../transaction-runner.js';
import { assertDatabase, dialectOf } from './utils.js';

export interface TypeormTransactionOptions {
  /** The transactions' isolation level; the database's default when not given. */
  isolationLevel?: 'READ UNCOMMITTED' | 'READ COMMITTED' | 'REPEATABLE READ' | 'SERIALIZABLE';
}

/**
 * Transactions opened with `dataSource.transaction(fn)` (or an `EntityManager`'s). Give the
 * result to the store on the same database: `postgresStore({ url, transactions:
 * typeormTransactions(dataSource) })` or `mysqlStore(…)`.
 */
export function typeormTransactions(dataSource: DataSource | EntityManager, options: TypeormTransactionOptions = {}): TransactionRunner<EntityManager> {
  assertDatabase('dataSource', dataSource, 'transaction', 'a TypeORM DataSource (new DataSource({ type, url }).initialize())');
  const { isolationLevel } = options;
  const type = (dataSource as { options?: { type?: unknown } }).options?.type ?? (dataSource as EntityManager).connection?.options?.type;
  return {
    name: 'typeorm',
    dialect: dialectOf(typeof type === 'string' ? type : undefined),
    run: (body) => {
      const work = (manager: EntityManager) =>
        body(manager, async (statement) => statementResult(await manager.query(statement.text, statement.values)));
      return isolationLevel === undefined ? dataSource.transaction(work) : dataSource.transaction(isolationLevel, work);
    },
  };
}
