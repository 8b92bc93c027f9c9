/**
 * RFC 9457 problem details for the errors the layer itself produces (H19).
 * @module
 */
import { IdempotencyConflictError, IdempotencyKeyError, StoreUnavailableError, type IdempotencyError } from './errors.js';

/** A complete HTTP response the adapters write as is. */
export interface HttpResponse {
  status: number;
  headers: Record<string, string | string[]>;
  body: Uint8Array;
}

const titles: Record<string, string> = {
  'key-missing': 'Idempotency-Key header is required',
  'key-invalid': 'Idempotency-Key header is invalid',
  'key-reused': 'Idempotency key reused with a different request',
  'request-in-progress': 'A request with this idempotency key is in progress',
  'response-not-replayable': 'The original response cannot be replayed',
  'store-unavailable': 'Idempotency store unavailable',
  'body-too-large': 'Request body too large',
  'scope-required': 'Idempotency keys have no scope on this server',
};

/** The problem `type` URI for a code; docs/errors.md has one heading per code. */
export const problemType = (code: string): string => `urn:idempotency-kit:problem:${code}`;

export function problemResponse(error: IdempotencyError, header = 'Idempotency-Key'): HttpResponse {
  const body: Record<string, unknown> = {
    type: problemType(error.code),
    title: titles[error.code] ?? error.code,
    status: error.status,
    // The store's own error text (hosts, ports) stays in the event, not in the response.
    detail:
      error.code === 'key-missing'
        ? `This endpoint requires an ${header} header.`
        : error.code === 'store-unavailable'
          ? 'The idempotency store did not answer; retry later with the same key.'
          : error.message,
    code: error.code,
  };
  if (error instanceof IdempotencyKeyError && error.reason) body.reason = error.reason;
  const headers: Record<string, string> = {
    'content-type': 'application/problem+json',
    'cache-control': 'no-store',
  };
  if (error instanceof IdempotencyConflictError || error instanceof StoreUnavailableError) {
    headers['retry-after'] = String(error.retryAfterSeconds);
  }
  return { status: error.status, headers, body: new Uint8Array(Buffer.from(JSON.stringify(body))) };
}
