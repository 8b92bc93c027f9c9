/**
 * One process of the ORM transaction tests (test/suites/orm-transactions.suite.ts).
 * argv: orm, database, records table, orders table, mode, key prefix.
 * - `race`: prints "ready", waits for "go", places 100 orders × 4 duplicates at once through
 *   `idempotent(fn, { transaction: true })`, prints one JSON line (how many fn runs).
 * - `before-commit`: places one order; once the record's completion ran in the ORM's
 *   transaction, prints "at-commit" and hangs (the test SIGKILLs it before COMMIT).
 * - `after-commit`: places one order; once the ORM committed, prints "committed" and hangs
 *   (the test SIGKILLs it after COMMIT, before anything else happens).
 */
import { idempotent } from '../../src/index.js';
import { mysqlStore } from '../../drivers/mysql.js';
import { postgresStore } from '../../drivers/postgres.js';
import type { TransactionRunner } from '../../src/transaction.js';
import { openOrm, urlOf, type Database, type OrmName } from '../helpers/orm-cases.js';

const [orm, db, records, orders, mode, prefix] = process.argv.slice(2) as [OrmName, Database, string, string, string, string];
const ormCase = await openOrm(orm, db, orders);
const hang = () => new Promise<never>(() => setInterval(() => undefined, 60_000));

// eslint-disable-next-line @typescript-eslint/no-explicit-any
let runner: TransactionRunner<any> = ormCase.runner;
if (mode === 'before-commit') {
  runner = {
    ...ormCase.runner,
    run: (body) =>
      ormCase.runner.run((tx, execute) =>
        body(tx, async (statement) => {
          const result = await execute(statement);
          process.stdout.write('at-commit\n');
          return hang();
        }),
      ),
  };
} else if (mode === 'after-commit') {
  runner = {
    ...ormCase.runner,
    run: async (body) => {
      await ormCase.runner.run(body);
      process.stdout.write('committed\n');
      return hang();
    },
  };
}
const options = { url: urlOf(db), table: records, transactions: runner, timeoutMs: 20_000 };
const store = db === 'postgres' ? postgresStore(options) : mysqlStore(options);
let runs = 0;
const place = idempotent(
  async (order: { key: string; amount: number }, tx: unknown) => {
    runs++;
    await ormCase.insert(tx, order.key, order.amount);
    return { key: order.key, pid: process.pid };
  },
  { store, key: (order) => order.key, transaction: true, leaseMs: mode === 'race' ? 30_000 : 1000, waitMs: 60_000, storeTimeoutMs: 20_000 },
);

if (mode === 'race') {
  await store.get('warm-up'); // connect and create the table before the race
  process.stdout.write('ready\n');
  await new Promise<void>((resolve) => process.stdin.on('data', (chunk) => String(chunk).includes('go') && resolve()));
  const calls = [];
  for (let k = 0; k < 100; k++) for (let d = 0; d < 4; d++) calls.push(place({ key: `${prefix}-${k}`, amount: k }));
  const results = await Promise.all(calls);
  await store.close();
  await ormCase.close();
  process.stdout.write(`${JSON.stringify({ pid: process.pid, runs, replays: results.filter((r) => r.pid !== process.pid).length })}\n`);
  process.stdin.destroy();
} else {
  await place({ key: prefix, amount: 7 });
}
