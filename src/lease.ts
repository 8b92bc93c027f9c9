/**
 * The lease: a won claim while its handler runs. It renews itself every leaseMs/3, and
 * its writes (complete, release, the transaction's commit) are fenced by the claim's
 * token, so a process whose lease was taken over can change nothing.
 * @module
 */
import { randomFillSync } from 'node:crypto';
import { LeaseLostError } from './errors.js';
import type { IdempotencyEvent, StoreOperation } from './events.js';
import type { ResolvedEngineOptions } from './options.js';
import type { ProcessingRecord, StoredResponse } from './store.js';
import type { Telemetry } from './telemetry.js';
import { isTransactionalStore, type TransactionOutcome } from './transaction.js';
import type { Flight } from './waiting.js';

/**
 * The engine as the lease and the acquisition use it: what `Engine` (engine.ts) offers
 * them, named here so that neither imports the engine back.
 */
export interface EngineServices {
  readonly options: ResolvedEngineOptions;
  readonly telemetry: Telemetry;
  /** Run one store call within `storeTimeoutMs`; every failure becomes StoreUnavailableError. */
  call<T>(operation: StoreOperation, run: () => Promise<T>): Promise<T>;
  emit(event: IdempotencyEvent): void;
  /** Whether an event would reach anyone: else it is not even built. */
  observed(): boolean;
  /** Report a failed store call as a `store-error` event. */
  storeError(operation: StoreOperation, key: string, scope: string | undefined, error: unknown): void;
}

const TOKEN_BYTES = 16;
const TOKEN_POOL_BYTES = 4096;
let tokenPool: Buffer | undefined;
let tokenOffset = TOKEN_POOL_BYTES;

/**
 * A claim's fencing token: 128 random bits, base64url. Cut from a pool of random bytes
 * filled 256 tokens at a time, and decoded natively into one flat string: the token lives
 * as long as its record (in the memory store, on the heap), as a single object.
 */
export function newToken(): string {
  if (tokenOffset + TOKEN_BYTES > TOKEN_POOL_BYTES) {
    tokenPool = randomFillSync(Buffer.allocUnsafeSlow(TOKEN_POOL_BYTES));
    tokenOffset = 0;
  }
  const token = tokenPool!.toString('base64url', tokenOffset, tokenOffset + TOKEN_BYTES);
  tokenOffset += TOKEN_BYTES;
  return token;
}

/**
 * A won claim. While it is held the lease is renewed; `complete` and `release` are
 * fenced by the claim's token and report whether they took effect.
 */
export class Lease {
  #lost = false;
  #settled = false;
  /** The transaction's work is done and the record row is about to be locked: renewals would wait on it. */
  #completing = false;
  #timer: NodeJS.Timeout | undefined;
  /** Our own conservative view of when the lease ends: the start of the last successful claim or renewal + leaseMs. */
  #leaseUntil: number;
  /** Requests of this process waiting on this claim in memory, and the claimed record. */
  readonly #flight: Flight | undefined;
  readonly #record: ProcessingRecord | undefined;
  /** The claimed record's fingerprint: sealed responses are bound to it. */
  readonly #fingerprint: string;

