/**
 * `idempotent(fn, options)`: run an async function once per key, e.g. a
 * queue message handler, so a redelivered message has its effect once.
 * @module
 * @example
 * const handle = idempotent(chargeCard, { store, key: (msg) => msg.id });
 * await handle(msg); // a redelivery of msg returns the first result, chargeCard is not called
 */
import { createHash } from 'node:crypto';
import { Engine } from './engine.js';
import { isTransactionalStore, type TransactionalStore } from './transaction.js';
import { idempotencyDisabled } from './kill-switch.js';
import { IdempotencyKeyError, ScopeRequiredError, KeyInvalidError, KeyMissingError } from './errors.js';
import { hashValue } from './fingerprint.js';
import type { KeySpace } from './key.js';
import { splitTtl, type EngineOptions } from './options.js';
import { DEFAULT_MAX_RESULT_BYTES, runOnce } from './run-once.js';
import { assertFunction, assertInteger, describeValue } from './validate.js';

// `any` is needed for the constraint: `unknown[]` parameters would reject every fn that
// declares a parameter type (parameters are contravariant).
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type AnyFunction = (...args: any[]) => unknown;

export interface IdempotentOptions<Args extends readonly unknown[], Result = unknown> extends Omit<EngineOptions, 'ttl' | 'ttlMs'> {
  /**
   * How long a result replays, in ms: a number, or a function of the call's
   * arguments (as an array) and fn's result, e.g. `([msg]) => msg.type === 'payment' ? 7 * DAY : HOUR`.
   * A function must return a positive integer synchronously; anything else (or a throw)
   * keeps the record 24 h and emits `ttl-invalid` (docs/semantics.md#per-operation-ttl).
   * @default 86400000 (24 h)
   */
  ttlMs?: number | ((args: Args, result: Result) => number);
  /** @deprecated Renamed `ttlMs`; the old name works until the next minor release. */
  ttl?: number | ((args: Args, result: Result) => number);
  /**
   * The idempotency key of a call, from its arguments: e.g. `(msg) => msg.properties.messageId`.
   * Keys are hashed before they reach the store, so any length is fine. Returning
   * `undefined`, `null` or `''` rejects the call with IdempotencyKeyError before fn runs.
   */
  key: (...args: Args) => string;
  /**
   * The tenant of a call; the same key in two scopes is two records. It must return a
   * non-empty string or a finite number: anything else (`undefined`, `''`, `NaN`, an
   * object) rejects the call with ScopeRequiredError (`scope-required`) before fn runs,
   * never the shared space. Without `scope`, every call shares one key space.
   */
  scope?: (...args: Args) => string | number;
  /**
   * What identifies the request behind the key, e.g. the message body; a later call with
   * the same key and a different fingerprint throws KeyReusedError. Bytes
   * (a Buffer) are hashed as they are, anything else canonically (object key order does
   * not matter). By default only the key counts, because brokers change delivery
   * metadata (redelivered flags, delivery tags) between deliveries of the same message.
   */
  fingerprint?: (...args: Args) => unknown;
  /**
   * Change a stored result before a repeat call returns it (a field saying it is a replay,
   * say): gets the result and the call's arguments, returns what the call returns. Never
   * called for the first run; the stored record is not changed.
   * @default none
   */
  onReplay?(result: Result, args: Args): unknown;
  /**
   * The largest result that is stored, serialized, in bytes. A larger result, or one that
   * cannot be stored faithfully (a function, a class instance, a cycle), is returned to the
   * caller as it is while the key completes without it: a `result-not-stored` event says
   * why, and a repeat call throws ResponseNotReplayableError, fn never runs twice
   * (docs/semantics.md#results-that-are-not-stored).
   * @default 1048576 (1 MiB)
   */
  maxResultBytes?: number;
}

/**
 * Options of `idempotent(fn, { transaction: true, ... })`: fn runs in a transaction of the
 * store's database, which also completes the record before it commits.
 */
export interface IdempotentTransactionOptions<Args extends readonly unknown[], Client>
  extends Omit<IdempotentOptions<Args>, 'store' | 'ttl' | 'ttlMs' | 'onReplay'> {
  /**
   * How long a result replays, in ms. A number only: the transaction completes the record
   * with a lifetime fixed before fn runs.
   * @default 86400000 (24 h)
   */
  ttlMs?: number;
  /** @deprecated Renamed `ttlMs`; the old name works until the next minor release. */
  ttl?: number;
  /** A store that runs transactions: `postgresStore({ pool })` on the application's own pool, or `postgresStore({ url })`. */
  store: TransactionalStore<Client>;
  /**
   * fn gets the transaction's client as its last argument; its writes through that client
   * and the stored result commit together or not at all. See docs/transactions.md.
   */
  transaction: true;
}

