/**
 * The client's retry policy, shared by the fetch client, the got hooks and the ky instance:
 * which requests get a key, which outcomes are retried, how long to wait, when to stop.
 * Pure functions over plain values (status, headers, elapsed time), so each HTTP library
 * only translates its own response or error into an {@link Outcome}.
 * @module
 */
import { assertFunction, assertInteger, assertStringArray } from '../src/validate.js';

/** Why an attempt ended. Only `response` is final by itself. */
export type AttemptReason =
  /** The connection failed, was reset, or closed before a full response arrived. */
  | 'network-error'
  /** No response within `timeoutMs` (or the total time left). */
  | 'timeout'
  /** 409 with Retry-After: the first request with this key is still running. */
  | 'in-progress'
  /** 429 Too Many Requests. */
  | 'rate-limited'
  /** 503 Service Unavailable. */
  | 'unavailable'
  /** Another 5xx, retried only with `retryServerErrors`. */
  | 'server-error'
  /** The caller's AbortSignal fired during the attempt. */
  | 'aborted'
  /** An answer to return as it is (2xx, 3xx, a 4xx such as 400 or 422, a 5xx not retried). */
  | 'response';

/** Why the client stopped retrying and threw. */
export type StopCode = 'attempts-exhausted' | 'time-exhausted' | 'aborted' | 'body-not-replayable';

/** What one attempt produced, as the policy needs to see it. */
export interface Outcome {
  reason: AttemptReason;
  /** The HTTP status, when a response arrived. */
  status?: number;
  /** The response's `Retry-After` header, if any. */
  retryAfter?: string | null | undefined;
}

export type Decision = { retry: true; delayMs: number } | { retry: false; stop?: StopCode };

/** What `onAttempt` receives after every attempt. */
export interface AttemptEvent {
  /** 1 for the first attempt. */
  attempt: number;
  /** The Idempotency-Key sent with every attempt of this call. */
  key: string;
  method: string;
  url: string;
  reason: AttemptReason;
  status?: number;
  /** The network error or timeout, when there was no response. */
  error?: unknown;
  /** `retry` with the wait before the next attempt, or `done` (`stop` says why, if it gave up). */
  decision: Decision;
  /** Milliseconds since the call started. */
  elapsedMs: number;
}

/** Options shared by `createIdempotentFetch`, `idempotentGot` and `idempotentKy`. */
export interface RetryPolicyOptions {
  /**
   * Methods that get an Idempotency-Key and are retried. Other methods go out once, untouched.
   * @default ['POST', 'PATCH']
   */
  methods?: string[];
  /**
   * The header that carries the key.
   * @default 'Idempotency-Key'
   */
  header?: string;
  /**
   * Where a call's key comes from when the request does not already carry one: a function
   * called once per call (its key is then kept for every retry of that call).
   * @default a random UUID (`crypto.randomUUID()`)
   */
  key?: (request: { method: string; url: string }) => string;
  /**
   * Attempts per call, the first one included.
   * @default 5
   */
  maxAttempts?: number;
  /**
   * Total time for a call, attempts and waits included. A wait that would end past it is not
   * started: the call stops with `time-exhausted` instead.
   * @default 60000
   */
  maxTimeMs?: number;
  /**
   * Time one attempt may take before it is abandoned and retried (with the same key, so the
   * server replays or finishes the first execution rather than running it twice).
   * @default 15000
   */
  timeoutMs?: number;
  /**
   * Also retry 500, 502, 504 and the other 5xx. A server that honours the key releases it on a
   * 5xx, so the retry runs the operation again: turn this on when that is what you want.
   * @default false
   */
  retryServerErrors?: boolean;
  /**
   * First backoff wait (when the server sent no Retry-After); it doubles on each retry.
   * @default 200
   */
  minDelayMs?: number;
  /**
   * Longest backoff wait. A server's Retry-After is followed as given (within `maxTimeMs`).
   * @default 10000
   */
  maxDelayMs?: number;
  /** Called after every attempt with its outcome and what happens next. */
  onAttempt?: (event: AttemptEvent) => void;
}

export interface RetryPolicy {
  methods: ReadonlySet<string>;
  header: string;
  key: (request: { method: string; url: string }) => string;
  maxAttempts: number;
  maxTimeMs: number;
  timeoutMs: number;
  retryServerErrors: boolean;
  minDelayMs: number;
  maxDelayMs: number;
  onAttempt: ((event: AttemptEvent) => void) | undefined;
  /** Milliseconds, injectable for tests. */
  now: () => number;
  random: () => number;
}

