/**
 * The options the engine takes (shared by the HTTP layer and `idempotent()`), their
 * defaults, and their checks: a bad option is a precise TypeError when the engine is
 * made, never a surprise at the first request.
 * @module
 */
import { resolveCompression, type CompressOptions, type Compressor } from './compression.js';
import { resolveEncryption, type EncryptionOptions, type Keyring } from './encryption.js';
import type { IdempotencyEvent } from './events.js';
import type { IdempotencyStore } from './store.js';
import type { TelemetryOptions } from './telemetry.js';
import { renamedOption } from './deprecation.js';
import { assertFunction, assertInteger, assertOneOf, describeValue } from './validate.js';

/** Options shared by the HTTP adapters and `idempotent()`. */
export interface EngineOptions {
  /** Where records live: a store from `createStore()` or a driver factory. */
  store: IdempotencyStore;
  /**
   * How long a duplicate waits for the first request to finish before a 409 / conflict
   * error, in ms. 0 answers at once.
   * @default 2000
   */
  waitMs?: number;
  /** @deprecated Renamed `waitMs`; the old name works until the next minor release. */
  wait?: number;
  /**
   * How long a claim holds the key without renewal, in ms; renewed every leaseMs/3 while
   * the handler runs. A crashed process's key frees after this.
   * @default 30000
   */
  leaseMs?: number;
  /**
   * Whether a claim renews its lease (every leaseMs/3) while the handler runs. `false`: the
   * claim holds for `leaseMs` and no longer, with no write while it runs; for a caller that
   * knows when its handler is certain to have stopped (a Lambda invocation's deadline).
   * @default true
   */
  renewLease?: boolean;
  /**
   * How long a completed record is replayed, in ms. The HTTP layer and
   * `idempotent()` also accept a function of the request and response (or of the
   * arguments and result), see docs/semantics.md#per-operation-ttl.
   * @default 86400000 (24 h)
   */
  ttlMs?: number;
  /** @deprecated Renamed `ttlMs`; the old name works until the next minor release. */
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
  /**
   * Encrypt stored responses at rest (AES-256-GCM, docs/security.md): the first key
   * seals, every listed key opens. A record no listed key opens is answered 500
   * `record-unreadable`, never replayed and never run again.
   * @default undefined (stored in clear)
   */
  encryption?: EncryptionOptions;
  /**
   * Store large bodies compressed (`node:zlib`; before encryption): `true` for bodies of
   * 1 KiB and more with brotli, or `{ minBytes, algorithm }`. Records are read whatever
   * this says; one that fails to inflate is answered 500 `record-unreadable`, never
   * replayed and never run again.
   * @default undefined (stored as they are)
   */
  compress?: boolean | CompressOptions;
}

export interface ResolvedEngineOptions {
  store: IdempotencyStore;
  waitMs: number;
  leaseMs: number;
  renewLease: boolean;
  ttlMs: number;
  storeTimeoutMs: number;
  onStoreError: 'fail' | 'continue';
  onEvent: ((event: IdempotencyEvent) => void) | undefined;
  now: () => number;
  telemetry: TelemetryOptions | false | undefined;
  /** The checked `encryption` keys; undefined: responses are stored in clear. */
  keyring: Keyring | undefined;
  /** The checked `compress` option; undefined: responses are stored as they are. */
  compressor: Compressor | undefined;
}

const storeMethods = ['claim', 'get', 'complete', 'release', 'extend', 'close'] as const;

export function resolveEngineOptions(options: EngineOptions): ResolvedEngineOptions {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError(`Expected options to be an object, got ${describeValue(options)}`);
  }
  const { store } = options;
  if (typeof store !== 'object' || store === null || storeMethods.some((m) => typeof store[m] !== 'function')) {
    throw new TypeError(
      typeof store === 'string'
        ? 'Expected `store` to be a store object, got a string: pass `createStore(url)` instead of the URL'
        : `Expected \`store\` to be an idempotency store (claim, get, complete, release, extend, close), got ${describeValue(store)}`,
    );
  }
  const resolved: ResolvedEngineOptions = {
    store,
    waitMs: renamedOption<number>(options, 'wait', 'waitMs') ?? 2000,
    leaseMs: options.leaseMs ?? 30_000,
    renewLease: options.renewLease ?? true,
    ttlMs: renamedOption<number>(options, 'ttl', 'ttlMs') ?? 86_400_000,
    storeTimeoutMs: options.storeTimeoutMs ?? 2000,
    onStoreError: options.onStoreError ?? 'fail',
    onEvent: options.onEvent,
    now: options.now ?? Date.now,
    telemetry: options.telemetry,
    keyring: resolveEncryption(options.encryption),
    compressor: resolveCompression(options.compress),
  };
  assertInteger('waitMs', resolved.waitMs, 0);
  assertInteger('leaseMs', resolved.leaseMs, 1);
  if (typeof resolved.renewLease !== 'boolean') throw new TypeError(`Expected \`renewLease\` to be a boolean, got ${String(resolved.renewLease)}`);
  assertInteger('ttlMs', resolved.ttlMs, 1);
  assertInteger('storeTimeoutMs', resolved.storeTimeoutMs, 1);
  assertOneOf('onStoreError', resolved.onStoreError, ['fail', 'continue'] as const);
  if (resolved.onEvent !== undefined) assertFunction('onEvent', resolved.onEvent);
  assertFunction('now', resolved.now);
  return resolved;
}

/** A function of one operation (the request and response, or the arguments and result). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type TtlFunction = (...args: any[]) => number;

/**
 * Split options whose `ttlMs` may be a function of each operation (the HTTP layer's request
 * and response, `idempotent()`'s arguments and result) into the engine's options, where
 * the engine keeps its default `ttlMs` for a function, and the function, which the caller
 * evaluates once per completed record through `Engine.ttlFor`. A `ttlMs` that is neither a
 * number nor a function is a TypeError; a bad number is the engine's to refuse. The
 * deprecated name `ttl` is read here too.
 */
export function splitTtl<F extends TtlFunction>(
  options: Omit<EngineOptions, 'ttl' | 'ttlMs'> & { ttlMs?: number | F; ttl?: number | F },
): [EngineOptions, F | undefined] {
  if (typeof options !== 'object' || options === null) return [options as EngineOptions, undefined]; // the engine says so
  const ttl = renamedOption<unknown>(options, 'ttl', 'ttlMs');
  if (typeof ttl === 'function') return [{ ...options, ttl: undefined, ttlMs: undefined }, ttl as F];
  if (ttl !== undefined && typeof ttl !== 'number') {
    throw new TypeError(`Expected \`ttlMs\` to be a positive integer (ms) or a function returning one, got ${describeValue(ttl)}`);
  }
  return [options.ttl === undefined ? (options as EngineOptions) : { ...options, ttl: undefined, ttlMs: ttl }, undefined];
}