/** What an entry point built on `idempotentIn` may add to the flow. Internal. */
export interface IdempotentHooks {
  /** What of fn's result is stored (RPC: what its transport sends); a throw counts as not storable. */
  storedForm?(result: unknown): unknown;
}

/** The wrapper `idempotent(fn)` returns: fn's parameters and `this`, always async. */
export type IdempotentFunction<F extends AnyFunction> = (
  this: ThisParameterType<F>,
  ...args: Parameters<F>
) => Promise<Awaited<ReturnType<F>>>;

// Records are shared with the HTTP layer's store; the fingerprint prefix keeps a function
// record from ever replaying to HTTP.
const FINGERPRINT_PREFIX = 'fn:';


function fingerprintOf(value: unknown): string {
  if (value instanceof Uint8Array) {
    return FINGERPRINT_PREFIX + createHash('sha256').update('b').update(value).digest('base64url');
  }
  return FINGERPRINT_PREFIX + hashValue(value);
}

/**
 * With `transaction: true`: fn runs inside a transaction of the store's database and gets
 * its client as an extra last argument; the record is completed in the same transaction
 * before COMMIT, so fn's writes through that client and its stored result commit together
 * or not at all. A crash at any point either leaves both (a retry replays) or neither (a
 * retry runs fn again).
 *
 * - fn throws, or its result cannot be stored (or is over `maxResultBytes`): rolled back, the key released, the error rethrown;
 * - the lease ended before the commit (another caller took the key over): rolled back, LeaseLostError;
 * - serialization failure or deadlock: fn runs again in a new transaction (bounded), then TransactionConflictError.
 */
export function idempotent<Arg, R, Client, This = unknown>(
  fn: (this: This, arg: Arg, client: Client) => R,
  options: IdempotentTransactionOptions<[Arg], Client>,
): (this: This, arg: Arg) => Promise<Awaited<R>>;
/** With `transaction: true` and any number of arguments before the client (annotate the client's type). */
export function idempotent<Args extends unknown[], R, Client, This = unknown>(
  fn: (this: This, ...args: [...Args, Client]) => R,
  options: IdempotentTransactionOptions<Args, Client>,
): (this: This, ...args: Args) => Promise<Awaited<R>>;
/**
 * Wrap `fn` so that calls with the same key run it once. The wrapper keeps fn's
 * parameter types and returns a promise of fn's result:
 *
 * - first call: fn runs; its result is stored and returned;
 * - repeat (same key and fingerprint): the stored result is returned, fn is not called;
 * - repeat while the first is still running: waits up to `wait` ms for its result, then
 *   throws RequestInProgressError (`retryable`: redeliver later);
 * - same key, different fingerprint: KeyReusedError;
 * - fn throws: the key is released and fn's error is rethrown as it is, so a retry runs fn again.
 *
 * Results round-trip through the result encoding: JSON values, `undefined`, `Date`,
 * `Buffer` / `Uint8Array`, `Map`, `Set`, `bigint`. A result that cannot be stored (a
 * function, a class instance, a cycle) or is over `maxResultBytes` is returned as it is
 * and the key completes without it: a repeat throws ResponseNotReplayableError, fn never
 * runs twice, and a `result-not-stored` event says why.
 */
export function idempotent<F extends AnyFunction>(
  fn: F,
  options: IdempotentOptions<Parameters<F>, Awaited<ReturnType<F>>>,
): IdempotentFunction<F>;
export function idempotent<F extends AnyFunction>(
  fn: F,
  options: IdempotentOptions<Parameters<F>> | IdempotentTransactionOptions<Parameters<F>, unknown>,
): IdempotentFunction<F> {
  return idempotentIn('function', fn, options);
}

/**
 * `idempotent()` in the key space of an entry point: the webhook receivers and the message
 * handlers keep their records apart from `idempotent()` callers' and from each other's
 * (`'webhook:stripe'`, `'message:nats'`...). Internal: what the recipes are built on.
 */
