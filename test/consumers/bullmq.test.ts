/**
 * BullMQ on the Redis here: `idempotentProcessor()` in a real Worker. Each
 * outcome does to the job what docs/consumers.md says (C1–C3): completes with the result
 * (or the replayed one), moves it to delayed on a conflict or an unavailable store without
 * using an attempt, lets BullMQ retry a throwing handler, fails a mismatch for good. Then
 * the crash proof (crash-harness.ts): three worker processes, every job added twice (the
 * same jobId again after the first was removed), workers SIGKILLed while their jobs are
 * active (the jobs stall and come back), effects = jobs; on Redis, and on PostgreSQL with
 * `transaction: true`.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { Queue, QueueEvents, Worker, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, expectTypeOf, it } from 'vitest';
import { idempotentProcessor, JobRejectedError } from '../../consumers/bullmq.js';
import { createStore } from '../../drivers/create-store.js';
import { postgresStore } from '../../drivers/postgres.js';
import { idempotentIn } from '../../src/idempotent.js';
import type { IdempotencyStore } from '../../src/store.js';
import { POSTGRES_URL, REDIS_URL, serviceAvailable } from '../helpers/services.js';
import { bundleWorker, crashProof, Proc, sleep, type Line } from './crash-harness.js';

const available = (await serviceAvailable('Redis', REDIS_URL)) && (await serviceAvailable('PostgreSQL', POSTGRES_URL));
const run = randomUUID().slice(0, 8);
const PREFIX = `ik-test-${run}`;

type Data = { id: string; n: number; note?: string };

describe.skipIf(!available)('BullMQ: idempotentProcessor()', () => {
  let connection: Redis;
  let store: IdempotencyStore;
  const closers: Array<() => Promise<unknown>> = [];

  /** A queue, its events, and a worker running `processor` on it. */
  async function queueWith(name: string, processor: (job: Job<Data>, token?: string, signal?: AbortSignal) => Promise<unknown>) {
    const queueName = `${name}-${randomUUID().slice(0, 6)}`;
    const queue = new Queue<Data>(queueName, { connection, prefix: PREFIX });
    const events = new QueueEvents(queueName, { connection: new Redis(REDIS_URL, { maxRetriesPerRequest: null }), prefix: PREFIX });
    const worker = new Worker<Data>(queueName, processor, { connection: new Redis(REDIS_URL, { maxRetriesPerRequest: null }), prefix: PREFIX, concurrency: 4 });
    await Promise.all([worker.waitUntilReady(), events.waitUntilReady()]);
    closers.push(async () => {
      await worker.close();
      await events.close();
      await queue.obliterate({ force: true });
      await queue.close();
    });
    return { queue, events, worker, queueName };
  }

  beforeAll(async () => {
    connection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
    store = createStore(REDIS_URL, { namespace: `bullmq_${run}` });
  });
  afterAll(async () => {
    for (const close of closers) await close().catch(() => undefined);
    await store?.close();
    connection?.disconnect();
  });

  it('C1/C2: the job completes with fn\'s result; the same jobId added again after removal replays it, fn not run', async () => {
    const runs: string[] = [];
    const { queue, events } = await queueWith('once', idempotentProcessor(async (job: Job<Data>) => {
      runs.push(job.id!);
      return { shipped: job.data.n, at: new Date(0).toISOString() };
    }, { store }));
    const first = await queue.add('ship', { id: 'o-1', n: 1 }, { jobId: 'o-1', removeOnComplete: true });
    expect(await first.waitUntilFinished(events, 10_000)).toEqual({ shipped: 1, at: '1970-01-01T00:00:00.000Z' });
    // BullMQ itself ignores an add with the id of a job it still has; once removed, the id is new to it.
    const again = await queue.add('ship', { id: 'o-1', n: 1 }, { jobId: 'o-1', removeOnComplete: true });
    expect(await again.waitUntilFinished(events, 10_000)).toEqual({ shipped: 1, at: '1970-01-01T00:00:00.000Z' });
    expect(runs).toEqual(['o-1']);
  });

  it('C3: the key in flight in another worker -> moved to delayed (no attempt used), then completed with the other\'s result', async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const delayed: string[] = [];
    const { queue, events, queueName } = await queueWith('conflict', async (job, token, signal) => {
      try {
        return await processor(job, token, signal);
      } catch (error) {
        delayed.push((error as Error).name);
        throw error;
      }
    });
    const processor = idempotentProcessor(async () => 'here', { store, waitMs: 0, retryDelayMs: 300 });
    // The recipe's own key space: what another worker's processor claims.
    const other = idempotentIn('message:bullmq', async () => {
      await held;
      return 'by the other worker';
    }, { store, key: () => 'o-2', scope: () => queueName });
    const running = other();
    await sleep(50);
    const job = await queue.add('ship', { id: 'o-2', n: 2 }, { jobId: 'o-2', attempts: 1 });
    await sleep(150);
    expect(await job.getState()).toBe('delayed');
    release();
    await running;
    expect(await job.waitUntilFinished(events, 10_000)).toBe('by the other worker');
    // Its single attempt was not used up by the delays: it was started again and completed.
    const done = (await queue.getJob('o-2'))!;
    expect(done.attemptsStarted).toBeGreaterThanOrEqual(2);
    expect(await done.getState()).toBe('completed');
    expect(delayed[0]).toBe('DelayedError');
  });

  it('C3: fn throws -> BullMQ retries per attempts and backoff and fn runs again; a mismatch fails for good, attempts left unused', async () => {
    let calls = 0;
    const { queue, events } = await queueWith('retry', idempotentProcessor(async (job: Job<Data>) => {
      if (job.data.id === 'o-3' && ++calls === 1) throw new Error('downstream is down');
      return job.data.n;
    }, { store, fingerprint: (job) => job.data }));
    const flaky = await queue.add('ship', { id: 'o-3', n: 3 }, { jobId: 'o-3', attempts: 3, backoff: { type: 'fixed', delay: 50 } });
    expect(await flaky.waitUntilFinished(events, 10_000)).toBe(3);
    expect(calls).toBe(2);
    const ok = await queue.add('ship', { id: 'o-4', n: 4 }, { jobId: 'o-4', removeOnComplete: true });
    await ok.waitUntilFinished(events, 10_000);
    const reused = await queue.add('ship', { id: 'o-4', n: 4, note: 'other data' }, { jobId: 'o-4', attempts: 5 });
    await expect(reused.waitUntilFinished(events, 10_000)).rejects.toThrow(/idempotency-kit: key-reused/);
    const failed = (await queue.getJob('o-4'))!;
    expect(failed.attemptsMade).toBe(1);
    expect(await failed.getState()).toBe('failed');
  });

  it('C3: the store down -> delayed, fn not run; types, JobRejectedError and bad options', async () => {
    const down = createStore('redis://127.0.0.1:1', { namespace: 'down' });
    let runs = 0;
    const { queue } = await queueWith('down', idempotentProcessor(async () => ++runs, { store: down, storeTimeoutMs: 200, retryDelayMs: 5000 }));
    const job = await queue.add('ship', { id: 'o-5', n: 5 }, { jobId: 'o-5' });
    for (let i = 0; i < 50 && (await job.getState()) !== 'delayed'; i++) await sleep(50);
    expect(await job.getState()).toBe('delayed');
    expect(runs).toBe(0);
    await down.close().catch(() => undefined);

    const error = new JobRejectedError(Object.assign(new Error('reused'), { code: 'key-reused' }));
    expect([error.name, error.code, error.message]).toEqual(['UnrecoverableError', 'key-reused', 'idempotency-kit: key-reused: reused']);
    const fn = async (job: Job<Data>) => job.data.n;
    expect(() => idempotentProcessor(fn, { store, retryDelayMs: -5 })).toThrow('Expected `retryDelayMs` to be a non-negative integer (ms) or a function returning one, got -5');
    expect(() => idempotentProcessor(fn, { store, key: 'id' as never })).toThrow('Expected `key` to be a function, got "id"');
    expect(() => idempotentProcessor(fn, { store, waitMs: -1 })).toThrow('Expected `waitMs` to be a non-negative integer, got -1');
    expectTypeOf(idempotentProcessor(fn, { store })).returns.resolves.toBeNumber();
  });

  describe('transaction: true (PostgreSQL)', () => {
    let db: pg.Pool;
    const table = `ik_bullmq_tx_${run}`;
    beforeAll(async () => {
      db = new pg.Pool({ connectionString: POSTGRES_URL, max: 4 });
      await db.query(`CREATE TABLE ${table} (id serial PRIMARY KEY, message_id text NOT NULL)`);
    });
    afterAll(async () => {
      await db?.query(`DROP TABLE IF EXISTS ${table}`);
      await db?.query(`DROP TABLE IF EXISTS ${table}_records`);
      await db?.end();
    });

    it('fn(job, client) writes in the record\'s transaction: a failed attempt leaves nothing, the retry commits once', async () => {
      const txStore = postgresStore({ pool: db, table: `${table}_records` });
      let attempt = 0;
      const { queue, events } = await queueWith('tx', idempotentProcessor(async (job: Job<Data>, client: pg.PoolClient) => {
        await client.query(`INSERT INTO ${table} (message_id) VALUES ($1)`, [job.id]);
        if (++attempt === 1) throw new Error('after the write');
        return attempt;
      }, { store: txStore, transaction: true }));
      const job = await queue.add('ship', { id: 'tx-1', n: 1 }, { jobId: 'tx-1', attempts: 2, removeOnComplete: true });
      expect(await job.waitUntilFinished(events, 10_000)).toBe(2);
      const again = await queue.add('ship', { id: 'tx-1', n: 1 }, { jobId: 'tx-1' });
      expect(await again.waitUntilFinished(events, 10_000)).toBe(2);
      expect((await db.query(`SELECT count(*)::int AS n FROM ${table}`)).rows[0].n).toBe(1);
    });
  });
});

