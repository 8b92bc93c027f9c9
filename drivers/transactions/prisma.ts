/**
 * Prisma transactions for the PostgreSQL and MySQL stores: the handler gets the client of
 * Prisma's interactive transaction (`prisma.$transaction(async (tx) => …)`), and the record
 * is completed on that transaction's connection before Prisma commits, so the handler's
 * writes and the stored response commit together or not at all.
 * @module
 * @example
 * import { PrismaPg } from '@prisma/adapter-pg';
 * import { PrismaClient } from './generated/prisma/client.js';
 * import { postgresStore } from 'idempotency-kit/drivers/postgres';
 * import { prismaTransactions } from 'idempotency-kit/transactions/prisma';
 * const prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: process.env.DATABASE_URL }) });
 * const store = postgresStore({ url: process.env.DATABASE_URL, transactions: prismaTransactions(prisma) });
 */
import type { TransactionRunner } from '../../src/transaction.js';
import { statementResult } from '../transaction-runner.js';
import { assertDatabase } from './utils.js';

/** A Prisma client: anything with the interactive `$transaction(fn, options)`. */
export interface PrismaClientLike {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  $transaction(fn: (tx: any) => Promise<any>, options?: any): Promise<any>;
}

/** The client Prisma hands an interactive transaction's callback, for the client `P`. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type PrismaTransaction<P> = P extends { $transaction(fn: (tx: infer Tx) => any, ...rest: any[]): any } ? Tx : never;

/** Prisma's options of an interactive transaction for the client `P` (`{ maxWait, timeout, isolationLevel }`). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type PrismaTransactionOptions<P> = P extends { $transaction(fn: (tx: any) => any, options?: infer O): any } ? O : never;

interface RawClient {
  $queryRawUnsafe(query: string, ...values: unknown[]): Promise<unknown>;
  $executeRawUnsafe(query: string, ...values: unknown[]): Promise<number>;
}

/**
 * Transactions opened with `prisma.$transaction(fn, options)`. Give the result to the
 * store on the same database: `postgresStore({ url, transactions: prismaTransactions(prisma) })`
 * or `mysqlStore(…)`. `options` are Prisma's own: mind its `timeout` (5 s by default), which
 * bounds the whole transaction, the handler included.
 */
export function prismaTransactions<P extends PrismaClientLike>(prisma: P, options?: PrismaTransactionOptions<P>): TransactionRunner<PrismaTransaction<P>> {
  assertDatabase('prisma', prisma, '$transaction', 'a PrismaClient (new PrismaClient({ adapter }))');
  return {
    name: 'prisma',
    run: (body) =>
      prisma.$transaction(
        (tx: PrismaTransaction<P> & RawClient) =>
          body(tx, async (statement) =>
            // A plain read returns its rows; the store's writes are run for their count (rows
            // changed or returned): Prisma cannot read back a column of type void, which
            // PostgreSQL's completion returns beside its row.
            /^\s*SELECT\b/i.test(statement.text)
              ? statementResult(await tx.$queryRawUnsafe(statement.text, ...statement.values))
              : { rows: [], affectedRows: await tx.$executeRawUnsafe(statement.text, ...statement.values) },
          ),
        options,
      ),
  };
}
