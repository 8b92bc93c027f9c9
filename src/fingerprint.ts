/**
 * Request fingerprints: what makes two requests with one key "the same request".
 *
 * The current scheme (version 2, stored as `v2:` + base64url SHA-256) hashes the method,
 * the route path, the canonical query, the `fingerprintHeaders` and the body in a form
 * that follows what it means rather than how a client spelled it:
 *
 * - JSON: canonical text (object key order and whitespace do not matter), each number
 *   written from its own decimal digits, so that two numbers one double would hold (ids
 *   beyond 2^53) stay apart; a JSON body that is not UTF-8 counts by its bytes;
 * - `application/x-www-form-urlencoded`: the decoded pairs sorted by name, the values of a
 *   repeated name in their order (the query string the same way);
 * - `multipart/form-data`: the ordered parts, each one's name, filename, content type and
 *   SHA-256 of its content (never the boundary or how the part headers are spelled);
 * - a multipart body an upload middleware parsed before the layer: its fields and its
 *   files, hashed;
 * - anything else, and a body that does not parse as its type: the raw bytes.
 *
 * Every part of the digest input has its own tag, and the tag and the framing come before
 * the body, so that no body of one kind can spell the digest input of another.
 *
 * A record stores the fingerprint with its scheme's version prefix, so that a later scheme
 * can still tell (and compare under) the one a record was made with. The first scheme
 * (unprefixed) is gone: its records were stored under keys no release after 0.1.0 looks up.
 * @module
 */
import { createHash } from 'node:crypto';
import { anyValueHash, canonicalJsonExact, canonicalJsonOf, hashValue, jsonNumbersExact, parseJsonExact, sha256 } from './canonical-json.js';
import { FieldSelection } from './fingerprint-fields.js';
import { formPairs, multipartBoundary, MultipartScanner, sortPairs, strictUtf8, type FormPair, type MultipartPart } from './form-body.js';
import { isParsedJsonBody, isRawBody, isUploadBody, mediaType, type ParsedJsonBody, type UploadedFile } from './request-body.js';

export { canonicalJson, hashValue, sha256 } from './canonical-json.js';
export { FieldSelection, type FingerprintFields } from './fingerprint-fields.js';
export { isJsonType, ParsedJsonBody, RawBody, UploadBody, type UploadedFile } from './request-body.js';

/** The version of the scheme new records are fingerprinted with. */
export const FINGERPRINT_VERSION = 2;
const PREFIX = `v${FINGERPRINT_VERSION}:`;

export interface FingerprintInput {
  method: string;
  /** The request target: path plus optional `?query`. */
  url: string;
  headers: Record<string, string | readonly string[] | undefined>;
  /**
   * The body: raw bytes (a `Uint8Array` or a {@link RawBody}), a string, a {@link ParsedJsonBody},
   * an {@link UploadBody}, a value a framework's parser made, or undefined for none.
   */
  body: unknown;
  /** Lower-case header names that belong to the fingerprint. */
  fingerprintHeaders?: readonly string[];
  /** Replaces query, body and headers (method and path always count). */
  custom?: unknown;
  /** Only these fields of a JSON or form body count (`fingerprint: { include } | { exclude }`). */
  fields?: FieldSelection;
}

/**
 * A request's fingerprint: its value under the current scheme (what a new record stores),
 * and how to compare it with a stored one made under whichever scheme wrote it.
 */
export interface RequestFingerprint {
  readonly value: string;
  /** Whether `stored` (a record's fingerprint, of any scheme this release reads) is this request's. */
  matches(stored: string): boolean;
}

/** A fingerprint as the engine takes it: a plain string (compared as it is) or a {@link RequestFingerprint}. */
export type Fingerprint = string | RequestFingerprint;

/** The value a new record stores. */
export const fingerprintValue = (fingerprint: Fingerprint): string => (typeof fingerprint === 'string' ? fingerprint : fingerprint.value);

/** Whether a stored fingerprint is the incoming request's, under the scheme that made it. */
export function sameFingerprint(stored: string, fingerprint: Fingerprint): boolean {
  return typeof fingerprint === 'string' ? stored === fingerprint : fingerprint.matches(stored);
}

/** A body's contribution: a tag naming its kind, and a text or the bytes to hash. */
type BodyDigest = { tag: string; text: string; chunks?: undefined } | { tag: 'bytes'; text?: undefined; chunks: readonly Uint8Array[] };

const NONE: BodyDigest = { tag: 'none', text: '' };
const bytesOf = (chunks: readonly Uint8Array[]): BodyDigest => ({ tag: 'bytes', chunks });
const encoder = new TextEncoder();