const defaultKey = (): string => {
  const crypto = (globalThis as { crypto?: { randomUUID?: () => string } }).crypto;
  if (typeof crypto?.randomUUID !== 'function') {
    throw new TypeError('globalThis.crypto.randomUUID is not available in this runtime: pass a `key` function');
  }
  return crypto.randomUUID();
};

const tokenPattern = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

export function assertOptions(options: unknown): asserts options is object {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw new TypeError(`Expected options to be an object, got ${options === null ? 'null' : Array.isArray(options) ? 'an array' : typeof options}`);
  }
}

/**
 * An HTTP library instance a wrapper extends: got and ky instances are functions with an
 * `extend` method. Written out here rather than imported from got or ky: both ship ES modules
 * only, so their types do not resolve for a CommonJS or node10 TypeScript project, and this
 * package's types must (the wrapper returns the caller's own instance type, fully typed).
 */
export interface ExtendableClient {
  (...args: never[]): unknown;
  extend: (...args: never[]) => unknown;
}

/** The HTTP library instance a wrapper extends: got and ky both have `extend`. */
export function assertExtendable(name: string, instance: unknown): void {
  if (typeof instance !== 'function' || typeof (instance as { extend?: unknown }).extend !== 'function') {
    throw new TypeError(`Expected \`${name}\` to be a ${name} instance (the default export or one made with .extend()), got ${instance === null ? 'null' : typeof instance}`);
  }
}

/** Check and complete the options; a bad one is a precise TypeError here, never at request time. */
export function resolvePolicy(options: RetryPolicyOptions = {}, testing: Partial<Pick<RetryPolicy, 'now' | 'random'>> = {}): RetryPolicy {
  assertOptions(options);
  const {
    methods = ['POST', 'PATCH'],
    header = 'Idempotency-Key',
    key = defaultKey,
    maxAttempts = 5,
    maxTimeMs = 60_000,
    timeoutMs = 15_000,
    retryServerErrors = false,
    minDelayMs = 200,
    maxDelayMs = 10_000,
    onAttempt,
  } = options;
  assertStringArray('methods', methods);
  if (typeof header !== 'string' || !tokenPattern.test(header)) {
    throw new TypeError(`Expected \`header\` to be an HTTP header name, got ${JSON.stringify(header)}`);
  }
  assertFunction('key', key);
  assertInteger('maxAttempts', maxAttempts, 1);
  assertInteger('maxTimeMs', maxTimeMs, 1);
  assertInteger('timeoutMs', timeoutMs, 1);
  assertInteger('minDelayMs', minDelayMs, 0);
  assertInteger('maxDelayMs', maxDelayMs, 0);
  if (maxDelayMs < minDelayMs) {
    throw new TypeError(`Expected \`maxDelayMs\` to be at least \`minDelayMs\` (${minDelayMs}), got ${maxDelayMs}`);
  }
  if (typeof retryServerErrors !== 'boolean') {
    throw new TypeError(`Expected \`retryServerErrors\` to be a boolean, got ${typeof retryServerErrors}`);
  }
  if (onAttempt !== undefined) assertFunction('onAttempt', onAttempt);
  return {
    methods: new Set(methods.map((m) => m.toUpperCase())),
    header,
    key,
    maxAttempts,
    maxTimeMs,
    timeoutMs,
    retryServerErrors,
    minDelayMs,
    maxDelayMs,
    onAttempt,
    now: testing.now ?? (() => performance.now()),
    random: testing.random ?? Math.random,
  };
}

export function isCovered(policy: RetryPolicy, method: string): boolean {
  return policy.methods.has(method.toUpperCase());
}

/** The key for a call: the caller's own header wins, else the `key` function's. */
export function keyFor(policy: RetryPolicy, request: { method: string; url: string }, existing: string | null | undefined): string {
  if (existing) return existing;
  const key = policy.key(request);
  if (typeof key !== 'string' || key === '') {
    throw new TypeError(`Expected \`key()\` to return a non-empty string, got ${key === '' ? '""' : typeof key}`);
  }
  return key;
}

