/**
 * NATS JetStream: run a handler once per message, however often JetStream delivers it,
 * and settle each delivery for what happened: `ack` after the effect, `nak(delay)` to try
 * again later, `term` when trying again cannot help. Works with the messages of
 * `@nats-io/jetstream` 3.x and of `nats` 2.x; neither is imported.
 * @module
 * @example
 * import { idempotentJetStreamHandler } from 'idempotency-kit/nats';
 * const handle = idempotentJetStreamHandler(async (msg) => shipOrder(msg.json()), { store });
 * const messages = await (await js.consumers.get('ORDERS', 'shipper')).consume();
 * for await (const msg of messages) await handle(msg); // acks, naks or terms msg
 */
import { deprecatedFunction } from '../src/deprecation.js';
import { failureKind, type FailureKind } from '../src/outcome.js';
import type { TransactionalStore } from '../src/transaction.js';
import { assertFunction, assertInteger } from '../src/validate.js';
import { assertDelay, backoff, delayFor, onceFor, type MessageOptions } from './internal/once.js';

/**
 * The part of a JetStream message the handler uses: `JsMsg` of `@nats-io/jetstream`
 * (3.x) and of `nats` (2.x) both have it.
 */
export interface JetStreamMessage {
  readonly subject: string;
  readonly data: Uint8Array;
  readonly headers?: { get(name: string): string } | undefined;
  /** `deliveryCount` in 3.x, `redeliveryCount` in 2.x: the number of this delivery, from 1. */
  readonly info: { readonly stream: string; readonly deliveryCount?: number; readonly redeliveryCount?: number };
  ack(): void;
  nak(millis?: number): void;
  working(): void;
  term(reason?: string): void;
}

/** What was done with a delivery, returned by the handler and given to `onSettle`. */
export interface JetStreamSettlement<R = unknown> {
  /** `ack`: done, now or before; `nak`: redelivered after `delayMs`; `term`: never redelivered. */
  action: 'ack' | 'nak' | 'term';
  /** `done` for a success or replay, else what kind of failure (see `FailureKind`). */
  outcome: 'done' | FailureKind;
  /** The handler's result (or the stored result of an earlier delivery), when `done`. */
  result?: R;
  error?: unknown;
  /** The nak delay. */
  delayMs?: number;
  /** This delivery's number, from 1. */
  delivery: number;
}

export interface JetStreamHandlerOptions<M extends JetStreamMessage = JetStreamMessage, R = unknown> extends MessageOptions<M, R> {
  /**
   * The message's idempotency key. Set by the publisher, the same on every copy of a logical
   * message: never the stream sequence, which is new for each published copy.
   * @default the `Nats-Msg-Id` header (which also turns on the stream's own de-duplication within its `duplicate_window`)
   */
  key?: (message: M) => string | undefined;
  /**
   * The key space.
   * @default the stream's name: a message id is unique within its stream
   */
  scope?: (message: M) => string | undefined;
  /**
   * What must be the same for a redelivery to be the same message.
   * @default the payload bytes (`msg.data`): a known id with another payload is termed
   */
  fingerprint?: ((message: M) => unknown) | false;
  /**
   * How long to wait before the redelivery when the key is in flight elsewhere or the store
   * did not answer (`nak(delay)`), in ms, or a function of the delivery number.
   * @default 1000
   */
  retryDelayMs?: number | ((delivery: number) => number);
  /**
   * The nak delay after the handler threw, in ms, or a function of the delivery number.
   * @default 1 s doubling per delivery, at most 60 s
   */
  failureDelayMs?: number | ((delivery: number) => number);
  /**
   * The delivery on which a handler that still throws gives up: the message is termed
   * instead of nak'd (JetStream has no dead-letter queue: `onSettle` sees it, and the
   * server publishes a `MSG_TERMINATED` advisory). Deliveries that only met a conflict or
   * an unavailable store count as deliveries too.
   * @default 5
   */
  maxDeliveries?: number;
  /**
   * While the handler runs, `msg.working()` is sent this often (ms) so that the consumer's
   * `ack_wait` does not run out and JetStream does not redeliver to another consumer.
   * About a third of your consumer's `ack_wait`; `false` never.
   * @default 10000 (a third of JetStream's default ack_wait of 30 s)
   */
  workingMs?: number | false;
  /** Told how each delivery was settled: for logs, metrics, and a dead-letter of your own on `term`. */
  onSettle?: (message: M, settlement: JetStreamSettlement<R>) => void;
}

export interface JetStreamTransactionOptions<M extends JetStreamMessage, Client> extends JetStreamHandlerOptions<M> {
  store: TransactionalStore<Client>;
  transaction: true;
}

const OWN = ['retryDelayMs', 'failureDelayMs', 'maxDeliveries', 'workingMs', 'onSettle'] as const;