/** Canonical JSON text of a parsed value (filtered), or an object-hash for values that are not plain JSON data. */
function valueDigest(tag: string, value: unknown, fields: FieldSelection | undefined, checked: boolean): BodyDigest {
  const kept = fields ? fields.apply(value) : value;
  // Nothing kept (every field left out): one text that no JSON text can be.
  if (kept === undefined) return { tag, text: '' };
  const canonical = canonicalJsonOf(kept, checked);
  if (canonical !== undefined) return { tag, text: canonical };
  return { tag: 'object', text: anyValueHash(kept) };
}

/** The bytes of a body, made when first needed (a string body is encoded only if it counts by its bytes). */
type Chunks = () => readonly Uint8Array[];

function jsonText(text: string | undefined, chunks: Chunks, fields: FieldSelection | undefined): BodyDigest {
  if (text !== undefined) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      return bytesOf(chunks());
    }
    const digest = valueDigest('json', parsed, fields, false);
    // A number JSON cannot hold (1e400 parses to Infinity): the bytes count.
    if (digest.tag === 'json') return jsonNumbersExact(text) ? digest : (exactDigest(text, fields) ?? bytesOf(chunks()));
  }
  return bytesOf(chunks());
}

/**
 * A JSON text with a number that a double rounds: its canonical text with that number
 * written from its digits. Every other JSON body's text is what the parsed value gives, so
 * fingerprints made before numbers counted this way stay equal wherever they were right.
 * `undefined` when it nests too deeply to read (the bytes count).
 */
function exactDigest(text: string, fields: FieldSelection | undefined): BodyDigest | undefined {
  const parsed = parseJsonExact(text);
  if (parsed === undefined) return undefined;
  const kept = fields ? fields.apply(parsed.value) : parsed.value;
  if (kept === undefined) return { tag: 'json', text: '' };
  const canonical = canonicalJsonExact(kept);
  return canonical === undefined ? undefined : { tag: 'json', text: canonical };
}

type IsUtf8 = (input: Uint8Array) => boolean;
/**
 * `buffer.isUtf8` where the runtime offers it without an import (`process.getBuiltinModule`,
 * Node ≥ 20.16: the web adapters' module graph imports no `node:buffer`), else a fatal decode.
 */
const isUtf8: IsUtf8 =
  ((globalThis as { process?: { getBuiltinModule?: (id: string) => unknown } }).process?.getBuiltinModule?.('node:buffer') as { isUtf8?: IsUtf8 } | undefined)
    ?.isUtf8 ?? ((bytes) => strictUtf8(bytes) !== undefined);

/**
 * A JSON body parsed already: its value counts, unless its bytes are not UTF-8 (a lenient
 * decoder made U+FFFD of every bad byte: the bytes count, as they do where the layer reads
 * them) or a number in its text is one a double rounds (the text counts, its numbers exact).
 */
function parsedJsonDigest(body: ParsedJsonBody, contentType: string, fields: FieldSelection | undefined): BodyDigest {
  const { bytes } = body;
  if (typeof bytes !== 'string' && !isUtf8(bytes)) return bodyDigest(bytes, contentType, fields);
  const digest = valueDigest('json', body.value, fields, body.checked);
  // Not plain JSON data (a number beyond a double, a value changed after the parser): the body counts as its bytes or text alone would.
  if (digest.tag !== 'json') return bodyDigest(bytes, contentType, fields);
  // Numbers are ASCII: bytes read as latin1 scan as their UTF-8 text does.
  const scanned = typeof bytes === 'string' ? bytes : (body.text ?? Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('latin1'));
  if (jsonNumbersExact(scanned)) return digest;
  const text = typeof bytes === 'string' ? bytes : (body.text ?? Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8'));
  return exactDigest(text, fields) ?? bodyDigest(bytes, contentType, fields);
}

function formText(text: string | undefined, chunks: Chunks, fields: FieldSelection | undefined): BodyDigest {
  const pairs = text === undefined ? undefined : formPairs(text);
  if (pairs === undefined) return bytesOf(chunks());
  const kept = fields ? pairs.filter(([name]) => fields.counts(name)) : pairs;
  return { tag: 'form', text: JSON.stringify(sortPairs(kept)) };
}

function partsDigest(parts: readonly MultipartPart[], fields: FieldSelection | undefined): BodyDigest {
  const kept = fields ? parts.filter((p) => fields.counts(p.name)) : parts;
  return { tag: 'parts', text: JSON.stringify(kept.map((p) => [p.name, p.filename, p.type, p.sha256])) };
}

function multipart(contentType: string, chunks: readonly Uint8Array[], fields: FieldSelection | undefined): BodyDigest {
  const boundary = multipartBoundary(contentType);
  if (boundary === undefined) return bytesOf(chunks);
  const scanner = new MultipartScanner(boundary);
  for (const chunk of chunks) scanner.write(chunk);
  const parts = scanner.end();
  return parts === undefined ? bytesOf(chunks) : partsDigest(parts, fields);
}

function uploadDigest(fieldsValue: unknown, files: readonly UploadedFile[], fields: FieldSelection | undefined): BodyDigest {
  // Fields as ordered pairs (a FormData's text entries), canonical as a form's are; else as the middleware parsed them.
  const text =
    fieldsValue instanceof URLSearchParams
      ? formText(fieldsValue.toString(), () => [], fields)
      : valueDigest('fields', fieldsValue ?? {}, fields, true);
  const kept = fields ? files.filter((f) => fields.counts(f.name)) : files;
  return { tag: 'upload', text: JSON.stringify([text.tag, text.text, kept.map((f) => [f.name, f.filename, f.type, f.sha256])]) };
}

function headerValue(headers: FingerprintInput['headers'], name: string): string {
  const value = headers[name];
  return typeof value === 'string' ? value : Array.isArray(value) ? (value[0] ?? '') : '';
}

const whole = (chunks: readonly Uint8Array[]): Uint8Array => (chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks));

