/**
 * The ORMs of the transaction tests, each on PostgreSQL or MySQL: an orders table made by
 * SQL, the ORM opened on it, its transaction runner, and an insert and a count written with
 * the ORM's own API (what a handler does). Used in-process and by worker processes.
 */
import mysql from 'mysql2/promise';
import pg from 'pg';
import type { TransactionRunner } from '../../src/transaction.js';
import { MYSQL_URL, POSTGRES_URL } from './services.js';

export type OrmName = 'drizzle' | 'kysely' | 'knex' | 'typeorm' | 'prisma' | 'mikro-orm' | 'mysql2';
export type Database = 'postgres' | 'mysql';

export interface OrmCase {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  runner: TransactionRunner<any>;
  /** Insert an order with the ORM's own API on the transaction `tx`. */
  insert(tx: unknown, key: string, amount: number): Promise<void>;
  /** Orders with `key`, read through `tx` (inside the transaction). */
  count(tx: unknown, key: string): Promise<number>;
  /** `amount = amount + 1` on the order `id`, with the ORM's own API on `tx` (takes the row's lock). */
  bump(tx: unknown, id: number): Promise<void>;
  close(): Promise<void>;
}

export const urlOf = (db: Database): string => (db === 'postgres' ? POSTGRES_URL : MYSQL_URL);

/** The orders table, by SQL (no ORM migrations). */
export async function createOrders(db: Database, table: string): Promise<void> {
  if (db === 'postgres') {
    const client = new pg.Client({ connectionString: POSTGRES_URL });
    await client.connect();
    await client.query(`CREATE TABLE IF NOT EXISTS "${table}" (id serial PRIMARY KEY, key varchar(200) NOT NULL, amount int NOT NULL)`);
    await client.end();
  } else {
    const connection = await mysql.createConnection(MYSQL_URL);
    await connection.query(
      `CREATE TABLE IF NOT EXISTS \`${table}\` (id int AUTO_INCREMENT PRIMARY KEY, \`key\` varchar(200) NOT NULL, amount int NOT NULL) ENGINE=InnoDB`,
    );
    await connection.end();
  }
}

/** Run one statement outside any ORM (the test's own view of the database). */
export async function sqlOutside<T = Record<string, unknown>>(db: Database, text: string, values: unknown[] = []): Promise<T[]> {
  if (db === 'postgres') {
    const client = new pg.Client({ connectionString: POSTGRES_URL });
    await client.connect();
    try {
      return (await client.query(text, values)).rows as T[];
    } finally {
      await client.end();
    }
  }
  const connection = await mysql.createConnection(MYSQL_URL);
  try {
    return (await connection.query(text, values))[0] as T[];
  } finally {
    await connection.end();
  }
}

export const quote = (db: Database, name: string): string => (db === 'postgres' ? `"${name}"` : `\`${name}\``);

