/**
 * C1–C3, H9, H17 against a real broker: RabbitMQ redelivers, several consumer processes
 * share one Redis store, and the effect (a PostgreSQL row, deliberately NOT protected by
 * a unique constraint) must happen exactly once per message.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import amqp, { type ChannelModel, type ConfirmChannel } from 'amqplib';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AMQP_URL, POSTGRES_URL, REDIS_URL, serviceAvailable } from '../helpers/services.js';
import { importsFromSources } from '../helpers/package-imports.js';

// The shared store every consumer process uses (Redis; CONSUMER_STORE_URL may point at PostgreSQL).
const STORE_URL = process.env.CONSUMER_STORE_URL ?? REDIS_URL;
const available =
  (await serviceAvailable('RabbitMQ', AMQP_URL)) &&
  (await serviceAvailable('PostgreSQL', POSTGRES_URL)) &&
  // CONSUMER_STORE_URL=memory:// gives every process its own store: the test must then fail.
  (STORE_URL.startsWith('memory:') || (await serviceAvailable('shared store', STORE_URL)));

const WORKER = fileURLToPath(new URL('./rabbitmq-worker.ts', import.meta.url));
const EXAMPLE = fileURLToPath(new URL('../../examples/consumer-rabbitmq.ts', import.meta.url));
const MESSAGES = 200;

interface Line {
  w: string;
  ev: string;
  id?: string;
  how?: string;
  path?: string;
  redelivered?: boolean;
  [field: string]: unknown;
}

/** A child process whose JSON stdout lines are collected and can be waited for. */
class Proc {
  readonly lines: Line[] = [];
  readonly stderr: string[] = [];
  readonly exited: Promise<number | null>;
  #waiters: Array<() => void> = [];

