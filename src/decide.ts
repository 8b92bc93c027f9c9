/**
 * The core decision as a pure function of (record, incoming fingerprint, now).
 * @module
 */
import { sameFingerprint, type Fingerprint } from './fingerprint.js';
import type { IdempotencyRecord } from './store.js';

export type Decision =
  /** No live record: run the handler (after winning an atomic claim). */
  | 'execute'
  /** Completed with the same fingerprint: send the stored response. */
  | 'replay'
  /** Completed with the same fingerprint but no stored body: 409, never re-run. */
  | 'not-replayable'
  /** Same key, different request, whatever the state: 422. */
  | 'mismatch'
  /** Processing under a valid lease: wait and look again, then 409. */
  | 'wait';

export function decide(record: IdempotencyRecord | undefined, fingerprint: Fingerprint, now: number): Decision {
  if (record === undefined) return 'execute';
  if (record.state === 'processing' ? record.leaseUntil <= now : record.expiresAt <= now) return 'execute';
  // Compared under the scheme that made the stored fingerprint (a record of an earlier release).
  if (!sameFingerprint(record.fingerprint, fingerprint)) return 'mismatch';
  if (record.state === 'processing') return 'wait';
  return record.response.body === null ? 'not-replayable' : 'replay';
}