  constructor(
    private readonly engine: EngineServices,
    readonly key: string,
    readonly scope: string | undefined,
    readonly storageKey: string,
    readonly token: string,
    flight?: Flight,
    record?: ProcessingRecord,
  ) {
    const { leaseMs, now } = engine.options;
    this.#leaseUntil = now() + leaseMs;
    this.#fingerprint = record?.fingerprint ?? '';
    if (flight && record) {
      this.#flight = flight;
      this.#record = record;
      flight.owner = { record, leaseUntil: () => this.#leaseUntil };
      flight.inProgress(now());
    }
    // Renew at a third of the lease, so two missed renewals still leave time.
    if (engine.options.renewLease) {
      this.#timer = setInterval(() => void this.#renew(), Math.max(1, Math.floor(leaseMs / 3)));
      this.#timer.unref();
    }
  }

  /** True once another claimer took the key over: this owner's writes are refused. */
  get lost(): boolean {
    return this.#lost;
  }

  async #renew(): Promise<void> {
    if (this.#settled || this.#lost || this.#completing) return;
    try {
      const { leaseMs, now } = this.engine.options;
      const started = now();
      const ok = await this.engine.call('extend', () => this.engine.options.store.extend(this.storageKey, this.token, leaseMs));
      if (ok) this.#leaseUntil = started + leaseMs;
      // Refused while the transaction completes the record: it waited on the row lock and
      // then found the record completed by us, not lost. The commit's own check decides.
      else if (!this.#settled && !this.#completing) this.#loseLease('extend');
    } catch (error) {
      this.engine.storeError('extend', this.key, this.scope, error);
    }
  }

  #loseLease(operation: 'extend' | 'complete' | 'release'): void {
    this.#lost = true;
    this.#stop();
    this.#flight?.end(undefined);
    this.engine.emit({ type: 'lease-lost', key: this.key, scope: this.scope, operation });
  }

  #stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /**
   * Stop renewing without settling: the claim now ends with its lease unless `complete` or
   * `release` comes first. For an owner that can no longer tell whether its handler will
   * ever finish (the client went away), so the key frees like a crashed process's.
   */
  abandon(): void {
    this.#stop();
    this.#flight?.end(undefined); // its followers wait on the store from now on
  }

  /** What the store is given: `response` compressed, then sealed, as the options ask (docs/security.md). */
  #stored(response: StoredResponse): StoredResponse {
    const { keyring, compressor } = this.engine.options;
    const packed = compressor ? compressor.compress(response) : response;
    return keyring ? keyring.seal(packed, this.storageKey, this.#fingerprint) : packed;
  }

  /**
   * Store the outcome for replay. Throws on store failure (after stopping renewal); the
   * write is then retried in the background while the lease can still be ours, because a
   * completion that never lands lets the key expire and a retry run the handler twice.
   */
  async complete(response: StoredResponse, ttl: number = this.engine.options.ttlMs): Promise<boolean> {
    this.#settled = true;
    this.#stop();
    if (this.#lost) return false;
    const { store } = this.engine.options;
    const stored = this.#stored(response);
    let ok: boolean;
    try {
      ok = await this.engine.call('complete', () => store.complete(this.storageKey, this.token, stored, ttl));
    } catch (error) {
      this.#flight?.end(undefined);
      void this.#retryComplete(stored, response.status, ttl);
      throw error;
    }
    if (ok) {
      this.#settleFollowers(response, ttl);
      if (this.engine.observed()) this.engine.emit({ type: 'completed', key: this.key, scope: this.scope, status: response.status });
    } else this.#loseLease('complete');
    return ok;
  }

  async #retryComplete(response: StoredResponse, status: number, ttl: number): Promise<void> {
    const { store, now } = this.engine.options;
    let delayMs = 50;
    while (now() + delayMs < this.#leaseUntil) {
      await new Promise((resolve) => setTimeout(resolve, delayMs).unref());
      delayMs = Math.min(delayMs * 2, 2000);
      try {
        if (await this.engine.call('complete', () => store.complete(this.storageKey, this.token, response, ttl))) {
          this.engine.emit({ type: 'completed', key: this.key, scope: this.scope, status });
          return;
        }
        // Refused by token: either the failed attempt landed after all (a slow or paused
        // store ran it late), or the lease really is gone.
        const record = await this.engine.call('get', () => store.get(this.storageKey));
        if (record?.state === 'completed' && record.token === this.token) {
          this.engine.emit({ type: 'completed', key: this.key, scope: this.scope, status });
        } else this.#loseLease('complete');
        return;
      } catch (error) {
        this.engine.storeError('complete', this.key, this.scope, error);
      }
    }
    this.#loseLease('complete');
  }

  /** The stored record, handed to this process's waiting duplicates as it is stored. */
  #settleFollowers(response: StoredResponse, ttl: number = this.engine.options.ttlMs): void {
    const flight = this.#flight;
    const record = this.#record;
    if (!flight || !record) return;
    // Nobody follows (the usual case): end it without building the record it would hand over.
    if (!flight.followed) {
      flight.end(undefined);
      return;
    }
    const expiresAt = this.engine.options.now() + ttl;
    flight.end(() => ({
      record: {
        state: 'completed',
        fingerprint: record.fingerprint,
        token: this.token,
        createdAt: record.createdAt,
        expiresAt,
        response,
      },
    }));
  }

