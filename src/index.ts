/**
 * idempotency-kit: make retried requests and redelivered messages safe.
 * @module
 * @example
 * import { createStore, idempotent } from 'idempotency-kit';
 * const handle = idempotent(processMessage, { store: createStore('sqlite://./idem.db'), key: (m) => m.id });
 */
export { decide, type Decision } from './decide.js';
export {
  Engine,
  Lease,
  storageKey,
  type EngineOptions,
  type IdempotencyEvent,
  type IdempotencyEventType,
} from './engine.js';
export {
  BodyTooLargeError,
  IdempotencyConflictError,
  IdempotencyError,
  IdempotencyKeyError,
  IdempotencyMismatchError,
  ResponseNotReplayableError,
  ResultNotStorableError,
  StoreUnavailableError,
  isIdempotencyError,
  type IdempotencyErrorCode,
  type KeyInvalidReason,
} from './errors.js';
export { canonicalJson, fingerprintRequest, hashValue, type FingerprintInput } from './fingerprint.js';
export {
  Idempotency,
  createIdempotency,
  defaultStoreResponse,
  type CapturedResponse,
  type HttpClaim,
  type HttpDecision,
  type HttpRequestInfo,
  type IdempotencyOptions,
} from './http.js';
export { idempotent, type IdempotentOptions } from './idempotent.js';
export { parseIdempotencyKey, type KeyParseResult } from './key.js';
export { problemResponse, problemType, type HttpResponse } from './problem.js';
export { deserializeResult, serializeResult } from './serialize.js';
export {
  decodeRecord,
  encodeRecord,
  type ClaimRequest,
  type ClaimResult,
  type CompletedRecord,
  type IdempotencyRecord,
  type IdempotencyStore,
  type MaintenanceOptions,
  type ProcessingRecord,
  type StoreStats,
  type StoredResponse,
} from './store.js';
export {
  EVENT_CHANNEL,
  STORE_CHANNEL,
  type EventMessage,
  type OpenTelemetryApi,
  type StoreCallMessage,
  type TelemetryOptions,
} from './telemetry.js';
// The package root also offers the URL resolver; the core modules above import no driver.
export { createStore, type CreateStoreOptions } from '../drivers/create-store.js';
