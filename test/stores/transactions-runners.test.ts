/**
 * The ORM transaction runners without a database: the handler's `tx` is typed as the ORM's
 * own, bad options are precise TypeErrors, and the statement helpers bind every value.
 * (Their behaviour on real servers: test/stores/transactions-<orm>.test.ts.)
 */
import type { EntityManager as MikroEntityManager } from '@mikro-orm/postgresql';
import { drizzle } from 'drizzle-orm/node-postgres';
import { drizzle as drizzleMysql } from 'drizzle-orm/mysql2';
import knex, { type Knex } from 'knex';
import { Kysely, PostgresDialect, type Transaction } from 'kysely';
import mysql from 'mysql2/promise';
import pg from 'pg';
import type { EntityManager } from 'typeorm';
import { describe, expect, expectTypeOf, it } from 'vitest';
import { mysqlStore } from '../../drivers/mysql.js';
import { postgresStore } from '../../drivers/postgres.js';
import { connectionLost, databaseCode, questionMarks, splitStatement, statementResult } from '../../drivers/transaction-runner.js';
import { drizzleTransactions } from '../../drivers/transactions/drizzle.js';
import { knexTransactions } from '../../drivers/transactions/knex.js';
import { kyselyTransactions } from '../../drivers/transactions/kysely.js';
import { mikroOrmTransactions } from '../../drivers/transactions/mikro-orm.js';
import { mysql2Transactions } from '../../drivers/transactions/mysql2.js';
import { prismaTransactions } from '../../drivers/transactions/prisma.js';
import { typeormTransactions } from '../../drivers/transactions/typeorm.js';
import { idempotent, inTransaction } from '../../src/index.js';

const URL_PG = 'postgres://nobody@127.0.0.1:1/none';
const URL_MY = 'mysql://nobody@127.0.0.1:1/none';

