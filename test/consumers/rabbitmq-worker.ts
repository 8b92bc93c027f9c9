/**
 * A consumer process for test/consumers/rabbitmq.test.ts. It consumes QUEUE with
 * idempotent() over a shared store (STORE_URL) and inserts one PostgreSQL row per run of
 * the handler (TABLE has no unique constraint, so a second run would show as a second row).
 * It reports every delivery and settlement as a JSON line on stdout.
 *
 * Env: AMQP_URL, QUEUE, STORE_URL, DATABASE_URL, TABLE, WORKER, PREFETCH, LEASE_MS, WAIT_MS,
 * CHAOS=1 (nack some first deliveries before or after handling them; fail some handler
 * runs once), DOOM_AFTER=n (never ack; handle deliveries one at a time; after n of them the
 * next handler run hangs before its effect and reports `doomed`, waiting for SIGKILL).
 */
import amqp, { type ConsumeMessage } from 'amqplib';
import pg from 'pg';
import { settle, settlementFor, type Settlement } from '../../examples/consumer-rabbitmq.js';
import { createStore } from '../../drivers/create-store.js';
import { idempotent, isIdempotencyError, type IdempotencyEvent } from '../../src/index.js';

const env = (name: string): string => {
  const value = process.env[name];
  if (!value) throw new Error(`rabbitmq-worker: ${name} is not set`);
  return value;
};
const worker = env('WORKER');
const queue = env('QUEUE');
const table = env('TABLE');
const chaos = process.env.CHAOS === '1';
const doomAfter = process.env.DOOM_AFTER ? Number(process.env.DOOM_AFTER) : undefined;

const report = (line: Record<string, unknown>): void => {
  process.stdout.write(`${JSON.stringify({ w: worker, ...line })}\n`);
};
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const store = createStore(env('STORE_URL'));
const db = new pg.Pool({ connectionString: env('DATABASE_URL'), max: 4 });
const connection = await amqp.connect(env('AMQP_URL'));
const channel = await connection.createChannel();
await channel.prefetch(Number(process.env.PREFETCH ?? 10));

const events: Partial<Record<IdempotencyEvent['type'], number>> = {};
let handled = 0;
// The deliveries fn ran for (the rest were replays).
const ranHere = new WeakSet<ConsumeMessage>();

const body = (msg: ConsumeMessage) => JSON.parse(msg.content.toString('utf8')) as { n: number; payload: string };

const handle = idempotent(
  async (msg: ConsumeMessage) => {
    const { n } = body(msg);
    if (doomAfter !== undefined && handled >= doomAfter) {
      // The claim is held (and renewed) while this process lives; the test kills it now.
      report({ ev: 'doomed', id: msg.properties.messageId });
      await new Promise(() => {});
    }
    if (chaos && n % 10 === 5 && !msg.fields.redelivered) {
      report({ ev: 'handler-throws', id: msg.properties.messageId });
      throw new Error('transient failure (test)');
    }
    ranHere.add(msg);
    await sleep(2 + (n % 7) * 3);
    const { rows } = await db.query<{ id: string }>(
      `INSERT INTO ${table} (message_id, worker, n) VALUES ($1, $2, $3) RETURNING id`,
      [msg.properties.messageId, worker, n],
    );
    report({ ev: 'effect', id: msg.properties.messageId });
    await sleep(n % 5);
    return { row: Number(rows[0]!.id), worker, at: new Date(), tag: Buffer.from([n % 256]), note: undefined };
  },
  {
    store,
    key: (msg) => msg.properties.messageId as string,
    fingerprint: (msg) => msg.content,
    leaseMs: Number(process.env.LEASE_MS ?? 1500),
    waitMs: Number(process.env.WAIT_MS ?? 500),
    ttlMs: 600_000,
    onEvent: (event) => {
      events[event.type] = (events[event.type] ?? 0) + 1;
      if (event.type === 'store-error' || event.type === 'lease-lost') {
        report({ ev: 'idempotency-event', type: event.type, key: event.key, error: String(event.error) });
      }
    },
  },
);

async function onDelivery(msg: ConsumeMessage): Promise<void> {
  const id = msg.properties.messageId as string;
  const { n } = body(msg);
  const redelivered = msg.fields.redelivered;
  report({ ev: 'delivery', id, redelivered });
  if (chaos && n % 10 === 3 && !redelivered) {
    channel.nack(msg, false, true);
    report({ ev: 'test-nack', id, when: 'before' });
    return;
  }
  let settlement: Settlement;
  let path: string;
  try {
    const result = await handle(msg);
    if (typeof result.row !== 'number' || !(result.at instanceof Date) || !Buffer.isBuffer(result.tag)) {
      throw new Error(`result did not round-trip: ${JSON.stringify(result)}`);
    }
    path = ranHere.has(msg) ? 'executed' : 'replayed';
    settlement = 'ack';
  } catch (error) {
    path = isIdempotencyError(error) ? error.code : `handler-error: ${String(error)}`;
    settlement = settlementFor(error, msg);
  }
  handled++;
  if (doomAfter !== undefined) {
    report({ ev: 'held', id, path });
    return; // the doomed consumer never acks
  }
  if (chaos && n % 10 === 7 && !redelivered && settlement === 'ack') {
    channel.nack(msg, false, true); // handled, then "crashed" before the ack: the redelivery must replay
    report({ ev: 'test-nack', id, when: 'after', path });
    return;
  }
  settle(channel, msg, settlement, 100);
  report({ ev: 'settle', id, how: settlement, path, redelivered });
}

const inFlight = new Set<Promise<void>>();
let chain = Promise.resolve();

const { consumerTag } = await channel.consume(
  queue,
  (msg) => {
    if (msg === null) return;
    const run = () =>
      onDelivery(msg).catch((error: unknown) => report({ ev: 'worker-error', error: String(error) }));
    // The doomed consumer handles one delivery at a time, so that when it hangs nothing
    // else of its own is half done.
    const task = doomAfter === undefined ? run() : (chain = chain.then(run));
    inFlight.add(task);
    void task.finally(() => inFlight.delete(task));
  },
  { noAck: false },
);
report({ ev: 'ready' });

process.once('SIGTERM', () => {
  void (async () => {
    await channel.cancel(consumerTag);
    await Promise.all(inFlight);
    await sleep(150); // delayed nacks (retry) are unref'd timers
    await channel.close();
    await connection.close();
    await Promise.all([store.close(), db.end()]);
    report({ ev: 'stopped', handled, events });
    process.exit(0);
  })().catch((error: unknown) => {
    report({ ev: 'worker-error', error: String(error) });
    process.exit(1);
  });
});
