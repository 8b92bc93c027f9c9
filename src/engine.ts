/**
 * The engine: claim / wait / replay / complete / release over any store, with lease
 * renewal, fencing, timeouts and events. Shared by the HTTP layer and `idempotent()`.
 * @module
 */
import { randomFillSync } from 'node:crypto';
import { decide } from './decide.js';
import { fingerprintValue, sameFingerprint, sha256, type Fingerprint } from './fingerprint.js';
import {
  IdempotencyConflictError,
  IdempotencyMismatchError,
  LeaseLostError,
  ResponseNotReplayableError,
  StoreUnavailableError,
  isIdempotencyError,
} from './errors.js';
import type { CompletedRecord, IdempotencyRecord, IdempotencyStore, ProcessingRecord, StoredResponse } from './store.js';
import { Telemetry, type AcquireOutcome, type TelemetryOptions } from './telemetry.js';
import { withTimeout } from './timers.js';
import { isTransactionalStore, type TransactionOutcome } from './transaction.js';
import { assertFunction, assertInteger, assertOneOf } from './validate.js';
import { Flight, TIMED_OUT, waitHub, within, type FlightOutcome, type WaitHub } from './waiting.js';

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
  | 'ttl-invalid';

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
}

/** Options shared by the HTTP adapters and `idempotent()`. */
export interface EngineOptions {
  /** Where records live: a store from `createStore()` or a driver factory. */
  store: IdempotencyStore;
  /**
   * How long a duplicate waits for the first request to finish before a 409 / conflict
   * error, in ms. 0 answers at once.
   * @default 2000
   */
  wait?: number;
  /**
   * How long a claim holds the key without renewal, in ms; renewed every leaseMs/3 while
   * the handler runs. A crashed process's key frees after this.
   * @default 30000
   */
  leaseMs?: number;
  /**
   * How long a completed record is replayed, in ms. The HTTP layer and
   * `idempotent()` also accept a function of the request and response (or of the
   * arguments and result), see docs/semantics.md#per-operation-ttl.
   * @default 86400000 (24 h)
   */
  ttl?: number;
  /**
   * Any single store call slower than this fails as `store-unavailable`.
   * @default 2000
   */
  storeTimeoutMs?: number;
  /**
   * What to do when the store fails before the handler ran: `'fail'` answers 503
   * (fail closed), `'continue'` runs the handler unprotected and emits `unprotected`.
   * @default 'fail'
   */
  onStoreError?: 'fail' | 'continue';
  /** Called for every claim, replay, conflict, mismatch, release, lost lease and store error. */
  onEvent?: (event: IdempotencyEvent) => void;
  /** Clock, for tests. @default Date.now */
  now?: () => number;
  /**
   * OpenTelemetry spans and metrics, and `node:diagnostics_channel` messages
   * (docs/telemetry.md). On when `@opentelemetry/api` is installed; `false` turns
   * OpenTelemetry off. Never records the key or a body; the scope only with `recordScope`.
   * @default {}
   */
  telemetry?: TelemetryOptions | false;
}

export interface ResolvedEngineOptions {
  store: IdempotencyStore;
  wait: number;
  leaseMs: number;
  ttl: number;
  storeTimeoutMs: number;
  onStoreError: 'fail' | 'continue';
  onEvent: ((event: IdempotencyEvent) => void) | undefined;
  now: () => number;
  telemetry: TelemetryOptions | false | undefined;
}

const storeMethods = ['claim', 'get', 'complete', 'release', 'extend', 'close'] as const;

