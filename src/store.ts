/**
 * The storage contract every driver implements, and the record shape.
 * @module
 */

/** A response as captured from a handler and stored for replay. */
export interface StoredResponse {
  status: number;
  /** Only allow-listed headers, lower-case names. */
  headers: Record<string, string | string[]>;
  /**
   * The body bytes. `null` marks a record completed without a replayable body
   * (too large or a stream that could not be captured): a retry gets 409.
   */
  body: Uint8Array | null;
}

export interface ProcessingRecord {
  state: 'processing';
  fingerprint: string;
  /** Random per claim; fences complete / release / extend. */
  token: string;
  createdAt: number;
  /** Epoch ms after which another caller may take the key over. */
  leaseUntil: number;
}

export interface CompletedRecord {
  state: 'completed';
  fingerprint: string;
  token: string;
  createdAt: number;
  /** Epoch ms after which the record is gone. */
  expiresAt: number;
  response: StoredResponse;
}

export type IdempotencyRecord = ProcessingRecord | CompletedRecord;

/** What a claim asks the store to write. The store fills `leaseUntil` from its own clock. */
export interface ClaimRequest {
  fingerprint: string;
  token: string;
  createdAt: number;
}

/** What a claim tells a store beyond the record itself. Optional: a store may ignore it. */
export interface ClaimContext {
  /**
   * A hash of the request's scope (whose key space the key is in), the same for every key
   * of one scope and never the scope's text: a store with bounds (the memory store) uses
   * it to keep them fair across tenants.
   */
  partition: string;
}

export type ClaimResult =
  | { claimed: true; record: ProcessingRecord }
  | { claimed: false; record: IdempotencyRecord };

/**
 * A storage backend. Keys passed in are already hashed: drivers never see user input.
 *
 * Every method throws on a store failure; a failure is never reported as "not found".
 */
export interface IdempotencyStore {
  readonly name: string;
  /**
   * Atomically create a processing record if the key is absent, its lease has
   * expired, or its completed record has expired. Exactly one of any number of
   * concurrent claimers wins; a loser gets the live record in the same round trip.
   */
  claim(key: string, request: ClaimRequest, leaseMs: number, context?: ClaimContext): Promise<ClaimResult>;
  /** Never returns an expired record or a processing record whose lease ended. */
  get(key: string): Promise<IdempotencyRecord | undefined>;
  /** Processing -> completed, only while `token` owns the record. */
  complete(key: string, token: string, response: StoredResponse, ttlMs: number): Promise<boolean>;
  /** Delete the record, only while `token` owns it and it is processing. */
  release(key: string, token: string): Promise<boolean>;
  /** Push `leaseUntil` to now + leaseMs, only while `token` owns the processing record. */
  extend(key: string, token: string, leaseMs: number): Promise<boolean>;
  /** Stop timers and close connections the store opened itself. */
  close(): Promise<void>;

  // Maintenance, for operators and the `idempotency-kit` command line (docs/cli.md).
  // Optional so that a third-party store keeps working without them; every built-in
  // driver has all five (scan and replaceResponse: docs/writing-a-store.md). None of
  // them is ever called while serving requests.

