/**
 * Typed errors with stable `code` strings. `isIdempotencyError` checks a global
 * brand, so it works across two copies of the package (ESM and CJS, or two versions).
 * @module
 */

const brand = Symbol.for('idempotency-kit.error');

/** Every problem the library reports; `code` doubles as the problem type name. */
export type IdempotencyErrorCode =
  | 'key-missing'
  | 'key-invalid'
  | 'key-reused'
  | 'request-in-progress'
  | 'response-not-replayable'
  | 'store-unavailable'
  | 'body-too-large'
  | 'result-not-storable'
  | 'lease-lost'
  | 'transaction-conflict'
  | 'scope-required'
  | 'record-unreadable'
  | 'webhook-signature-invalid'
  | 'memory-store-in-production';

export class IdempotencyError extends Error {
  override name = 'IdempotencyError';
  readonly code: IdempotencyErrorCode;
  /** The HTTP status the adapters answer with. */
  readonly status: number;
  /** Whether trying again later can succeed (a broker should redeliver). */
  readonly retryable: boolean;
  declare readonly [brand]: true;

  constructor(code: IdempotencyErrorCode, status: number, message: string, options?: { cause?: unknown; retryable?: boolean }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.status = status;
    this.retryable = options?.retryable ?? false;
    Object.defineProperty(this, brand, { value: true });
  }
}

/** Why a key was refused. */
export type KeyInvalidReason =
  | 'empty'
  | 'too-long'
  | 'non-printable'
  | 'non-ascii'
  | 'malformed-quoting'
  | 'several-values';

/** The request has no key, or its key is not usable: the base of {@link KeyMissingError} and {@link KeyInvalidError}. */
export class IdempotencyKeyError extends IdempotencyError {
  override name = 'IdempotencyKeyError';
  /** Set for `key-invalid`. */
  readonly reason: KeyInvalidReason | undefined;
  constructor(reason: KeyInvalidReason | undefined, message: string) {
    super(reason === undefined ? 'key-missing' : 'key-invalid', 400, message);
    this.reason = reason;
  }
}

/** `key-missing`: the request carries no key where one is required. */
export class KeyMissingError extends IdempotencyKeyError {
  override name = 'KeyMissingError';
  constructor(message = 'Idempotency key missing.') {
    super(undefined, message);
  }
}

/** `key-invalid`: the key is empty, too long, not printable ASCII, or badly quoted; `reason` says which. */
export class KeyInvalidError extends IdempotencyKeyError {
  override name = 'KeyInvalidError';
  declare readonly reason: KeyInvalidReason;
  constructor(reason: KeyInvalidReason, message: string) {
    super(reason, message);
  }
}

/** `key-reused`: the same key came with a different request. Never retryable with this key. */
export class KeyReusedError extends IdempotencyError {
  override name = 'KeyReusedError';
  constructor(message = 'This idempotency key was already used with a different request.') {
    super('key-reused', 422, message);
  }
}

/** `request-in-progress`: the first request with this key is still running. Retry later. */
export class RequestInProgressError extends IdempotencyError {
  override name = 'RequestInProgressError';
  /** Seconds to wait before retrying (the `Retry-After` value). */
  readonly retryAfterSeconds: number;
  constructor(retryAfterSeconds = 1, message = 'A request with this idempotency key is still being processed.') {
    super('request-in-progress', 409, message, { retryable: true });
    this.retryAfterSeconds = retryAfterSeconds;
  }
}

/** The first request completed, but its response was not stored and cannot be replayed. */
export class ResponseNotReplayableError extends IdempotencyError {
  override name = 'ResponseNotReplayableError';
  constructor(message = 'The request with this idempotency key completed, but its response was too large or streamed and cannot be replayed.') {
    super('response-not-replayable', 409, message);
  }
}

/** The store failed or timed out before the handler ran. */
export class StoreUnavailableError extends IdempotencyError {
  override name = 'StoreUnavailableError';
  readonly retryAfterSeconds: number;
  constructor(cause: unknown, retryAfterSeconds = 1) {
    const detail = cause instanceof Error ? cause.message : String(cause);
    super('store-unavailable', 503, `The idempotency store is unavailable: ${detail}`, { cause, retryable: true });
    this.retryAfterSeconds = retryAfterSeconds;
  }
}