  /**
   * Run `work` in a transaction of the store's database and complete the record in that
   * same transaction (fenced by this claim's token), so the effect and the stored result
   * commit together or not at all. The lease keeps renewing while `work` runs.
   *
   * `response(value)` gives what to store; `undefined` rolls back and releases the key.
   * `work` throws, or the transaction fails: rolled back, the key released, the error
   * rethrown. The lease was lost: rolled back, `LeaseLostError`, the key left to its new owner.
   */
  async transaction<C, T>(
    work: (client: C) => Promise<T>,
    response: (value: T) => StoredResponse | undefined,
  ): Promise<TransactionOutcome<T>> {
    const { store, ttlMs: ttl } = this.engine.options;
    if (!isTransactionalStore(store)) {
      throw new TypeError(
        `Expected a store that runs transactions (postgresStore({ url }) or postgresStore({ pool })), got the ${store.name} store`,
      );
    }
    if (this.#settled) throw new TypeError('idempotency-kit: this claim was already completed or released');
    if (this.#lost) {
      this.#settled = true;
      throw new LeaseLostError();
    }
    let outcome: TransactionOutcome<T>;
    let stored: StoredResponse | undefined;
    try {
      outcome = await store.transaction(
        async (client) => {
          this.#completing = false; // again after a serialization failure: the row is not locked now
          const value = await work(client as C);
          this.#completing = true;
          return value;
        },
        {
          key: this.storageKey,
          token: this.token,
          ttlMs: ttl,
          response: (value) => {
            stored = response(value);
            return stored && this.#stored(stored);
          },
        },
      );
    } catch (error) {
      this.#completing = false;
      if (error instanceof LeaseLostError) {
        this.#settled = true;
        if (!this.#lost) this.#loseLease('complete'); // a failed renewal may have reported it already
        throw error;
      }
      // Rolled back (or, after a failed COMMIT, known not to have landed): free the key so
      // that a retry runs again. Fenced, so a record completed by the commit stays.
      await this.release().catch((releaseError: unknown) => this.engine.storeError('release', this.key, this.scope, releaseError));
      throw error;
    }
    this.#completing = false;
    if (outcome.stored) {
      this.#settled = true;
      this.#stop();
      if (stored) this.#settleFollowers(stored);
      else this.#flight?.end(undefined);
      this.engine.emit({ type: 'completed', key: this.key, scope: this.scope, status: stored?.status });
    } else {
      await this.release().catch((error: unknown) => this.engine.storeError('release', this.key, this.scope, error));
    }
    return outcome;
  }

  /** Free the key so that a retry runs again. Throws on store failure. */
  async release(status?: number): Promise<boolean> {
    this.#settled = true;
    this.#stop();
    if (this.#lost) return false;
    let ok: boolean;
    try {
      ok = await this.engine.call('release', () => this.engine.options.store.release(this.storageKey, this.token));
    } catch (error) {
      this.#flight?.end(undefined);
      throw error;
    }
    if (ok) {
      this.#flight?.end({ record: undefined });
      if (this.engine.observed()) this.engine.emit({ type: 'released', key: this.key, scope: this.scope, status });
    } else this.#loseLease('release');
    return ok;
  }
}
