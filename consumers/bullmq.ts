/**
 * BullMQ: a processor whose effect happens once per job id, however often BullMQ runs the
 * job (a retry after a failed attempt, a stalled job whose worker died, a job added again
 * with the same `jobId` after the first was removed). bullmq is not imported: the
 * processor takes BullMQ's own `job` and `token`.
 * @module
 * @example
 * import { Worker } from 'bullmq';
 * import { idempotentProcessor } from 'idempotency-kit/bullmq';
 * new Worker('orders', idempotentProcessor(async (job) => shipOrder(job.data), { store }), { connection });
 * await queue.add('ship', order, { jobId: order.id }); // the job id is the key: choose it
 */
import { failureKind } from '../src/outcome.js';
import type { TransactionalStore } from '../src/transaction.js';
import { assertFunction } from '../src/validate.js';
import { assertDelay, delayFor, onceFor, type MessageOptions } from './internal/once.js';

/** The part of a BullMQ `Job` the processor uses. */
export interface BullMQJob {
  readonly id?: string | undefined;
  readonly queueName: string;
  /** Attempts that failed so far. */
  readonly attemptsMade: number;
  moveToDelayed(timestamp: number, token?: string): Promise<void>;
}

export interface IdempotentProcessorOptions<J extends BullMQJob = BullMQJob, R = unknown> extends MessageOptions<J, R> {
  /**
   * The job's idempotency key.
   * @default the job id: give jobs an id that names the logical job (`queue.add(name, data, { jobId: order.id })`);
   * BullMQ's own ids count up per queue and start again from 1 if the queue is obliterated
   */
  key?: (job: J) => string | undefined;
  /**
   * The key space.
   * @default the queue's name: job ids are unique within their queue
   */
  scope?: (job: J) => string | undefined;
  /** @default only the key counts (a job's data may change between attempts: `job.updateData`) */
  fingerprint?: ((job: J) => unknown) | false;
  /**
   * When the job's key is in flight in another worker (or the store did not answer), the job
   * is moved to the delayed set for this long (ms, or a function of `attemptsMade`),
   * without using up one of its `attempts`.
   * @default 1000
   */
  retryDelayMs?: number | ((attemptsMade: number) => number);
}

export interface IdempotentProcessorTransactionOptions<J extends BullMQJob, Client> extends IdempotentProcessorOptions<J> {
  store: TransactionalStore<Client>;
  transaction: true;
}

/**
 * Thrown to BullMQ after the job was moved to the delayed set: BullMQ recognises it by its
 * name (as it does its own `DelayedError`) and neither completes nor fails the job.
 */
class JobDelayedError extends Error {
  override name = 'DelayedError';
}

/**
 * Thrown to BullMQ for a job that must not be tried again (same id, other data; no key): BullMQ
 * recognises it by its name (as its own `UnrecoverableError`) and fails the job without
 * using its remaining attempts. `cause` is the idempotency error.
 */
export class JobRejectedError extends Error {
  override name = 'UnrecoverableError';
  /** The idempotency error's code: `key-reused`, `key-missing`, `response-not-replayable`... */
  readonly code: string;
  constructor(cause: unknown) {
    const code = String((cause as { code?: unknown }).code);
    super(`idempotency-kit: ${code}: ${(cause as Error).message}`, { cause });
    this.code = code;
  }
}

/**
 * With `transaction: true`: `fn(job, client)` runs in a transaction of the store's
 * PostgreSQL database, which also completes the job's record before it commits.
 */
export function idempotentProcessor<J extends BullMQJob, R, Client>(
  fn: (job: J, client: Client) => R,
  options: IdempotentProcessorTransactionOptions<J, Client>,
): (job: J, token?: string, signal?: AbortSignal) => Promise<Awaited<R>>;
/**
 * A BullMQ processor around `fn(job, token, signal)` that runs it once per job key:
 *
 * | outcome | BullMQ |
 * |---|---|
 * | fn ran, or an earlier run's result was replayed | the job completes with that result |
 * | the key is in flight in another worker, the store is down | moved to delayed for `retryDelayMs` (no attempt used) |
 * | fn threw (its key released) | fn's error: BullMQ retries per the job's `attempts` and `backoff` |
 * | same key with other data (with `fingerprint`), no key, a repeat of a job whose result was not stored | failed for good (`UnrecoverableError`) |
 *
 * A worker killed mid-job leaves the job active until its lock (`lockDuration`) runs out;
 * BullMQ's stalled check then moves it back to wait (at most `maxStalledCount` times) and
 * another worker runs it: a replay if fn had finished, else fn, once the dead worker's
 * lease (`leaseMs`) is over.
 */
export function idempotentProcessor<J extends BullMQJob, R>(
  fn: (job: J, token?: string, signal?: AbortSignal) => R,
  options: IdempotentProcessorOptions<J, Awaited<R>>,
): (job: J, token?: string, signal?: AbortSignal) => Promise<Awaited<R>>;
export function idempotentProcessor<J extends BullMQJob, R>(
  fn: (job: J, ...rest: never[]) => R,
  options: IdempotentProcessorOptions<J, Awaited<R>>,
): (job: J, token?: string, signal?: AbortSignal) => Promise<Awaited<R>> {
  assertFunction('fn', fn);
  const { retryDelayMs = 1000 } = options ?? {};
  assertDelay('retryDelayMs', retryDelayMs);
  const transaction = options?.transaction === true;
  const handle = onceFor(
    'message:bullmq',
    transaction
      ? (job: J, client: unknown) => fn(job, client as never)
      : (job: J, token?: string, signal?: AbortSignal) => fn(job, token as never, signal as never),
    options,
    { key: (job) => job.id, scope: (job) => job.queueName },
    ['retryDelayMs'],
  ) as (job: J, token?: string, signal?: AbortSignal) => Promise<Awaited<R>>;

  return async function idempotentJob(job: J, token?: string, signal?: AbortSignal): Promise<Awaited<R>> {
    try {
      return await (transaction ? handle(job) : handle(job, token, signal));
    } catch (error) {
      const kind = failureKind(error);
      if (kind === 'failed') throw error;
      if (kind === 'reject') throw new JobRejectedError(error);
      // Without the token (a processor called outside a Worker) the job cannot be moved:
      // the error fails this attempt and BullMQ's attempts and backoff decide.
      if (token === undefined) throw error;
      try {
        await job.moveToDelayed(Date.now() + delayFor(retryDelayMs, job.attemptsMade, 1000), token);
      } catch {
        throw error; // the lock is gone (the job stalled to another worker): nothing to move
      }
      throw new JobDelayedError(`idempotency-kit: ${(error as { code?: string }).code}: delayed`, { cause: error });
    }
  };
}
