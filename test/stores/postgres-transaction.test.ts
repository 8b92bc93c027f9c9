/**
 * Effect and record in one PostgreSQL transaction: the business write and the
 * stored result commit together or not at all, on the application's own pool.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, expectTypeOf, it } from 'vitest';
import { postgresStore } from '../../drivers/postgres.js';
import { createStore } from '../../drivers/create-store.js';
import {
  idempotent,
  isIdempotencyError,
  LeaseLostError,
  ResultNotStorableError,
  TransactionConflictError,
  type IdempotencyEvent,
} from '../../src/index.js';
import { poolWithCommit } from '../helpers/pg-faults.js';
import { POSTGRES_URL, serviceAvailable } from '../helpers/services.js';

const available = await serviceAvailable('PostgreSQL', POSTGRES_URL);
const fresh = (prefix: string) => `${prefix}_${randomUUID().replaceAll('-', '').slice(0, 12)}`;

describe.skipIf(!available)('PostgreSQL: effect and record in one transaction', () => {
  const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 4 });
  const tables: string[] = [];
  let records: string;
  let orders: string;
  const newTables = async () => {
    records = fresh('ik_tx_records');
    orders = fresh('ik_tx_orders');
    tables.push(records, orders);
    await pool.query(`CREATE TABLE "${orders}" (id serial PRIMARY KEY, key text NOT NULL, amount int NOT NULL)`);
  };
  const count = async (key?: string) =>
    Number(
      (await pool.query(`SELECT count(*) AS n FROM "${orders}"${key ? ' WHERE key = $1' : ''}`, key ? [key] : [])).rows[0].n,
    );
  const recordStates = async () => (await pool.query(`SELECT state, token FROM "${records}"`)).rows as { state: string }[];

  beforeAll(newTables);
  afterAll(async () => {
    for (const name of tables) await pool.query(`DROP TABLE IF EXISTS "${name}"`);
    await pool.end();
  });

  it('C1: fn gets the transaction client (typed as the pool\'s PoolClient); the write and the result commit together; a repeat replays', async () => {
    const store = postgresStore({ pool, table: records });
    let runs = 0;
    const order = idempotent(
      async (msg: { id: string; amount: number }, client) => {
        expectTypeOf(client).toEqualTypeOf<pg.PoolClient>();
        runs++;
        const { rows } = await client.query(`INSERT INTO "${orders}" (key, amount) VALUES ($1, $2) RETURNING id`, [msg.id, msg.amount]);
        return { orderId: rows[0].id as number };
      },
      { store, key: (msg) => msg.id, transaction: true },
    );
    expectTypeOf(order).parameters.toEqualTypeOf<[{ id: string; amount: number }]>();
    const first = await order({ id: 'a', amount: 5 });
    const again = await order({ id: 'a', amount: 5 });
    expect(again).toEqual(first);
    expect(runs).toBe(1);
    expect(await count('a')).toBe(1);
    expect((await recordStates()).map((r) => r.state)).toEqual(['completed']);
    await store.close();
    // The store leaves the application's pool open.
    expect((await pool.query('SELECT 1 AS one')).rows[0].one).toBe(1);
  });

  it('C3: fn throws after its write: both roll back, the key is released, a retry runs fn again', async () => {
    const store = postgresStore({ pool, table: records });
    let fail = true;
    const order = idempotent(
      async (id: string, client) => {
        await client.query(`INSERT INTO "${orders}" (key, amount) VALUES ($1, 1)`, [id]);
        if (fail) throw new Error('payment declined');
        return 'ok';
      },
      { store, key: (id) => id, transaction: true },
    );
    await expect(order('b')).rejects.toThrow('payment declined');
    expect(await count('b')).toBe(0);
    fail = false;
    expect(await order('b')).toBe('ok');
    expect(await count('b')).toBe(1);
    await store.close();
  });

  it('C1: a result that cannot be stored rolls the write back and releases the key', async () => {
    const store = postgresStore({ pool, table: records });
    const order = idempotent(
      async (id: string, client) => {
        await client.query(`INSERT INTO "${orders}" (key, amount) VALUES ($1, 1)`, [id]);
        return { callback: () => 1 };
      },
      { store, key: (id) => id, transaction: true },
    );
    const error = await order('c').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ResultNotStorableError);
    expect((error as Error).message).toMatch(/rolled back/);
    expect(await count('c')).toBe(0);
    await store.close();
  });

  it('C1: a result over maxResultBytes rolls the write back and releases the key (fn had no effect); within the limit it commits', async () => {
    const store = postgresStore({ pool, table: records });
    const order = (max: number) =>
      idempotent(
        async (id: string, client) => {
          await client.query(`INSERT INTO "${orders}" (key, amount) VALUES ($1, 1)`, [id]);
          return { note: 'x'.repeat(500) };
        },
        { store, key: (id) => id, transaction: true, maxResultBytes: max },
      );
    const error = await order(100)('big').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ResultNotStorableError);
    expect((error as Error).message).toMatch(/more than the 100 bytes allowed.*rolled back/s);
    expect((error as ResultNotStorableError).result).toEqual({ note: 'x'.repeat(500) });
    expect(await count('big')).toBe(0);
    // Released: a retry with a larger limit runs and commits.
    expect(await order(10_000)('big')).toEqual({ note: 'x'.repeat(500) });
    expect(await count('big')).toBe(1);
    await store.close();
  });

  it('a failed COMMIT (deferred constraint) rolls back both and releases the key; the database error is rethrown', async () => {
    const ledger = fresh('ik_tx_ledger');
    tables.push(ledger);
    await pool.query(`CREATE TABLE "${ledger}" (ref text, CONSTRAINT ${ledger}_u UNIQUE (ref) DEFERRABLE INITIALLY DEFERRED)`);
    await pool.query(`INSERT INTO "${ledger}" VALUES ('taken')`);
    const store = postgresStore({ pool, table: records });
    const book = idempotent(
      async (ref: string, client) => {
        await client.query(`INSERT INTO "${orders}" (key, amount) VALUES ($1, 1)`, [ref]);
        await client.query(`INSERT INTO "${ledger}" VALUES ($1)`, [ref]); // checked at COMMIT
        return ref;
      },
      { store, key: (ref) => `ledger-${ref}`, transaction: true },
    );
    await expect(book('taken')).rejects.toMatchObject({ code: '23505' });
    expect(await count('taken')).toBe(0);
    // Released: the same key runs again (and fails again the same way, nothing stuck as processing).
    await expect(book('taken')).rejects.toMatchObject({ code: '23505' });
    expect(await book('free')).toBe('free');
    expect(await count('free')).toBe(1);
    await store.close();
  });

  it('H18: the transaction outlives its lease (renewals starved): the fenced completion matches no row, the effect rolls back, LeaseLostError; the successor keeps the key', async () => {
    // One connection: while the transaction holds it, the lease cannot renew.
    const tiny = new pg.Pool({ connectionString: POSTGRES_URL, max: 1 });
    await tiny.query('SELECT 1');
    const store = postgresStore({ pool: tiny, table: records });
    const successorStore = postgresStore({ url: POSTGRES_URL, table: records });
    const events: IdempotencyEvent[] = [];
    let takenOver!: () => void;
    const tookOver = new Promise<void>((resolve) => (takenOver = resolve));
    const slow = idempotent(
      async (id: string, client) => {
        await client.query(`INSERT INTO "${orders}" (key, amount) VALUES ($1, 1)`, [id]);
        await tookOver; // the successor claims once the lease ended
        return 'late';
      },
      { store, key: (id) => id, transaction: true, leaseMs: 600, onEvent: (e) => events.push(e) },
    );
    const successor = idempotent(async (id: string, client) => {
      await client.query(`INSERT INTO "${orders}" (key, amount) VALUES ($1, 2)`, [id]);
      return 'successor';
    }, { store: successorStore, key: (id) => id, transaction: true, waitMs: 10_000 });
    const late = slow('d').catch((e: unknown) => e);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(await successor('d')).toBe('successor');
    takenOver();
    const error = await late;
    expect(error).toBeInstanceOf(LeaseLostError);
    expect(isIdempotencyError(error) && error.retryable).toBe(true);
    expect(events.some((e) => e.type === 'lease-lost')).toBe(true);
    // Only the successor's write exists, and its result is the one replayed.
    expect((await pool.query(`SELECT amount FROM "${orders}" WHERE key = 'd'`)).rows).toEqual([{ amount: 2 }]);
    expect(await successor('d')).toBe('successor');
    await Promise.all([store.close(), successorStore.close()]);
    await tiny.end();
  });

  it('serializable: concurrent conflicting transactions are retried (bounded) and each key has its effect once; with 1 attempt, TransactionConflictError and the key is released', async () => {
    const counter = fresh('ik_tx_counter');
    tables.push(counter);
    await pool.query(`CREATE TABLE "${counter}" (id int PRIMARY KEY, n int NOT NULL); INSERT INTO "${counter}" VALUES (1, 0)`);
    const store = postgresStore({ pool, table: records, isolationLevel: 'serializable', transactionAttempts: 10 });
    // The three first attempts all read before any writes: all but one must be retried.
    let runs = 0;
    let allRead!: () => void;
    const firstReads = new Promise<void>((resolve) => (allRead = resolve));
    const increment = idempotent(
      async (_id: string, client) => {
        const run = ++runs;
        const { rows } = await client.query(`SELECT n FROM "${counter}" WHERE id = 1`);
        if (run === 3) allRead();
        if (run <= 3) await firstReads;
        await client.query(`UPDATE "${counter}" SET n = $1 WHERE id = 1`, [rows[0].n + 1]);
        return rows[0].n + 1;
      },
      { store, key: (id) => id, transaction: true },
    );
    expect((await Promise.all(['s1', 's2', 's3'].map((id) => increment(id)))).sort()).toEqual([1, 2, 3]);
    expect((await pool.query(`SELECT n FROM "${counter}"`)).rows[0].n).toBe(3); // no lost update
    expect(runs).toBeGreaterThan(3); // retried after serialization failures
    await store.close();

    const once = postgresStore({ pool, table: records, isolationLevel: 'serializable', transactionAttempts: 1 });
    // Both read before either writes, however the machine schedules them.
    let reads = 0;
    let bothRead!: () => void;
    const barrier = new Promise<void>((resolve) => (bothRead = resolve));
    const incrementOnce = idempotent(
      async (_id: string, client) => {
        const { rows } = await client.query(`SELECT n FROM "${counter}" WHERE id = 1`);
        if (++reads === 2) bothRead();
        if (reads <= 2) await barrier;
        await client.query(`UPDATE "${counter}" SET n = $1 WHERE id = 1`, [rows[0].n + 1]);
        return rows[0].n + 1;
      },
      { store: once, key: (id) => id, transaction: true },
    );
    const outcomes = await Promise.allSettled(['t1', 't2'].map((id) => incrementOnce(id)));
    const rejected = outcomes.filter((o) => o.status === 'rejected').map((o) => (o as PromiseRejectedResult).reason);
    expect(rejected).toHaveLength(1);
    expect(rejected[0]).toBeInstanceOf(TransactionConflictError);
    expect(rejected[0]).toMatchObject({ code: 'transaction-conflict', retryable: true, attempts: 1, cause: { code: '40001' } });
    // Released: the loser's key runs again.
    const loser = outcomes[0]!.status === 'rejected' ? 't1' : 't2';
    expect(await incrementOnce(loser)).toBe(5);
    await once.close();
  });

  it('the connection dies at COMMIT (backend terminated): nothing committed, the key is released, StoreUnavailableError', async () => {
    let armed = true;
    const faulty = poolWithCommit(async (commit, pid) => {
      if (armed) {
        armed = false;
        await pool.query('SELECT pg_terminate_backend($1)', [pid]);
      }
      return commit();
    });
    const store = postgresStore({ pool: faulty, table: records });
    const order = idempotent(
      async (id: string, client) => (await client.query(`INSERT INTO "${orders}" (key, amount) VALUES ($1, 3) RETURNING id`, [id])).rows[0].id as number,
      { store, key: (id) => id, transaction: true },
    );
    const error = await order('e').catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'store-unavailable', retryable: true });
    expect(await count('e')).toBe(0);
    // Released: the retry runs and commits.
    expect(await order('e')).toEqual(expect.any(Number));
    expect(await count('e')).toBe(1);
    await store.close();
    await faulty.end();
  });

  it('COMMIT lands but its answer is lost: the store reads the record under its row lock, sees it completed by this claim, and returns the result', async () => {
    let armed = true;
    const faulty = poolWithCommit(async (commit) => {
      const result = await commit();
      if (!armed) return result;
      armed = false;
      throw Object.assign(new Error('Connection terminated unexpectedly'), { code: undefined });
    });
    const store = postgresStore({ pool: faulty, table: records });
    let runs = 0;
    const order = idempotent(
      async (id: string, client) => {
        runs++;
        return (await client.query(`INSERT INTO "${orders}" (key, amount) VALUES ($1, 4) RETURNING id`, [id])).rows[0].id as number;
      },
      { store, key: (id) => id, transaction: true },
    );
    const id = await order('f');
    expect(await order('f')).toBe(id);
    expect(runs).toBe(1);
    expect(await count('f')).toBe(1);
    await store.close();
    await faulty.end();
  });

  it('a store made from a URL runs transactions on its own pool; a store without transactions is refused with a TypeError', async () => {
    const store = postgresStore({ url: POSTGRES_URL, table: records });
    const order = idempotent(
      async (id: string, client) => (await client.query(`INSERT INTO "${orders}" (key, amount) VALUES ($1, 7) RETURNING amount`, [id])).rows[0].amount as number,
      { store, key: (id) => id, transaction: true },
    );
    expect(await order('u')).toBe(7);
    expect(await order('u')).toBe(7);
    expect(await count('u')).toBe(1);
    await store.close();
    const memory = createStore('memory://');
    // @ts-expect-error the memory store runs no transactions
    expect(() => idempotent(async (_id: string, _client: unknown) => 1, { store: memory, key: (id: string) => id, transaction: true })).toThrow(
      /Expected `store` to run transactions/,
    );
    await memory.close();
    expect(() => postgresStore({ pool, url: POSTGRES_URL })).toThrow('Expected exactly one of `url`, `adapter`, `keyv` or `pool`');
    // @ts-expect-error not a pool
    expect(() => postgresStore({ pool: 'postgres://x' })).toThrow(/Expected `pool` to be a pg Pool/);
    expect(() => postgresStore({ pool, transactionAttempts: 0 })).toThrow(/transactionAttempts/);
    // @ts-expect-error not an isolation level
    expect(() => postgresStore({ pool, isolationLevel: 'chaos' })).toThrow(/isolationLevel/);
  });
});