const msgId = (msg: JetStreamMessage): string | undefined => msg.headers?.get('Nats-Msg-Id') || undefined;

/**
 * With `transaction: true`: `fn(msg, client)` runs in a transaction of the store's
 * PostgreSQL database, which also completes the message's record before it commits.
 */
export function idempotentJetStreamHandler<M extends JetStreamMessage, R, Client>(
  fn: (msg: M, client: Client) => R,
  options: JetStreamTransactionOptions<M, Client>,
): (msg: M) => Promise<JetStreamSettlement<Awaited<R>>>;
/**
 * Wrap a JetStream message handler so that its effect happens once per message key, and
 * every delivery is settled:
 *
 * | outcome | settles |
 * |---|---|
 * | fn ran, or an earlier delivery's result was replayed | `ack()` |
 * | the key is in flight elsewhere, the store is down, the lease was lost | `nak(retryDelayMs)` |
 * | fn threw (its key released) | `nak(failureDelayMs)`, `term()` on delivery `maxDeliveries` |
 * | same key with another payload, no key, a repeat of a message whose result was not stored | `term()` |
 *
 * The returned function resolves with the settlement and never rejects for the message's
 * own outcome.
 */
export function idempotentJetStreamHandler<M extends JetStreamMessage, R>(
  fn: (msg: M) => R,
  options: JetStreamHandlerOptions<M, Awaited<R>>,
): (msg: M) => Promise<JetStreamSettlement<Awaited<R>>>;
export function idempotentJetStreamHandler<M extends JetStreamMessage, R>(
  fn: (msg: M, client?: unknown) => R,
  options: JetStreamHandlerOptions<M, Awaited<R>>,
): (msg: M) => Promise<JetStreamSettlement<Awaited<R>>> {
  assertFunction('fn', fn);
  const { retryDelayMs = 1000, failureDelayMs = backoff, maxDeliveries = 5, workingMs = 10_000, onSettle } = options ?? {};
  assertDelay('retryDelayMs', retryDelayMs);
  assertDelay('failureDelayMs', failureDelayMs);
  assertInteger('maxDeliveries', maxDeliveries, 1);
  if (workingMs !== false) assertInteger('workingMs', workingMs, 1);
  if (onSettle !== undefined) assertFunction('onSettle', onSettle);
  const handle = onceFor(
    'message:nats',
    options?.transaction ? (msg: M, client: unknown) => fn(msg, client) : (msg: M) => fn(msg),
    options,
    { key: msgId, scope: (msg) => msg.info.stream, fingerprint: (msg) => msg.data },
    OWN,
  ) as (msg: M) => Promise<Awaited<R>>;

  return async function settleJetStreamMessage(msg: M): Promise<JetStreamSettlement<Awaited<R>>> {
    const delivery = msg.info.deliveryCount ?? msg.info.redeliveryCount ?? 1;
    const timer = workingMs === false ? undefined : setInterval(() => {
      try {
        msg.working();
      } catch {
        // The connection is closing: the redelivery will be answered from the store.
      }
    }, workingMs);
    let settlement: JetStreamSettlement<Awaited<R>>;
    try {
      const result = await handle(msg);
      settlement = { action: 'ack', outcome: 'done', result, delivery };
    } catch (error) {
      const kind = failureKind(error);
      if (kind === 'reject' || (kind === 'failed' && delivery >= maxDeliveries)) {
        settlement = { action: 'term', outcome: kind, error, delivery };
      } else {
        const delayMs = kind === 'retry' ? delayFor(retryDelayMs, delivery, 1000) : delayFor(failureDelayMs, delivery, backoff(delivery));
        settlement = { action: 'nak', outcome: kind, error, delayMs, delivery };
      }
    } finally {
      clearInterval(timer);
    }
    // After the effect, never before: a crash before this line is a redelivery that replays.
    try {
      if (settlement.action === 'ack') msg.ack();
      else if (settlement.action === 'nak') msg.nak(settlement.delayMs);
      // No reason: a server before 2.11 does not understand `+TERM <reason>` and leaves the
      // message pending, so it would come back after ack_wait. `onSettle` has the why.
      else msg.term();
    } catch {
      // The connection closed: JetStream redelivers after ack_wait, and the store answers it.
    }
    try {
      onSettle?.(msg, settlement);
    } catch {
      // A failing listener must not change how the message was settled.
    }
    return settlement;
  };
}

/** @deprecated Renamed `idempotentJetStreamHandler`; the old name works until the next minor release. */
export const jetStreamHandler: typeof idempotentJetStreamHandler = deprecatedFunction(idempotentJetStreamHandler, 'jetStreamHandler()', 'idempotentJetStreamHandler()');
