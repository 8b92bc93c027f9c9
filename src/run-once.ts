/**
 * Run once, store the result: the one flow behind `idempotent()`, with or without a
 * transaction (and so the message recipes and `idempotentBatch`), the NestJS GraphQL
 * resolvers and message handlers. Claim
 * the key, or replay the stored result, or run the work under the claim; a throw releases
 * the key, a result completes it. The HTTP layer keeps its own flow, for responses that
 * are captured rather than returned.
 *
 * What is stored follows one policy (docs/semantics.md#results-that-are-not-stored): a
 * result that cannot be stored faithfully, or that serializes to more than
 * `maxResultBytes`, completes the key without a stored result. The caller that ran the
 * work gets its result as it is, a `result-not-stored` event says why, and a retry is
 * refused as `response-not-replayable`: the work never runs twice, and the key is never
 * left in flight.
 * @module
 */
import type { Engine } from './engine.js';
import { ResultNotStorableError } from './errors.js';
import type { Fingerprint } from './fingerprint.js';
import type { KeySpace } from './key.js';
import { deserializeResult, serializeResult } from './serialize.js';
import type { StoredResponse } from './store.js';
import type { TransactionalStore } from './transaction.js';
import { describeValue } from './validate.js';

/** The status a stored result carries; function records never replay to HTTP (their fingerprint differs). */
const RESULT_STATUS = 200;

/** The largest stored result by default, in bytes: the HTTP layer's `maxResponseBytes` default. */
export const DEFAULT_MAX_RESULT_BYTES = 1024 * 1024;

/** Why a result was not stored: over the size limit, or not faithfully serializable (a function, a class instance, a cycle...). */
export type ResultNotStoredReason = 'too-large' | 'not-storable';

/** What to store for a result: the record's response, with a body or (not stored) without one and the reason. */
export type ResultRecord =
  | { response: StoredResponse; reason?: undefined; error?: undefined }
  | { response: StoredResponse; reason: ResultNotStoredReason; error: ResultNotStorableError };

/**
 * The record of a result under the policy: its serialized bytes when they can be stored
 * and are at most `maxResultBytes`; else no body, with the reason and an error that says
 * where the value was found (or how large it was).
 */
export function resultRecord(value: unknown, maxResultBytes: number): ResultRecord {
  let body: Uint8Array;
  try {
    body = serializeResult(value);
  } catch (error) {
    // Anything that fails while the value is read (a getter that throws, too deep a
    // nesting) leaves it as unstorable as a function would.
    return { response: { status: RESULT_STATUS, headers: {}, body: null }, reason: 'not-storable', error: notStorable(error) };
  }
  if (body.byteLength > maxResultBytes) {
    const error = new ResultNotStorableError(`The result serializes to ${body.byteLength} bytes, more than the ${maxResultBytes} bytes allowed`);
    return { response: { status: RESULT_STATUS, headers: {}, body: null }, reason: 'too-large', error };
  }
  return { response: { status: RESULT_STATUS, headers: {}, body } };
}

function notStorable(error: unknown): ResultNotStorableError {
  if (error instanceof ResultNotStorableError) return error;
  return new ResultNotStorableError(`Reading the result to store it failed: ${error instanceof Error ? error.message : String(error)}`, { cause: error });
}

/** One call through the flow: the key, where it lives, and the work. */
export interface RunOnceCall<R> {
  key: string;
  scope: string | undefined;
  fingerprint: Fingerprint;
  /** The entry point's key space (`'function'`, `'message:nats'`...); undefined for the HTTP one. */
  space?: KeySpace;
  /**
   * The work: fn, the resolver, the message handler. A throw releases the key and reaches
   * the caller as it is. With `transaction`, it gets the transaction's client.
   */
  run(client?: unknown): Promise<R>;
  /**
   * Run the work in a transaction of the store's database, which also completes the record
   * before COMMIT (docs/transactions.md). A result the policy would not store then rolls the
   * transaction back and releases the key (nothing has happened yet), with ResultNotStorableError.
   */
  transaction?: boolean;
  /** The largest serialized result that is stored, in bytes. */
  maxResultBytes: number;
  /**
   * What of the result is stored, when not the result itself: GraphQL stores the fields
   * the operation selected, RPC what its transport sends. A throw counts as not storable.
   * Synchronous with `transaction` (the record is written inside it).
   */
  storedForm?(result: R): unknown;
  /** The record's lifetime for this result and what is stored of it, in ms (the caller checks a `ttl` function); the engine's `ttl` by default. */
  ttlMs?(result: R, stored: StoredResponse): number;
  /**
   * Watch for the client going away while the work runs: call `abandon` then, so renewals
   * stop and a work that hangs frees its key after `leaseMs` (a result that still comes is
   * stored). Returns the function that stops watching.
   */
  watchClient?(abandon: () => void): () => void;
}

