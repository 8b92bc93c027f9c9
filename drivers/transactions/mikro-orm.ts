/**
 * MikroORM (6.x) transactions for the PostgreSQL and MySQL stores: the handler gets the
 * forked `EntityManager` of `em.transactional(…)`, and the record is completed on that
 * transaction's connection before MikroORM flushes and commits, so the handler's writes and
 * the stored response commit together or not at all.
 * @module
 * @example
 * import { MikroORM } from '@mikro-orm/postgresql';
 * import { postgresStore } from 'idempotency-kit/drivers/postgres';
 * import { mikroOrmTransactions } from 'idempotency-kit/transactions/mikro-orm';
 * const orm = await MikroORM.init({ clientUrl: process.env.DATABASE_URL, entities: [Order] });
 * const store = postgresStore({ url: process.env.DATABASE_URL, transactions: mikroOrmTransactions(orm.em) });
 */
import type { EntityManager, IsolationLevel } from '@mikro-orm/core';
import type { TransactionRunner } from '../../src/transaction.js';
import { questionMarks, statementResult } from '../transaction-runner.js';
import { assertDatabase, dialectOf } from './utils.js';

export interface MikroOrmTransactionOptions {
  /** The transactions' isolation level; the database's default when not given. */
  isolationLevel?: IsolationLevel;
}

interface SqlConnection {
  execute(query: string, params: unknown[], method: 'all' | 'get' | 'run', ctx?: unknown): Promise<unknown>;
}

/**
 * Transactions opened with `em.transactional(fn)`: the handler gets the transaction's fork
 * of `em`. Give the result to the store on the same database: `postgresStore({ url,
 * transactions: mikroOrmTransactions(orm.em) })` or `mysqlStore(…)`. Entities the handler
 * persists are flushed when its work returns, before the record is completed.
 */
export function mikroOrmTransactions<EM extends EntityManager>(em: EM, options: MikroOrmTransactionOptions = {}): TransactionRunner<EM> {
  assertDatabase('em', em, 'transactional', "MikroORM's EntityManager (orm.em)");
  const platform = (em as { getPlatform?: () => object }).getPlatform?.();
  return {
    name: 'mikro-orm',
    dialect: dialectOf(platform?.constructor.name),
    run: (body) =>
      em.transactional(
        async (fork) =>
          body(fork as EM, async (statement) => {
            // What the handler persisted goes first, as any statement of its own would see it.
            await fork.flush();
            const { text, values } = questionMarks(statement);
            const connection = fork.getConnection() as unknown as SqlConnection;
            return statementResult(
              await connection.execute(text, values, statement.dialect === 'postgres' ? 'all' : 'run', fork.getTransactionContext()),
            );
          }),
        options.isolationLevel === undefined ? {} : { isolationLevel: options.isolationLevel },
      ),
  };
}