/** What a response's status means for a retry. */
export function reasonForStatus(policy: RetryPolicy, status: number, retryAfter: string | null | undefined): AttemptReason {
  // A 409 with Retry-After is "still running, come back"; one without it is a real conflict
  // (for this package's servers: the first response was not stored and cannot be replayed).
  if (status === 409) return retryAfter ? 'in-progress' : 'response';
  if (status === 429) return 'rate-limited';
  if (status === 503) return 'unavailable';
  if (status >= 500 && status <= 599 && policy.retryServerErrors) return 'server-error';
  return 'response';
}

/**
 * Retry-After in milliseconds: delay-seconds (`120`) or an HTTP-date (a date in the past is 0).
 * Anything else is ignored (undefined): the backoff applies.
 */
export function parseRetryAfter(value: string | null | undefined, nowEpochMs = Date.now()): number | undefined {
  if (!value) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  // An HTTP-date names its weekday and GMT (RFC 9110); plain numbers were handled above.
  if (!/GMT$/.test(text)) return undefined;
  const at = Date.parse(text);
  return Number.isNaN(at) ? undefined : Math.max(0, at - nowEpochMs);
}

/** Backoff before retry number `attempt` (1 = the wait after the first attempt): doubling, half of it random. */
export function backoffMs(policy: RetryPolicy, attempt: number): number {
  const full = Math.min(policy.maxDelayMs, policy.minDelayMs * 2 ** (attempt - 1));
  return Math.round(full / 2 + (policy.random() * full) / 2);
}

/**
 * After attempt number `attempt` ended with `outcome`, `elapsedMs` into the call: retry (and
 * after how long) or stop. `replayable` is false when the request body was a one-shot stream.
 */
export function decide(
  policy: RetryPolicy,
  outcome: Outcome,
  state: { attempt: number; elapsedMs: number; replayable: boolean },
): Decision {
  if (outcome.reason === 'response') return { retry: false };
  if (outcome.reason === 'aborted') return { retry: false, stop: 'aborted' };
  if (!state.replayable) return { retry: false, stop: 'body-not-replayable' };
  if (state.attempt >= policy.maxAttempts) return { retry: false, stop: 'attempts-exhausted' };
  const delayMs = parseRetryAfter(outcome.retryAfter) ?? backoffMs(policy, state.attempt);
  // Waiting past the deadline would only end in the same error later.
  if (state.elapsedMs + delayMs >= policy.maxTimeMs) return { retry: false, stop: 'time-exhausted' };
  return { retry: true, delayMs };
}

const brand = Symbol.for('idempotency-kit.IdempotentRequestError');

const messages: Record<StopCode, string> = {
  'attempts-exhausted': 'gave up after the last allowed attempt',
  'time-exhausted': 'gave up: the next attempt would end past maxTimeMs',
  aborted: 'aborted by the caller',
  'body-not-replayable': 'the request body is a one-shot stream and cannot be sent again',
};

/**
 * A call that stopped without an answer to return: every attempt so far failed in a retryable
 * way and the client gave up (`code` says why). The server may still have run the operation:
 * retry later with the same `key` to get its answer.
 */
export class IdempotentRequestError extends Error {
  override name = 'IdempotentRequestError';
  readonly code: StopCode;
  /** Attempts made, the first one included. */
  readonly attempts: number;
  /** How the last attempt ended. */
  readonly reason: AttemptReason;
  /** The Idempotency-Key every attempt carried. */
  readonly key: string;
  /** The last attempt's HTTP status, if it got a response. */
  readonly status: number | undefined;
  /** The last attempt's response (body unread), for a fetch call that got one. */
  readonly response: Response | undefined;

  constructor(details: {
    code: StopCode;
    attempts: number;
    reason: AttemptReason;
    key: string;
    status?: number;
    response?: Response;
    cause?: unknown;
  }) {
    const last = details.status === undefined ? details.reason : `${details.reason}, HTTP ${details.status}`;
    super(`Idempotent request ${messages[details.code]} (${details.attempts} attempt${details.attempts === 1 ? '' : 's'}, last: ${last})`, {
      cause: details.cause,
    });
    this.code = details.code;
    this.attempts = details.attempts;
    this.reason = details.reason;
    this.key = details.key;
    this.status = details.status;
    this.response = details.response;
    Object.defineProperty(this, brand, { value: true });
  }
}

/** True for an IdempotentRequestError from any copy of this package (ESM or CommonJS). */
export function isIdempotentRequestError(error: unknown): error is IdempotentRequestError {
  return typeof error === 'object' && error !== null && (error as Record<symbol, unknown>)[brand] === true;
}