describe('ORM transaction runners', () => {
  it("types: the handler's transaction object is the ORM's own, through the store", () => {
    const pool = new pg.Pool({ connectionString: URL_PG });
    const db = drizzle(pool);
    const store = postgresStore({ url: URL_PG, transactions: drizzleTransactions(db) });
    type DrizzleTx = Parameters<Parameters<typeof db.transaction>[0]>[0];
    const place = idempotent(
      async (id: string, tx) => {
        expectTypeOf(tx).toEqualTypeOf<DrizzleTx>();
        return id;
      },
      { store, key: (id) => id, transaction: true },
    );
    expectTypeOf(place).parameters.toEqualTypeOf<[string]>();

    const kysely = new Kysely<{ orders: { id: number } }>({ dialect: new PostgresDialect({ pool }) });
    expectTypeOf(postgresStore({ url: URL_PG, transactions: kyselyTransactions(kysely) }).transaction)
      .parameter(0)
      .parameter(0)
      .toEqualTypeOf<Transaction<{ orders: { id: number } }>>();
    const k = knex({ client: 'pg' });
    expectTypeOf(mysqlStore({ url: URL_MY, transactions: knexTransactions(knex({ client: 'mysql2' })) }).transaction).parameter(0).parameter(0).toEqualTypeOf<Knex.Transaction>();
    const typeorm = {} as EntityManager;
    expectTypeOf(typeormTransactions).returns.toEqualTypeOf<import('../../src/transaction.js').TransactionRunner<EntityManager>>();
    void typeorm;
    expectTypeOf(mikroOrmTransactions<MikroEntityManager>).returns.toEqualTypeOf<import('../../src/transaction.js').TransactionRunner<MikroEntityManager>>();
    const prismaLike = { $transaction: async <R>(fn: (tx: { order: { create(): void } }) => Promise<R>, _options?: { timeout?: number }) => fn({ order: { create() {} } }) };
    expectTypeOf(prismaTransactions(prismaLike).run).parameter(0).parameter(0).toEqualTypeOf<{ order: { create(): void } }>();
    // In an HTTP handler the transaction object's type is named, as with the raw pool's client.
    expectTypeOf(inTransaction<DrizzleTx>).parameter(1).parameter(0).toEqualTypeOf<DrizzleTx>();
    void store.close();
    void pool.end();
    void k.destroy();
  });

  it('bad runners and options are precise TypeErrors', () => {
    expect(() => postgresStore({ url: URL_PG, transactions: {} as never })).toThrow(
      /Expected `transactions` to be a transaction runner \(e\.g\. drizzleTransactions\(db\)/,
    );
    const mysqlDrizzle = drizzleMysql(mysql.createPool({ uri: URL_MY }));
    expect(() => postgresStore({ url: URL_PG, transactions: drizzleTransactions(mysqlDrizzle) })).toThrow(
      'Expected `transactions` on PostgreSQL, the store\'s database, got a drizzle runner on MySQL',
    );
    const pgKnex = knex({ client: 'pg' });
    expect(() => mysqlStore({ url: URL_MY, transactions: knexTransactions(pgKnex) })).toThrow(
      'Expected `transactions` on MySQL, the store\'s database, got a knex runner on PostgreSQL',
    );
    void pgKnex.destroy();
    expect(() => postgresStore({ url: URL_PG, transactions: knexTransactions(knex({ client: 'pg' })), isolationLevel: 'serializable' })).toThrow(
      /with `transactions`, give it to the runner/,
    );
    expect(() => mysqlStore({ url: URL_MY, transactions: mysql2Transactions(mysql.createPool({ uri: URL_MY })), transactionAttempts: 0 })).toThrow(
      'Expected `transactionAttempts` to be',
    );
    expect(() => drizzleTransactions(null as never)).toThrow('Expected `db` to be a Drizzle database (drizzle(pool)), got null');
    expect(() => kyselyTransactions({} as never)).toThrow('Expected `db` to be a Kysely instance');
    expect(() => knexTransactions('pg' as never)).toThrow('Expected `db` to be a Knex instance');
    expect(() => typeormTransactions({} as never)).toThrow('Expected `dataSource` to be a TypeORM DataSource');
    expect(() => prismaTransactions({} as never)).toThrow('Expected `prisma` to be a PrismaClient');
    expect(() => mikroOrmTransactions({} as never)).toThrow("Expected `em` to be MikroORM's EntityManager (orm.em)");
    expect(() => mysql2Transactions({} as never)).toThrow('Expected `pool` to be a mysql2/promise pool');
    expect(() => mysql2Transactions({ getConnection: async () => ({}) } as never, { isolationLevel: 'snapshot' as never })).toThrow(
      "Expected `isolationLevel` to be one of 'READ UNCOMMITTED', 'READ COMMITTED', 'REPEATABLE READ', 'SERIALIZABLE', got snapshot",
    );
  });

  it('each runner tells the database from the ORM itself, where the ORM says', async () => {
    const { DataSource } = await import('typeorm');
    const { MysqlDialect } = await import('kysely');
    const pool = new pg.Pool({ connectionString: URL_PG });
    const myPool = mysql.createPool({ uri: URL_MY });
    expect(drizzleTransactions(drizzle(pool)).dialect).toBe('postgres');
    expect(drizzleTransactions(drizzleMysql(myPool)).dialect).toBe('mysql');
    expect(kyselyTransactions(new Kysely({ dialect: new PostgresDialect({ pool }) })).dialect).toBe('postgres');
    const { createPool } = await import('mysql2');
    expect(kyselyTransactions(new Kysely({ dialect: new MysqlDialect({ pool: createPool({ uri: URL_MY }) }) })).dialect).toBe('mysql');
    expect(knexTransactions(knex({ client: 'pg' })).dialect).toBe('postgres');
    expect(knexTransactions(knex({ client: 'mysql2' })).dialect).toBe('mysql');
    expect(typeormTransactions(new DataSource({ type: 'postgres' })).dialect).toBe('postgres');
    expect(typeormTransactions(new DataSource({ type: 'mariadb' })).dialect).toBe('mysql');
    expect(mysql2Transactions(myPool).dialect).toBe('mysql');
    expect(prismaTransactions({ $transaction: async () => undefined }).dialect).toBeUndefined(); // the store's statement says
    await pool.end();
    await myPool.end();
  });

  it('statements: each placeholder gets its value, a repeated $n as often as it is used', () => {
    const statement = { dialect: 'postgres' as const, text: 'SELECT $1::int, $2, $1 WHERE x = $10', values: [1, 'b', 3, 4, 5, 6, 7, 8, 9, 10] };
    expect(splitStatement(statement)).toEqual({ parts: ['SELECT ', '::int, ', ', ', ' WHERE x = ', ''], values: [1, 'b', 1, 10] });
    expect(questionMarks(statement)).toEqual({ text: 'SELECT ?::int, ?, ? WHERE x = ?', values: [1, 'b', 1, 10] });
    const mysqlStatement = { dialect: 'mysql' as const, text: 'UPDATE t SET a = ? WHERE b = ?', values: [1, 2] };
    expect(splitStatement(mysqlStatement)).toEqual({ parts: ['UPDATE t SET a = ', ' WHERE b = ', ''], values: [1, 2] });
    expect(questionMarks(mysqlStatement)).toEqual({ text: mysqlStatement.text, values: [1, 2] });
  });

  it("results: rows and changed rows from each driver's shape", () => {
    expect(statementResult([{ n: 1 }])).toEqual({ rows: [{ n: 1 }] });
    expect(statementResult({ rows: [{ n: 1 }], rowCount: 1 })).toEqual({ rows: [{ n: 1 }], affectedRows: 1 });
    expect(statementResult({ rows: [], numAffectedRows: 1n })).toEqual({ rows: [], affectedRows: 1 });
    expect(statementResult([{ affectedRows: 1, insertId: 0 }, undefined])).toEqual({ rows: [], affectedRows: 1 });
    expect(statementResult([[{ n: 1 }], [{ name: 'n' }]])).toEqual({ rows: [{ n: 1 }] });
    expect(statementResult({ affectedRows: 0 })).toEqual({ rows: [], affectedRows: 0 });
    expect(statementResult(1)).toEqual({ rows: [], affectedRows: 1 });
  });

  it('database errors: codes found through ORM wrappers; connection failures told from statement failures', () => {
    expect(databaseCode({ message: 'wrapped', cause: { code: '40001' } })).toBe('40001');
    expect(databaseCode({ driverError: { code: '40P01' } })).toBe('40P01');
    expect(databaseCode({ errno: 1213, code: 'ER_LOCK_DEADLOCK', sqlState: '40001' })).toBe('errno:1213');
    expect(databaseCode({ meta: { driverAdapterError: { cause: { originalCode: '23505' } } } })).toBe('23505');
    expect(databaseCode({ code: 'EPIPE', errno: -32 })).toBeUndefined();
    expect(databaseCode({ code: 'P2034', meta: {}, clientVersion: '7.10.1' })).toBe('40001');
    const lost = new Error('Connection terminated unexpectedly');
    expect(databaseCode(lost), JSON.stringify(Object.entries(lost))).toBeUndefined();
    expect(connectionLost(lost)).toBe(true);
    expect(connectionLost({ code: '57P01' })).toBe(true);
    expect(connectionLost({ code: '08006' })).toBe(true);
    expect(connectionLost({ errno: 2013 })).toBe(true);
    expect(connectionLost({ code: '23505' })).toBe(false);
    expect(connectionLost({ errno: 1062 })).toBe(false);
    // Prisma's MariaDB adapter: the connector's own number, with SQLSTATE 08S01.
    const prismaClosed = { code: 'P2028', cause: { kind: 'mysql', code: 45013, originalCode: '45013', state: '08S01' } };
    expect(databaseCode(prismaClosed)).toBe('errno:45013');
    expect(connectionLost(prismaClosed)).toBe(true);
    expect(databaseCode({ cause: { kind: 'mysql', code: 1213, state: '40001' } })).toBe('errno:1213');
  });
});
