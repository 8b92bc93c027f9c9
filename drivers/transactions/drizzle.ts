/**
 * Drizzle ORM transactions for the PostgreSQL and MySQL stores: the handler gets Drizzle's
 * own `tx`, and the record is completed on that transaction's connection before Drizzle
 * commits, so the handler's writes and the stored response commit together or not at all.
 * @module
 * @example
 * import { drizzle } from 'drizzle-orm/node-postgres';
 * import { postgresStore } from 'idempotency-kit/drivers/postgres';
 * import { drizzleTransactions } from 'idempotency-kit/transactions/drizzle';
 * const db = drizzle(pool);
 * const store = postgresStore({ pool, transactions: drizzleTransactions(db) });
 */
import { sql } from 'drizzle-orm';
import type { TransactionRunner } from '../../src/transaction.js';
import { splitStatement, statementResult } from '../transaction-runner.js';
import { assertDatabase, dialectOf } from './utils.js';

/** A Drizzle database: anything with Drizzle's `transaction(fn, config?)`. */
export interface DrizzleDatabase {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  transaction(transaction: (tx: any) => Promise<any>, config?: any): Promise<any>;
}

/** The `tx` a Drizzle database hands its transaction callback (`PgTransaction`, `MySqlTransaction`, …). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type DrizzleTransaction<D> = D extends { transaction(transaction: (tx: infer Tx) => Promise<any>, ...rest: any[]): any } ? Tx : never;

/** Drizzle's transaction config (`{ isolationLevel, accessMode, … }`) for the database `D`. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type DrizzleTransactionConfig<D> = D extends { transaction(transaction: any, config?: infer C): any } ? C : never;

// Drizzle names its classes for `is()`: the dialect's kind says the database.
const ENTITY_KIND = Symbol.for('drizzle:entityKind');

/**
 * Transactions opened with `db.transaction(fn, config)`. Give the result to the store on the
 * same database: `postgresStore({ url, transactions: drizzleTransactions(db) })` or
 * `mysqlStore(…)`. `config` is Drizzle's own (`{ isolationLevel: 'serializable' }`).
 */
export function drizzleTransactions<D extends DrizzleDatabase>(db: D, config?: DrizzleTransactionConfig<D>): TransactionRunner<DrizzleTransaction<D>> {
  assertDatabase('db', db, 'transaction', 'a Drizzle database (drizzle(pool))');
  const dialect = (db as { dialect?: { constructor?: Record<symbol, unknown> } }).dialect?.constructor;
  return {
    name: 'drizzle',
    dialect: dialectOf(typeof dialect?.[ENTITY_KIND] === 'string' ? (dialect[ENTITY_KIND] as string) : undefined),
    run: (body) =>
      db.transaction(
        (tx: DrizzleTransaction<D> & { execute(query: unknown): Promise<unknown> }) =>
          body(tx, async (statement) => {
            const { parts, values } = splitStatement(statement);
            // The statement as a Drizzle template: its values are bound as parameters.
            const query = sql(Object.assign([...parts], { raw: parts }) as TemplateStringsArray, ...values);
            return statementResult(await tx.execute(query));
          }),
        config,
      ),
  };
}
