/**
 * A RabbitMQ consumer whose side effect (a row in PostgreSQL) happens once per message,
 * although RabbitMQ delivers at least once: publishers retry, consumers crash before
 * they ack, and nacked messages come back.
 * @module
 * @example
 * // Run it (Redis as the shared store; several copies may run at once):
 * //   AMQP_URL=amqp://guest:guest@127.0.0.1:5672 STORE_URL=redis://127.0.0.1:6379 \
 * //   DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test npx tsx examples/consumer-rabbitmq.ts
 * // Publish with a stable message id, the key of the message:
 * //   channel.sendToQueue('orders', Buffer.from(JSON.stringify(order)), { messageId: order.id, persistent: true });
 */
import { pathToFileURL } from 'node:url';
import amqp, { type Channel, type ConsumeMessage } from 'amqplib';
import pg from 'pg';
// In your project: import { createStore, idempotent, isIdempotencyError } from 'idempotency-kit';
import { createStore, idempotent, isIdempotencyError, type IdempotencyEvent, type IdempotencyStore } from '../src/index.js';

/** What a delivery asks of the broker once it was handled. */
export type Settlement = 'ack' | 'retry' | 'dead-letter';

/**
 * The broker decision for a handler outcome (`error` undefined: success).
 *
 * - success, or a replay of an earlier success: ack;
 * - RequestInProgressError (another consumer is still on it) and StoreUnavailableError:
 *   `retryable`, so nack with requeue, after a short delay;
 * - KeyReusedError (the id was reused for another body), ResponseNotReplayableError,
 *   a missing key, ResultNotStorableError: trying again cannot help, dead-letter;
 * - the handler itself failed: idempotent() released the key, so a redelivery runs it
 *   again. Retry once, then dead-letter, so a poison message cannot loop forever.
 */
export function settlementFor(error: unknown, msg: ConsumeMessage): Settlement {
  if (error === undefined) return 'ack';
  if (isIdempotencyError(error)) return error.retryable ? 'retry' : 'dead-letter';
  return msg.fields.redelivered ? 'dead-letter' : 'retry';
}

/** Tell the broker. `retry` waits `retryDelayMs` first so a conflict does not spin. */
export function settle(channel: Channel, msg: ConsumeMessage, settlement: Settlement, retryDelayMs = 250): void {
  if (settlement === 'ack') channel.ack(msg);
  // Without requeue, RabbitMQ routes the message to the queue's dead-letter exchange.
  else if (settlement === 'dead-letter') channel.nack(msg, false, false);
  else {
    setTimeout(() => {
      try {
        channel.nack(msg, false, true);
      } catch {
        // The channel closed meanwhile: RabbitMQ requeues every unacked message anyway.
      }
    }, retryDelayMs).unref();
  }
}

export interface OrderConsumerOptions {
  store: IdempotencyStore;
  db: pg.Pool;
  /** The table the effect writes to. @default 'shipments' */
  table?: string;
  onEvent?: (event: IdempotencyEvent) => void;
}

/** The message handler, made idempotent: one shipment row per order message. */
export function createOrderHandler({ store, db, table = 'shipments', onEvent }: OrderConsumerOptions) {
  if (!/^[a-z_][a-z0-9_]*$/.test(table)) throw new TypeError(`Expected \`table\` to be a plain SQL identifier, got ${table}`);
  return idempotent(
    async (msg: ConsumeMessage) => {
      const order = JSON.parse(msg.content.toString('utf8')) as { id: string; sku: string; quantity: number };
      const { rows } = await db.query<{ id: number }>(
        `INSERT INTO ${table} (message_id, sku, quantity) VALUES ($1, $2, $3) RETURNING id`,
        [msg.properties.messageId, order.sku, order.quantity],
      );
      // Whatever is returned is stored and handed to every redelivery instead of running again.
      return { shipmentId: rows[0]!.id, at: new Date() };
    },
    {
      store,
      key: (msg) => msg.properties.messageId as string,
      // The same id with another body is a bug upstream: KeyReusedError, dead-letter.
      fingerprint: (msg) => msg.content,
      // Longer than the slowest handler run you expect; renewed every leaseMs/3 while it runs.
      // If the process dies, another consumer can take the message over after this.
      leaseMs: 30_000,
      // A redelivery that arrives while the first delivery is still running waits this
      // long for its result, then gets RequestInProgressError and is requeued.
      waitMs: 1000,
      onEvent,
    },
  );
}

export interface StartConsumerOptions extends OrderConsumerOptions {
  channel: Channel;
  queue: string;
  /** Unacked messages this consumer holds at once. @default 10 */
  prefetch?: number;
}

/** Consume `queue`; returns `stop()`, which cancels and waits for in-flight messages. */
export async function startConsumer({ channel, queue, prefetch = 10, ...handlerOptions }: StartConsumerOptions) {
  const handle = createOrderHandler(handlerOptions);
  const inFlight = new Set<Promise<void>>();
  await channel.prefetch(prefetch);
  const { consumerTag } = await channel.consume(
    queue,
    (msg) => {
      if (msg === null) return; // the queue was deleted
      const task = handle(msg).then(
        () => settle(channel, msg, 'ack'),
        (error: unknown) => settle(channel, msg, settlementFor(error, msg)),
      );
      inFlight.add(task);
      void task.finally(() => inFlight.delete(task));
    },
    { noAck: false },
  );
  return {
    async stop(): Promise<void> {
      await channel.cancel(consumerTag);
      await Promise.all(inFlight);
    },
  };
}

async function main(): Promise<void> {
  const queue = process.env.QUEUE ?? 'orders';
  const table = process.env.TABLE ?? 'shipments';
  const store = createStore(process.env.STORE_URL ?? 'redis://127.0.0.1:6379');
  const db = new pg.Pool({ connectionString: process.env.DATABASE_URL ?? 'postgresql://postgres@127.0.0.1:5432/test' });
  await db.query(
    `CREATE TABLE IF NOT EXISTS ${table} (id serial PRIMARY KEY, message_id text NOT NULL, sku text, quantity int)`,
  );
  const connection = await amqp.connect(process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672');
  const channel = await connection.createChannel();
  // Rejected messages (mismatch, poison) go to `${queue}.dead`.
  await channel.assertQueue(`${queue}.dead`, { durable: true });
  await channel.assertQueue(queue, {
    durable: true,
    arguments: { 'x-dead-letter-exchange': '', 'x-dead-letter-routing-key': `${queue}.dead` },
  });
  const consumer = await startConsumer({ channel, queue, store, db, table });
  console.log(`consuming ${queue}`);

  const shutdown = async () => {
    await consumer.stop();
    await channel.close();
    await connection.close();
    await Promise.all([store.close(), db.end()]);
    process.exit(0);
  };
  process.once('SIGINT', () => void shutdown());
  process.once('SIGTERM', () => void shutdown());
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
}