export function resolveEngineOptions(options: EngineOptions): ResolvedEngineOptions {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError(`Expected options to be an object, got ${String(options)}`);
  }
  const { store } = options;
  if (typeof store !== 'object' || store === null || storeMethods.some((m) => typeof store[m] !== 'function')) {
    throw new TypeError(
      typeof store === 'string'
        ? 'Expected `store` to be a store object, got a string: pass `createStore(url)` instead of the URL'
        : `Expected \`store\` to be an idempotency store (claim, get, complete, release, extend, close), got ${String(store)}`,
    );
  }
  const resolved: ResolvedEngineOptions = {
    store,
    wait: options.wait ?? 2000,
    leaseMs: options.leaseMs ?? 30_000,
    ttl: options.ttl ?? 86_400_000,
    storeTimeoutMs: options.storeTimeoutMs ?? 2000,
    onStoreError: options.onStoreError ?? 'fail',
    onEvent: options.onEvent,
    now: options.now ?? Date.now,
    telemetry: options.telemetry,
  };
  assertInteger('wait', resolved.wait, 0);
  assertInteger('leaseMs', resolved.leaseMs, 1);
  assertInteger('ttl', resolved.ttl, 1);
  assertInteger('storeTimeoutMs', resolved.storeTimeoutMs, 1);
  assertOneOf('onStoreError', resolved.onStoreError, ['fail', 'continue'] as const);
  if (resolved.onEvent !== undefined) assertFunction('onEvent', resolved.onEvent);
  assertFunction('now', resolved.now);
  return resolved;
}

/** The store sees a hash of (scope, key), never the client's text. */
export function storageKey(scope: string | undefined, key: string): string {
  return sha256(JSON.stringify([scope ?? null, key]));
}

const TOKEN_BYTES = 16;
const TOKEN_POOL_BYTES = 4096;
let tokenPool: Buffer | undefined;
let tokenOffset = TOKEN_POOL_BYTES;

/**
 * A claim's fencing token: 128 random bits, base64url. Drawn from a pool of random bytes,
 * filled 256 tokens at a time, and decoded natively into one flat string: `randomUUID()`
 * builds its text by concatenation, and the string tree it leaves (14 heap objects) lived
 * as long as the record in the memory store, which made garbage collection copy and
 * trace it again and again.
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

/** When a request's wait ends: set once, when it first learns that the key is in progress. */
interface WaitClock {
  deadline: number | undefined;
}

