/**
 * How a duplicate waits for the request that holds its key (docs/semantics.md#how-a-duplicate-waits):
 * in memory when that request runs in this process (a {@link Flight}), else until the store
 * wakes it (`IdempotencyStore.subscribe`) with a slow safety poll, or by polling with backoff
 * when the store cannot wake it. The state lives per store object, so every engine sharing a
 * store shares it; waiters' reads go through a small limiter so that they never crowd out
 * the owners' completes on a shared connection pool.
 * @module
 */
import { sameFingerprint, type Fingerprint } from './fingerprint.js';
import type { IdempotencyRecord, IdempotencyStore, ProcessingRecord, SettleListener } from './store.js';

/** While the store's wake-ups are live, look anyway after this long (a message lost unseen), doubling. */
const SAFETY_POLL_MS = 2000;
const SAFETY_POLL_MAX_MS = 10_000;
/** Without wake-ups: poll with jittered backoff, as the store is the only news. */
const POLL_MIN_MS = 10;
const POLL_MAX_MS = 250;
const POLL_FACTOR = 1.6;
/** Waiters' reads in flight at once, per store: the rest of the store's connections stay free for owners. */
const MAX_WAITER_READS = 4;
/** Keys whose wake-up arrived recently, kept for a waiter that registers just after it. */
const RECENT_SETTLES = 4096;

export const TIMED_OUT: unique symbol = Symbol('timed out');

/**
 * What a flight learned when it ended: the record as it settled (`undefined` when it was
 * released), or nothing a follower can use (`undefined` outcome: ask the store).
 */
export type FlightOutcome = { record: IdempotencyRecord | undefined } | undefined;

/** The claim a flight holds, as its followers see it. */
export interface FlightOwner {
  record: ProcessingRecord;
  /** The owner's own view of its lease end (it renews it); past it, followers stop trusting it. */
  leaseUntil(): number;
}

/**
 * The request of this process that is handling a storage key (claiming it, waiting for it
 * in the store, or owning it). Later requests for the key follow it instead of asking the
 * store; it ends once with what it learned.
 */
export class Flight {
  owner: FlightOwner | undefined;
  /** When it learned that the key is in progress (it claimed it, or found it claimed). */
  inProgressSince: number | undefined;
  // The promises are made when a follower first asks for them: most flights (a request
  // with no duplicate in this process) end unfollowed, and then cost no promise at all.
  #done: Promise<FlightOutcome> | undefined;
  #firstProgress: Promise<unknown> | undefined;
  #resolve: ((outcome: FlightOutcome) => void) | undefined;
  #resolveFirstProgress: (() => void) | undefined;
  #outcome: FlightOutcome;
  #ended = false;

  constructor(
    private readonly flights: Map<string, Flight>,
    readonly key: string,
    readonly fingerprint: string,
  ) {
    flights.set(key, this);
  }

  get ended(): boolean {
    return this.#ended;
  }

  /** Whether a request follows this flight (asked for `done` or `firstProgress`). */
  get followed(): boolean {
    return this.#done !== undefined || this.#firstProgress !== undefined;
  }