  /**
   * Remove the record at `key` whatever its state or owner, so that the next request
   * with that key runs again. Resolves true when there was a record (live or expired).
   * A processing record's owner then finds its write refused by token, as after a
   * takeover.
   */
  delete?(key: string): Promise<boolean>;
  /**
   * Count records by state and find the earliest expiry. Drivers that must visit every
   * record (Redis SCAN) do so in bounded batches and report the count visited so far
   * through `onProgress`.
   */
  stats?(options?: MaintenanceOptions): Promise<StoreStats>;
  /**
   * Delete every expired record now, in bounded batches; resolves the number deleted.
   * Stores that expire records natively (Redis) resolve 0.
   */
  sweep?(options?: MaintenanceOptions): Promise<number>;
  /**
   * One page of the live records (processing and completed), in an order that stays the
   * same between calls, with keys as the other methods receive them. Pass the page's
   * `cursor` to get the next one; `undefined` means there is no more. A page holds up to
   * `limit` records (a store that cannot cut a page exactly, as Redis SCAN, may give a
   * few more) and may hold fewer, even none, before the end. A record written
   * while scanning may or may not be listed; one live throughout is listed at least once.
   * Used by the command line's `reseal` (docs/cli.md#reseal).
   */
  scan?(options: ScanOptions): Promise<ScanPage>;
  /**
   * Compare-and-set: replace the response of the completed record at `key`, only while it
   * is live, completed and still has `token`, in one atomic step; its fingerprint,
   * createdAt and expiresAt stay as they are. Resolves whether it replaced it. Used to
   * re-seal records under a new encryption key (docs/cli.md#reseal).
   */
  replaceResponse?(key: string, token: string, response: StoredResponse): Promise<boolean>;
  /**
   * Optional: wake-ups for duplicates waiting in other processes (see
   * docs/semantics.md#how-a-duplicate-waits). When present, the store tells `listener`
   * about every record completed or released by any process sharing it, so waiters read
   * the record once instead of polling. Without it, waiters poll with backoff.
   *
   * Contract for store authors:
   * - `complete` and `release` that took effect publish the key, best in the same atomic
   *   step as the write (Redis: PUBLISH in the script; PostgreSQL: pg_notify in the
   *   statement), so that a process dying between the two cannot lose the message. A
   *   store may skip the message for a key that no claim found processing since it was
   *   claimed (nobody waits for it): PostgreSQL does, as a claim that loses to a processing
   *   record marks it under the row's lock, so the mark and the completion are ordered.
   * - Delivery needs its own connection, opened lazily on the first call and shared by
   *   every listener of the store; `close()` closes it.
   * - `listener.ready()` once messages published from then on are delivered (again after
   *   each reconnect); `listener.down()` when delivery stopped (messages may be lost until
   *   the next `ready()`). A lost subscription reconnects in the background and never
   *   makes a store call fail.
   * - `subscribe` itself never throws for a server problem; it returns a function that
   *   detaches the listener.
   */
  subscribe?(listener: SettleListener): () => void;
}

/** What {@link IdempotencyStore.subscribe} reports. */
export interface SettleListener {
  /**
   * A record was completed or released; `key` as the store's methods receive it. A store
   * that can send the outcome along cheaply passes `record`: the completed record, or
   * `null` for a release; waiters then need no read. `undefined`: the waiter reads it.
   */
  settled(key: string, record?: IdempotencyRecord | null): void;
  /** From now on every settle is reported (called again after each reconnect). */
  ready(): void;
  /** Delivery stopped: settles may go unreported until the next `ready()`. */
  down(): void;
}

export interface MaintenanceOptions {
  /** Called after each batch with the records visited (stats) or deleted (sweep) so far. */
  onProgress?: (done: number) => void;
}

/** What {@link IdempotencyStore.stats} reports. */
export interface StoreStats {
  /** Live records whose handler is still running (lease not yet ended). */
  processing: number;
  /** Live records kept for replay. */
  completed: number;
  /** Records past their expiry that a sweep has not removed yet (always 0 on Redis). */
  expired: number;
  /**
   * Epoch ms of the earliest expiry over all records still stored, expired ones
   * included (an old value here means the sweep is not running); undefined when empty.
   */
  oldestExpiresAt: number | undefined;
}

/** What {@link IdempotencyStore.scan} takes. */
export interface ScanOptions {
  /** Where the previous page ended (its `cursor`); undefined for the first page. */
  cursor?: string;
  /** Records wanted in the page (a positive integer; see {@link IdempotencyStore.scan}). */
  limit: number;
}

/** One page of {@link IdempotencyStore.scan}. */
export interface ScanPage {
  records: Array<{ key: string; record: IdempotencyRecord }>;
  /** Where to go on from; undefined once every record was listed. Opaque text. */
  cursor: string | undefined;
}