/** The request body is larger than `maxBodyBytes`, so it cannot be fingerprinted. */
export class BodyTooLargeError extends IdempotencyError {
  override name = 'BodyTooLargeError';
  readonly limit: number;
  constructor(limit: number) {
    super('body-too-large', 413, `The request body exceeds ${limit} bytes.`);
    this.limit = limit;
  }
}

/** `idempotent()` was given a result (or arguments) it cannot store faithfully. */
export class ResultNotStorableError extends IdempotencyError {
  override name = 'ResultNotStorableError';
  /** The value fn returned, when fn ran (its effect happened) but the value could not be stored. */
  declare readonly result: unknown;
  constructor(message: string, options?: { result?: unknown; cause?: unknown }) {
    super('result-not-storable', 500, message, { cause: options?.cause });
    // Not enumerable: a logged error should not dump a large result.
    if (options && 'result' in options) Object.defineProperty(this, 'result', { value: options.result });
  }
}

/**
 * A transaction that was to complete the record could not: the claim's lease had ended
 * and the key belongs to another caller now. The transaction was rolled back, so the
 * effect did not happen here; a retry replays or waits for the other caller's result.
 */
export class LeaseLostError extends IdempotencyError {
  override name = 'LeaseLostError';
  constructor(
    message = 'The idempotency lease ended before the transaction committed; it was rolled back and the key now belongs to another request.',
  ) {
    super('lease-lost', 409, message, { retryable: true });
  }
}

/**
 * The database refused the transaction again and again (serialization failure or
 * deadlock, SQLSTATE 40001 / 40P01) after every attempt; each was rolled back and the key
 * released. `cause` is the database's last error; `attempts` how many ran.
 */
export class TransactionConflictError extends IdempotencyError {
  override name = 'TransactionConflictError';
  readonly attempts: number;
  constructor(attempts: number, cause: unknown) {
    const detail = cause instanceof Error ? cause.message : String(cause);
    super('transaction-conflict', 409, `The transaction was rolled back ${attempts} times by the database (${detail}); retry later.`, {
      cause,
      retryable: true,
    });
    this.attempts = attempts;
  }
}

/**
 * No `scope` option was given and the request carries no authenticated user to scope its
 * key by. Keys are never shared between clients silently (docs/semantics.md#security), so
 * this is a configuration error of the server (500), whose message says what to write.
 */
export class ScopeRequiredError extends IdempotencyError {
  override name = 'ScopeRequiredError';
  constructor(message: string) {
    super('scope-required', 500, message);
  }
}

/**
 * A stored record could not be opened: it is sealed under a key id this process was not
 * given (`encryption.keys`), or it failed authentication (tampered, truncated, sealed for
 * another record), or it is stored in clear while `encryption.allowPlaintext` is false.
 * The layer fails closed: the stored response is not replayed and the handler does not run
 * again (its effect happened). A server problem (500): add the missing key back, or delete
 * the record (docs/security.md). `keyId` names the key the record asks for, when readable.
 */
export class RecordUnreadableError extends IdempotencyError {
  override name = 'RecordUnreadableError';
  /** The key id the record was sealed under; undefined for a plaintext or malformed record. */
  readonly keyId: string | undefined;
  /** `key-missing`: no configured key has that id; `authentication-failed`; `plaintext`; `malformed`. */
  readonly reason: 'key-missing' | 'authentication-failed' | 'plaintext' | 'malformed';
  constructor(keyId: string | undefined, reason: RecordUnreadableError['reason'], detail?: string) {
    super(
      'record-unreadable',
      500,
      `The stored record of this idempotency key cannot be opened${detail ? `: ${detail}` : ''}. It is neither replayed nor run again.`,
    );
    this.keyId = keyId;
    this.reason = reason;
  }
}

/**
 * `memory-store-in-production`: the memory store was asked for while NODE_ENV is
 * production. It keeps keys in one process only, so a second instance or a restart runs a
 * retried request again; the message says which store to use instead, or how to keep memory
 * on purpose (`inProduction: 'warn'` or `'allow'`).
 */
export class MemoryStoreInProductionError extends IdempotencyError {
  override name = 'MemoryStoreInProductionError';
  constructor(message: string) {
    super('memory-store-in-production', 500, message);
  }
}

/** True for any error this library created, from any copy of the package. */
export function isIdempotencyError(error: unknown): error is IdempotencyError {
  return typeof error === 'object' && error !== null && (error as Record<symbol, unknown>)[brand] === true;
}