/** How a call ended: the work ran (its result stored or not), a stored result was replayed, or the store failed and the work ran unprotected. */
export type RunOnceOutcome<R> =
  | { type: 'ran'; value: R; stored: boolean }
  | { type: 'replayed'; value: unknown }
  | { type: 'unprotected'; value: R };

/**
 * Run `call.run` at most once for its key. Refusals (conflict after waiting, mismatch, not
 * replayable, store unavailable, unreadable record) are thrown before the work runs; the
 * work's own throw releases the key and is rethrown unchanged. A store failure after the
 * work ran never hides its result: it is reported as `store-error` (a lost lease as
 * `lease-lost`).
 */
export async function runOnce<R>(engine: Engine, call: RunOnceCall<R>): Promise<RunOnceOutcome<R>> {
  const { key, scope } = call;
  let acquired;
  try {
    acquired = await engine.acquire(key, scope, call.fingerprint, call.space);
  } catch (error) {
    if (!engine.runsUnprotected(error, key, scope)) throw error;
    // Unprotected (the store failed, `onStoreError: 'continue'`): still one transaction, without a record.
    if (!call.transaction) return { type: 'unprotected', value: await call.run() };
    const store = engine.options.store as TransactionalStore<unknown>;
    return { type: 'unprotected', value: (await store.transaction((client) => call.run(client))).value };
  }
  // A completed record without a result is refused by the engine (not replayable).
  if (acquired.type === 'replay') return { type: 'replayed', value: deserializeResult(acquired.record.response.body!) };

  const { lease } = acquired;
  if (call.transaction) {
    const { value } = await lease.transaction(
      (client) => call.run(client),
      (value) => {
        let record: ResultRecord;
        try {
          record = resultRecord(call.storedForm ? call.storedForm(value) : value, call.maxResultBytes);
        } catch (error) {
          record = { response: { status: RESULT_STATUS, headers: {}, body: null }, reason: 'not-storable', error: notStorable(error) };
        }
        if (!record.reason) return record.response;
        throw new ResultNotStorableError(
          `The result cannot be stored: ${record.error.message}. Its transaction was rolled back and the key ${describeValue(key)} ` +
            'released, so the work had no effect. Return plain data (JSON values, undefined, Date, Buffer, Uint8Array, Map, ' +
            'Set, bigint) within `maxResultBytes`; the result is on `error.result`.',
          { result: value, cause: record.error },
        );
      },
    );
    return { type: 'ran', value, stored: true };
  }
  const stopWatching = call.watchClient?.(() => lease.abandon());
  let result: R;
  try {
    result = await call.run();
  } catch (error) {
    // Release so that a retry runs the work again. A store failure here leaves the record
    // to expire after leaseMs, which also lets a retry run it.
    await lease.release().catch((releaseError: unknown) => engine.storeError('release', key, scope, releaseError));
    throw error;
  } finally {
    stopWatching?.();
  }

  // Whatever fails on the way to the stored form ends the claim too: the work's effect
  // happened, so the key completes (without a result) rather than staying in flight.
  let record: ResultRecord;
  if (call.storedForm) {
    try {
      record = resultRecord(await call.storedForm(result), call.maxResultBytes);
    } catch (error) {
      record = { response: { status: RESULT_STATUS, headers: {}, body: null }, reason: 'not-storable', error: notStorable(error) };
    }
  } else {
    record = resultRecord(result, call.maxResultBytes);
  }
  if (record.reason) engine.emit({ type: 'result-not-stored', key, scope, reason: record.reason, error: record.error });
  let ttl: number;
  try {
    ttl = call.ttlMs ? call.ttlMs(result, record.response) : engine.options.ttlMs;
  } catch {
    ttl = engine.options.ttlMs;
  }
  await lease.complete(record.response, ttl).catch((error: unknown) => engine.storeError('complete', key, scope, error));
  return { type: 'ran', value: result, stored: !record.reason };
}