/** Open `orm` on `db`, its handlers writing to `table`. */
export async function openOrm(orm: OrmName, db: Database, table: string): Promise<OrmCase> {
  switch (orm) {
    case 'drizzle': {
      const { count, eq, sql } = await import('drizzle-orm');
      const { drizzleTransactions } = await import('../../drivers/transactions/drizzle.js');
      if (db === 'postgres') {
        const { drizzle } = await import('drizzle-orm/node-postgres');
        const { integer, pgTable, serial, varchar } = await import('drizzle-orm/pg-core');
        const orders = pgTable(table, { id: serial('id').primaryKey(), key: varchar('key', { length: 200 }).notNull(), amount: integer('amount').notNull() });
        const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 5 });
        // As pg asks of every application: a connection that dies is an 'error' of the pool
        // when idle, and of the client while checked out (the ORM does not listen).
        pool.on('error', () => undefined);
        pool.on('connect', (client) => client.on('error', () => undefined));
        const database = drizzle(pool);
        type Tx = Parameters<Parameters<typeof database.transaction>[0]>[0];
        return {
          runner: drizzleTransactions(database),
          insert: async (tx, key, amount) => void (await (tx as Tx).insert(orders).values({ key, amount })),
          count: async (tx, key) => Number((await (tx as Tx).select({ n: count() }).from(orders).where(eq(orders.key, key)))[0]!.n),
          bump: async (tx, id) => void (await (tx as Tx).update(orders).set({ amount: sql`${orders.amount} + 1` }).where(eq(orders.id, id))),
          close: () => pool.end(),
        };
      }
      const { drizzle } = await import('drizzle-orm/mysql2');
      const { int, mysqlTable, serial, varchar } = await import('drizzle-orm/mysql-core');
      const orders = mysqlTable(table, { id: serial('id').primaryKey(), key: varchar('key', { length: 200 }).notNull(), amount: int('amount').notNull() });
      const pool = mysql.createPool({ uri: MYSQL_URL, connectionLimit: 5 });
      const database = drizzle(pool);
      type Tx = Parameters<Parameters<typeof database.transaction>[0]>[0];
      return {
        runner: drizzleTransactions(database),
        insert: async (tx, key, amount) => void (await (tx as Tx).insert(orders).values({ key, amount })),
        count: async (tx, key) => Number((await (tx as Tx).select({ n: count() }).from(orders).where(eq(orders.key, key)))[0]!.n),
        bump: async (tx, id) => void (await (tx as Tx).update(orders).set({ amount: sql`${orders.amount} + 1` }).where(eq(orders.id, id))),
        close: () => pool.end(),
      };
    }
    case 'kysely': {
      const { Kysely, MysqlDialect, PostgresDialect, sql } = await import('kysely');
      const { kyselyTransactions } = await import('../../drivers/transactions/kysely.js');
      type Orders = Record<string, { id: number; key: string; amount: number }>;
      let end: () => Promise<void>;
      let database;
      if (db === 'postgres') {
        const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 5 });
        // As pg asks of every application: a connection that dies is an 'error' of the pool
        // when idle, and of the client while checked out (the ORM does not listen).
        pool.on('error', () => undefined);
        pool.on('connect', (client) => client.on('error', () => undefined));
        database = new Kysely<Orders>({ dialect: new PostgresDialect({ pool }) });
      } else {
        const { createPool } = await import('mysql2');
        database = new Kysely<Orders>({ dialect: new MysqlDialect({ pool: createPool({ uri: MYSQL_URL, connectionLimit: 5 }) }) });
      }
      end = () => database.destroy();
      type Tx = import('kysely').Transaction<Orders>;
      return {
        runner: kyselyTransactions(database),
        insert: async (tx, key, amount) => void (await (tx as Tx).insertInto(table).values({ key, amount } as never).execute()),
        count: async (tx, key) =>
          Number((await (tx as Tx).selectFrom(table).select(sql<number>`count(*)`.as('n')).where('key', '=', key).executeTakeFirstOrThrow()).n),
        bump: async (tx, id) =>
          void (await (tx as Tx).updateTable(table).set((eb) => ({ amount: eb('amount', '+', 1) }) as never).where('id', '=', id).execute()),
        close: () => end(),
      };
    }
    case 'knex': {
      const { default: knex } = await import('knex');
      const { knexTransactions } = await import('../../drivers/transactions/knex.js');
      const database = knex({ client: db === 'postgres' ? 'pg' : 'mysql2', connection: urlOf(db), pool: { min: 0, max: 5 } });
      type Tx = import('knex').Knex.Transaction;
      return {
        runner: knexTransactions(database),
        insert: async (tx, key, amount) => void (await (tx as Tx)(table).insert({ key, amount })),
        count: async (tx, key) => Number(((await (tx as Tx)(table).where({ key }).count({ n: '*' })) as { n: number | string }[])[0]!.n),
        bump: async (tx, id) => void (await (tx as Tx)(table).where({ id }).increment('amount', 1)),
        close: () => database.destroy(),
      };
    }
    case 'typeorm': {
      const { DataSource, EntitySchema } = await import('typeorm');
      const { typeormTransactions } = await import('../../drivers/transactions/typeorm.js');
      const Order = new EntitySchema<{ id: number; key: string; amount: number }>({
        name: `Order_${table}`,
        tableName: table,
        columns: { id: { type: Number, primary: true, generated: true }, key: { type: String }, amount: { type: Number } },
      });
      const dataSource = await new DataSource({
        ...(db === 'postgres' ? { type: 'postgres' as const } : { type: 'mysql' as const }),
        url: urlOf(db),
        entities: [Order],
        poolSize: 5,
      }).initialize();
      type Tx = import('typeorm').EntityManager;
      return {
        runner: typeormTransactions(dataSource),
        insert: async (tx, key, amount) => void (await (tx as Tx).insert(Order, { key, amount })),
        count: (tx, key) => (tx as Tx).count(Order, { where: { key } }),
        bump: async (tx, id) => void (await (tx as Tx).increment(Order, { id }, 'amount', 1)),
        close: () => dataSource.destroy(),
      };
    }
    case 'mikro-orm': {
      const { EntitySchema, raw } = await import('@mikro-orm/core');
      const { mikroOrmTransactions } = await import('../../drivers/transactions/mikro-orm.js');
      const Order = new EntitySchema<{ id: number; key: string; amount: number }>({
        name: `Order_${table}`,
        tableName: table,
        properties: { id: { type: 'number', primary: true }, key: { type: 'string' }, amount: { type: 'number' } },
      });
      const { MikroORM } = db === 'postgres' ? await import('@mikro-orm/postgresql') : await import('@mikro-orm/mysql');
      const orm = await MikroORM.init({ clientUrl: urlOf(db), entities: [Order], pool: { min: 0, max: 5 }, debug: false, allowGlobalContext: true });
      type Tx = typeof orm.em;
      return {
        runner: mikroOrmTransactions(orm.em),
        insert: async (tx, key, amount) => {
          (tx as Tx).create(Order, { key, amount });
        },
        count: (tx, key) => (tx as Tx).count(Order, { key }),
        bump: async (tx, id) => void (await (tx as Tx).nativeUpdate(Order, { id }, { amount: raw('amount + 1') })),
        close: () => orm.close(true),
      };
    }
    case 'mysql2': {
      const { mysql2Transactions } = await import('../../drivers/transactions/mysql2.js');
      const pool = mysql.createPool({ uri: MYSQL_URL, connectionLimit: 5 });
      type Tx = mysql.PoolConnection;
      return {
        runner: mysql2Transactions(pool),
        insert: async (tx, key, amount) => void (await (tx as Tx).query(`INSERT INTO \`${table}\` (\`key\`, amount) VALUES (?, ?)`, [key, amount])),
        count: async (tx, key) =>
          Number(((await (tx as Tx).query(`SELECT count(*) AS n FROM \`${table}\` WHERE \`key\` = ?`, [key]))[0] as { n: number }[])[0]!.n),
        bump: async (tx, id) => void (await (tx as Tx).query(`UPDATE \`${table}\` SET amount = amount + 1 WHERE id = ?`, [id])),
        close: () => pool.end(),
      };
    }
    case 'prisma': {
      const { openPrisma } = await import('./prisma-case.js');
      return openPrisma(db, table);
    }
  }
}