  constructor(readonly name: string, readonly child: ChildProcess) {
    createInterface({ input: child.stdout! }).on('line', (text) => {
      try {
        this.lines.push(JSON.parse(text) as Line);
      } catch {
        this.stderr.push(text);
      }
      for (const wake of this.#waiters) wake();
    });
    createInterface({ input: child.stderr! }).on('line', (text) => this.stderr.push(text));
    this.exited = new Promise((resolve) => child.once('exit', (code) => {
      resolve(code);
      for (const wake of this.#waiters) wake();
    }));
  }

  /** Resolve once `done()` holds, checked on every line; reject after `timeoutMs`. */
  waitFor<T>(what: string, done: () => T | undefined | false, timeoutMs: number): Promise<T> {
    return new Promise((resolve, reject) => {
      const check = () => {
        const value = done();
        if (value !== undefined && value !== false) {
          clearTimeout(timer);
          this.#waiters = this.#waiters.filter((w) => w !== check);
          resolve(value);
        } else if (this.child.exitCode !== null || this.child.signalCode !== null) {
          clearTimeout(timer);
          reject(new Error(`${this.name} exited (${this.child.exitCode ?? this.child.signalCode}) before ${what}:\n${this.stderr.join('\n')}`));
        }
      };
      const timer = setTimeout(() => {
        this.#waiters = this.#waiters.filter((w) => w !== check);
        const last = this.lines.slice(-8).map((l) => JSON.stringify(l));
        reject(new Error(`${this.name}: timed out waiting for ${what}\n${[...this.stderr, ...last].join('\n')}`));
      }, timeoutMs);
      this.#waiters.push(check);
      check();
    });
  }

  line(ev: string, pred: (l: Line) => boolean = () => true, timeoutMs = 20_000): Promise<Line> {
    return this.waitFor(`a "${ev}" line`, () => this.lines.find((l) => l.ev === ev && pred(l)), timeoutMs);
  }

  kill(signal: NodeJS.Signals): void {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill(signal);
  }
}

function spawnTs(name: string, file: string, env: Record<string, string>): Proc {
  const child = spawn(process.execPath, ['--import', 'tsx', file], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return new Proc(name, child);
}

/** Poll until `done()` or fail after `timeoutMs`. */
async function until(what: string, done: () => boolean | Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await done())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe.skipIf(!available)('RabbitMQ consumers over a shared store', () => {
  const run = randomUUID().slice(0, 8);
  const queue = `idem-test-${run}`;
  const dlq = `${queue}.dead`;
  const table = `idem_effects_${run}`;
  const procs: Proc[] = [];
  let connection: ChannelModel;
  let channel: ConfirmChannel;
  let db: pg.Client;

  const assertQueues = async (name: string) => {
    // x-expires removes the queues even if this test process dies before afterAll.
    await channel.assertQueue(`${name}.dead`, { durable: false, arguments: { 'x-expires': 300_000 } });
    await channel.assertQueue(name, {
      durable: false,
      arguments: { 'x-expires': 300_000, 'x-dead-letter-exchange': '', 'x-dead-letter-routing-key': `${name}.dead` },
    });
  };
  const publish = async (name: string, id: string, body: unknown) => {
    channel.sendToQueue(name, Buffer.from(JSON.stringify(body)), { messageId: id, contentType: 'application/json' });
  };
  const workerEnv = (name: string, extra: Record<string, string>) => ({
    WORKER: name,
    QUEUE: queue,
    TABLE: table,
    AMQP_URL,
    STORE_URL,
    DATABASE_URL: POSTGRES_URL,
    LEASE_MS: '1500',
    WAIT_MS: '400',
    ...extra,
  });

  beforeAll(async () => {
    connection = await amqp.connect(AMQP_URL);
    channel = await connection.createConfirmChannel();
    await assertQueues(queue);
    db = new pg.Client({ connectionString: POSTGRES_URL });
    await db.connect();
    // No unique constraint on message_id: a second run of the handler must show as a second row.
    await db.query(
      `CREATE TABLE ${table} (id bigserial PRIMARY KEY, message_id text NOT NULL, worker text NOT NULL, n int NOT NULL)`,
    );
  });

  afterAll(async () => {
    for (const proc of procs) proc.kill('SIGKILL');
    await Promise.all(procs.map((p) => p.exited));
    await channel?.deleteQueue(queue).catch(() => {});
    await channel?.deleteQueue(dlq).catch(() => {});
    await connection?.close().catch(() => {});
    await db?.query(`DROP TABLE IF EXISTS ${table}`).catch(() => {});
    await db?.end();
  });

  it(
    'C2/C3/H9/H17: 200 messages published twice, nacked, redelivered and orphaned by a killed consumer have exactly 200 effects',
    async () => {
      const started = Date.now();
      // The doomed consumer runs alone first, so its deliveries are fresh: it never acks, and
      // after 8 deliveries it hangs inside the handler (claim held and renewed) until killed.
      const doomed = spawnTs('doomed', WORKER, workerEnv('doomed', { DOOM_AFTER: '8', PREFETCH: '20' }));
      procs.push(doomed);
      await doomed.line('ready');

      const ids = Array.from({ length: MESSAGES }, (_, n) => `${run}-msg-${n}`);
      const bodyOf = (n: number) => ({ n, payload: `order ${n}` });
      // Every message twice: a third of the copies right behind their original (so that two
      // consumers race on them), the rest after all originals.
      const order = [...ids.keys()].flatMap((n) => (n % 3 === 0 ? [n, n] : [n]));
      order.push(...[...ids.keys()].filter((n) => n % 3 !== 0));
      expect(order).toHaveLength(2 * MESSAGES);
      for (const n of order) await publish(queue, ids[n]!, bodyOf(n));
      await channel.waitForConfirms();
      const hung = await doomed.line('doomed');

      const workers = ['w1', 'w2'].map((name) => spawnTs(name, WORKER, workerEnv(name, { CHAOS: '1', PREFETCH: '15' })));
      procs.push(...workers);
      await Promise.all(workers.map((w) => w.line('ready')));
      // Kill it mid-run: the others are busy, and it holds 20 unacked deliveries (8 handled,
      // 1 inside the handler, the rest not started).
      await until('the others to be busy', () => workers.every((w) => w.lines.some((l) => l.ev === 'settle')), 10_000);
      doomed.kill('SIGKILL');
      await doomed.exited;

      // Every published message is settled for good exactly once: acked (or dead-lettered).
      const finals = () => workers.flatMap((w) => w.lines.filter((l) => l.ev === 'settle' && l.how !== 'retry'));
      await until('400 final settlements', () => finals().length >= 2 * MESSAGES, 40_000);

      // Same message id, different body: KeyReusedError, dead-lettered, no effect.
      await publish(queue, ids[0]!, { n: 0, payload: 'a different order' });
      await channel.waitForConfirms();
      await until('the mismatch to be dead-lettered', () => finals().length >= 2 * MESSAGES + 1, 10_000);
      await until('the dead-letter queue to get it', async () => (await channel.checkQueue(dlq)).messageCount === 1, 5000);
      const dead = await channel.get(dlq, { noAck: true });
      expect(dead && dead.properties.messageId).toBe(ids[0]);

      for (const w of workers) w.kill('SIGTERM');
      const stopped = await Promise.all(workers.map((w) => w.line('stopped')));
      expect(await Promise.all(workers.map((w) => w.exited))).toEqual([0, 0]);
      expect((await channel.checkQueue(queue)).messageCount).toBe(0);

      const { rows } = await db.query<{ effects: string; distinct_ids: string }>(
        `SELECT count(*) AS effects, count(DISTINCT message_id) AS distinct_ids FROM ${table}`,
      );
      const { rows: perWorker } = await db.query<{ worker: string; effects: string }>(
        `SELECT worker, count(*) AS effects FROM ${table} GROUP BY worker ORDER BY worker`,
      );
      const { rows: hungRows } = await db.query<{ worker: string }>(`SELECT worker FROM ${table} WHERE message_id = $1`, [
        hung.id,
      ]);
      const { rows: stored } = await db.query<{ message_id: string }>(`SELECT DISTINCT message_id FROM ${table}`);

      const all = procs.flatMap((p) => p.lines);
      const count = (pred: (l: Line) => boolean) => all.filter(pred).length;
      const figures = {
        published: 2 * MESSAGES + 1,
        deliveries: count((l) => l.ev === 'delivery'),
        redeliveries: count((l) => l.ev === 'delivery' && l.redelivered === true),
        executed: count((l) => l.path === 'executed'),
        replays: count((l) => l.path === 'replayed'),
        conflicts: count((l) => l.path === 'request-in-progress'),
        handlerErrors: count((l) => l.ev === 'handler-throws'),
        testNacks: count((l) => l.ev === 'test-nack'),
        heldByKilledConsumer: count((l) => l.w === 'doomed' && l.ev === 'held'),
        acks: count((l) => l.ev === 'settle' && l.how === 'ack'),
        deadLettered: count((l) => l.ev === 'settle' && l.how === 'dead-letter'),
        effects: Number(rows[0]!.effects),
        distinctIds: Number(rows[0]!.distinct_ids),
        effectsPerWorker: Object.fromEntries(perWorker.map((r) => [r.worker, Number(r.effects)])),
        seconds: (Date.now() - started) / 1000,
      };
      console.log(`rabbitmq consumers (store ${new URL(STORE_URL).protocol}):`, JSON.stringify(figures));
      // A store call slower than storeTimeoutMs (a loaded machine) is a retryable error: the
      // message is requeued and its redelivery settles it, which the counts below prove.
      // Anything else (a lost lease, a worker error) is a problem.
      const storeTimeouts = all.filter((l) => l.ev === 'idempotency-event' && l.type === 'store-error' && /store-unavailable|unavailable/i.test(String(l.error)));
      if (storeTimeouts.length > 0) console.log(`rabbitmq consumers: ${storeTimeouts.length} store calls timed out and were redelivered`);
      const problems = all.filter((l) => (l.ev === 'worker-error' || l.ev === 'idempotency-event') && !storeTimeouts.includes(l));
      expect(problems).toEqual([]);

      // The claim: exactly one effect per message, despite everything below.
      expect(figures.effects).toBe(MESSAGES);
      expect(figures.distinctIds).toBe(MESSAGES);
      expect(new Set(stored.map((r) => r.message_id))).toEqual(new Set(ids));
      expect(figures.acks).toBe(2 * MESSAGES);
      expect(figures.deadLettered).toBe(1);
      expect(all.filter((l) => l.how === 'dead-letter').map((l) => l.path)).toEqual(['key-reused']);
      // ...and everything below really happened.
      expect(figures.replays).toBeGreaterThanOrEqual(MESSAGES); // every second copy at least
      expect(figures.handlerErrors).toBeGreaterThan(0); // C3: released, then run again
      expect(figures.testNacks).toBeGreaterThan(0);
      expect(figures.heldByKilledConsumer).toBeGreaterThanOrEqual(8);
      expect(figures.effectsPerWorker.doomed).toBeGreaterThan(0); // its effects were replayed, not repeated
      // H17: the killed consumer's claim blocked the redelivery (conflict) until its lease
      // ran out; then another consumer ran the handler, once.
      expect(figures.conflicts).toBeGreaterThan(0);
      expect(hungRows.map((r) => r.worker)).toHaveLength(1);
      expect(hungRows[0]!.worker).not.toBe('doomed');
      expect(stopped.every((s) => s.handled as number > 0)).toBe(true);
    },
    60_000,
  );

  it('the example consumer (examples/consumer-rabbitmq.ts) ships once per order, two copies running', async () => {
    const exampleQueue = `${queue}-example`;
    const exampleTable = `${table}_example`;
    // The example declares its own (durable) queues; the table is created here so that its two
    // copies do not race on CREATE TABLE IF NOT EXISTS (not atomic in PostgreSQL).
    await db.query(
      `CREATE TABLE ${exampleTable} (id serial PRIMARY KEY, message_id text NOT NULL, sku text, quantity int)`,
    );
    try {
      const env = { QUEUE: exampleQueue, TABLE: exampleTable, STORE_URL, DATABASE_URL: POSTGRES_URL, AMQP_URL };
      const copies = ['a', 'b'].map((name) => spawnTs(`example-${name}`, EXAMPLE, env));
      procs.push(...copies);
      await Promise.all(copies.map((c) => c.waitFor('consuming', () => c.stderr.some((l) => l.startsWith('consuming')), 20_000)));
      const orders = Array.from({ length: 30 }, (_, i) => ({ id: `${run}-order-${i}`, sku: `sku-${i % 4}`, quantity: 1 + (i % 3) }));
      for (let copy = 0; copy < 3; copy++) {
        for (const order of orders) await publish(exampleQueue, order.id, order);
      }
      await channel.waitForConfirms();
      await until('the example queue to drain', async () => {
        const { messageCount } = await channel.checkQueue(exampleQueue);
        const { rows } = await db.query<{ n: string }>(`SELECT count(*) AS n FROM ${exampleTable}`).catch(() => ({ rows: [{ n: '0' }] }));
        return messageCount === 0 && Number(rows[0]!.n) >= orders.length;
      }, 20_000);
      for (const c of copies) c.kill('SIGTERM');
      expect(await Promise.all(copies.map((c) => c.exited))).toEqual([0, 0]);
      const { rows } = await db.query<{ effects: string; distinct_ids: string }>(
        `SELECT count(*) AS effects, count(DISTINCT message_id) AS distinct_ids FROM ${exampleTable}`,
      );
      expect(rows[0]).toEqual({ effects: String(orders.length), distinct_ids: String(orders.length) });
      expect((await channel.checkQueue(exampleQueue)).messageCount).toBe(0);
      expect((await channel.checkQueue(`${exampleQueue}.dead`)).messageCount).toBe(0);
    } finally {
      await channel.deleteQueue(exampleQueue).catch(() => {});
      await channel.deleteQueue(`${exampleQueue}.dead`).catch(() => {});
      await db.query(`DROP TABLE IF EXISTS ${exampleTable}`);
    }
  }, 40_000);

  it('docs/consumers.md: the RabbitMQ consumer a user copies runs as written (two copies, each order shipped once)', async () => {
    const docs = readFileSync(new URL('../../docs/consumers.md', import.meta.url), 'utf8');
    const section = docs.slice(docs.indexOf('## A RabbitMQ consumer to copy'));
    const snippet = /```ts\n([\s\S]*?)```/.exec(section)![1]!;
    const docQueue = `${queue}-docs`;
    const docTable = `${table}_docs`;
    // The snippet as written; only the package import (not installed under its own name
    // here), the queue and the table names are replaced, so that runs do not collide.
    const resolve = createRequire(import.meta.url).resolve;
    const source = importsFromSources(snippet)
      .replace("from 'amqplib'", `from ${JSON.stringify(resolve('amqplib'))}`)
      .replace("from 'pg'", `from ${JSON.stringify(resolve('pg'))}`)
      .replaceAll("'orders.dead'", `'${docQueue}.dead'`)
      .replaceAll("'orders'", `'${docQueue}'`)
      .replaceAll('INSERT INTO shipments', `INSERT INTO ${docTable}`);
    expect(source).not.toMatch(/'orders|INTO shipments/);
    // .mts: outside the package, a .ts file would load as CommonJS (no top-level await).
    const file = join(tmpdir(), `consumers-doc-${run}.mts`);
    writeFileSync(file, source);
    await db.query(`CREATE TABLE ${docTable} (id serial PRIMARY KEY, message_id text NOT NULL, sku text, quantity int)`);
    try {
      const env = { STORE_URL, DATABASE_URL: POSTGRES_URL };
      const copies = ['a', 'b'].map((name) => spawnTs(`docs-${name}`, file, env));
      procs.push(...copies);
      const alive = () => {
        const dead = copies.find((c) => c.child.exitCode !== null || c.child.signalCode !== null);
        if (dead) throw new Error(`${dead.name} exited:\n${dead.stderr.join('\n')}`);
      };
      await until('the snippet to declare its queue', async () => {
        alive();
        const probe = await connection.createChannel();
        probe.on('error', () => {});
        const ok = await probe.checkQueue(docQueue).then(() => true, () => false);
        if (ok) await probe.close();
        return ok;
      }, 20_000);
      await until('both copies to consume', async () => (await channel.checkQueue(docQueue)).consumerCount === 2, 20_000);
      const orders = Array.from({ length: 20 }, (_, i) => ({ id: `${run}-doc-${i}`, sku: `sku-${i % 3}`, quantity: 1 + i }));
      for (let copy = 0; copy < 3; copy++) {
        for (const order of orders) await publish(docQueue, order.id, order);
      }
      await channel.waitForConfirms();
      await until('the snippet to drain its queue', async () => {
        alive();
        const { messageCount } = await channel.checkQueue(docQueue);
        const { rows } = await db.query<{ n: string }>(`SELECT count(*) AS n FROM ${docTable}`);
        return messageCount === 0 && Number(rows[0]!.n) >= orders.length;
      }, 20_000);
      await new Promise((r) => setTimeout(r, 300)); // a late duplicate would show now
      const { rows } = await db.query<{ effects: string; distinct_ids: string }>(
        `SELECT count(*) AS effects, count(DISTINCT message_id) AS distinct_ids FROM ${docTable}`,
      );
      expect(rows[0]).toEqual({ effects: String(orders.length), distinct_ids: String(orders.length) });
      expect((await channel.checkQueue(`${docQueue}.dead`)).messageCount).toBe(0);
      expect(copies.flatMap((c) => c.stderr)).toEqual([]);
    } finally {
      for (const p of procs) p.kill('SIGKILL');
      rmSync(file, { force: true });
      await channel.deleteQueue(docQueue).catch(() => {});
      await channel.deleteQueue(`${docQueue}.dead`).catch(() => {});
      await db.query(`DROP TABLE IF EXISTS ${docTable}`);
    }
  }, 40_000);
});
