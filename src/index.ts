/**
 * idempotency-kit: make retried requests and redelivered messages safe.
 *
 * The root entry holds what an application, an adapter author or a store author needs:
 * `createStore`, `idempotent`, `idempotentBatch`, the HTTP layer (`createIdempotency`, for writing an adapter:
 * docs/writing-an-adapter.md), the error classes, and the store interface's types.
 * @module
 * @example
 * import { createStore, idempotent } from 'idempotency-kit';
 * const handle = idempotent(processMessage, { store: createStore('sqlite://./idem.db'), key: (m) => m.id });
 */
export type { IdempotencyEvent, IdempotencyEventType } from './events.js';
export type { EngineOptions } from './options.js';
export type { EncryptionKey, EncryptionOptions } from './encryption.js';
export {
  BodyTooLargeError,
  IdempotencyError,
  IdempotencyKeyError,
  KeyInvalidError,
  KeyMissingError,
  KeyReusedError,
  LeaseLostError,
  MemoryStoreInProductionError,
  RequestInProgressError,
  RecordUnreadableError,
  ResponseNotReplayableError,
  ResultNotStorableError,
  ScopeRequiredError,
  StoreUnavailableError,
  TransactionConflictError,
  isIdempotencyError,
  type IdempotencyErrorCode,
  type KeyInvalidReason,
} from './errors.js';
export {
  createIdempotency,
  defaultStoreResponse,
  type AdapterDefaults,
  type CapturedResponse,
  type HttpClaim,
  type HttpDecision,
  type HttpRequestInfo,
  type IdempotencyOptions,
} from './http.js';
export { idempotent, type IdempotentOptions, type IdempotentTransactionOptions } from './idempotent.js';
export { withLocalCache, type LocalCacheOptions } from './local-cache.js';
export {
  idempotentBatch,
  type BatchFailure,
  type BatchResult,
  type BatchSuccess,
  type IdempotentBatchOptions,
  type IdempotentBatchTransactionOptions,
} from './batch.js';
export type { FailureKind } from './outcome.js';
export type { FormatError, HttpResponse, ProblemDetails } from './problem.js';
export type {
  ClaimContext,
  ClaimRequest,
  ClaimResult,
  CompletedRecord,
  IdempotencyRecord,
  IdempotencyStore,
  MaintenanceOptions,
  ProcessingRecord,
  ScanOptions,
  ScanPage,
  StoreStats,
  StoredResponse,
} from './store.js';
// Telemetry options, and the messages of the 'idempotency-kit:event' and
// 'idempotency-kit:store' diagnostics channels (docs/telemetry.md).
export type { EventMessage, OpenTelemetryApi, StoreCallMessage, TelemetryOptions } from './telemetry.js';
export {
  inTransaction,
  type TransactionalStore,
  type TransactionClient,
  type TransactionCompletion,
  type TransactionOutcome,
  type TransactionResponse,
  type TransactionRunner,
  type TransactionStatement,
  type TransactionStatementResult,
} from './transaction.js';
// The package root also offers the URL resolver; the core modules above import no driver.
export { createStore, type CreateStoreOptions } from '../drivers/create-store.js';

// Old names, kept until the next minor release: each warns once, naming its replacement.
import { deprecatedClass } from './deprecation.js';
import { KeyReusedError as KeyReused, RequestInProgressError as RequestInProgress } from './errors.js';
import { Idempotency as IdempotencyClass } from './http.js';
/** @deprecated Renamed {@link KeyReused | KeyReusedError} (its code is `key-reused`). */
export const IdempotencyMismatchError = deprecatedClass(KeyReused, 'IdempotencyMismatchError', 'KeyReusedError');
/** @deprecated Renamed {@link KeyReused | KeyReusedError} (its code is `key-reused`). */
export type IdempotencyMismatchError = KeyReused;
/** @deprecated Renamed {@link RequestInProgress | RequestInProgressError} (its code is `request-in-progress`). */
export const IdempotencyConflictError = deprecatedClass(RequestInProgress, 'IdempotencyConflictError', 'RequestInProgressError');
/** @deprecated Renamed {@link RequestInProgress | RequestInProgressError} (its code is `request-in-progress`). */
export type IdempotencyConflictError = RequestInProgress;
/**
 * The HTTP layer an adapter takes (`idempotency(layer)`), made by `createIdempotency(options)`.
 * `new Idempotency(...)` is deprecated in favour of `createIdempotency(...)`; the type stays.
 */
export const Idempotency = deprecatedClass(IdempotencyClass, 'new Idempotency(...)', 'createIdempotency(...)');
export type Idempotency<Req = unknown> = IdempotencyClass<Req>;