export function idempotentIn<F extends AnyFunction>(
  space: KeySpace,
  fn: F,
  options: IdempotentOptions<Parameters<F>> | IdempotentTransactionOptions<Parameters<F>, unknown>,
  hooks?: IdempotentHooks,
): IdempotentFunction<F> {
  assertFunction('fn', fn);
  const inTransaction = (options as { transaction?: unknown } | null)?.transaction;
  if (inTransaction !== undefined && typeof inTransaction !== 'boolean') {
    throw new TypeError(`Expected \`transaction\` to be a boolean, got ${describeValue(inTransaction)}`);
  }
  const [engineOptions, ttlFn] = splitTtl(options as IdempotentOptions<Parameters<F>>);
  if (ttlFn && inTransaction) {
    // The transaction completes the record with a ttl fixed before fn runs.
    throw new TypeError('A `ttlMs` function is not supported with `transaction: true`; pass a number of ms');
  }
  const engine = new Engine(engineOptions);
  const { key: keyFn, scope: scopeFn, fingerprint: fingerprintFn } = options;
  if (typeof keyFn !== 'function') {
    throw new TypeError(
      `Expected \`key\` to be a function that returns the key from the arguments, e.g. \`(msg) => msg.id\`, got ${describeValue(keyFn)}`,
    );
  }
  const transactional = engine.options.store as TransactionalStore<unknown>;
  if (inTransaction && !isTransactionalStore(transactional)) {
    throw new TypeError(
      `Expected \`store\` to run transactions with \`transaction: true\` (postgresStore({ url }) or postgresStore({ pool })), got the ${engine.options.store.name} store`,
    );
  }
  if (scopeFn !== undefined) assertFunction('scope', scopeFn);
  if (fingerprintFn !== undefined) assertFunction('fingerprint', fingerprintFn);
  const onReplay = (options as IdempotentOptions<Parameters<F>>).onReplay;
  if (onReplay !== undefined) assertFunction('onReplay', onReplay);
  const maxResultBytes = (options as IdempotentOptions<Parameters<F>>).maxResultBytes ?? DEFAULT_MAX_RESULT_BYTES;
  assertInteger('maxResultBytes', maxResultBytes, 0);
  const storedForm = hooks?.storedForm;
  // The kill switch: every call runs fn as it is (said loudly once, refused in production unless forced).
  if (idempotencyDisabled()) {
    return async function unprotectedCall(this: ThisParameterType<F>, ...args: Parameters<F>): Promise<Awaited<ReturnType<F>>> {
      return (await fn.apply(this, args)) as Awaited<ReturnType<F>>;
    };
  }

  const scopeOf = (value: unknown): string => {
    if ((typeof value === 'string' && value !== '') || (typeof value === 'number' && Number.isFinite(value))) return String(value);
    throw new ScopeRequiredError(
      `The \`scope\` function returned ${describeValue(value)}, not a non-empty string or a finite number: the call's key cannot be kept apart from other tenants' keys, so fn was not run.`,
    );
  };

  return async function idempotentCall(this: ThisParameterType<F>, ...args: Parameters<F>): Promise<Awaited<ReturnType<F>>> {
    // Everything about the call is checked before fn can run.
    const key: unknown = keyFn(...args);
    if (key === undefined || key === null) throw new KeyMissingError('The key function returned no key.');
    if (typeof key !== 'string') throw new TypeError(`Expected \`key()\` to return a string, got ${describeValue(key)}`);
    if (key === '') throw new KeyInvalidError('empty', 'The key function returned an empty key.');
    const scope = scopeFn === undefined ? undefined : scopeOf(scopeFn(...args));
    const fingerprint = fingerprintFn ? fingerprintOf(fingerprintFn(...args)) : FINGERPRINT_PREFIX;

    const outcome = await runOnce<Awaited<ReturnType<F>>>(engine, {
      key,
      scope,
      fingerprint,
      space,
      run: inTransaction
        ? (client) => fn.apply(this, [...args, client]) as Promise<Awaited<ReturnType<F>>>
        : () => fn.apply(this, args) as Promise<Awaited<ReturnType<F>>>,
      transaction: inTransaction === true,
      maxResultBytes,
      storedForm,
      ttlMs: ttlFn && ((result) => engine.ttlFor(() => ttlFn(args, result), key, scope)),
    });
    if (outcome.type !== 'replayed') return outcome.value;
    const result = outcome.value as Awaited<ReturnType<F>>;
    return onReplay ? (onReplay(result, args) as Awaited<ReturnType<F>>) : result;
  };
}
