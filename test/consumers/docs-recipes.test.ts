/**
 * docs/consumers.md: the NATS JetStream, BullMQ and MQTT recipes a user copies run as
 * written against the real brokers (only the package import, and the stream, queue, topic
 * and table names are replaced, so that runs never collide): every order published twice
 * is shipped once.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { jetstream } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import mqtt from 'mqtt';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES_URL, REDIS_URL, serviceAvailable } from '../helpers/services.js';
import { Proc, sleep, type Line } from './crash-harness.js';

const available =
  (await serviceAvailable('NATS', 'nats://127.0.0.1:4222')) &&
  (await serviceAvailable('Mosquitto', 'mqtt://127.0.0.1:1883')) &&
  (await serviceAvailable('Redis', REDIS_URL)) &&
  (await serviceAvailable('PostgreSQL', POSTGRES_URL));
const root = fileURLToPath(new URL('../../', import.meta.url));
const run = randomUUID().slice(0, 8);
// Inside the project (bare imports resolve), under node_modules (git never sees it).
const dir = join(root, 'node_modules', '.cache', `ik-docs-recipes-${run}`);
const docs = readFileSync(join(root, 'docs/consumers.md'), 'utf8');

/** The first ```ts block under `heading`, with the package imports pointed at the sources. */
function recipe(heading: string, names: Array<[string, string]>): string {
  const section = docs.slice(docs.indexOf(`\n## ${heading}\n`));
  let code = /```ts\n([\s\S]*?)```/.exec(section)![1]!;
  code = code
    .replace("from 'idempotency-kit'", `from ${JSON.stringify(join(root, 'src/index.ts'))}`)
    .replace(/from 'idempotency-kit\/(nats|bullmq|mqtt)'/, (_m, sub: string) => `from ${JSON.stringify(join(root, `consumers/${sub}.ts`))}`);
  for (const [from, to] of names) code = code.replaceAll(from, to);
  return code;
}