export type Acquired =
  | { type: 'execute'; lease: Lease }
  | { type: 'replay'; record: CompletedRecord };

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

  constructor(
    private readonly engine: Engine,
    readonly key: string,
    readonly scope: string | undefined,
    readonly storageKey: string,
    readonly token: string,
    flight?: Flight,
    record?: ProcessingRecord,
  ) {
    const { leaseMs, now } = engine.options;
    this.#leaseUntil = now() + leaseMs;
    if (flight && record) {
      this.#flight = flight;
      this.#record = record;
      flight.owner = { record, leaseUntil: () => this.#leaseUntil };
      flight.inProgress(now());
    }
    // Renew at a third of the lease, so two missed renewals still leave time.
    this.#timer = setInterval(() => void this.#renew(), Math.max(1, Math.floor(leaseMs / 3)));
    this.#timer.unref();
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
      this.engine.emit({ type: 'store-error', key: this.key, scope: this.scope, operation: 'extend', error });
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

  /**
   * Store the outcome for replay. Throws on store failure (after stopping renewal); the
   * write is then retried in the background while the lease can still be ours, because a
   * completion that never lands lets the key expire and a retry run the handler twice.
   */
  async complete(response: StoredResponse, ttl: number = this.engine.options.ttl): Promise<boolean> {
    this.#settled = true;
    this.#stop();
    if (this.#lost) return false;
    const { store } = this.engine.options;
    let ok: boolean;
    try {
      ok = await this.engine.call('complete', () => store.complete(this.storageKey, this.token, response, ttl));
    } catch (error) {
      this.#flight?.end(undefined);
      void this.#retryComplete(response, ttl);
      throw error;
    }
    if (ok) {
      this.#settleFollowers(response, ttl);
      if (this.engine.observed()) this.engine.emit({ type: 'completed', key: this.key, scope: this.scope, status: response.status });
    } else this.#loseLease('complete');
    return ok;
  }

  async #retryComplete(response: StoredResponse, ttl: number): Promise<void> {
    const { store, now } = this.engine.options;
    let delayMs = 50;
    while (now() + delayMs < this.#leaseUntil) {
      await new Promise((resolve) => setTimeout(resolve, delayMs).unref());
      delayMs = Math.min(delayMs * 2, 2000);
      try {
        if (await this.engine.call('complete', () => store.complete(this.storageKey, this.token, response, ttl))) {
          this.engine.emit({ type: 'completed', key: this.key, scope: this.scope, status: response.status });
          return;
        }
        // Refused by token: either the failed attempt landed after all (a slow or paused
        // store ran it late), or the lease really is gone.
        const record = await this.engine.call('get', () => store.get(this.storageKey));
        if (record?.state === 'completed' && record.token === this.token) {
          this.engine.emit({ type: 'completed', key: this.key, scope: this.scope, status: response.status });
        } else this.#loseLease('complete');
        return;
      } catch (error) {
        this.engine.emit({ type: 'store-error', key: this.key, scope: this.scope, operation: 'complete', error });
      }
    }
    this.#loseLease('complete');
  }

  /** The stored record, handed to this process's waiting duplicates as it is stored. */
  #settleFollowers(response: StoredResponse, ttl: number = this.engine.options.ttl): void {
    const flight = this.#flight;
    const record = this.#record;
    if (!flight || !record) return;
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
    const { store, ttl } = this.engine.options;
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
        { key: this.storageKey, token: this.token, ttlMs: ttl, response: (value) => (stored = response(value)) },
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
      await this.release().catch((releaseError: unknown) =>
        this.engine.emit({ type: 'store-error', key: this.key, scope: this.scope, operation: 'release', error: releaseError }),
      );
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
      await this.release().catch((error: unknown) =>
        this.engine.emit({ type: 'store-error', key: this.key, scope: this.scope, operation: 'release', error }),
      );
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

export class Engine {
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

  /** Run one store call within `storeTimeoutMs`; every failure becomes StoreUnavailableError. */
  call<T>(operation: NonNullable<IdempotencyEvent['operation']>, run: () => Promise<T>): Promise<T> {
    const { storeTimeoutMs } = this.options;
    const message = (this.#timeoutMessages[operation] ??= `store ${operation} timed out after ${storeTimeoutMs} ms`);
    let pending: Promise<T>;
    try {
      pending = this.telemetry.storeCall(operation, () => withTimeout(run(), storeTimeoutMs, message), (error) => error instanceof Error && error.message === message);
    } catch (error) {
      pending = Promise.reject(error); // a store method that throws instead of rejecting
    }
    return pending.catch(toStoreUnavailable);
  }

  /** The timeout message of each store operation, made once. */
  readonly #timeoutMessages: Partial<Record<NonNullable<IdempotencyEvent['operation']>, string>> = {};

  /**
   * Claim the key, or find what to do instead: replay, or throw a typed error
   * (mismatch, conflict after waiting, not replayable, store unavailable).
   * A duplicate waits as docs/semantics.md#how-a-duplicate-waits says: on a request of this
   * process in memory, else on the store's wake-ups (or polls).
   */
  acquire(key: string, scope: string | undefined, fingerprint: Fingerprint): Promise<Acquired> {
    return this.telemetry.acquire(scope, () => this.#acquire(key, scope, fingerprint), acquireOutcome);
  }

  /**
   * The ttl of one completed record: what `compute` returns, checked, or the `ttl` option.
   * A bad value (not a positive integer of ms, or a throw) must not lose the record of an
   * effect that happened: it keeps the `ttl` option's value (24 h unless a number was
   * given) and emits `ttl-invalid` with the reason.
   */
  ttlFor(compute: (() => unknown) | undefined, key: string, scope: string | undefined): number {
    if (compute === undefined) return this.options.ttl;
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
      `Expected the \`ttl\` function to return a positive integer (ms), ${got}; the record is kept for ${this.options.ttl} ms instead`,
      cause === undefined ? undefined : { cause },
    );
    this.emit({ type: 'ttl-invalid', key, scope, error });
    return this.options.ttl;
  }

  async #acquire(key: string, scope: string | undefined, fingerprint: Fingerprint): Promise<Acquired> {
    const { store } = this.options;
    const skey = storageKey(scope, key);
    // The wait runs from the moment this request learns that the key is in progress.
    const wait: WaitClock = { deadline: undefined };
    const hub = waitHub(store);
    // The flight this call leads: other requests of this process for the key follow it.
    let mine: Flight | undefined;
    try {
      for (;;) {
        const local = hub.flights.get(skey);
        if (local && local !== mine) {
          const outcome = await this.telemetry.waiting(scope, () => this.#follow(local, key, scope, fingerprint, wait), (o) => o?.record, isConflict);
          if (outcome) {
            const next = this.#decided(outcome.record, key, scope, fingerprint);
            if (next === 'claim') continue;
            if (next !== 'wait') return next;
          }
        }
        if (!mine && !hub.flights.has(skey)) mine = new Flight(hub.flights, skey, fingerprintValue(fingerprint));
        const acquired = await this.#claim(hub, key, scope, skey, fingerprint, wait, mine);
        if (acquired === 'claim') continue; // released or expired while we waited: claim again
        if (acquired.type === 'execute') mine = undefined; // the lease now ends the flight
        else mine?.end({ record: acquired.record });
        return acquired;
      }
    } catch (error) {
      // Mismatch and not-replayable ended it with the record already; anything else taught nothing.
      mine?.end(undefined);
      throw error;
    }
  }

  /** One claim in the store, then (if it is held elsewhere) the wait for it to settle. */
  async #claim(
    hub: WaitHub,
    key: string,
    scope: string | undefined,
    skey: string,
    fingerprint: Fingerprint,
    wait: WaitClock,
    flight: Flight | undefined,
  ): Promise<Acquired | 'claim'> {
    const { store, leaseMs, now } = this.options;
    const mark = hub.mark();
    const token = newToken();
    let result;
    try {
      result = await this.call('claim', () => store.claim(skey, { fingerprint: fingerprintValue(fingerprint), token, createdAt: now() }, leaseMs));
    } catch (error) {
      this.emit({ type: 'store-error', key, scope, operation: 'claim', error });
      // A claim that timed out may still reach the store later (a paused or slow server
      // runs queued commands when it resumes): without this, that orphan claim would
      // answer the client's retry with 409 for a whole lease. Best effort, fenced by
      // this token, so it can only remove our own claim.
      void this.call('release', () => store.release(skey, token)).catch(() => undefined);
      throw error;
    }
    if (result.claimed) {
      if (this.observed()) this.emit({ type: 'claimed', key, scope });
      return { type: 'execute', lease: new Lease(this, key, scope, skey, token, flight, result.record) };
    }
    let record: IdempotencyRecord | undefined = result.record;
    let next = this.#decided(record, key, scope, fingerprint, flight);
    // The store refused the claim, so the record is live by the store's clock even if
    // ours disagrees: wait rather than spin on claims.
    if (next === 'claim' || next === 'wait') {
      const foundAt = now();
      flight?.inProgress(foundAt);
      wait.deadline ??= foundAt + this.options.wait;
      const deadline = wait.deadline;
      record = await this.telemetry.waiting(
        scope,
        () => this.#waitInStore(hub, key, scope, skey, fingerprint, record, deadline, mark),
        (settled) => settled,
        isConflict,
      );
      next = this.#decided(record, key, scope, fingerprint, flight);
      if (next === 'wait') throw new Error('unreachable: the wait returned a record still processing');
    }
    return next;
  }

  /**
   * What a settled record means for this request: a replay, a claim to try, a wait, or a
   * thrown mismatch / not-replayable (ending `flight` with the record, for its followers).
   */
  #decided(
    record: IdempotencyRecord | undefined,
    key: string,
    scope: string | undefined,
    fingerprint: Fingerprint,
    flight?: Flight,
  ): Acquired | 'claim' | 'wait' {
    switch (decide(record, fingerprint, this.options.now())) {
      case 'execute':
        return 'claim';
      case 'wait':
        return 'wait';
      case 'replay':
        if (this.observed()) this.emit({ type: 'replayed', key, scope, status: (record as CompletedRecord).response.status });
        return { type: 'replay', record: record as CompletedRecord };
      case 'mismatch':
        flight?.end({ record });
        this.emit({ type: 'mismatch', key, scope });
        throw new IdempotencyMismatchError();
      case 'not-replayable':
        flight?.end({ record });
        this.emit({ type: 'not-replayable', key, scope });
        throw new ResponseNotReplayableError();
    }
  }

  #conflict(key: string, scope: string | undefined): IdempotencyConflictError {
    this.emit({ type: 'conflict', key, scope });
    return new IdempotencyConflictError(1);
  }

  /**
   * Wait in memory for a request of this process that handles the same key: no store call.
   * Resolves with what it learned, or `undefined` to ask the store instead (a different
   * request still claiming, an owner that stopped renewing, nothing learned).
   */
  async #follow(flight: Flight, key: string, scope: string | undefined, fingerprint: Fingerprint, wait: WaitClock): Promise<FlightOutcome> {
    const { now } = this.options;
    const arrived = now();
    for (;;) {
      if (flight.ended) return flight.done;
      const owner = flight.owner;
      if (owner && owner.leaseUntil() <= now()) {
        // Its renewals stopped (a paused or failing owner): the key frees like a crashed one's.
        flight.end(undefined);
        return undefined;
      }
      // A different request in the same key: the store's record decides (mismatch), as ever.
      if (owner && !sameFingerprint(owner.record.fingerprint, fingerprint)) return { record: owner.record };
      if (!owner && flight.fingerprint !== fingerprintValue(fingerprint)) return undefined;
      if (flight.inProgressSince === undefined) {
        // Its claim is on the way (bounded by storeTimeoutMs): its answer is ours too.
        await flight.news;
        continue;
      }
      wait.deadline ??= Math.max(flight.inProgressSince, arrived) + this.options.wait;
      const remaining = wait.deadline - now();
      if (remaining <= 0) {
        if (owner) throw this.#conflict(key, scope);
        // The leader is waiting in the store with (about) the same deadline: its last look
        // is ours too, as a waiter's own last read at its deadline would be. Bounded like
        // one store call.
        const outcome = await within(flight.done, this.options.storeTimeoutMs);
        if (outcome === TIMED_OUT || outcome === undefined) throw this.#conflict(key, scope);
        return outcome;
      }
      const outcome = await within(flight.done, owner ? Math.min(remaining, owner.leaseUntil() - now() + 1) : remaining);
      if (outcome !== TIMED_OUT) return outcome;
    }
  }

  /** Wait in the store until the record settles; 409 when the deadline passes. */
  async #waitInStore(
    hub: WaitHub,
    key: string,
    scope: string | undefined,
    skey: string,
    fingerprint: Fingerprint,
    record: IdempotencyRecord | undefined,
    deadline: number,
    mark: number,
  ): Promise<IdempotencyRecord | undefined> {
    const { store, now } = this.options;
    if (deadline - now() <= 0) throw this.#conflict(key, scope);
    let found;
    try {
      found = await hub.waitForSettle({
        key: skey,
        fingerprint,
        leaseUntil: record?.state === 'processing' ? record.leaseUntil : undefined,
        deadline,
        mark,
        now,
        read: () => this.call('get', () => store.get(skey)),
      });
    } catch (error) {
      this.emit({ type: 'store-error', key, scope, operation: 'get', error });
      throw error;
    }
    if (found === TIMED_OUT) throw this.#conflict(key, scope);
    return found;
  }
}

const isConflict = (error: unknown) => error instanceof IdempotencyConflictError;

function toStoreUnavailable(error: unknown): never {
  throw isIdempotencyError(error) ? error : new StoreUnavailableError(error);
}

function acquireOutcome(error: unknown): AcquireOutcome {
  if (error instanceof IdempotencyMismatchError) return 'mismatch';
  if (error instanceof IdempotencyConflictError) return 'conflict';
  if (error instanceof ResponseNotReplayableError) return 'not-replayable';
  if (error instanceof StoreUnavailableError) return 'store-unavailable';
  return 'error';
}
