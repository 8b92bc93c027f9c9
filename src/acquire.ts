/**
 * Acquisition: what a request with a key gets from the engine. It claims the key (a
 * lease), or finds what to do instead: replay the completed record, or throw a typed
 * error (mismatch, conflict after waiting, not replayable, store unavailable). A
 * duplicate of a request in flight waits as docs/semantics.md#how-a-duplicate-waits says:
 * on that request in memory when it runs in this process (its {@link Flight}), else on the
 * store's wake-ups or polls ({@link StoreWaiters}).
 * @module
 */
import { decide } from './decide.js';
import { openRecord } from './encryption.js';
import { RequestInProgressError, KeyReusedError, RecordUnreadableError, ResponseNotReplayableError, StoreUnavailableError } from './errors.js';
import { fingerprintValue, sameFingerprint, type Fingerprint } from './fingerprint.js';
import { scopePartition, storageKey, type KeySpace } from './key.js';
import { Lease, newToken, type EngineServices } from './lease.js';
import type { ClaimContext, CompletedRecord, IdempotencyRecord } from './store.js';
import type { AcquireOutcome } from './telemetry.js';
import { Flight, TIMED_OUT, storeWaiters, within, type FlightOutcome, type StoreWaiters } from './waiting.js';

export type Acquired =
  | { type: 'execute'; lease: Lease }
  | { type: 'replay'; record: CompletedRecord };

/** Claim `key` in `scope` for a request of `fingerprint`, waiting for a request that holds it. */
export function acquire(engine: EngineServices, key: string, scope: string | undefined, fingerprint: Fingerprint, space?: KeySpace): Promise<Acquired> {
  return new Acquisition(engine, key, scope, fingerprint, space).run();
}

/** What an acquisition that failed means, for its telemetry span. */
export function acquireOutcome(error: unknown): AcquireOutcome {
  if (error instanceof KeyReusedError) return 'mismatch';
  if (error instanceof RequestInProgressError) return 'conflict';
  if (error instanceof ResponseNotReplayableError) return 'not-replayable';
  if (error instanceof StoreUnavailableError) return 'store-unavailable';
  if (error instanceof RecordUnreadableError) return 'record-unreadable';
  return 'error';
}

const isConflict = (error: unknown) => error instanceof RequestInProgressError;

/** One request's acquisition of its key. */
/**
 * What a claim tells the store of its scope. The partition is hashed only when a store reads
 * it (the memory store's fair bounds): the others never pay for it.
 */
class ScopeContext implements ClaimContext {
  readonly #scope: string | undefined; // private: a store is told a hash, never the scope's text
  #partition: string | undefined;
  constructor(scope: string | undefined) {
    this.#scope = scope;
  }
  get partition(): string {
    return (this.#partition ??= scopePartition(this.#scope));
  }
}

class Acquisition {
  /** When the wait ends: set once, when this request first learns that the key is in progress. */
  deadline: number | undefined = undefined;
  readonly skey: string;

  constructor(
    readonly engine: EngineServices,
    readonly key: string,
    readonly scope: string | undefined,
    readonly fingerprint: Fingerprint,
    space: KeySpace | undefined,
  ) {
    this.skey = storageKey(scope, key, space);
  }

