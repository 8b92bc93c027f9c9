/**
 * The first fingerprint scheme, frozen: exactly the digests that releases before the
 * versioned scheme stored (an unprefixed base64url SHA-256), for the same inputs as their
 * adapters handed over. A record such a release wrote is compared under this scheme, so a
 * retry that spans the upgrade still replays; the scheme stays as long as such records
 * can live (their ttl). Do not change it: test/core/fingerprint-legacy.test.ts proves it
 * against the digests that release made (test/fixtures/fingerprint-v1.json).
 *
 * Known weaknesses, fixed in the current scheme and kept here on purpose: a string body
 * is hashed without a type marker (it can spell the JSON or empty-body marker), repeated
 * query values are sorted by value, and form and multipart bodies count by their bytes.
 * @module
 */
import { createHash } from 'node:crypto';
import { canonicalJson, canonicalJsonOf, canonicalJsonText, hashValue, objectHashValue, sha256 } from './canonical-json.js';
import { isParsedJsonBody } from './request-body.js';

export interface FingerprintInputV1 {
  method: string;
  /** The request target: path plus optional `?query`. */
  url: string;
  headers: Record<string, string | readonly string[] | undefined>;
  /** Raw bytes, a string, a parsed value, or undefined for no body. */
  body: unknown;
  /** Lower-case header names that belong to the fingerprint. */
  fingerprintHeaders?: readonly string[];
  /** Replaces query, body and headers (method and path always count). */
  custom?: unknown;
}

/** Whether a content type is JSON (`application/json` or `…+json`); of a repeated header, the first. */
function isJsonType(contentType: string | readonly string[] | undefined): boolean {
  const value = Array.isArray(contentType) ? contentType[0] : contentType;
  if (typeof value !== 'string') return false;
  const type = value.split(';', 1)[0]!.trim().toLowerCase();
  return type === 'application/json' || type.endsWith('+json');
}

/**
 * The body's part of the fingerprint text. JSON (by content type) counts by its canonical
 * text, whether the adapter hands over raw bytes or an already parsed value, so key order
 * and whitespace never matter; other bodies count by their bytes.
 */
function bodyPart(body: unknown, json: boolean): string | Uint8Array {
  if (body === undefined || body === null) return '\u0000none';
  if (typeof body === 'object' && isParsedJsonBody(body)) {
    if (body.bytes.length === 0) return '\u0000none';
    if (json) {
      const canonical = canonicalJsonOf(body.value, body.checked);
      if (canonical !== undefined) return `\u0000json${canonical}`;
    }
    return body.bytes;
  }
  if (typeof body === 'string' || body instanceof Uint8Array) {
    if (body.length === 0) return '\u0000none';
    if (json) {
      const text =
        typeof body === 'string' ? body : Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8');
      const canonical = canonicalJsonText(text);
      if (canonical !== undefined) return `\u0000json${canonical}`;
      // Invalid JSON: its bytes.
    }
    return body;
  }
  const canonical = canonicalJson(body);
  if (canonical !== undefined) return `\u0000json${canonical}`;
  return `\u0000value${objectHashValue(body)}`;
}

/** The fingerprint of a request, base64url SHA-256. */
export function fingerprintRequestV1(input: FingerprintInputV1): string {
  const q = input.url.indexOf('?');
  const path = q === -1 ? input.url : input.url.slice(0, q);
  let head = `${input.method.toUpperCase()}\u0000${path}\u0000`;
  if (input.custom !== undefined) {
    return sha256(`${head}custom\u0000${hashValue(input.custom)}`);
  }
  if (q !== -1) {
    const pairs = [...new URLSearchParams(input.url.slice(q + 1))].sort(([a, x], [b, y]) =>
      a < b ? -1 : a > b ? 1 : x < y ? -1 : x > y ? 1 : 0,
    );
    head += JSON.stringify(pairs);
  }
  head += '\u0000';
  for (const name of input.fingerprintHeaders ?? []) {
    const value = input.headers[name];
    head += `${JSON.stringify([name, value ?? null])}\u0000`;
  }
  const body = bodyPart(input.body, isJsonType(input.headers['content-type']));
  if (typeof body === 'string') return sha256(head + body);
  // Bytes: hashed as they are (no decoding), after a marker.
  return createHash('sha256').update(`${head}\u0000bytes`).update(body).digest('base64url');
}
