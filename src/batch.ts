/**
 * `idempotentBatch(messages, handler, options)`: handle a batch of messages (an SQS or
 * Lambda batch, a Kafka poll, a page of jobs) with each message claimed on its own, so one
 * bad message does not fail the rest and a redelivered batch runs only what did not finish.
 * @module
 * @example
 * // AWS Lambda with an SQS event source and ReportBatchItemFailures on:
 * export const handler = async (event) => {
 *   const { batchItemFailures } = await idempotentBatch(event.Records, chargeOrder, {
 *     store,
 *     key: (record) => JSON.parse(record.body).orderId,
 *     itemIdentifier: (record) => record.messageId,
 *   });
 *   return { batchItemFailures }; // SQS redelivers only these; the others replay if they come back
 * };
 */
import { idempotent, type IdempotentOptions, type IdempotentTransactionOptions } from './idempotent.js';
import { failureKind, type FailureKind } from './outcome.js';
import type { TransactionalStore } from './transaction.js';
import { assertFunction, assertInteger, describeValue } from './validate.js';

interface BatchOptions<M> {
  /**
   * How many messages run at once. `1` handles them one after another, in order.
   * @default 10
   */
  concurrency?: number;
  /**
   * The id a failed message is reported under in `batchItemFailures`: for SQS the
   * record's `messageId` (which is not the idempotency key when the key comes from the body).
   * @default the `key` of the message
   */
  itemIdentifier?: (message: M) => string;
}

/** Options of `idempotentBatch()`: those of `idempotent()` for one message, plus the batch's own. */
export interface IdempotentBatchOptions<M, R = unknown> extends IdempotentOptions<[M], R>, BatchOptions<M> {}

/** With `transaction: true`: each message runs in its own transaction (docs/transactions.md). */
export interface IdempotentBatchTransactionOptions<M, Client> extends IdempotentTransactionOptions<[M], Client>, BatchOptions<M> {}

export interface BatchSuccess<M, R> {
  message: M;
  /** Its position in the batch. */
  index: number;
  /** What the handler returned: now, or the stored result of an earlier delivery. */
  result: R;
}

export interface BatchFailure<M> {
  message: M;
  index: number;
  /** The handler's own error, or the idempotency error (conflict, mismatch, store down...). */
  error: unknown;
  /**
   * `retry`: can succeed later (another consumer is on it, the store is down); `failed`: the
   * handler threw and its key was released, so a redelivery runs it again; `reject`: trying
   * again cannot help (the key was reused for another message, the message has no key).
   */
  kind: FailureKind;
}

export interface BatchResult<M, R> {
  /** In batch order. */
  succeeded: BatchSuccess<M, R>[];
  /** In batch order. */
  failed: BatchFailure<M>[];
  /**
   * The failures in the shape an SQS-triggered Lambda returns for partial batch responses
   * (`ReportBatchItemFailures`): `return { batchItemFailures }`.
   */
  batchItemFailures: { itemIdentifier: string }[];
}


/**
 * With `transaction: true`: `handler(message, client)` runs in a transaction of the store's
 * database for each message, which completes that message's record before it commits.
 */
export function idempotentBatch<M, R, Client>(
  messages: Iterable<M>,
  handler: (message: M, client: Client) => R,
  options: IdempotentBatchTransactionOptions<M, Client>,
): Promise<BatchResult<M, Awaited<R>>>;
/**
 * Handle every message of a batch through `idempotent()`, at most `concurrency` at once,
 * and report which succeeded and which failed; the returned promise never rejects because
 * of one message.
 *
 * - each message is claimed on its own key: a message handled before (in this batch or an
 *   earlier delivery of it) returns its stored result without running the handler;
 * - a message whose handler throws is released, so only it runs again when the batch (or
 *   the message) is redelivered;
 * - after a crash mid-batch, the redelivered batch replays the finished messages and runs
 *   the rest.
 */
export function idempotentBatch<M, R>(
  messages: Iterable<M>,
  handler: (message: M) => R,
  options: IdempotentBatchOptions<M, Awaited<R>>,
): Promise<BatchResult<M, Awaited<R>>>;
export async function idempotentBatch<M, R>(
  messages: Iterable<M>,
  handler: (message: M, client?: unknown) => R,
  options: IdempotentBatchOptions<M, Awaited<R>> | IdempotentBatchTransactionOptions<M, unknown>,
): Promise<BatchResult<M, Awaited<R>>> {
  if (messages === null || typeof (messages as Partial<Iterable<M>> | undefined)?.[Symbol.iterator] !== 'function') {
    throw new TypeError(`Expected \`messages\` to be an array (or another iterable) of messages, got ${describeValue(messages)}`);
  }
  assertFunction('handler', handler);
  const { concurrency = 10, itemIdentifier, ...rest } = (options ?? {}) as IdempotentBatchOptions<M>;
  assertInteger('concurrency', concurrency, 1);
  if (itemIdentifier !== undefined) assertFunction('itemIdentifier', itemIdentifier);
  // Checks the options (and throws their TypeErrors) before any message runs.
  const handle = idempotent(
    handler as (message: M) => Promise<Awaited<R>>,
    rest as IdempotentOptions<[M], Awaited<R>> & { store: TransactionalStore<unknown> },
  );
  const identify = itemIdentifier ?? rest.key;

  const items = Array.from(messages);
  const outcomes: Array<{ ok: true; result: Awaited<R> } | { ok: false; error: unknown }> = new Array(items.length);
  let next = 0;
  const lane = async () => {
    while (next < items.length) {
      const index = next++;
      try {
        outcomes[index] = { ok: true, result: await handle(items[index]!) };
      } catch (error) {
        outcomes[index] = { ok: false, error };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, lane));

  const result: BatchResult<M, Awaited<R>> = { succeeded: [], failed: [], batchItemFailures: [] };
  for (const [index, outcome] of outcomes.entries()) {
    const message = items[index]!;
    if (outcome.ok) {
      result.succeeded.push({ message, index, result: outcome.result });
      continue;
    }
    result.failed.push({ message, index, error: outcome.error, kind: failureKind(outcome.error) });
    let id: unknown;
    try {
      id = identify(message);
    } catch (error) {
      id = error;
    }
    if (typeof id !== 'string' || id === '') {
      // Left out, the message would count as done and never come back: fail the whole
      // batch instead, so that everything is redelivered (what succeeded then replays).
      throw new TypeError(
        `Message ${index} of the batch failed, and its \`${itemIdentifier ? 'itemIdentifier' : 'key'}\` gave no id to report it under (got ${id instanceof Error ? `an error: ${id.message}` : describeValue(id)}); ` +
          'the whole batch is failed so that it is redelivered. Pass `itemIdentifier` (for SQS: `(record) => record.messageId`).',
        { cause: outcome.error },
      );
    }
    result.batchItemFailures.push({ itemIdentifier: id });
  }
  return result;
}
