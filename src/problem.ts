/**
 * RFC 9457 problem details for the errors the layer itself produces.
 * @module
 */
import { RequestInProgressError, IdempotencyKeyError, StoreUnavailableError, type IdempotencyError } from './errors.js';

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
  'record-unreadable': 'The stored record of this idempotency key cannot be opened',
  'webhook-signature-invalid': 'Webhook signature missing or invalid',
  'memory-store-in-production': 'The memory store is refused in production',
};

/** An RFC 9457 problem document as the layer writes it. */
export interface ProblemDetails {
  type: string;
  title: string;
  status: number;
  detail: string;
  code: string;
  /** Whether the same request with the same key can succeed later (after `Retry-After`). */
  retryable: boolean;
  /** Why a key was refused (`key-invalid` only). */
  reason?: string;
}

/**
 * Reshapes the body of the layer's own error responses, e.g. into the envelope an API's
 * clients already understand (`{ error: { type, code, message } }`). The status, the
 * `Retry-After` and `Cache-Control` headers and the `code` stay; the body is sent as
 * `application/json` (it is no longer a problem document).
 */
export type FormatError = (problem: ProblemDetails, error: IdempotencyError) => unknown;

/** The problem `type` URI for a code; docs/errors.md has one heading per code. */
export const problemType = (code: string): string => `urn:idempotency-kit:problem:${code}`;

export function problemResponse(error: IdempotencyError, header = 'Idempotency-Key', format?: FormatError): HttpResponse {
  const body: ProblemDetails = {
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
    retryable: error.retryable,
  };
  if (error instanceof IdempotencyKeyError && error.reason) body.reason = error.reason;
  let payload: unknown = body;
  if (format) {
    try {
      payload = format(body, error);
    } catch {
      payload = body; // a failing formatter must not turn a 409 into a 500: answer the plain problem
    }
  }
  const headers: Record<string, string> = {
    'content-type': payload === body ? 'application/problem+json' : 'application/json',
    'cache-control': 'no-store',
  };
  if (error instanceof RequestInProgressError || error instanceof StoreUnavailableError) {
    headers['retry-after'] = String(error.retryAfterSeconds);
  }
  return { status: error.status, headers, body: new Uint8Array(Buffer.from(JSON.stringify(payload))) };
}
