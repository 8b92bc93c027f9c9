/**
 * The COMMIT an ORM sends lands, but its answer is lost (the connection reports an error
 * right after the server committed): the layer reads the record, sees the commit, and
 * returns the result, with no 503 and no second run. Here the fault sits in the `pg`
 * client under Drizzle and Kysely, so it goes through the ORM's own handling of a failed
 * COMMIT (the suite makes the same fault at the runner's boundary for every ORM).
 */
import { randomUUID } from 'node:crypto';
import { drizzle } from 'drizzle-orm/node-postgres';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { postgresStore } from '../../drivers/postgres.js';
import { drizzleTransactions } from '../../drivers/transactions/drizzle.js';
import { kyselyTransactions } from '../../drivers/transactions/kysely.js';
import { idempotent } from '../../src/index.js';
import type { TransactionRunner } from '../../src/transaction.js';
import { POSTGRES_URL, serviceAvailable } from '../helpers/services.js';

const available = await serviceAvailable('PostgreSQL', POSTGRES_URL);
const suffix = randomUUID().replaceAll('-', '').slice(0, 10);
const orders = `ik_commit_answer_orders_${suffix}`;
const records = `ik_commit_answer_records_${suffix}`;

/** A pool whose clients lose the answer of the next COMMIT once `arm()` was called: it lands, then the call fails. */
function poolLosingCommitAnswer() {
  const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 3 });
  pool.on('error', () => undefined);
  let armed = false;
  pool.on('connect', (client) => {
    client.on('error', () => undefined);
    const query = client.query.bind(client) as (...args: unknown[]) => Promise<unknown>;
    (client as unknown as { query: unknown }).query = async (...args: unknown[]) => {
      const first = args[0] as string | { text?: string };
      const text = typeof first === 'string' ? first : first?.text;
      if (!armed || !/^\s*commit\b/i.test(text ?? '')) return query(...args);
      armed = false;
      await query(...args); // committed on the server
      throw new Error('Connection terminated unexpectedly'); // the answer never arrives
    };
  });
  return { pool, arm: () => (armed = true) };
}

describe.skipIf(!available)("an ORM's COMMIT lands but its answer is lost: the result is returned, not a 503", () => {
  const admin = new pg.Pool({ connectionString: POSTGRES_URL, max: 2 });
  afterAll(async () => {
    await admin.query(`DROP TABLE IF EXISTS "${orders}"; DROP TABLE IF EXISTS "${records}"`);
    await admin.end();
  });

  const cases: Array<[string, (pool: pg.Pool) => { runner: TransactionRunner<unknown>; insert: (tx: unknown, key: string) => Promise<unknown>; end: () => Promise<void> }]> = [
    [
      'Drizzle',
      (pool) => {
        const db = drizzle(pool);
        return {
          runner: drizzleTransactions(db) as TransactionRunner<unknown>,
          insert: (tx, key) => (tx as { execute(q: unknown): Promise<unknown> }).execute(`INSERT INTO "${orders}" (key) VALUES ('${key}')`),
          end: () => pool.end(),
        };
      },
    ],
    [
      'Kysely',
      (pool) => {
        const db = new Kysely<Record<string, { key: string }>>({ dialect: new PostgresDialect({ pool }) });
        return {
          runner: kyselyTransactions(db) as TransactionRunner<unknown>,
          insert: (tx, key) => (tx as typeof db).insertInto(orders).values({ key }).execute(),
          end: () => db.destroy(),
        };
      },
    ],
  ];

  for (const [name, open] of cases) {
    it(`${name}: one run, one row, the stored result both times`, async () => {
      await admin.query(`CREATE TABLE IF NOT EXISTS "${orders}" (id serial PRIMARY KEY, key text NOT NULL)`);
      const { pool, arm } = poolLosingCommitAnswer();
      const { runner, insert, end } = open(pool);
      const store = postgresStore({ url: POSTGRES_URL, table: records, transactions: runner });
      let runs = 0;
      const place = idempotent(
        async (key: string, tx: unknown) => {
          runs++;
          await insert(tx, key);
          return { key, run: runs };
        },
        { store, key: (key) => key, transaction: true },
      );
      try {
        const key = `${name}-${randomUUID()}`;
        arm();
        expect(await place(key)).toEqual({ key, run: 1 });
        expect(await place(key)).toEqual({ key, run: 1 });
        expect(runs).toBe(1);
        expect((await admin.query(`SELECT count(*)::int AS n FROM "${orders}" WHERE key = $1`, [key])).rows[0].n).toBe(1);
      } finally {
        await store.close();
        await end();
      }
    });
  }
});