/** A body's bytes (or its text, when a parser gave a string) read as their content type says. */
function typedBytes(contentType: string, text: string | undefined, chunks: Chunks, fields: FieldSelection | undefined): BodyDigest {
  const type = mediaType(contentType);
  if (type === 'application/json' || type.endsWith('+json')) return jsonText(text ?? strictUtf8(whole(chunks())), chunks, fields);
  if (type === 'application/x-www-form-urlencoded') return formText(text ?? strictUtf8(whole(chunks())), chunks, fields);
  if (type === 'multipart/form-data') return multipart(contentType, chunks(), fields);
  return bytesOf(chunks());
}

function bodyDigest(body: unknown, contentType: string, fields: FieldSelection | undefined): BodyDigest {
  if (body === undefined || body === null) return NONE;
  if (typeof body === 'string') {
    if (body.length === 0) return NONE;
    return typedBytes(contentType, body, () => [encoder.encode(body)], fields);
  }
  if (body instanceof Uint8Array) return body.byteLength === 0 ? NONE : typedBytes(contentType, undefined, () => [body], fields);
  if (typeof body === 'object') {
    if (isRawBody(body)) return body.byteLength === 0 ? NONE : typedBytes(contentType, undefined, () => body.chunks, fields);
    if (isParsedJsonBody(body)) return body.bytes.length === 0 ? NONE : parsedJsonDigest(body, contentType, fields);
    if (isUploadBody(body)) return uploadDigest(body.fields, body.files, fields);
  }
  // A value a framework's parser made: JSON by its content type, else a parsed value of another type.
  const type = mediaType(contentType);
  return valueDigest(type === 'application/json' || type.endsWith('+json') ? 'json' : 'value', body, fields, true);
}

/** No query pairs, no fingerprinted headers: one array for every request (only ever read). */
const NO_PAIRS: readonly never[] = Object.freeze([]);

/** The query's canonical form: the decoded pairs sorted by name (values of a name in order), or the raw text when it does not decode. */
function canonicalQuery(url: string, q: number): readonly FormPair[] | string {
  if (q === -1) return NO_PAIRS;
  const text = url.slice(q + 1);
  const pairs = formPairs(text);
  return pairs === undefined ? text : sortPairs(pairs);
}

/** The fingerprint of a request under the current scheme: `v2:` + base64url SHA-256. */
export function fingerprintRequest(input: FingerprintInput): string {
  const q = input.url.indexOf('?');
  const path = q === -1 ? input.url : input.url.slice(0, q);
  const method = input.method.toUpperCase();
  if (input.custom !== undefined) {
    return PREFIX + sha256(`${JSON.stringify([method, path, null, null])}\u0000custom\u0000${hashValue(input.custom)}`);
  }
  const names = input.fingerprintHeaders;
  const headers = names === undefined || names.length === 0 ? NO_PAIRS : names.map((name) => [name, input.headers[name] ?? null]);
  // JSON text holds no raw NUL: the first NUL ends the head, the next one the tag, and the
  // body comes last, whatever it holds.
  const head = JSON.stringify([method, path, canonicalQuery(input.url, q), headers]);
  const body = bodyDigest(input.body, headerValue(input.headers, 'content-type'), input.fields);
  const prefix = `${head}\u0000${body.tag}\u0000`;
  if (body.chunks === undefined) return PREFIX + sha256(prefix + body.text);
  const hash = createHash('sha256').update(prefix);
  for (const chunk of body.chunks) hash.update(chunk);
  return PREFIX + hash.digest('base64url');
}

/** The request's fingerprint under the current scheme. */
export function requestFingerprint(input: FingerprintInput): RequestFingerprint {
  return new CurrentFingerprint(fingerprintRequest(input));
}

/** A request's fingerprint under the current scheme: a stored one matches when it is the same value. */
class CurrentFingerprint implements RequestFingerprint {
  constructor(readonly value: string) {}

  matches(stored: string): boolean {
    return stored === this.value;
  }
}