describe.skipIf(!available)('docs/consumers.md recipes run as written', () => {
  let db: pg.Pool;
  const tables: string[] = [];
  const procs: Proc[] = [];
  beforeAll(async () => {
    mkdirSync(dir, { recursive: true });
    db = new pg.Pool({ connectionString: POSTGRES_URL, max: 2 });
  });
  afterAll(async () => {
    for (const p of procs) p.kill('SIGKILL');
    for (const t of tables) await db.query(`DROP TABLE IF EXISTS ${t}`);
    await db?.end();
    rmSync(dir, { recursive: true, force: true });
  });

  async function start(name: string, code: string, env: Record<string, string> = {}): Promise<{ table: string; proc: Proc }> {
    const table = `ik_docs_${name}_${run}`;
    tables.push(table);
    await db.query(`CREATE TABLE ${table} (id serial PRIMARY KEY, message_id text NOT NULL, sku text, quantity int)`);
    const file = join(dir, `${name}.mts`);
    writeFileSync(file, code.replaceAll('INSERT INTO shipments', `INSERT INTO ${table}`));
    const lines: Line[] = [];
    const proc = new Proc(name, spawn(process.execPath, ['--import', 'tsx', file], { cwd: root, env: { ...process.env, STORE_URL: REDIS_URL, DATABASE_URL: POSTGRES_URL, ...env }, stdio: ['ignore', 'pipe', 'pipe'] }), lines);
    procs.push(proc);
    return { table, proc };
  }
  async function shippedOnce(table: string, proc: Proc, orders: number) {
    const deadline = Date.now() + 20_000;
    for (;;) {
      if (!proc.alive) throw new Error(`${proc.name} exited:\n${proc.stderr.join('\n')}`);
      const { rows } = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}`);
      if (rows[0]!.n >= orders) break;
      if (Date.now() > deadline) throw new Error(`${proc.name}: ${rows[0]!.n} of ${orders} shipped:\n${proc.stderr.join('\n')}`);
      await sleep(100);
    }
    await sleep(800); // a second effect would show now
    const { rows } = await db.query<{ effects: number; ids: number }>(`SELECT count(*)::int AS effects, count(DISTINCT message_id)::int AS ids FROM ${table}`);
    expect(rows[0]).toEqual({ effects: orders, ids: orders });
    expect(proc.stderr.filter((l) => !/ExperimentalWarning|--trace-warnings/.test(l))).toEqual([]);
    proc.kill('SIGKILL');
  }
  const orders = Array.from({ length: 10 }, (_, i) => ({ id: `${run}-order-${i}`, sku: `sku-${i % 3}`, quantity: 1 + i }));

  it('NATS JetStream', async () => {
    const stream = `DOCS_${run}`;
    const subject = `docs${run}`;
    const { table, proc } = await start('nats', recipe('NATS JetStream', [["'ORDERS'", `'${stream}'`], ["'orders.>'", `'${subject}.>'`]]));
    const nc = await connect({ servers: '127.0.0.1:4222' });
    const js = jetstream(nc);
    try {
      // The recipe creates the stream: publish once it exists.
      for (let i = 0; ; i++) {
        try {
          await js.publish(`${subject}.new`, JSON.stringify(orders[0]), { msgID: orders[0]!.id });
          break;
        } catch (error) {
          if (i > 100 || !proc.alive) throw error;
          await sleep(200);
        }
      }
      // Twice: within the stream's duplicate window JetStream drops the copy itself.
      for (let copy = 0; copy < 2; copy++) {
        for (const order of orders) await js.publish(`${subject}.new`, JSON.stringify(order), { msgID: order.id });
      }
      await shippedOnce(table, proc, orders.length);
    } finally {
      const jsm = await js.jetstreamManager();
      await jsm.streams.delete(stream).catch(() => undefined);
      await nc.close();
    }
  }, 60_000);

  it('BullMQ', async () => {
    const queueName = `docs-orders-${run}`;
    const code = recipe('BullMQ', [["'orders'", `'${queueName}'`]]) + '\nawait Promise.all(JSON.parse(process.env.ORDERS!).map(enqueue));\nawait sleep(1500);\nawait Promise.all(JSON.parse(process.env.ORDERS!).map(enqueue));\nfunction sleep(ms: number) { return new Promise((r) => setTimeout(r, ms)); }\n';
    const { table, proc } = await start('bullmq', code, { ORDERS: JSON.stringify(orders) });
    try {
      await shippedOnce(table, proc, orders.length);
    } finally {
      const connection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
      const queue = new Queue(queueName, { connection });
      await queue.obliterate({ force: true }).catch(() => undefined);
      await queue.close();
      connection.disconnect();
    }
  }, 60_000);

  it('MQTT', async () => {
    const topic = `ik-docs/${run}/orders`;
    const { table, proc } = await start('mqtt', recipe('MQTT', [["'$share/shippers/orders'", `'$share/docs${run}/${topic}'`], ['`shipper-${', `\`ik-docs-${run}-\${`]]));
    const publisher = await mqtt.connectAsync('mqtt://127.0.0.1:1883', { protocolVersion: 5 });
    try {
      await sleep(2500); // the recipe connects and subscribes
      for (let copy = 0; copy < 2; copy++) {
        for (const order of orders) {
          await publisher.publishAsync(topic, JSON.stringify(order), { qos: 1, properties: { userProperties: { 'message-id': order.id } } });
        }
      }
      await shippedOnce(table, proc, orders.length);
    } finally {
      await publisher.endAsync();
      const session = await mqtt.connectAsync('mqtt://127.0.0.1:1883', { protocolVersion: 5, clientId: `ik-docs-${run}-1`, clean: true, properties: { sessionExpiryInterval: 0 } });
      await session.endAsync();
    }
  }, 60_000);
});
