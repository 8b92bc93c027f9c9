/**
 * A BullMQ worker process for test/consumers/bullmq.test.ts (lines and effects as
 * crash-harness.ts describes). Its processor is `idempotentProcessor()`; a SIGKILLed
 * worker's active jobs stall (lock `lockDuration` 1 s), and the stalled check of a live
 * worker puts them back.
 *
 * Env: REDIS_URL, QUEUE, PREFIX, WORKER, MODE (plain: Redis store; transaction:
 * PostgreSQL store on table RECORDS, insert in its transaction), DATABASE_URL, TABLE,
 * LEASE_MS, WAIT_MS, CONCURRENCY, CHAOS=1 (the first attempt of every tenth job throws).
 */
import { Worker, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import pg from 'pg';
import { idempotentProcessor } from '../../consumers/bullmq.js';
import { createStore } from '../../drivers/create-store.js';
import { postgresStore } from '../../drivers/postgres.js';

const env = (name: string): string => {
  const value = process.env[name];
  if (!value) throw new Error(`bullmq-worker: ${name} is not set`);
  return value;
};
const worker = env('WORKER');
const table = env('TABLE');
const mode = env('MODE');
const chaos = process.env.CHAOS === '1';
const concurrency = Number(process.env.CONCURRENCY ?? 4);
const report = (line: Record<string, unknown>): void => {
  process.stdout.write(`${JSON.stringify({ w: worker, pid: process.pid, t: Date.now(), ...line })}\n`);
};
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

type Data = { id: string; n: number };
const db = new pg.Pool({ connectionString: env('DATABASE_URL'), max: concurrency + 2 });
db.on('error', () => undefined);
const pgStore = mode === 'transaction' ? postgresStore({ pool: db, table: env('RECORDS') }) : undefined;
const store = pgStore ?? createStore(env('REDIS_URL'));
const insert = `INSERT INTO ${table} (message_id, worker, pid) VALUES ($1, $2, $3)`;
const ranHere = new WeakSet<Job>();

async function effect(job: Job<Data>, client: pg.PoolClient | pg.Pool) {
  const { id, n } = job.data;
  ranHere.add(job);
  report({ ev: 'run', id });
  if (chaos && n % 10 === 5 && job.attemptsMade === 0) throw new Error('transient failure (test)');
  await sleep(15 + (n % 5) * 10);
  await client.query(insert, [id, worker, process.pid]);
  report({ ev: 'effect', id });
  if (mode === 'transaction') await sleep(10 + (n % 3) * 10);
  return { n, worker, at: new Date() };
}

const options = { leaseMs: Number(process.env.LEASE_MS ?? 1500), waitMs: Number(process.env.WAIT_MS ?? 300), retryDelayMs: 300, ttlMs: 600_000 };
const processor = pgStore
  ? idempotentProcessor((job: Job<Data>, client: pg.PoolClient) => effect(job, client), { ...options, store: pgStore, transaction: true })
  : idempotentProcessor((job: Job<Data>) => effect(job, db), { ...options, store });

let handled = 0;
const connection = new Redis(env('REDIS_URL'), { maxRetriesPerRequest: null });
const bull = new Worker<Data>(
  env('QUEUE'),
  async (job, token, signal) => {
    const { id } = job.data;
    report({ ev: 'delivery', id, delivery: job.attemptsStarted });
    try {
      const result = await processor(job, token, signal);
      handled++;
      report({ ev: 'settle', id, action: 'complete', outcome: 'done', replayed: !ranHere.has(job) });
      return result;
    } catch (error) {
      const name = (error as Error).name;
      const outcome = name === 'DelayedError' ? 'retry' : name === 'UnrecoverableError' ? 'reject' : 'failed';
      const code = ((error as { cause?: { code?: string } }).cause?.code ?? (error as { code?: string }).code) as string | undefined;
      report({ ev: 'settle', id, action: outcome === 'retry' ? 'delay' : 'fail', outcome, code });
      throw error;
    }
  },
  {
    connection,
    prefix: env('PREFIX'),
    concurrency,
    // A killed worker's jobs stall after their lock runs out, and come back on a live worker.
    lockDuration: 1000,
    stalledInterval: 500,
    maxStalledCount: 20,
  },
);
// A lock renewal that fails on a loaded machine makes BullMQ give the job to another worker
// while this one still runs it: what the store must then keep to one effect. Counted, not an error.
bull.on('error', (error) => report({ ev: /could not renew lock/.test(String(error)) ? 'lock-lost' : 'worker-error', error: String(error) }));
await bull.waitUntilReady();

// Before `ready`: without a listener the default action ends the process the instant the
// signal arrives, even between two statements.
process.once('SIGTERM', () => {
  void (async () => {
    await bull.close();
    await store.close();
    await db.end();
    connection.disconnect();
    report({ ev: 'stopped', handled });
    process.exit(0);
  })().catch((error: unknown) => {
    report({ ev: 'worker-error', error: String(error) });
    process.exit(1);
  });
});
report({ ev: 'ready' });
