/**
 * Kysely transactions for the PostgreSQL and MySQL stores: the handler gets Kysely's own
 * `trx`, and the record is completed on that transaction's connection before Kysely
 * commits, so the handler's writes and the stored response commit together or not at all.
 * @module
 * @example
 * import { Kysely, PostgresDialect } from 'kysely';
 * import { postgresStore } from 'idempotency-kit/drivers/postgres';
 * import { kyselyTransactions } from 'idempotency-kit/transactions/kysely';
 * const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
 * const store = postgresStore({ pool, transactions: kyselyTransactions(db) });
 */
import { sql, type IsolationLevel, type Kysely, type Transaction } from 'kysely';
import type { TransactionRunner } from '../../src/transaction.js';
import { splitStatement, statementResult } from '../transaction-runner.js';
import { assertDatabase, dialectOf } from './utils.js';

export interface KyselyTransactionOptions {
  /** The transactions' isolation level (`db.transaction().setIsolationLevel(…)`); the database's default when not given. */
  isolationLevel?: IsolationLevel;
}

/**
 * Transactions opened with `db.transaction().execute(fn)`. Give the result to the store on
 * the same database: `postgresStore({ url, transactions: kyselyTransactions(db) })` or
 * `mysqlStore(…)`.
 */
export function kyselyTransactions<DB>(db: Kysely<DB>, options: KyselyTransactionOptions = {}): TransactionRunner<Transaction<DB>> {
  assertDatabase('db', db, 'transaction', 'a Kysely instance (new Kysely({ dialect }))');
  const adapter = (db.getExecutor() as { adapter?: object }).adapter;
  return {
    name: 'kysely',
    dialect: dialectOf(adapter?.constructor.name),
    run: (body) => {
      let builder = db.transaction();
      if (options.isolationLevel !== undefined) builder = builder.setIsolationLevel(options.isolationLevel);
      return builder.execute((trx) =>
        body(trx, async (statement) => {
          const { parts, values } = splitStatement(statement);
          // The statement as a Kysely template: its values are bound as parameters.
          const query = sql(Object.assign([...parts], { raw: parts }) as TemplateStringsArray, ...values);
          return statementResult(await query.execute(trx));
        }),
      );
    },
  };
}