  async run(): Promise<Acquired> {
    const { engine, scope, skey } = this;
    const waiters = storeWaiters(engine.options.store);
    // The flight this call leads: other requests of this process for the key follow it.
    let ledFlight: Flight | undefined;
    try {
      for (;;) {
        const followed = waiters.flights.get(skey);
        if (followed && followed !== ledFlight) {
          const outcome = await engine.telemetry.waiting(scope, () => this.#follow(followed), (o) => o?.record, isConflict);
          if (outcome) {
            const next = this.#decided(outcome.record);
            if (next === 'claim') continue;
            if (next !== 'wait') return next;
          }
        }
        if (!ledFlight && !waiters.flights.has(skey)) ledFlight = new Flight(waiters.flights, skey, fingerprintValue(this.fingerprint));
        const acquired = await this.#claim(waiters, ledFlight);
        if (acquired === 'claim') continue; // released or expired while we waited: claim again
        if (acquired.type === 'execute') ledFlight = undefined; // the lease now ends the flight
        else ledFlight?.end({ record: acquired.record });
        return acquired;
      }
    } catch (error) {
      // Mismatch and not-replayable ended it with the record already; anything else taught nothing.
      ledFlight?.end(undefined);
      throw error;
    }
  }

  /** One claim in the store, then (if it is held elsewhere) the wait for it to settle. */
  async #claim(waiters: StoreWaiters, flight: Flight | undefined): Promise<Acquired | 'claim'> {
    const { engine, key, scope, skey, fingerprint } = this;
    const { store, leaseMs, now } = engine.options;
    const sequenceBeforeClaim = waiters.wakeSequence();
    const token = newToken();
    let result;
    try {
      result = await engine.call('claim', () => store.claim(skey, { fingerprint: fingerprintValue(fingerprint), token, createdAt: now() }, leaseMs, new ScopeContext(scope)));
    } catch (error) {
      engine.storeError('claim', key, scope, error);
      // A claim that timed out may still reach the store later (a paused or slow server
      // runs queued commands when it resumes): without this, that orphan claim would
      // answer the client's retry with 409 for a whole lease. Best effort, fenced by
      // this token, so it can only remove our own claim.
      void engine.call('release', () => store.release(skey, token)).catch(() => undefined);
      throw error;
    }
    if (result.claimed) {
      if (engine.observed()) engine.emit({ type: 'claimed', key, scope });
      return { type: 'execute', lease: new Lease(engine, key, scope, skey, token, flight, result.record) };
    }
    let record: IdempotencyRecord | undefined = result.record;
    let next = this.#decided(record, flight);
    // The store refused the claim, so the record is live by the store's clock even if
    // ours disagrees: wait rather than spin on claims.
    if (next === 'claim' || next === 'wait') {
      const foundAt = now();
      flight?.inProgress(foundAt);
      this.deadline ??= foundAt + engine.options.waitMs;
      const deadline = this.deadline;
      record = await engine.telemetry.waiting(scope, () => this.#waitInStore(waiters, record, deadline, sequenceBeforeClaim), (settled) => settled, isConflict);
      next = this.#decided(record, flight);
      if (next === 'wait') throw new Error('unreachable: the wait returned a record still processing');
    }
    return next;
  }

  /**
   * What a settled record means for this request: a replay, a claim to try, a wait, or a
   * thrown mismatch / not-replayable (ending `flight` with the record, for its followers).
   */
  #decided(record: IdempotencyRecord | undefined, flight?: Flight): Acquired | 'claim' | 'wait' {
    const { engine, key, scope } = this;
    switch (decide(record, this.fingerprint, engine.options.now())) {
      case 'execute':
        return 'claim';
      case 'wait':
        return 'wait';
      case 'replay': {
        let opened: CompletedRecord;
        try {
          opened = openRecord(record as CompletedRecord, this.skey, engine.options.keyring);
        } catch (error) {
          if (!(error instanceof RecordUnreadableError)) throw error;
          // Fail closed: neither replayed nor run again (the effect happened).
          flight?.end({ record });
          engine.emit({ type: 'record-unreadable', key, scope, keyId: error.keyId, error });
          throw error;
        }
        if (opened.response.body === null) return this.#decided(opened, flight); // sealed, without a replayable body
        if (engine.observed()) engine.emit({ type: 'replayed', key, scope, status: opened.response.status });
        return { type: 'replay', record: opened };
      }
      case 'mismatch':
        flight?.end({ record });
        engine.emit({ type: 'mismatch', key, scope });
        throw new KeyReusedError();
      case 'not-replayable':
        flight?.end({ record });
        engine.emit({ type: 'not-replayable', key, scope });
        throw new ResponseNotReplayableError();
    }
  }

  #conflict(): RequestInProgressError {
    this.engine.emit({ type: 'conflict', key: this.key, scope: this.scope });
    return new RequestInProgressError(1);
  }

  /**
   * Wait in memory for a request of this process that handles the same key: no store call.
   * Resolves with what it learned, or `undefined` to ask the store instead (a different
   * request still claiming, an owner that stopped renewing, nothing learned).
   */
  async #follow(flight: Flight): Promise<FlightOutcome> {
    const { now, waitMs, storeTimeoutMs } = this.engine.options;
    const { fingerprint } = this;
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
        await flight.firstProgress;
        continue;
      }
      this.deadline ??= Math.max(flight.inProgressSince, arrived) + waitMs;
      const remaining = this.deadline - now();
      if (remaining <= 0) {
        if (owner) throw this.#conflict();
        // The leader is waiting in the store with (about) the same deadline: its last look
        // is ours too, as a waiter's own last read at its deadline would be. Bounded like
        // one store call.
        const outcome = await within(flight.done, storeTimeoutMs);
        if (outcome === TIMED_OUT || outcome === undefined) throw this.#conflict();
        return outcome;
      }
      const outcome = await within(flight.done, owner ? Math.min(remaining, owner.leaseUntil() - now() + 1) : remaining);
      if (outcome !== TIMED_OUT) return outcome;
    }
  }

  /** Wait in the store until the record settles; 409 when the deadline passes. */
  async #waitInStore(waiters: StoreWaiters, record: IdempotencyRecord | undefined, deadline: number, sequenceBeforeClaim: number): Promise<IdempotencyRecord | undefined> {
    const { engine, key, scope, skey } = this;
    const { store, now } = engine.options;
    if (deadline - now() <= 0) throw this.#conflict();
    let found;
    try {
      found = await waiters.waitForSettle({
        key: skey,
        fingerprint: this.fingerprint,
        leaseUntil: record?.state === 'processing' ? record.leaseUntil : undefined,
        deadline,
        sequenceBeforeClaim,
        now,
        read: () => engine.call('get', () => store.get(skey)),
      });
    } catch (error) {
      engine.storeError('get', key, scope, error);
      throw error;
    }
    if (found === TIMED_OUT) throw this.#conflict();
    return found;
  }
}
