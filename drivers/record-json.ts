/**
 * Internal: a record as compact JSON text, the form the Redis driver stores and the
 * PostgreSQL and Redis drivers send along with a wake-up. Keys are one letter; the body
 * is base64. Not a package entry.
 * @module
 */
import type { IdempotencyRecord, StoredResponse } from '../src/store.js';

/** The JSON form of a record. */
interface RecordJson {
  s: 'p' | 'c';
  f: string;
  t: string;
  c: number;
  l?: number;
  e?: number;
  r?: { s: number; h: Record<string, string | string[]>; b: string | null };
}

/** Serialize a record to a compact JSON string (body as base64). */
export function encodeRecord(record: IdempotencyRecord): string {
  const json: RecordJson =
    record.state === 'processing'
      ? { s: 'p', f: record.fingerprint, t: record.token, c: record.createdAt, l: record.leaseUntil }
      : {
          s: 'c',
          f: record.fingerprint,
          t: record.token,
          c: record.createdAt,
          e: record.expiresAt,
          r: {
            s: record.response.status,
            h: record.response.headers,
            b: record.response.body === null ? null : Buffer.from(record.response.body).toString('base64'),
          },
        };
  return JSON.stringify(json);
}

/** Inverse of {@link encodeRecord}. Throws a TypeError on data it did not write. */
export function decodeRecord(text: string): IdempotencyRecord {
  const json = JSON.parse(text) as RecordJson;
  if (json.s === 'p' && typeof json.l === 'number') {
    return { state: 'processing', fingerprint: json.f, token: json.t, createdAt: json.c, leaseUntil: json.l };
  }
  if (json.s === 'c' && typeof json.e === 'number' && json.r) {
    return {
      state: 'completed',
      fingerprint: json.f,
      token: json.t,
      createdAt: json.c,
      expiresAt: json.e,
      response: {
        status: json.r.s,
        headers: json.r.h,
        body: json.r.b === null ? null : new Uint8Array(Buffer.from(json.r.b, 'base64')),
      },
    };
  }
  throw new TypeError('idempotency-kit: stored record has an unknown shape');
}

/**
 * The `r` member of a completed record, exactly as encodeRecord() writes it, for a
 * store that builds the record's JSON around it (Redis does, in its scripts).
 */
export function encodeResponse(response: StoredResponse): string {
  return JSON.stringify({
    s: response.status,
    h: response.headers,
    b: response.body === null ? null : Buffer.from(response.body.buffer, response.body.byteOffset, response.body.byteLength).toString('base64'),
  });
}
