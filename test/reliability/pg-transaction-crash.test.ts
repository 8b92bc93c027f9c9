/**
 * Effect and record in one PostgreSQL transaction, proven by crashing: consumer
 * processes (fixtures/pg-transaction-worker.ts) are SIGKILLed at every point of a job:
 * before the business write, after it but before COMMIT, right before COMMIT is sent,
 * after COMMIT before the answer, and at random moments. After each kill the job is
 * retried by another process.
 *
 * With `transaction: true` the order row exists exactly when the record is completed, at
 * every kill point; the retry replays when it does and runs fn once when it does not, so
 * orders always equal distinct keys and no record is lost. The same schedule on the plain
 * path (autocommit write, then the record's completion) hits its window on every kill
 * between the two: that order is written twice. That is what the transaction closes.
 *
 * PG_TX_CRASH_RUNS (default 200), PG_TX_CRASH_PLAIN_RUNS (default 16), PG_TX_CRASH_LANES
 * (default 6, processes killed in parallel), PG_TX_CRASH_SEED (to replay a schedule),
 * PG_TX_CRASH_BUDGET_S (default 240: past it no new job starts, once every lane has run
 * at least PG_TX_CRASH_MIN_RUNS / lanes jobs, default 50 in all; a loaded machine starts
 * processes slowly, and the suite's duration stays bounded), PG_TX_CRASH_DEBUG=1 (per-run
 * timings).
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { build } from 'esbuild';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { storageKey } from '../../src/key.js';
import { sqlKey } from '../../drivers/utils.js';
import { POSTGRES_URL, serviceAvailable } from '../helpers/services.js';
import { figure } from './fixtures/cluster.js';
import { seededRandom } from '../helpers/random.js';

const SOURCE = fileURLToPath(new URL('./fixtures/pg-transaction-worker.ts', import.meta.url));
// Bundled once into plain JavaScript: a process per kill, so start-up is most of the cost
// (about a third of the CPU of loading the sources through tsx).
const WORKER = fileURLToPath(new URL(`../../node_modules/.cache/ik-pg-tx-worker-${randomUUID().slice(0, 8)}.mjs`, import.meta.url));
const RUNS = Number(process.env.PG_TX_CRASH_RUNS ?? 200);
const PLAIN_RUNS = Number(process.env.PG_TX_CRASH_PLAIN_RUNS ?? 16);
const LANES = Number(process.env.PG_TX_CRASH_LANES ?? 6);
const SEED = Number(process.env.PG_TX_CRASH_SEED ?? Math.floor(Math.random() * 2 ** 31));
const BUDGET_MS = Number(process.env.PG_TX_CRASH_BUDGET_S ?? 240) * 1000;
const MIN_RUNS = Math.min(RUNS, Number(process.env.PG_TX_CRASH_MIN_RUNS ?? 50));
// Short, so a retry after a kill mid-job waits little; renewals every third of it keep a
// live owner's lease even on a loaded machine.
const LEASE_MS = 1000;

type Mode = 'transaction' | 'plain';
type KillPoint = 'before-write' | 'after-write' | 'before-commit' | 'after-commit' | 'random';
const POINTS: Record<Mode, KillPoint[]> = {
  transaction: ['before-write', 'after-write', 'before-commit', 'after-commit', 'random'],
  plain: ['before-write', 'after-write', 'after-commit', 'random'],
};

const available = await serviceAvailable('PostgreSQL', POSTGRES_URL);


/**
 * Every point equally often, shuffled within each round of all the points: whatever prefix
 * of the plan runs (the time budget may cut it), the points in it are spread evenly.
 */
function schedule(mode: Mode, runs: number, random: () => number): KillPoint[] {
  const points = Array.from({ length: runs }, (_, i) => POINTS[mode][i % POINTS[mode].length]!);
  const round = POINTS[mode].length;
  for (let start = 0; start < points.length; start += round) {
    const end = Math.min(start + round, points.length);
    for (let i = end - 1; i > start; i--) {
      const j = start + Math.floor(random() * (i - start + 1));
      [points[i], points[j]] = [points[j]!, points[i]!];
    }
  }
  return points;
}

