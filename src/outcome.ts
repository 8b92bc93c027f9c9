/**
 * What the failure of an `idempotent()` call asks of whoever delivered the message: shared
 * by the batch helper and the broker recipes (consumers/), so that every broker settles
 * the same outcome the same way.
 * @module
 */
import { isIdempotencyError } from './errors.js';

/**
 * - `retry`: the same message can succeed later: another consumer is running its key, the
 *   store did not answer, the lease was lost, the database refused the transaction;
 * - `reject`: trying again cannot help: the key was reused for another message, the
 *   message has no key, an earlier result could not be stored;
 * - `failed`: the handler itself threw; its key was released, so a redelivery runs it again.
 */
export type FailureKind = 'retry' | 'reject' | 'failed';

export function failureKind(error: unknown): FailureKind {
  if (isIdempotencyError(error)) return error.retryable ? 'retry' : 'reject';
  return 'failed';
}