describe.skipIf(!available)('BullMQ crash proof: workers SIGKILLed while their jobs are active', () => {
  const JOBS = Number(process.env.CONSUMER_CRASH_MESSAGES ?? 120);
  let worker: Awaited<ReturnType<typeof bundleWorker>>;
  let db: pg.Pool;
  let connection: Redis;
  const dropped: string[] = [];
  const queues: Queue[] = [];
  beforeAll(async () => {
    worker = await bundleWorker(new URL('./bullmq-worker.ts', import.meta.url));
    db = new pg.Pool({ connectionString: POSTGRES_URL, max: 3 });
    connection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  });
  afterAll(async () => {
    for (const queue of queues) {
      await queue.obliterate({ force: true }).catch(() => undefined);
      await queue.close();
    }
    for (const table of dropped) await db?.query(`DROP TABLE IF EXISTS ${table}`);
    await db?.end();
    connection?.disconnect();
    worker?.dispose();
  });

  for (const mode of ['plain', 'transaction'] as const) {
    it(`C2/C3/H9/H17: ${JOBS} jobs added twice, 3 workers (${mode === 'plain' ? 'Redis store' : 'PostgreSQL store, transaction: true'}) SIGKILLed at random -> stalled jobs come back, one effect each`, async () => {
      const id = `${run}_${mode}`;
      const queueName = `ik-crash-${id}`;
      const table = `ik_bullmq_effects_${id}`;
      dropped.push(table, `${table}_records`);
      await db.query(`CREATE TABLE ${table} (id bigserial PRIMARY KEY, message_id text NOT NULL, worker text NOT NULL, pid int NOT NULL)`);
      const queue = new Queue<Data>(queueName, { connection, prefix: PREFIX });
      queues.push(queue);
      const ids = Array.from({ length: JOBS }, (_, n) => `${id}-j${n}`);
      const env = (name: string) => ({
        REDIS_URL,
        QUEUE: queueName,
        PREFIX,
        WORKER: name,
        MODE: mode,
        RECORDS: `${table}_records`,
        DATABASE_URL: POSTGRES_URL,
        TABLE: table,
        // Longer than the lock (1 s) plus two stalled checks (0.5 s each): a stalled job that comes
        // back at once meets its dead worker's claim and is delayed.
        LEASE_MS: '3500',
        WAIT_MS: '300',
        CONCURRENCY: '4',
        CHAOS: '1',
      });
      const add = (n: number) => queue.add('ship', { id: ids[n]!, n }, { jobId: ids[n], removeOnComplete: true, attempts: 5, backoff: { type: 'fixed', delay: 100 } });
      let readded = 0;
      const { figures, problems } = await crashProof({
        system: 'bullmq',
        mode,
        ids,
        db,
        table,
        workers: ['w1', 'w2', 'w3'],
        start: (name: string, sink: Line[]) =>
          new Proc(name, spawn(process.execPath, [worker.file], { env: { ...process.env, ...env(name) }, stdio: ['ignore', 'pipe', 'pipe'] }), sink),
        get published() {
          return JOBS + readded;
        },
        async publish() {
          for (let n = 0; n < JOBS; n++) {
            await add(n);
            if (n % 4 === 3) await sleep(50);
          }
          // The producer adds every job again once it is done and removed: BullMQ runs it
          // again under the same id, and the store answers it.
          const again = new Set(ids.keys());
          const deadline = Date.now() + 50_000;
          while (again.size > 0 && Date.now() < deadline) {
            for (const n of again) {
              if ((await queue.getJob(ids[n]!)) === undefined) {
                await add(n);
                readded++;
                again.delete(n);
              }
            }
            await sleep(100);
          }
        },
        drained: async () => {
          const counts = await queue.getJobCounts('waiting', 'active', 'delayed', 'prioritized', 'failed');
          return Object.values(counts).every((c) => c === 0);
        },
        kills: 6,
        killEveryMs: [500, 1100],
        timeoutMs: 70_000,
      });
      console.log(`bullmq consumers crash proof: ${JSON.stringify({ ...figures, published: JOBS + readded })}`);
      expect(problems).toEqual([]);
      expect(readded).toBe(JOBS);
      expect(figures.distinctIds).toBe(JOBS);
      if (mode === 'transaction') expect(figures.effects).toBe(JOBS);
      else expect(figures.effects).toBe(JOBS + figures.windowHits);
      expect(figures.minDeliveriesPerMessage).toBeGreaterThanOrEqual(2);
      expect(figures.kills).toBeGreaterThanOrEqual(3);
      expect(figures.killsHolding).toBe(figures.kills);
      expect(figures.killsInHandler).toBeGreaterThan(0);
      expect(figures.replays).toBeGreaterThanOrEqual(JOBS);
      expect(figures.handlerErrors).toBeGreaterThan(0);
      // Stalled jobs of the killed workers came back and were settled elsewhere. (Whether they
      // meet the dead worker's claim (a conflict, delayed) depends on how long they queue
      // behind the waiting jobs: the conflict path is proven above.)
      expect(figures.recoveredFromKilled).toBeGreaterThan(0);
    }, 100_000);
  }
});
