/**
 * Knex transactions for the PostgreSQL and MySQL stores: the handler gets Knex's own
 * `trx`, and the record is completed on that transaction's connection before Knex commits,
 * so the handler's writes and the stored response commit together or not at all.
 * @module
 * @example
 * import knex from 'knex';
 * import { postgresStore } from 'idempotency-kit/drivers/postgres';
 * import { knexTransactions } from 'idempotency-kit/transactions/knex';
 * const db = knex({ client: 'pg', connection: process.env.DATABASE_URL });
 * const store = postgresStore({ url: process.env.DATABASE_URL, transactions: knexTransactions(db) });
 */
import type { Knex } from 'knex';
import type { TransactionRunner } from '../../src/transaction.js';
import { questionMarks, statementResult } from '../transaction-runner.js';
import { assertDatabase, dialectOf } from './utils.js';

/**
 * Transactions opened with `db.transaction(fn, config)`. Give the result to the store on
 * the same database: `postgresStore({ url, transactions: knexTransactions(db) })` or
 * `mysqlStore(…)`. `config` is Knex's own (`{ isolationLevel: 'serializable' }`).
 */
export function knexTransactions(db: Knex, config?: Knex.TransactionConfig): TransactionRunner<Knex.Transaction> {
  assertDatabase('db', db, 'transaction', 'a Knex instance (knex({ client, connection }))');
  const client = (db as unknown as { client?: { dialect?: string; config?: { client?: unknown } } }).client;
  return {
    name: 'knex',
    dialect: dialectOf(client?.dialect ?? (typeof client?.config?.client === 'string' ? client.config.client : undefined)),
    run: (body) =>
      db.transaction(
        (trx) =>
          body(trx, async (statement) => {
            // Knex binds `?` (and turns it into `$n` for PostgreSQL itself).
            const { text, values } = questionMarks(statement);
            return statementResult(await trx.raw(text, values as Knex.RawBinding[]));
          }),
        config,
      ),
  };
}
