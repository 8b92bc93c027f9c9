/**
 * Effect and record in one transaction that an ORM opens (issue 53), on a real PostgreSQL
 * or MySQL: the same proofs for every ORM. The handler writes with the ORM's own API on the
 * ORM's own transaction object; the store completes the record on that connection before
 * the ORM commits.
 *
 * - the business row and the record commit together; a throw after the write leaves neither;
 * - the session killed at COMMIT: 503 store-unavailable, nothing kept, the retry commits once;
 * - COMMIT landed but its answer was lost: the record says so, the result is returned;
 * - the process SIGKILLed before and after COMMIT, then the retry: one row, the replay;
 * - 4 processes × 100 keys × 4 duplicates racing: one row per key, one run per key;
 * - isolation: the handler reads its own writes; nothing (row or record) is visible to
 *   others before COMMIT; a duplicate waits and replays;
 * - cost: the transaction holds the handler's statements and the record's completion,
 *   nothing else.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mysqlStore } from '../../drivers/mysql.js';
import { postgresStore } from '../../drivers/postgres.js';
import { withIdempotency } from '../../adapters/node.js';
import { idempotent, inTransaction, isIdempotencyError, LeaseLostError, type IdempotencyStore } from '../../src/index.js';
import type { TransactionalStore, TransactionRunner, TransactionStatement } from '../../src/transaction.js';
import { createOrders, openOrm, quote, sqlOutside, urlOf, type Database, type OrmCase, type OrmName } from '../helpers/orm-cases.js';
import { MYSQL_URL, POSTGRES_URL, serviceAvailable } from '../helpers/services.js';
import { startWorker } from '../helpers/worker-process.js';
import { onMariadbStatement } from '../helpers/statement-sink.js';

const WORKER = fileURLToPath(new URL('../stores/orm-transaction-worker.ts', import.meta.url));
const fresh = (prefix: string) => `${prefix}_${randomUUID().replaceAll('-', '').slice(0, 10)}`;
const require = createRequire(import.meta.url);

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type AnyRunner = TransactionRunner<any>;

/**
 * Every statement a pg, mysql2 or mariadb connection of this process sends, while `on`: through
 * the drivers' documented methods (pg's `Client#query`, mysql2's `Connection#query` and
 * `#execute`) and the mariadb connector's documented `logger.query` option (Prisma's MySQL
 * adapter), never through a driver's internal modules.
 */
function statementLog(db: Database) {
  const texts: string[] = [];
  let on = false;
  type Proto = Record<string, unknown>;
  // pg for every ORM on PostgreSQL; on MySQL mysql2, and the mariadb connector (Prisma's adapter).
  const targets: [Proto, string[]][] =
    db === 'postgres'
      ? [[pg.Client.prototype as unknown as Proto, ['query']]]
      : [[(require('mysql2') as { Connection: { prototype: Proto } }).Connection.prototype, ['query', 'execute']]];
  // One line per statement sent (a prepared statement's PREPARE is followed by its EXECUTE).
  if (db !== 'postgres') onMariadbStatement((message) => {
    const sent = /^(?:QUERY|EXECUTE: \(-?\d+\) sql): ([\s\S]*)$/.exec(message);
    if (on && sent) texts.push(sent[1]!);
  });
  const originals: [Proto, string, unknown][] = [];
  for (const [target, methods] of targets) {
    for (const method of methods) {
      const original = target[method] as (...args: unknown[]) => unknown;
      originals.push([target, method, original]);
      target[method] = function (this: unknown, ...args: unknown[]) {
        if (on) {
          const first = args[0] as string | { text?: string; sql?: string };
          texts.push(typeof first === 'string' ? first : (first?.text ?? first?.sql ?? String(first)));
        }
        return original.apply(this, args);
      };
    }
  }
  return {
    async during(fn: () => Promise<unknown>): Promise<string[]> {
      texts.length = 0;
      on = true;
      try {
        await fn();
      } finally {
        on = false;
      }
      return [...texts];
    },
    restore() {
      onMariadbStatement(undefined);
      for (const [target, method, original] of originals) target[method] = original;
    },
  };
}

