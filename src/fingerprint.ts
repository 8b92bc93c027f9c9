/**
 * Request fingerprints (H14): method, route path, sorted query, canonical body (object
 * key order does not matter) and the `fingerprintHeaders`, hashed with SHA-256.
 *
 * Plain JSON values take a fast canonical path written here (iterative, so a deeply
 * nested body cannot overflow the stack); anything else (Dates, Maps, class instances,
 * cycles) goes through `object-hash`, which sorts keys the same way.
 * @module
 */
import { createHash, type Hash } from 'node:crypto';
import objectHash from 'object-hash';

class Literal {
  constructor(readonly text: string) {}
}

function isPlainObject(value: object): value is Record<string, unknown> {
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/**
 * A canonical JSON text for plain JSON data (sorted keys, `undefined` members dropped as
 * JSON does), or `undefined` when the value is not plain JSON data.
 */
export function canonicalJson(value: unknown): string | undefined {
  const out: string[] = [];
  const stack: unknown[] = [value];
  const seen = new WeakSet<object>();
  while (stack.length > 0) {
    const v = stack.pop();
    if (v instanceof Literal) {
      out.push(v.text);
      continue;
    }
    if (v === null) {
      out.push('null');
      continue;
    }
    switch (typeof v) {
      case 'string':
        out.push(JSON.stringify(v));
        break;
      case 'number':
        // JSON has no NaN or Infinity; keep them distinct from null anyway.
        out.push(Number.isFinite(v) ? String(v) : `"\u0000${String(v)}"`);
        break;
      case 'boolean':
        out.push(v ? 'true' : 'false');
        break;
      case 'object': {
        // A repeated object is a cycle or a shared reference: not plain JSON data.
        if (seen.has(v)) return undefined;
        seen.add(v);
        if (Array.isArray(v)) {
          out.push('[');
          stack.push(new Literal(']'));
          for (let i = v.length - 1; i >= 0; i--) {
            stack.push(v[i] === undefined ? null : v[i]);
            if (i > 0) stack.push(new Literal(','));
          }
        } else if (isPlainObject(v)) {
          const keys = Object.keys(v)
            .filter((k) => v[k] !== undefined)
            .sort();
          out.push('{');
          stack.push(new Literal('}'));
          for (let i = keys.length - 1; i >= 0; i--) {
            const k = keys[i]!;
            stack.push(v[k]);
            stack.push(new Literal(`${i > 0 ? ',' : ''}${JSON.stringify(k)}:`));
          }
        } else return undefined;
        break;
      }
      default:
        return undefined;
    }
  }
  return out.join('');
}

/** Hash any value canonically: plain JSON by the fast path, the rest by object-hash. */
export function hashValue(value: unknown): string {
  const canonical = canonicalJson(value);
  if (canonical !== undefined) return hashCanonical(canonical);
  return createHash('sha256')
    .update('o')
    .update(objectHash(value as object, { algorithm: 'sha256', unorderedObjects: true }))
    .digest('base64url');
}

const hashCanonical = (canonical: string): string => createHash('sha256').update('j').update(canonical).digest('base64url');

export interface FingerprintInput {
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

function isJsonType(contentType: string | readonly string[] | undefined): boolean {
  const value = Array.isArray(contentType) ? contentType[0] : contentType;
  if (typeof value !== 'string') return false;
  const type = value.split(';', 1)[0]!.trim().toLowerCase();
  return type === 'application/json' || type.endsWith('+json');
}

function updateBody(hash: Hash, body: unknown, json: boolean): void {
  if (body === undefined || body === null) {
    hash.update('\u0000none');
    return;
  }
  if (typeof body === 'string' || body instanceof Uint8Array) {
    const bytes = typeof body === 'string' ? Buffer.from(body) : body;
    if (bytes.length === 0) {
      hash.update('\u0000none');
      return;
    }
    if (json) {
      // Raw JSON is parsed so that key order and whitespace do not matter, exactly as
      // for adapters that hand over an already parsed body. Invalid JSON: its bytes.
      try {
        const canonical = canonicalJson(JSON.parse(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).toString('utf8')));
        if (canonical !== undefined) {
          hash.update('\u0000value').update(hashCanonical(canonical));
          return;
        }
      } catch {
        // not JSON after all
      }
    }
    hash.update('\u0000bytes').update(bytes);
    return;
  }
  hash.update('\u0000value').update(hashValue(body));
}

/** The fingerprint of a request, base64url SHA-256. */
export function fingerprintRequest(input: FingerprintInput): string {
  const hash = createHash('sha256');
  const q = input.url.indexOf('?');
  const path = q === -1 ? input.url : input.url.slice(0, q);
  hash.update(input.method.toUpperCase()).update('\u0000').update(path).update('\u0000');
  if (input.custom !== undefined) {
    hash.update('custom\u0000').update(hashValue(input.custom));
    return hash.digest('base64url');
  }
  if (q !== -1) {
    const pairs = [...new URLSearchParams(input.url.slice(q + 1))].sort(([a, x], [b, y]) =>
      a < b ? -1 : a > b ? 1 : x < y ? -1 : x > y ? 1 : 0,
    );
    hash.update(JSON.stringify(pairs));
  }
  hash.update('\u0000');
  for (const name of input.fingerprintHeaders ?? []) {
    const value = input.headers[name];
    hash.update(JSON.stringify([name, value ?? null])).update('\u0000');
  }
  updateBody(hash, input.body, isJsonType(input.headers['content-type']));
  return hash.digest('base64url');
}