  /** What it learned, once ended. */
  get done(): Promise<FlightOutcome> {
    if (this.#done === undefined) {
      this.#done = this.#ended
        ? Promise.resolve(this.#outcome)
        : new Promise((resolve) => {
            this.#resolve = resolve;
          });
    }
    return this.#done;
  }

  /** Settles at the first progress: the key is in progress, or the flight ended. */
  get firstProgress(): Promise<unknown> {
    if (this.#firstProgress === undefined) {
      this.#firstProgress =
        this.#ended || this.inProgressSince !== undefined
          ? Promise.resolve()
          : new Promise<void>((resolve) => {
              this.#resolveFirstProgress = resolve;
            });
    }
    return this.#firstProgress;
  }

  inProgress(since: number): void {
    this.inProgressSince ??= since;
    this.#resolveFirstProgress?.();
  }

  /**
   * Settle the followers (first call wins) and let the next request for the key lead.
   * `outcome` may be a function, called only when a request follows.
   */
  end(outcome: FlightOutcome | (() => FlightOutcome)): void {
    if (this.#ended) return;
    this.#ended = true;
    if (this.flights.get(this.key) === this) this.flights.delete(this.key);
    if (typeof outcome === 'function') outcome = this.followed ? outcome() : undefined;
    this.#outcome = outcome;
    this.#resolve?.(outcome);
    this.#resolveFirstProgress?.();
  }
}

/** Resolve with `promise`'s value, or with TIMED_OUT after `ms`. */
export function within<T>(promise: Promise<T>, ms: number): Promise<T | typeof TIMED_OUT> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<typeof TIMED_OUT>((resolve) => {
    timer = setTimeout(resolve, Math.max(0, ms), TIMED_OUT);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

export interface SettleWait {
  key: string;
  fingerprint: Fingerprint;
  /** The lease end of the record last seen: a crashed owner's key frees then, with no message. */
  leaseUntil: number | undefined;
  deadline: number;
  /** {@link StoreWaiters.wakeSequence} taken before the claim that found the record processing. */
  sequenceBeforeClaim: number;
  now: () => number;
  /** One read of the record (time-bounded by the caller). */
  read: () => Promise<IdempotencyRecord | undefined>;
}

/** Per-store waiting state: local flights, wake-up subscription, waiters' read limiter. */
export class StoreWaiters {
  readonly flights = new Map<string, Flight>();
  readonly #store: IdempotencyStore;
  readonly #watchers = new Map<string, Set<(record?: IdempotencyRecord | null) => void>>();
  #subscribed = false;
  #live = false;
  /** Counts wake-ups and (re)connections: the order of events, for `wakeSequence()`. */
  #seq = 0;
  /** `#seq` when the wake-ups last came up. */
  #liveSince = 0;
  /** Key -> `#seq` of its last wake-up (bounded, oldest dropped first). */
  readonly #recent = new Map<string, number>();
  #reading = 0;
  readonly #queue: (() => void)[] = [];

  constructor(store: IdempotencyStore) {
    this.#store = store;
  }

  /** Whether the store's wake-ups are being delivered now. */
  get live(): boolean {
    return this.#live;
  }

  /**
   * Taken before a claim: at wait time it tells whether a wake-up for the key may have
   * come and gone in between (the record's settle raced the claim's answer).
   */
  wakeSequence(): number {
    return this.#live ? this.#seq : -1;
  }

  /** Whether a wake-up for `key` may have been missed since `sequenceBeforeClaim`. */
  #missed(key: string, sequenceBeforeClaim: number): boolean {
    if (!this.#live) return false; // polling anyway
    if (sequenceBeforeClaim < 0 || this.#liveSince > sequenceBeforeClaim) return true;
    return (this.#recent.get(key) ?? -1) > sequenceBeforeClaim;
  }

  #subscribe(): void {
    if (this.#subscribed || typeof this.#store.subscribe !== 'function') return;
    this.#subscribed = true;
    const listener: SettleListener = {
      settled: (key, record) => {
        this.#recent.delete(key);
        this.#recent.set(key, ++this.#seq);
        if (this.#recent.size > RECENT_SETTLES) this.#recent.delete(this.#recent.keys().next().value!);
        const wakes = this.#watchers.get(key);
        if (wakes) for (const wake of wakes) wake(record);
      },
      ready: () => {
        this.#live = true;
        this.#liveSince = ++this.#seq;
        this.#wakeAll(); // messages may have been missed while down: everyone looks once
      },
      down: () => {
        if (!this.#live) return;
        this.#live = false;
        this.#wakeAll(); // switch every waiter to polling until the next ready()
      },
    };
    try {
      this.#store.subscribe(listener);
    } catch {
      // A store that cannot subscribe is polled; it never fails a request.
    }
  }

  #wakeAll(): void {
    for (const wakes of this.#watchers.values()) for (const wake of wakes) wake();
  }

  /** Run a waiter's read, at most MAX_WAITER_READS at once per store (FIFO). */
  async read<T>(run: () => Promise<T>): Promise<T> {
    if (this.#reading >= MAX_WAITER_READS) await new Promise<void>((resolve) => this.#queue.push(resolve));
    else this.#reading++;
    try {
      return await run();
    } finally {
      const next = this.#queue.shift();
      if (next) next(); // hand the slot over
      else this.#reading--;
    }
  }

  /**
   * Wait until the record is no longer processing under `fingerprint`: resolves with it
   * (`undefined` when it is gone), or TIMED_OUT at the deadline (after a last look).
   * Read errors reject.
   */
  async waitForSettle(w: SettleWait): Promise<IdempotencyRecord | undefined | typeof TIMED_OUT> {
    this.#subscribe();
    let woken = false;
    // What the wake-up brought: the settled record (null: released), or undefined (read it).
    let delivered: IdempotencyRecord | null | undefined;
    let signal: (() => void) | undefined;
    const wake = (record?: IdempotencyRecord | null) => {
      woken = true;
      delivered = record;
      signal?.();
    };
    const sleep = (ms: number) =>
      new Promise<void>((resolve) => {
        if (woken) return resolve();
        const done = () => {
          clearTimeout(timer);
          signal = undefined;
          resolve();
        };
        const timer = setTimeout(done, ms);
        signal = done;
      });
    let wakes = this.#watchers.get(w.key);
    if (!wakes) this.#watchers.set(w.key, (wakes = new Set()));
    wakes.add(wake);
    try {
      // Between the claim and now, wake-ups came up (or back), or this key's came already.
      woken = this.#missed(w.key, w.sequenceBeforeClaim);
      let pollMs = POLL_MIN_MS;
      let safetyMs = SAFETY_POLL_MS;
      let leaseUntil = w.leaseUntil;
      let leaseLooked: number | undefined;
      for (;;) {
        if (!woken) {
          const remaining = w.deadline - w.now();
          if (remaining <= 0) return TIMED_OUT;
          let delay: number;
          if (this.#live) {
            delay = safetyMs;
            safetyMs = Math.min(safetyMs * 2, SAFETY_POLL_MAX_MS);
          } else {
            delay = pollMs * (1 + Math.random());
            pollMs = Math.min(pollMs * POLL_FACTOR, POLL_MAX_MS);
          }
          // Look once when the lease ends (once per lease value: clocks may disagree).
          if (leaseUntil !== undefined && leaseUntil !== leaseLooked) {
            const untilLeaseEnd = leaseUntil - w.now() + 1;
            if (untilLeaseEnd < delay) {
              delay = Math.max(0, untilLeaseEnd);
              leaseLooked = leaseUntil;
            }
          }
          await sleep(Math.min(delay, remaining));
        }
        woken = false;
        const brought = delivered;
        delivered = undefined;
        // A record sent with the wake-up spares the read; a stale one (an earlier claim's)
        // is judged like any record by the caller, and at worst costs a claim.
        const found = brought === null ? undefined : brought !== undefined ? brought : await this.read(w.read);
        if (found?.state !== 'processing' || !sameFingerprint(found.fingerprint, w.fingerprint)) return found;
        leaseUntil = found.leaseUntil;
        if (w.now() >= w.deadline) return TIMED_OUT;
      }
    } finally {
      signal = undefined;
      wakes.delete(wake);
      if (wakes.size === 0 && this.#watchers.get(w.key) === wakes) this.#watchers.delete(w.key);
    }
  }
}

const waitersByStore = new WeakMap<IdempotencyStore, StoreWaiters>();

/** The waiting state shared by every engine on `store`. */
export function storeWaiters(store: IdempotencyStore): StoreWaiters {
  let waiters = waitersByStore.get(store);
  if (!waiters) waitersByStore.set(store, (waiters = new StoreWaiters(store)));
  return waiters;
}
