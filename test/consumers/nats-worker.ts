/**
 * A JetStream consumer process for test/consumers/nats.test.ts (lines and effects as
 * crash-harness.ts describes). It pulls from a durable consumer and handles up to
 * CONCURRENCY messages at once through `idempotentJetStreamHandler()`.
 *
 * Env: NATS_URL, STREAM, CONSUMER, WORKER, MODE (plain: Redis store STORE_URL, autocommit
 * insert; transaction: PostgreSQL store on table RECORDS, insert in its transaction),
 * DATABASE_URL, TABLE, LEASE_MS, WAIT_MS, WORKING_MS, CONCURRENCY, CHAOS=1 (the handler throws on the
 * first delivery of every tenth message; acks are sent 30 ms late, so that a kill can fall
 * between the stored result and the ack).
 */
import { connect } from '@nats-io/transport-node';
import { jetstream, type JsMsg } from '@nats-io/jetstream';
import pg from 'pg';
import { createStore } from '../../drivers/create-store.js';
import { postgresStore } from '../../drivers/postgres.js';
import { idempotentJetStreamHandler, type JetStreamSettlement } from '../../consumers/nats.js';

const env = (name: string): string => {
  const value = process.env[name];
  if (!value) throw new Error(`nats-worker: ${name} is not set`);
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

const db = new pg.Pool({ connectionString: env('DATABASE_URL'), max: concurrency + 2 });
db.on('error', () => undefined);
const pgStore = mode === 'transaction' ? postgresStore({ pool: db, table: env('RECORDS') }) : undefined;
const store = pgStore ?? createStore(env('STORE_URL'));
const nc = await connect({ servers: env('NATS_URL') });
const js = jetstream(nc);

const ranHere = new WeakSet<JsMsg>();
const rawOf = new WeakMap<JsMsg, JsMsg>();
const body = (msg: JsMsg) => msg.json<{ id: string; n: number }>();
const insert = `INSERT INTO ${table} (message_id, worker, pid) VALUES ($1, $2, $3)`;

async function effect(msg: JsMsg, client: pg.PoolClient | pg.Pool) {
  const { id, n } = body(msg);
  ranHere.add(rawOf.get(msg) ?? msg);
  report({ ev: 'run', id });
  if (chaos && n % 10 === 5 && msg.info.deliveryCount === 1) throw new Error('transient failure (test)');
  await sleep(15 + (n % 5) * 10);
  await client.query(insert, [id, worker, process.pid]);
  report({ ev: 'effect', id });
  // With the transaction still open: a kill now rolls the insert back.
  if (mode === 'transaction') await sleep(10 + (n % 3) * 10);
  return { n, worker, at: new Date() };
}

const options = {
  store,
  leaseMs: Number(process.env.LEASE_MS ?? 1500),
  waitMs: Number(process.env.WAIT_MS ?? 300),
  retryDelayMs: 300,
  failureDelayMs: 200,
  workingMs: Number(process.env.WORKING_MS ?? 1000),
  ttlMs: 600_000,
  onEvent: (event: { type: string; key: string; error?: unknown }) => {
    if (event.type === 'lease-lost') report({ ev: 'idempotency-event', type: event.type, key: event.key });
  },
};
const handle =
  mode === 'transaction'
    ? idempotentJetStreamHandler((msg: JsMsg, client: pg.PoolClient) => effect(msg, client), { ...options, store: pgStore!, transaction: true })
    : idempotentJetStreamHandler((msg: JsMsg) => effect(msg, db), options);

/** The ack goes out 30 ms after the handler settled it (CHAOS): a kill in between is a redelivery. */
function lateAcks(msg: JsMsg): JsMsg {
  if (!chaos) return msg;
  const late = new Proxy(msg, {
    get(target, property) {
      if (property === 'ack') return () => setTimeout(() => target.ack(), 30);
      const value = Reflect.get(target, property, target) as unknown;
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
  rawOf.set(late, msg);
  return late;
}

const consumer = await js.consumers.get(env('STREAM'), env('CONSUMER'));
const messages = await consumer.consume({ max_messages: concurrency * 2 });
const inFlight = new Set<Promise<void>>();
let handled = 0;

const loop = (async () => {
  for await (const raw of messages) {
    while (inFlight.size >= concurrency) await Promise.race(inFlight);
    const msg = lateAcks(raw);
    const { id } = body(raw);
    report({ ev: 'delivery', id, delivery: raw.info.deliveryCount });
    const task = handle(msg).then(
      (s: JetStreamSettlement) => {
        handled++;
        const code = (s.error as { code?: string } | undefined)?.code;
        report({ ev: 'settle', id, action: s.action, outcome: s.outcome, code, replayed: s.outcome === 'done' && !ranHere.has(raw), delivery: s.delivery });
      },
      (error: unknown) => report({ ev: 'worker-error', id, error: String(error) }),
    );
    inFlight.add(task);
    void task.finally(() => inFlight.delete(task));
  }
})();

// Before `ready`: without a listener the default action ends the process the instant the
// signal arrives, even between two statements.
process.once('SIGTERM', () => {
  void (async () => {
    await messages.close();
    await loop;
    await Promise.all(inFlight);
    await sleep(60); // late acks
    await nc.drain();
    await store.close();
    await db.end();
    report({ ev: 'stopped', handled });
    process.exit(0);
  })().catch((error: unknown) => {
    report({ ev: 'worker-error', error: String(error) });
    process.exit(1);
  });
});
report({ ev: 'ready' });
