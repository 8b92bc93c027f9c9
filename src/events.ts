/**
 * The events the engine reports through `onEvent`, OpenTelemetry and the diagnostics
 * channel (docs/telemetry.md). Types only: the engine, the lease and the telemetry all
 * speak them, and none of them has to import another for it.
 * @module
 */

export type IdempotencyEventType =
  | 'claimed'
  | 'replayed'
  | 'completed'
  | 'released'
  | 'conflict'
  | 'mismatch'
  | 'not-replayable'
  | 'lease-lost'
  | 'store-error'
  | 'unprotected'
  | 'ttl-invalid'
  | 'record-unreadable'
  | 'result-not-stored';

export interface IdempotencyEvent {
  type: IdempotencyEventType;
  /** The client's idempotency key (never the request body). */
  key: string;
  scope: string | undefined;
  /** The store operation that failed or was refused (`store-error`, `lease-lost`). */
  operation?: 'claim' | 'get' | 'complete' | 'release' | 'extend';
  /** The response status (`completed`, `released`, `replayed`). */
  status?: number;
  error?: unknown;
  /**
   * `result-not-stored`: why a result was not stored (the key completed without it, a retry
   * is refused as `response-not-replayable`): over the size limit, or not faithfully storable.
   */
  reason?: 'too-large' | 'not-storable';
  /** `record-unreadable`: the encryption key id the record was sealed under (undefined when it names none). */
  keyId?: string;
}

/** One of the store calls the engine makes (and times, and names in events). */
export type StoreOperation = NonNullable<IdempotencyEvent['operation']>;
