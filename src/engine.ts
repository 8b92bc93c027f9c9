/**
 * The engine: claim / wait / replay / complete / release over any store, shared by the
 * HTTP layer and `idempotent()`. It owns the resolved options, bounds every store call by
 * `storeTimeoutMs`, and reports events; the acquisition (acquire.ts) and the lease
 * (lease.ts) do the rest through it.
 * @module
 */
import { acquire, acquireOutcome, type Acquired } from './acquire.js';
import { StoreUnavailableError, isIdempotencyError } from './errors.js';
import type { IdempotencyEvent, StoreOperation } from './events.js';
import type { Fingerprint } from './fingerprint.js';
import type { KeySpace } from './key.js';
import type { EngineServices } from './lease.js';
import { resolveEngineOptions, type EngineOptions, type ResolvedEngineOptions } from './options.js';
import { Telemetry } from './telemetry.js';
import { withTimeout } from './timers.js';

export class Engine implements EngineServices {
  readonly options: ResolvedEngineOptions;
  readonly telemetry: Telemetry;

  constructor(options: EngineOptions) {
    this.options = resolveEngineOptions(options);
    this.telemetry = new Telemetry(this.options.telemetry, this.options.store.name);
  }

  /** Whether an event would reach anyone (`onEvent`, a recording counter, a channel subscriber): else it is not even built. */
  observed(): boolean {
    return this.options.onEvent !== undefined || this.telemetry.observed();
  }

  emit(event: IdempotencyEvent): void {
    try {
      this.telemetry.event(event);
    } catch {
      // Telemetry must not change what the client gets either.
    }
    try {
      this.options.onEvent?.(event);
    } catch {
      // A failing listener must not change what the client gets.
    }
  }

  /** Report a failed store call (`store-error`); the caller decides what the failure means. */
  storeError(operation: StoreOperation, key: string, scope: string | undefined, error: unknown): void {
    this.emit({ type: 'store-error', key, scope, operation, error });
  }

  /** Run one store call within `storeTimeoutMs`; every failure becomes StoreUnavailableError. */
  call<T>(operation: StoreOperation, run: () => Promise<T>): Promise<T> {
    const { storeTimeoutMs } = this.options;
    const message = (this.#timeoutMessages[operation] ??= `store ${operation} timed out after ${storeTimeoutMs} ms`);
    try {
      // Unobserved (no span, histogram or channel subscriber): the bounded call alone, and
      // its failures mapped on the way, with no wrapper closures or promises per call.
      if (!this.telemetry.watchesStoreCalls()) return withTimeout(run(), storeTimeoutMs, message, storeUnavailable);
      return this.telemetry
        .storeCall(operation, () => withTimeout(run(), storeTimeoutMs, message), (error) => error instanceof Error && error.message === message)
        .catch(toStoreUnavailable);
    } catch (error) {
      return Promise.reject(storeUnavailable(error)); // a store method that throws instead of rejecting
    }
  }

  /** The timeout message of each store operation, made once. */
  readonly #timeoutMessages: Partial<Record<StoreOperation, string>> = {};

  /**
   * Claim the key, or find what to do instead: replay, or throw a typed error
   * (mismatch, conflict after waiting, not replayable, store unavailable).
   * A duplicate waits as docs/semantics.md#how-a-duplicate-waits says: on a request of this
   * process in memory, else on the store's wake-ups (or polls).
   */
  acquire(key: string, scope: string | undefined, fingerprint: Fingerprint, space?: KeySpace): Promise<Acquired> {
    return this.telemetry.acquire(scope, () => acquire(this, key, scope, fingerprint, space), acquireOutcome);
  }

  /**
   * Whether a request whose acquisition failed with `error` runs its handler unprotected:
   * the store failed (StoreUnavailableError) and `onStoreError` is `'continue'`. Then
   * `unprotected` is emitted; otherwise the caller answers with the error.
   */
  runsUnprotected(error: unknown, key: string, scope: string | undefined): boolean {
    if (!(error instanceof StoreUnavailableError) || this.options.onStoreError !== 'continue') return false;
    this.emit({ type: 'unprotected', key, scope, error });
    return true;
  }

  /**
   * The ttl of one completed record: what `compute` returns, checked, or the `ttl` option.
   * A bad value (not a positive integer of ms, or a throw) must not lose the record of an
   * effect that happened: it keeps the `ttl` option's value (24 h unless a number was
   * given) and emits `ttl-invalid` with the reason.
   */
  ttlFor(compute: (() => unknown) | undefined, key: string, scope: string | undefined): number {
    if (compute === undefined) return this.options.ttlMs;
    let value: unknown;
    let cause: unknown;
    try {
      value = compute();
    } catch (error) {
      cause = error;
    }
    if (cause === undefined && typeof value === 'number' && Number.isSafeInteger(value) && value >= 1) return value;
    const got =
      cause !== undefined
        ? `it threw ${cause instanceof Error ? cause.message : String(cause)}`
        : value instanceof Promise
          ? 'a Promise (the ttl function must be synchronous)'
          : `got ${typeof value === 'string' ? JSON.stringify(value) : String(value)}`;
    const error = new TypeError(
      `Expected the \`ttlMs\` function to return a positive integer (ms), ${got}; the record is kept for ${this.options.ttlMs} ms instead`,
      cause === undefined ? undefined : { cause },
    );
    this.emit({ type: 'ttl-invalid', key, scope, error });
    return this.options.ttlMs;
  }
}

/** A failed store call as the engine reports it: its own errors as they are, anything else StoreUnavailableError. */
function storeUnavailable(error: unknown): unknown {
  return isIdempotencyError(error) ? error : new StoreUnavailableError(error);
}

function toStoreUnavailable(error: unknown): never {
  throw storeUnavailable(error);
}