/** Whether the database's server is reachable (loud skip, or a failure when CI is set). */
export const databaseAvailable = (db: Database): Promise<boolean> =>
  serviceAvailable(db === 'postgres' ? 'PostgreSQL' : 'MySQL', db === 'postgres' ? POSTGRES_URL : MYSQL_URL);

/**
 * `orders`: the orders table's name, when the ORM must know it before the suite runs
 * (Prisma's generated client); a fresh name otherwise.
 */
export function ormTransactionsSuite(orm: OrmName, db: Database, available: boolean, orders = fresh(`ik_${orm.replace('-', '')}_ord`)): void {
  const label = `${orm} on ${db === 'postgres' ? 'PostgreSQL' : 'MySQL'}`;

  describe.skipIf(!available)(`${label}: effect and record in one ORM transaction`, () => {
    const records = fresh(`ik_${orm.replace('-', '')}_rec`);
    const ordersTable = quote(db, orders);
    const keyColumn = quote(db, 'key');
    let ormCase: OrmCase;
    const stores: IdempotencyStore[] = [];
    const storeWith = (runner: AnyRunner): TransactionalStore<unknown> => {
      const options = { url: urlOf(db), table: records, transactions: runner };
      const store = db === 'postgres' ? postgresStore(options) : mysqlStore(options);
      stores.push(store);
      return store;
    };
    const rowsOf = async (key: string) =>
      Number((await sqlOutside<{ n: number | string }>(db, `SELECT count(*) AS n FROM ${ordersTable} WHERE ${keyColumn} = ${db === 'postgres' ? '$1' : '?'}`, [key]))[0]!.n);
    const recordStates = async () =>
      (await sqlOutside<{ state: string }>(db, `SELECT state FROM ${quote(db, records)}`)).map((row) => row.state);
    const place = (store: TransactionalStore<unknown>, runs: { n: number }, options: { waitMs?: number; leaseMs?: number } = {}) =>
      idempotent(
        async (order: { key: string; amount: number }, tx: unknown) => {
          runs.n++;
          await ormCase.insert(tx, order.key, order.amount);
          return { key: order.key, seen: await ormCase.count(tx, order.key) };
        },
        { store, key: (order) => order.key, transaction: true, ...options },
      );

    beforeAll(async () => {
      await createOrders(db, orders);
      ormCase = await openOrm(orm, db, orders);
    });
    afterAll(async () => {
      await Promise.all(stores.map((store) => store.close()));
      await ormCase?.close();
      for (const table of [records, orders]) await sqlOutside(db, `DROP TABLE IF EXISTS ${quote(db, table)}`);
    });

    it('C1: the handler gets the ORM\'s transaction and reads its own write; the row and the record commit together; a repeat replays', async () => {
      const store = storeWith(ormCase.runner);
      const runs = { n: 0 };
      const order = place(store, runs);
      const first = await order({ key: 'together', amount: 5 });
      expect(first).toEqual({ key: 'together', seen: 1 }); // its own write, inside the transaction
      expect(await order({ key: 'together', amount: 5 })).toEqual(first);
      expect(runs.n).toBe(1);
      expect(await rowsOf('together')).toBe(1);
      expect(await recordStates()).toContain('completed');
    });

    it('C3: a throw after the write leaves neither the row nor a record; the retry runs again and commits once', async () => {
      const store = storeWith(ormCase.runner);
      let fail = true;
      const order = idempotent(
        async (key: string, tx: unknown) => {
          await ormCase.insert(tx, key, 1);
          if (fail) throw new Error('payment declined');
          return 'ok';
        },
        { store, key: (key) => key, transaction: true },
      );
      await expect(order('declined')).rejects.toThrow('payment declined');
      expect(await rowsOf('declined')).toBe(0);
      fail = false;
      expect(await order('declined')).toBe('ok');
      expect(await order('declined')).toBe('ok');
      expect(await rowsOf('declined')).toBe(1);
    });

    it('H16: the database session killed at COMMIT gives 503 store-unavailable and keeps nothing; the retry commits exactly once', async () => {
      let kill: () => Promise<void>;
      let runner: AnyRunner = ormCase.runner;
      if (db === 'postgres') {
        // Killed by the server itself while it runs COMMIT: a deferred trigger on the orders
        // table terminates its own session, once (a sequence is not rolled back).
        const seq = fresh('ik_kill_seq');
        await sqlOutside(db, `CREATE SEQUENCE ${seq}`);
        await sqlOutside(
          db,
          `CREATE OR REPLACE FUNCTION ${seq}_f() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN IF nextval('${seq}') = 1 THEN PERFORM pg_terminate_backend(pg_backend_pid()); END IF; RETURN NULL; END $$`,
        );
        await sqlOutside(
          db,
          `CREATE CONSTRAINT TRIGGER ${seq}_t AFTER INSERT ON ${ordersTable} DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.key = 'killed') EXECUTE FUNCTION ${seq}_f()`,
        );
        kill = async () => {
          await sqlOutside(db, `DROP TRIGGER ${seq}_t ON ${ordersTable}`);
          await sqlOutside(db, `DROP FUNCTION ${seq}_f(); DROP SEQUENCE ${seq}`);
        };
      } else {
        // MySQL has no deferred trigger: the session is killed from outside (KILL) right
        // after the record's completion, so the ORM's COMMIT goes to a dead session.
        let armed = true;
        runner = {
          ...ormCase.runner,
          run: (body) =>
            ormCase.runner.run((tx, execute) =>
              body(tx, async (statement: TransactionStatement) => {
                const result = await execute(statement);
                if (armed) {
                  armed = false;
                  const [row] = (await execute({ dialect: 'mysql', text: 'SELECT CONNECTION_ID() AS id', values: [] })).rows;
                  await sqlOutside(db, `KILL ${Number(row!.id)}`);
                }
                return result;
              }),
            ),
        };
        kill = async () => undefined;
      }
      const store = storeWith(runner);
      let runs = 0;
      const handler = withIdempotency(
        async (req, res) => {
          try {
            const response = await inTransaction(req, async (tx) => {
              runs++;
              await ormCase.insert(tx, 'killed', 1);
              return { status: 201, body: { run: runs } };
            });
            res.writeHead(response.status, response.headers).end(response.body);
          } catch (error) {
            // What an application's error handler does with the layer's errors.
            const status = isIdempotencyError(error) ? error.status : 500;
            res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify({ code: isIdempotencyError(error) ? error.code : 'error' }));
          }
        },
        { store, scope: () => 'tenant' },
      );
      const server: Server = createServer((req, res) => void handler(req, res));
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      const { port } = server.address() as { port: number };
      const post = () =>
        fetch(`http://127.0.0.1:${port}/orders`, { method: 'POST', headers: { 'idempotency-key': 'at-commit', 'content-type': 'application/json' }, body: '{}' });
      try {
        const lost = await post();
        expect(lost.status).toBe(503);
        expect(await lost.json()).toEqual({ code: 'store-unavailable' });
        expect(await rowsOf('killed')).toBe(0);
        const retry = await post();
        expect(retry.status).toBe(201);
        expect(await retry.json()).toEqual({ run: 2 });
        const replay = await post();
        expect(replay.status).toBe(201);
        expect(replay.headers.get('idempotent-replayed')).toBe('true');
        expect(await replay.json()).toEqual({ run: 2 });
        expect(runs).toBe(2);
        expect(await rowsOf('killed')).toBe(1);
      } finally {
        server.close();
        await kill();
      }
    });

    it('H10: a status that is not stored (429) rolls the handler\'s write back and frees the key; the retry runs again', async () => {
      const store = storeWith(ormCase.runner);
      let status = 429;
      let runs = 0;
      const handler = withIdempotency(
        async (req, res) => {
          const response = await inTransaction(req, async (tx) => {
            runs++;
            await ormCase.insert(tx, 'throttled', 1);
            return { status, body: { run: runs } };
          });
          res.writeHead(response.status, response.headers).end(response.body);
        },
        { store, scope: () => 'tenant' },
      );
      const server: Server = createServer((req, res) => void handler(req, res));
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      const { port } = server.address() as { port: number };
      const post = () =>
        fetch(`http://127.0.0.1:${port}/orders`, { method: 'POST', headers: { 'idempotency-key': 'throttled', 'content-type': 'application/json' }, body: '{}' });
      try {
        const throttled = await post();
        expect(throttled.status).toBe(429);
        expect(await rowsOf('throttled')).toBe(0);
        status = 201;
        const retry = await post();
        expect(retry.status).toBe(201);
        expect(await retry.json()).toEqual({ run: 2 });
        expect(await rowsOf('throttled')).toBe(1);
      } finally {
        server.close();
      }
    });

    it('COMMIT landed but the ORM lost its answer: the record shows the commit, so the result is returned (no 503, no second run)', async () => {
      let armed = true;
      const runner: AnyRunner = {
        ...ormCase.runner,
        run: async (body) => {
          const value = await ormCase.runner.run(body);
          if (!armed) return value;
          armed = false;
          // As a driver reports a socket closed between COMMIT and its answer.
          throw Object.assign(new Error('Connection terminated unexpectedly'), { code: 'ECONNRESET' });
        },
      };
      const store = storeWith(runner);
      const runs = { n: 0 };
      const order = place(store, runs);
      expect(await order({ key: 'answer-lost', amount: 3 })).toEqual({ key: 'answer-lost', seen: 1 });
      expect(await order({ key: 'answer-lost', amount: 3 })).toEqual({ key: 'answer-lost', seen: 1 });
      expect(runs.n).toBe(1);
      expect(await rowsOf('answer-lost')).toBe(1);
    });

    it('isolation: neither the row nor the completed record is visible to others before COMMIT; a duplicate in another process waits, then replays', async () => {
      let reachedCommit!: () => void;
      const atCommit = new Promise<void>((resolve) => (reachedCommit = resolve));
      let proceed!: () => void;
      const mayCommit = new Promise<void>((resolve) => (proceed = resolve));
      const holding: AnyRunner = {
        ...ormCase.runner,
        run: (body) =>
          ormCase.runner.run((tx, execute) =>
            body(tx, async (statement: TransactionStatement) => {
              const result = await execute(statement);
              reachedCommit();
              await mayCommit; // the record is completed in the transaction, not yet committed
              return result;
            }),
          ),
      };
      const owner = place(storeWith(holding), { n: 0 });
      // Another store: no shared memory, the duplicate must wait in the database.
      const duplicateRuns = { n: 0 };
      const duplicate = place(storeWith(ormCase.runner), duplicateRuns, { waitMs: 30_000 });
      const first = owner({ key: 'isolated', amount: 9 });
      await atCommit;
      expect(await rowsOf('isolated')).toBe(0);
      const [record] = await sqlOutside<{ state: string }>(db, `SELECT state FROM ${quote(db, records)} WHERE state = 'processing'`);
      expect(record?.state).toBe('processing'); // the completion is not visible yet
      const second = duplicate({ key: 'isolated', amount: 9 });
      await new Promise((resolve) => setTimeout(resolve, 300));
      proceed();
      expect(await first).toEqual({ key: 'isolated', seen: 1 });
      expect(await second).toEqual({ key: 'isolated', seen: 1 });
      expect(duplicateRuns.n).toBe(0);
      expect(await rowsOf('isolated')).toBe(1);
    });

    it('a deadlock between two transactions: the database aborts one, it runs again in a new transaction, both commit once', async () => {
      // Two orders, locked in opposite orders by two calls: the database must abort one.
      const ids: number[] = [];
      for (const key of ['dl-a', 'dl-b']) {
        await sqlOutside(db, `INSERT INTO ${ordersTable} (${keyColumn}, amount) VALUES (${db === 'postgres' ? '$1' : '?'}, 0)`, [key]);
        const [row] = await sqlOutside<{ id: number }>(db, `SELECT id FROM ${ordersTable} WHERE ${keyColumn} = ${db === 'postgres' ? '$1' : '?'}`, [key]);
        ids.push(Number(row!.id));
      }
      const store = storeWith(ormCase.runner);
      let runs = 0;
      let firstLocks = 0;
      let bothLocked!: () => void;
      const locked = new Promise<void>((resolve) => (bothLocked = resolve));
      const transfer = idempotent(
        async (order: { key: string; from: number; to: number }, tx: unknown) => {
          runs++;
          await ormCase.bump(tx, order.from);
          if (++firstLocks === 2) bothLocked();
          await locked; // each holds its first row before it asks for the other's
          await ormCase.bump(tx, order.to);
          return 'moved';
        },
        { store, key: (order) => order.key, transaction: true },
      );
      const results = await Promise.all([
        transfer({ key: 'deadlock-1', from: ids[0]!, to: ids[1]! }),
        transfer({ key: 'deadlock-2', from: ids[1]!, to: ids[0]! }),
      ]);
      expect(results).toEqual(['moved', 'moved']);
      expect(runs).toBe(3); // the victim ran again
      const amounts = await sqlOutside<{ amount: number }>(db, `SELECT amount FROM ${ordersTable} WHERE id IN (${ids.join(', ')})`);
      expect(amounts.map((row) => Number(row.amount))).toEqual([2, 2]);
    }, 30_000);

    it('H18: a transaction whose lease was taken over is fenced: its completion matches no record, it rolls back (LeaseLostError), the successor\'s row alone stays', async () => {
      let release!: () => void;
      const held = new Promise<void>((resolve) => (release = resolve));
      let started!: () => void;
      const running = new Promise<void>((resolve) => (started = resolve));
      const slow = idempotent(
        async (key: string, tx: unknown) => {
          await ormCase.insert(tx, key, 1);
          started();
          await held;
          return 'late';
        },
        { store: storeWith(ormCase.runner), key: (key) => key, transaction: true },
      );
      const successor = idempotent(
        async (key: string, tx: unknown) => {
          await ormCase.insert(tx, key, 2);
          return 'successor';
        },
        { store: storeWith(ormCase.runner), key: (key) => key, transaction: true },
      );
      const late = slow('taken-over').catch((error: unknown) => error);
      await running;
      // As if the owner had been paused past its lease: the record's lease ends now.
      await sqlOutside(db, `UPDATE ${quote(db, records)} SET expires_at = 0 WHERE state = 'processing'`);
      expect(await successor('taken-over')).toBe('successor');
      release();
      const error = await late;
      expect(error).toBeInstanceOf(LeaseLostError);
      const rows = await sqlOutside<{ amount: number }>(db, `SELECT amount FROM ${ordersTable} WHERE ${keyColumn} = 'taken-over'`);
      expect(rows.map((row) => Number(row.amount))).toEqual([2]);
      expect(await successor('taken-over')).toBe('successor');
    });

    it('cost: the transaction sends the handler\'s statements and the record\'s completion, nothing else', async () => {
      const store = storeWith(ormCase.runner);
      const runs = { n: 0 };
      const order = place(store, runs);
      const log = statementLog(db);
      try {
        // Warm both paths first (connections, prepared plans, the table).
        await order({ key: 'cost-warm', amount: 1 });
        await ormCase.runner.run(async (tx) => ormCase.insert(tx, 'cost-warm-plain', 1));
        const plain = await log.during(() => ormCase.runner.run(async (tx) => ormCase.insert(tx, 'cost-plain', 1)));
        const protectedCall = await log.during(() => order({ key: 'cost', amount: 1 }));
        // The handler of `place` also reads its count back: the plain baseline does the same.
        const plainWithRead = await log.during(() =>
          ormCase.runner.run(async (tx) => {
            await ormCase.insert(tx, 'cost-plain-2', 1);
            await ormCase.count(tx, 'cost-plain-2');
          }),
        );
        const shown = `${protectedCall.join('\n---\n')}\n=== the same transaction without the layer:\n${plainWithRead.join('\n---\n')}`;
        expect(plain.length).toBeGreaterThan(0);
        // Statements on the records table: the claim of a free key (the store's own single
        // statement, before the transaction, as without transactions) and the completion, in
        // the transaction.
        const onRecords = protectedCall.filter((text) => text.includes(records));
        expect(onRecords.filter((text) => text.includes("SET state = 'completed'")), shown).toHaveLength(1);
        expect(onRecords.filter((text) => !text.includes("SET state = 'completed'")), shown).toHaveLength(1);
        // Everything else is exactly what the handler's transaction pays without the layer.
        expect(protectedCall.length - onRecords.length, shown).toBe(plainWithRead.length);
      } finally {
        log.restore();
      }
    });

    it('H9 across processes: 4 processes × 100 keys × 4 duplicates racing: one row and one run per key', async () => {
      const prefix = fresh('race');
      const workers = Array.from({ length: 4 }, () => startWorker<{ runs: number }>(WORKER, [orm, db, records, orders, 'race', prefix]));
      await Promise.all(workers.map((worker) => worker.ready));
      for (const worker of workers) worker.send('go');
      const results = await Promise.all(workers.map((worker) => worker.exited));
      expect(results.reduce((sum, result) => sum + result.runs, 0)).toBe(100);
      const counts = await sqlOutside<{ k: string; n: number | string }>(
        db,
        `SELECT ${keyColumn} AS k, count(*) AS n FROM ${ordersTable} WHERE ${keyColumn} LIKE '${prefix}-%' GROUP BY ${keyColumn}`,
      );
      expect(counts).toHaveLength(100);
      expect(counts.every((row) => Number(row.n) === 1)).toBe(true);
    }, 120_000);

    for (const point of ['before-commit', 'after-commit'] as const) {
      it(`the process SIGKILLed ${point.replace('-', ' ')}, then the retry: one row, ${point === 'before-commit' ? 'the retry runs once' : 'the retry replays the committed result'}`, async () => {
        const key = fresh(point);
        const worker = startWorker<unknown>(WORKER, [orm, db, records, orders, point, key]);
        worker.ready.catch(() => undefined); // it never says ready, and its end is the kill
        const signal = point === 'before-commit' ? 'at-commit' : 'committed';
        await new Promise<void>((resolve, reject) => {
          const timer = setInterval(() => {
            if (worker.stdout().includes(signal)) {
              clearInterval(timer);
              resolve();
            }
            if (worker.child.exitCode !== null) {
              clearInterval(timer);
              reject(new Error(`worker ended early: ${worker.output()}`));
            }
          }, 10);
        });
        worker.child.kill('SIGKILL');
        await new Promise((resolve) => worker.child.once('exit', resolve));
        const runs = { n: 0 };
        const retry = place(storeWith(ormCase.runner), runs, { waitMs: 30_000 });
        const result = await retry({ key, amount: 7 });
        expect(await rowsOf(key)).toBe(1);
        if (point === 'before-commit') {
          expect(runs.n).toBe(1);
          expect(result).toEqual({ key, seen: 1 });
        } else {
          expect(runs.n).toBe(0);
          expect(result).toEqual({ key, pid: worker.child.pid });
        }
      }, 60_000);
    }
  });
}
