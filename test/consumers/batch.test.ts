/**
 * `idempotentBatch()` on real stores: each message claimed on its own,
 * bounded concurrency, successes and failures reported (with the SQS `batchItemFailures`
 * shape), and a batch redelivered after its process was SIGKILLed mid-batch runs only the
 * messages that had not finished (C1–C3 per message).
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, expectTypeOf, it } from 'vitest';
import { createStore } from '../../drivers/create-store.js';
import { memoryStore } from '../../drivers/memory.js';
import { postgresStore, type PostgresStore } from '../../drivers/postgres.js';
import { RequestInProgressError, KeyReusedError, StoreUnavailableError } from '../../src/errors.js';
import { idempotent } from '../../src/idempotent.js';
import { idempotentBatch, type BatchResult } from '../../src/index.js';
import type { IdempotencyStore } from '../../src/store.js';
import { POSTGRES_URL, REDIS_URL, serviceAvailable } from '../helpers/services.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const run = randomUUID().slice(0, 8);

interface Msg {
  id: string;
  n: number;
  messageId?: string;
}
const batchOf = (count: number, prefix = randomUUID().slice(0, 8)): Msg[] =>
  Array.from({ length: count }, (_, n) => ({ id: `${prefix}-${n}`, n, messageId: `sqs-${prefix}-${n}` }));

const targets: { name: string; create: () => Promise<IdempotencyStore> }[] = [
  { name: 'memory', create: async () => memoryStore({ sweepIntervalMs: 0 }) },
];
const redisUp = await serviceAvailable('Redis', REDIS_URL);
const postgresUp = await serviceAvailable('PostgreSQL', POSTGRES_URL);
if (redisUp) targets.push({ name: 'redis', create: async () => createStore(REDIS_URL, { namespace: `batch_${run}` }) });
if (postgresUp) targets.push({ name: 'postgres', create: async () => createStore(POSTGRES_URL, { namespace: `batch_${run}` }) });

describe.each(targets)('idempotentBatch() on the $name store', ({ create }) => {
  let store: IdempotencyStore;
  beforeAll(async () => {
    store = await create();
  });
  afterAll(async () => {
    await store?.close();
  });

  it('C1/C2: every message runs once; the same batch delivered again replays each result without running the handler', async () => {
    const messages = batchOf(25);
    const runs: string[] = [];
    const handler = async (msg: Msg) => {
      runs.push(msg.id);
      await sleep(1 + (msg.n % 3));
      return { shipped: msg.n, at: new Date(1_700_000_000_000 + msg.n) };
    };
    const first = await idempotentBatch(messages, handler, { store, key: (msg) => msg.id });
    expect(first.failed).toEqual([]);
    expect(first.batchItemFailures).toEqual([]);
    expect(first.succeeded.map((s) => s.index)).toEqual(messages.map((_, i) => i));
    expect(first.succeeded.map((s) => s.message)).toEqual(messages);
    const again = await idempotentBatch(messages, handler, { store, key: (msg) => msg.id });
    expect(runs.sort()).toEqual(messages.map((m) => m.id).sort());
    expect(again.succeeded.map((s) => s.result)).toStrictEqual(first.succeeded.map((s) => s.result));
    expect(again.succeeded[3]!.result.at).toBeInstanceOf(Date);
  });

  it('C3: one failing message does not fail the rest; only it is reported (SQS shape) and only it runs on redelivery', async () => {
    const messages = batchOf(12);
    const attempts = new Map<string, number>();
    const handler = async (msg: Msg) => {
      const attempt = (attempts.get(msg.id) ?? 0) + 1;
      attempts.set(msg.id, attempt);
      if (msg.n % 5 === 2 && attempt === 1) throw new Error(`card declined ${msg.n}`);
      return msg.n * 10;
    };
    const options = { store, key: (msg: Msg) => msg.id, itemIdentifier: (msg: Msg) => msg.messageId! };
    const first = await idempotentBatch(messages, handler, options);
    expect(first.failed.map((f) => [f.index, f.kind, (f.error as Error).message])).toEqual([
      [2, 'failed', 'card declined 2'],
      [7, 'failed', 'card declined 7'],
    ]);
    expect(first.batchItemFailures).toEqual([{ itemIdentifier: messages[2]!.messageId }, { itemIdentifier: messages[7]!.messageId }]);
    expect(first.succeeded).toHaveLength(10);
    // SQS redelivers the whole batch when the function failed, or only the failures: both are safe.
    const second = await idempotentBatch(messages, handler, options);
    expect(second.failed).toEqual([]);
    expect(second.succeeded.map((s) => s.result)).toEqual(messages.map((m) => m.n * 10));
    expect([...attempts.values()].reduce((a, b) => a + b, 0)).toBe(14); // 12 first runs + the 2 failed ones again
  });

  it('runs at most `concurrency` handlers at once, and 1 keeps the batch order', async () => {
    const messages = batchOf(20);
    let running = 0;
    let peak = 0;
    const order: number[] = [];
    const handler = async (msg: Msg) => {
      running++;
      peak = Math.max(peak, running);
      order.push(msg.n);
      await sleep(20);
      running--;
    };
    // Never more than the bound (and the lanes do overlap; how many at once depends on the store's latency).
    await idempotentBatch(messages, handler, { store, key: (msg) => msg.id, concurrency: 4 });
    expect(peak).toBeLessThanOrEqual(4);
    expect(peak).toBeGreaterThan(1);
    const serial = batchOf(8);
    order.length = 0;
    peak = 0;
    await idempotentBatch(serial, handler, { store, key: (msg) => msg.id, concurrency: 1 });
    expect(peak).toBe(1);
    expect(order).toEqual(serial.map((m) => m.n));
    // The default is 10.
    peak = 0;
    await idempotentBatch(batchOf(30), handler, { store, key: (msg) => msg.id });
    expect(peak).toBeLessThanOrEqual(10);
    expect(peak).toBeGreaterThan(4);
  });

  it('C3: a message another consumer is running is a retryable conflict; a reused key with another body is a rejection', async () => {
    const [busy, reused, plain] = batchOf(3);
    // Another consumer holds `busy` for the whole batch.
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const other = idempotent(() => held, { store, key: () => busy!.id, fingerprint: () => busy!.n });
    const holding = other();
    await sleep(30);
    await idempotentBatch([reused!], (msg) => msg.n, { store, key: (msg) => msg.id, fingerprint: (msg) => msg.n });
    const result = await idempotentBatch(
      [busy!, { ...reused!, n: 99 }, plain!],
      (msg) => msg.n,
      { store, key: (msg) => msg.id, fingerprint: (msg) => msg.n, waitMs: 0 },
    );
    release();
    await holding;
    expect(result.succeeded.map((s) => s.message.id)).toEqual([plain!.id]);
    expect(result.failed.map((f) => [f.message.id, f.kind, f.error instanceof RequestInProgressError || f.error instanceof KeyReusedError])).toEqual([
      [busy!.id, 'retry', true],
      [reused!.id, 'reject', true],
    ]);
    expect(result.batchItemFailures).toEqual([{ itemIdentifier: busy!.id }, { itemIdentifier: reused!.id }]);
  });
});

describe('idempotentBatch() options and edge cases', () => {
  const store = memoryStore({ sweepIntervalMs: 0 });
  afterAll(() => store.close());

  it('bad options are precise TypeErrors before any message runs', async () => {
    let ran = 0;
    const handler = () => void ran++;
    await expect(idempotentBatch(batchOf(2), handler, { store, key: (m) => m.id, concurrency: 0 })).rejects.toThrow(
      'Expected `concurrency` to be a positive integer, got 0',
    );
    await expect(idempotentBatch(batchOf(2), handler, { store, key: (m) => m.id, concurrency: 1.5 })).rejects.toThrow(TypeError);
    await expect(idempotentBatch(batchOf(2), handler, { store, key: (m) => m.id, itemIdentifier: 'messageId' as never })).rejects.toThrow(
      'Expected `itemIdentifier` to be a function, got "messageId"',
    );
    await expect(idempotentBatch(batchOf(2), handler, { store, key: 'id' as never })).rejects.toThrow(/Expected `key` to be a function/);
    await expect(idempotentBatch(batchOf(2), handler, { store, key: (m) => m.id, leaseMs: -1 })).rejects.toThrow(
      'Expected `leaseMs` to be a positive integer, got -1',
    );
    await expect(idempotentBatch(null as never, handler, { store, key: (m: Msg) => m.id })).rejects.toThrow(/Expected `messages` to be an array/);
    await expect(idempotentBatch(batchOf(1), 'handler' as never, { store, key: (m) => m.id })).rejects.toThrow('Expected `handler` to be a function');
    expect(ran).toBe(0);
  });

  it('an empty batch, an iterable batch, and the store down (fail closed: nothing runs, every message retryable)', async () => {
    expect(await idempotentBatch([], () => 1, { store, key: () => 'x' })).toEqual({ succeeded: [], failed: [], batchItemFailures: [] });
    const set = new Set(batchOf(3));
    expect((await idempotentBatch(set, (m) => m.n, { store, key: (m) => m.id })).succeeded.map((s) => s.result)).toEqual([0, 1, 2]);
    const down = memoryStore({ sweepIntervalMs: 0 });
    await down.close();
    const broken: IdempotencyStore = { ...down, name: 'broken', claim: () => Promise.reject(new Error('ECONNREFUSED')) };
    let ran = 0;
    const result = await idempotentBatch(batchOf(3), () => void ran++, { store: broken, key: (m) => m.id });
    expect(ran).toBe(0);
    expect(result.failed.map((f) => [f.kind, f.error instanceof StoreUnavailableError])).toEqual([
      ['retry', true],
      ['retry', true],
      ['retry', true],
    ]);
  });

  it('a failed message with no id to report it under fails the whole batch (left out, it would count as done)', async () => {
    const messages = [{ id: 'ok-1', n: 1 }, { id: '', n: 2 }] as Msg[];
    await expect(idempotentBatch(messages, (m) => m.n, { store, key: (m) => m.id })).rejects.toThrow(
      /Message 1 of the batch failed, and its `key` gave no id to report it under/,
    );
    const error = await idempotentBatch(messages, (m) => m.n, { store, key: (m) => m.id, itemIdentifier: () => '' }).catch((e: Error) => e);
    expect((error as Error).message).toMatch(/its `itemIdentifier` gave no id/);
    expect(((error as Error).cause as Error).name).toBe('KeyInvalidError');
  });

  it('types: results and messages keep their types', async () => {
    const result = await idempotentBatch(batchOf(1), async (m) => ({ total: m.n }), { store, key: (m) => m.id });
    expectTypeOf(result).toEqualTypeOf<BatchResult<Msg, { total: number }>>();
    expectTypeOf<(typeof result.succeeded)[number]['result']['total']>().toBeNumber();
    expectTypeOf<(typeof result.failed)[number]['message']>().toEqualTypeOf<Msg>();
  });
});

describe.skipIf(!postgresUp)('idempotentBatch() with transaction: true, and a batch whose process is SIGKILLed mid-batch', () => {
  const table = `ik_batch_effects_${run}`;
  const records = `ik_batch_records_${run}`;
  let db: pg.Pool;
  let store: PostgresStore<pg.PoolClient>;
  beforeAll(async () => {
    db = new pg.Pool({ connectionString: POSTGRES_URL, max: 4 });
    await db.query(`CREATE TABLE ${table} (id serial PRIMARY KEY, message_id text NOT NULL, pid int NOT NULL)`);
    store = postgresStore({ pool: db, table: records });
  });
  afterAll(async () => {
    await store?.close();
    await db?.query(`DROP TABLE IF EXISTS ${table}`);
    await db?.query(`DROP TABLE IF EXISTS ${records}`);
    await db?.end();
  });

  it('each message commits its effect with its record; a rolled-back message is reported and runs again alone', async () => {
    const messages = batchOf(6);
    const result = await idempotentBatch(
      messages,
      async (msg: Msg, client: pg.PoolClient) => {
        await client.query(`INSERT INTO ${table} (message_id, pid) VALUES ($1, $2)`, [msg.id, process.pid]);
        if (msg.n === 4) throw new Error('rolled back');
        return msg.n;
      },
      { store, key: (msg) => msg.id, transaction: true, concurrency: 2 },
    );
    expect(result.failed.map((f) => f.index)).toEqual([4]);
    const { rows } = await db.query<{ message_id: string }>(`SELECT message_id FROM ${table} ORDER BY message_id`);
    expect(rows.map((r) => r.message_id)).toEqual(messages.filter((m) => m.n !== 4).map((m) => m.id).sort());
  });

  it('a crash mid-batch: the redelivered batch replays what committed and runs only the unfinished messages, once', async () => {
    const ids = batchOf(24, `crash-${run}`).map((m) => m.id);
    const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(new URL('./batch-worker.ts', import.meta.url))], {
      env: { ...process.env, POSTGRES_URL, TABLE: table, RECORDS: records, IDS: JSON.stringify(ids), HANG_AFTER: '9' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr!.on('data', (chunk) => (stderr += chunk));
    const exited = new Promise((resolve) => child.once('exit', resolve));
    // The worker commits 9 messages, then every further handler hangs inside its transaction
    // (claims held, effects not committed): killed now, mid-batch.
    const hanging = new Promise<void>((resolve, reject) => {
      child.stdout!.on('data', (chunk: Buffer) => chunk.toString().includes('hanging') && resolve());
      void exited.then(() => reject(new Error(`batch worker exited early:\n${stderr}`)));
    });
    await hanging;
    child.kill('SIGKILL');
    await exited;
    const committed = (await db.query<{ message_id: string }>(`SELECT message_id FROM ${table} WHERE message_id LIKE $1`, [`crash-${run}%`])).rows.map((r) => r.message_id);
    expect(committed.length).toBeGreaterThanOrEqual(9);
    expect(committed.length).toBeLessThan(ids.length);

    const ran: string[] = [];
    const messages = ids.map((id, n) => ({ id, n }));
    // Redelivered: the dead process's claims expire after its lease (1 s), waited for here.
    let result!: BatchResult<Msg, number>;
    for (let attempt = 0; attempt < 20; attempt++) {
      result = await idempotentBatch(
        messages,
        async (msg: Msg, client: pg.PoolClient) => {
          ran.push(msg.id);
          await client.query(`INSERT INTO ${table} (message_id, pid) VALUES ($1, $2)`, [msg.id, process.pid]);
          return msg.n;
        },
        { store, key: (msg) => msg.id, transaction: true, concurrency: 4, leaseMs: 1000, waitMs: 1500 },
      );
      if (result.failed.length === 0) break;
      expect(result.failed.every((f) => f.kind === 'retry')).toBe(true);
      await sleep(200);
    }
    expect(result.failed).toEqual([]);
    expect(result.succeeded.map((s) => s.result)).toEqual(messages.map((m) => m.n));
    expect(new Set(ran)).toEqual(new Set(ids.filter((id) => !committed.includes(id))));
    const { rows } = await db.query<{ effects: string; distinct_ids: string }>(
      `SELECT count(*) AS effects, count(DISTINCT message_id) AS distinct_ids FROM ${table} WHERE message_id LIKE $1`,
      [`crash-${run}%`],
    );
    expect(rows[0]).toEqual({ effects: String(ids.length), distinct_ids: String(ids.length) });
  }, 30_000);
});