interface Line {
  type: 'ready' | 'started' | 'done' | 'error';
  key?: string;
  result?: { orderId: number; pid: number };
  ran?: boolean;
  message?: string;
  code?: string;
}

const RETRYABLE = new Set(['lease-lost', 'request-in-progress', 'transaction-conflict', 'store-unavailable']);
/** Redeliveries after a retryable error, reported with the figures. */
const redeliveries: string[] = [];
/** Jobs that failed (retryably) before their kill point on a starved machine, reported likewise. */
const starved: string[] = [];

interface Worker {
  child: ChildProcessWithoutNullStreams;
  ready: Promise<void>;
  /** The next line of this type (for `done`, an `error` counts), of this job's key when given. */
  next(type: Line['type'], key?: string): Promise<Line>;
  exited: Promise<NodeJS.Signals | number | null>;
  output(): string;
  /** The PostgreSQL application_name of this process's connections. */
  appName: string;
}

const live = new Set<ChildProcessWithoutNullStreams>();

function startWorker(env: Record<string, string>): Worker {
  const appName = `ik-pg-tx-crash-${randomUUID().slice(0, 8)}`;
  const child = spawn(process.execPath, [WORKER], {
    env: { ...process.env, ...env, APP_NAME: appName },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  live.add(child);
  let stderr = '';
  child.stderr.on('data', (chunk) => (stderr += chunk));
  const queue: Line[] = [];
  const waiters: { type: Line['type']; key: string | undefined; resolve: (line: Line) => void; reject: (e: Error) => void }[] = [];
  const matches = (line: Line, type: Line['type'], key: string | undefined) =>
    (line.type === type || (line.type === 'error' && type === 'done')) && (key === undefined || line.key === key);
  const exited = new Promise<NodeJS.Signals | number | null>((resolve) =>
    child.once('exit', (code, signal) => {
      live.delete(child);
      for (const w of waiters.splice(0)) w.reject(new Error(`worker exited (${signal ?? code}) before "${w.type}":\n${stderr}`));
      resolve(signal ?? code);
    }),
  );
  createInterface({ input: child.stdout }).on('line', (text) => {
    const line = JSON.parse(text) as Line;
    const i = waiters.findIndex((w) => matches(line, w.type, w.key));
    if (i >= 0) waiters.splice(i, 1)[0]!.resolve(line);
    else queue.push(line);
  });
  const next = (type: Line['type'], key?: string) => {
    const i = queue.findIndex((l) => matches(l, type, key));
    if (i >= 0) return Promise.resolve(queue.splice(i, 1)[0]!);
    if (child.exitCode !== null || child.signalCode !== null) return Promise.reject(new Error(`worker gone:\n${stderr}`));
    return new Promise<Line>((resolve, reject) => waiters.push({ type, key, resolve, reject }));
  };
  const ready = next('ready').then(() => undefined);
  ready.catch(() => undefined); // a spare killed unused never gets ready; awaited where it matters
  return { child, ready, next, exited, output: () => stderr, appName };
}

const send = (worker: Worker, job: { key: string; killAt: KillPoint | 'none' }) => worker.child.stdin.write(`${JSON.stringify(job)}\n`);
/** The row key of a record: the engine's storage key, hashed again by the driver. */
const rowKey = (key: string) => sqlKey(storageKey(undefined, key, 'function'));
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface RunResult {
  key: string;
  killAt: KillPoint;
  /** Orders and record state right after the kill, before the retry. */
  ordersAfterKill: number;
  recordAfterKill: string;
  retryRan: boolean;
  ordersAtEnd: number;
  retryOrderId: number;
}

describe.skipIf(!available)('PostgreSQL transaction: SIGKILL at every point of a job', () => {
  const db = new pg.Pool({ connectionString: POSTGRES_URL, max: 8 });
  const tables: string[] = [];
  const random = seededRandom(SEED); // PG_TX_CRASH_SEED reproduces a schedule

  beforeAll(async () => {
    await db.query('SELECT 1');
    await build({ entryPoints: [SOURCE], outfile: WORKER, bundle: true, packages: 'external', platform: 'node', format: 'esm', target: 'node20', logLevel: 'error' });
  });
  afterAll(async () => {
    for (const child of live) child.kill('SIGKILL');
    for (const name of tables) await db.query(`DROP TABLE IF EXISTS "${name}"`);
    await db.end();
    rmSync(WORKER, { force: true });
  });

  async function crashRuns(mode: Mode, runs: number, budgetMs = Infinity): Promise<{ results: RunResult[]; seconds: number; jobs: number }> {
    const suffix = randomUUID().replaceAll('-', '').slice(0, 12);
    const orders = `ik_crash_orders_${suffix}`;
    const records = `ik_crash_records_${suffix}`;
    tables.push(orders, records);
    await db.query(`CREATE TABLE "${orders}" (id serial PRIMARY KEY, key text NOT NULL, pid int NOT NULL)`);
    const env = { POSTGRES_URL, RECORDS: records, ORDERS: orders, MODE: mode, LEASE_MS: String(LEASE_MS) };
    const plan = schedule(mode, runs, random);
    const results: RunResult[] = [];
    const started = performance.now();
    const minPerLane = Math.ceil(Math.min(runs, MIN_RUNS) / LANES);
    let jobsStarted = 0;

    const ordersOf = async (key: string) =>
      (await db.query(`SELECT id FROM "${orders}" WHERE key = $1 ORDER BY id`, [key])).rows.map((r) => r.id as number);
    const sessionsEnded = async (appName: string) => {
      for (const deadline = performance.now() + 30_000; ; await sleep(10)) {
        const { rows } = await db.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1', [appName]);
        if (rows[0].n === 0) return;
        if (performance.now() > deadline) throw new Error(`the sessions of a killed worker (${appName}) are still open after 30 s`);
      }
    };
    const recordState = async () => {
      // The record table is created by the first worker; one row per key, keys hashed.
      const { rows } = await db.query(`SELECT state, count(*)::int AS n FROM "${records}" GROUP BY state`);
      return Object.fromEntries(rows.map((r) => [r.state as string, r.n as number])) as Record<string, number>;
    };

    async function lane(jobs: KillPoint[]): Promise<void> {
      // The retrying consumer lives through the whole lane; the doomed ones are started
      // three ahead, so a process is loaded and connected when its job comes.
      const retrier = startWorker({ ...env, WAIT_MS: String(LEASE_MS * 10), POOL_MAX: '12' });
      const spares = [startWorker(env), startWorker(env), startWorker(env)];
      const retries: Promise<void>[] = [];
      try {
        await retrier.ready;
        for (const [index, killAt] of jobs.entries()) {
          if (index >= minPerLane && performance.now() - started > budgetMs) break;
          jobsStarted++;
          const doomed = spares.shift()!;
          spares.push(startWorker(env));
          const t0 = performance.now();
          await doomed.ready;
          const t1 = performance.now();
          const key = `k-${randomUUID()}`;
          send(doomed, { key, killAt });
          if (killAt === 'random') {
            await doomed.next('started');
            await sleep(random() * 200); // about the length of a job on a loaded machine
            doomed.child.kill('SIGKILL');
          }
          // A starved machine can fail the job before it reaches its kill point (its 1 s
          // lease lost, a store call over its time bound): the worker then answers and lives
          // on, so its exit alone is never awaited. Such a job is killed where it stopped, as
          // a random kill is, and the same invariants hold for it.
          // (A random kill was sent already: its worker may answer first, and dies anyway.)
          const answered = killAt === 'random' ? new Promise<never>(() => undefined) : doomed.next('done', key).catch(() => doomed.exited);
          const how: Line | Awaited<Worker['exited']> = await Promise.race([doomed.exited, answered]);
          let point: KillPoint = killAt;
          if (typeof how === 'object' && how !== null) {
            expect(how.type === 'error' && RETRYABLE.has(how.code ?? ''), `a worker to kill at ${killAt} answered ${JSON.stringify(how)}:\n${doomed.output()}`).toBe(true);
            starved.push(`${how.code} before ${killAt}`);
            point = 'random';
            doomed.child.kill('SIGKILL');
            await doomed.exited;
          } else expect(how, `a worker killed at ${killAt} died by SIGKILL:\n${doomed.output()}`).toBe('SIGKILL');

          // A killed process's last statement can still be running in its server session
          // (a COMMIT sent just before the kill commits after it): the state after the kill
          // is read once those sessions have ended, orders and record in one snapshot.
          await sessionsEnded(doomed.appName);
          const { rows } = await db.query(
            `SELECT (SELECT count(*)::int FROM "${orders}" WHERE key = $1) AS orders, (SELECT state FROM "${records}" WHERE key = $2) AS state`,
            [key, rowKey(key)],
          );
          const ordersAfterKill = rows[0].orders as number;
          const recordAfterKill = (rows[0].state as string | null) ?? 'absent';
          // The retry waits out the lease when the kill left the key processing; the lane
          // goes on with its next kill meanwhile.
          const t2 = performance.now();
          const retried = (async () => {
            // As a broker redelivers: again after an error that says to retry later (a
            // lease lost on a starved machine, a conflict), each of them rolled back.
            let answer: Line;
            for (let attempt = 1; ; attempt++) {
              send(retrier, { key, killAt: 'none' });
              answer = await retrier.next('done', key);
              if (answer.type === 'done' || attempt === 5 || !RETRYABLE.has(answer.code ?? '')) break;
              redeliveries.push(`${answer.code} after ${point}`);
            }
            expect(answer.type, `the retry of ${key} (killed at ${point}): ${answer.message}`).toBe('done');
            const ids = await ordersOf(key);
            if (process.env.PG_TX_CRASH_DEBUG) {
              console.log(killAt, 'ready', Math.round(t1 - t0), 'killed', Math.round(t2 - t1), 'retried', Math.round(performance.now() - t2));
            }
            results.push({
              key,
              killAt: point,
              ordersAfterKill,
              recordAfterKill,
              retryRan: answer.ran!,
              ordersAtEnd: ids.length,
              retryOrderId: answer.result!.orderId,
            });
            // The answer every retry gets is a committed order's id.
            expect(ids).toContain(answer.result!.orderId);
          })();
          retried.catch(() => undefined); // awaited with the lane's others below
          retries.push(retried);
        }
        await Promise.all(retries);
      } finally {
        await Promise.allSettled(retries);
        retrier.child.stdin.end();
        for (const spare of spares) spare.child.kill('SIGKILL');
        await Promise.all([retrier.exited, ...spares.map((spare) => spare.exited)]);
      }
    }

    const lanes = Array.from({ length: LANES }, (_, i) => plan.filter((_, j) => j % LANES === i));
    await Promise.all(lanes.map(lane));
    const states = await recordState();
    expect(results.length).toBe(jobsStarted);
    expect(states.completed, 'every key has its completed record (none lost)').toBe(jobsStarted);
    expect(states.processing ?? 0).toBe(0);
    return { results, seconds: (performance.now() - started) / 1000, jobs: jobsStarted };
  }

  it(`C1/H9/H17: with transaction: true, up to ${RUNS} jobs (at least ${MIN_RUNS}) SIGKILLed at every point: the order exists exactly when the record is completed, orders = distinct keys, every retry replays or runs once`, async () => {
    const { results, seconds, jobs } = await crashRuns('transaction', RUNS, BUDGET_MS);
    expect(jobs).toBeGreaterThanOrEqual(MIN_RUNS);
    // Every kill point ran, whatever the budget cut.
    for (const p of POINTS.transaction) expect(results.some((r) => r.killAt === p), p).toBe(true);
    for (const r of results) {
      // Right after the kill: the order exists exactly when its record is completed.
      expect(r.recordAfterKill === 'completed', `${r.killAt}: record ${r.recordAfterKill} with ${r.ordersAfterKill} orders`).toBe(
        r.ordersAfterKill === 1,
      );
      // The write and the record commit together: one order after the retry, whatever the kill point.
      expect(r.ordersAtEnd, `${r.killAt}: orders for ${r.key}`).toBe(1);
      // A committed order means a completed record: the retry replays it. No order: the retry runs fn once.
      expect(r.retryRan, `${r.killAt}: the retry ran fn iff nothing had committed`).toBe(r.ordersAfterKill === 0);
      if (r.killAt === 'after-commit') expect(r.retryRan).toBe(false);
      if (r.killAt !== 'after-commit' && r.killAt !== 'random') expect(r.retryRan).toBe(true);
    }
    const { rows } = await db.query(`SELECT count(*)::int AS orders, count(DISTINCT key)::int AS keys FROM "${tables.at(-2)}"`);
    expect(rows[0]).toEqual({ orders: jobs, keys: jobs });
    const by = (p: KillPoint) => results.filter((r) => r.killAt === p).length;
    figure(
      `pg transaction crash: ${jobs} SIGKILLs${jobs < RUNS ? ` (of ${RUNS}: the ${BUDGET_MS / 1000} s budget ran out)` : ''} (${POINTS.transaction.map((p) => `${p} ${by(p)}`).join(', ')}) ` +
        `-> ${rows[0].orders} orders for ${rows[0].keys} keys, ${results.filter((r) => !r.retryRan).length} retries replayed, ` +
        `${results.filter((r) => r.retryRan).length} ran once; ${seconds.toFixed(1)} s, ${LANES} lanes, seed ${SEED}; ` +
        `${redeliveries.length} redeliveries after a retryable error${redeliveries.length ? ` (${redeliveries.join(', ')})` : ''}; ` +
        `${starved.length} jobs failed retryably before their kill point and were killed there${starved.length ? ` (${starved.join(', ')})` : ''}`,
    );
  }, 600_000);

  it(`control: the plain path (autocommit write, then the record) under the same kills writes twice on every kill between the two (${PLAIN_RUNS} jobs)`, async () => {
    const { results, seconds } = await crashRuns('plain', PLAIN_RUNS);
    for (const r of results) {
      if (r.killAt === 'after-write') {
        // The window: the order committed, the record did not; the retry ran fn again.
        expect(r.ordersAfterKill).toBe(1);
        expect(r.recordAfterKill).toBe('processing');
        expect(r.retryRan).toBe(true);
        expect(r.ordersAtEnd).toBe(2);
      } else if (r.killAt !== 'random') expect(r.ordersAtEnd).toBe(1);
    }
    const { rows } = await db.query(`SELECT count(*)::int AS orders, count(DISTINCT key)::int AS keys FROM "${tables.at(-2)}"`);
    const window = results.filter((r) => r.killAt === 'after-write').length;
    expect(window).toBeGreaterThan(0);
    expect(rows[0].keys).toBe(PLAIN_RUNS);
    expect(rows[0].orders).toBeGreaterThanOrEqual(PLAIN_RUNS + window);
    figure(
      `pg plain-path control: ${PLAIN_RUNS} SIGKILLs -> ${rows[0].orders} orders for ${rows[0].keys} keys ` +
        `(${rows[0].orders - rows[0].keys} duplicates, ${window} kills in the window); ${seconds.toFixed(1)} s`,
    );
  }, 600_000);
});
