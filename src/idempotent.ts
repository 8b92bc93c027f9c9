/**
 * `idempotent(fn, options)`: run an async function once per key (SPEC §4), e.g. a
 * queue message handler, so a redelivered message has its effect once.
 * @module
 * @example
 * const handle = idempotent(chargeCard, { store, key: (msg) => msg.id });
 * await handle(msg); // a redelivery of msg returns the first result, chargeCard is not called
 */
import { Engine, type EngineOptions } from './engine.js';
import { IdempotencyKeyError, ResultNotStorableError, StoreUnavailableError } from './errors.js';
import { hashValue } from './fingerprint.js';
import { deserializeResult, serializeResult } from './serialize.js';
import { assertFunction } from './validate.js';

export interface IdempotentOptions<Args extends unknown[]> extends EngineOptions {
  /** The idempotency key of a call, e.g. a message id. */
  key: (...args: Args) => string;
  /** The tenant of a call; the same key in two scopes is two records. */
  scope?: (...args: Args) => string | undefined;
  /**
   * What identifies the request behind the key; a later call with the same key and a
   * different fingerprint throws IdempotencyMismatchError (C3). By default only the key
   * counts, because brokers change delivery metadata (redelivered flags, delivery tags)
   * between deliveries of the same message.
   */
  fingerprint?: (...args: Args) => unknown;
}

const RESULT_STATUS = 200;

export function idempotent<Args extends unknown[], R>(
  fn: (...args: Args) => R | Promise<R>,
  options: IdempotentOptions<Args>,
): (...args: Args) => Promise<Awaited<R>> {
  assertFunction('fn', fn);
  const engine = new Engine(options);
  assertFunction('key', options.key);
  if (options.scope !== undefined) assertFunction('scope', options.scope);
  if (options.fingerprint !== undefined) assertFunction('fingerprint', options.fingerprint);
  const { key: keyOf, scope: scopeOf, fingerprint: fingerprintOf } = options;

  return async function idempotentCall(...args: Args): Promise<Awaited<R>> {
    const key = keyOf(...args);
    if (key === undefined || key === null) throw new IdempotencyKeyError(undefined, 'The key function returned no key.');
    if (typeof key !== 'string') {
      throw new TypeError(`Expected \`key(...args)\` to return a string, got ${typeof key}`);
    }
    if (key === '') throw new IdempotencyKeyError('empty', 'The key function returned an empty key.');
    const scope = scopeOf?.(...args);
    const fingerprint = fingerprintOf ? hashValue(fingerprintOf(...args)) : '';
    let acquired;
    try {
      acquired = await engine.acquire(key, scope, fingerprint);
    } catch (error) {
      if (error instanceof StoreUnavailableError && engine.options.onStoreError === 'continue') {
        engine.emit({ type: 'unprotected', key, scope, error });
        return (await fn(...args)) as Awaited<R>;
      }
      throw error;
    }
    if (acquired.type === 'replay') return deserializeResult(acquired.record.response.body!) as Awaited<R>;

    const { lease } = acquired;
    let result: Awaited<R>;
    try {
      result = await fn(...args);
    } catch (error) {
      // C3: release so that a redelivery runs fn again; the caller sees fn's own error.
      await lease.release().catch((releaseError: unknown) =>
        engine.emit({ type: 'store-error', key, scope, operation: 'release', error: releaseError }),
      );
      throw error;
    }
    let body: Uint8Array | null;
    try {
      body = serializeResult(result);
    } catch (error) {
      if (!(error instanceof ResultNotStorableError)) throw error;
      // fn's effect has happened: never release (that would run it twice). The record
      // completes without a result, so a repeat gets ResponseNotReplayableError.
      body = null;
      engine.emit({ type: 'store-error', key, scope, operation: 'complete', error });
    }
    // A store failure here must not hide fn's result: the effect happened (H16).
    await lease
      .complete({ status: RESULT_STATUS, headers: {}, body })
      .catch((error: unknown) => engine.emit({ type: 'store-error', key, scope, operation: 'complete', error }));
    return result;
  };
}
