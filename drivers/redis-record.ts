/**
 * Internal: how the Redis driver lays a record out in its value, so that its scripts
 * compare the owner's token and copy the fixed part without decoding anything, and a
 * body travels as bytes. Not a package entry.
 *
 *     P|C  waiters(-|w)  token \n fingerprint \n createdAt \n  then
 *     processing: leaseUntil
 *     completed:  expiresAt \n  then
 *                 status \n headers JSON \n  then `b` and the body bytes, or `n` (no body)
 *                 or, for a compressed response (compression.ts), `z` and its payload
 *
 * Times are milliseconds since the epoch in base 36 (8 digits until the year 5188; builds
 * before that wrote 13 decimal digits, still read). The scripts never read them: they
 * find the lines by their line ends.
 *
 * `waiters` is `w` once a claim found the record processing: its completion or release then
 * publishes a wake-up, and only then. Values written by earlier releases (JSON, starting
 * with `{`, record-json.ts) are read as they are.
 * @module
 */
import type { IdempotencyRecord, StoredResponse } from '../src/store.js';
import { compressedPayload, fromCompressedPayload } from '../src/compression.js';
import { decodeRecord as decodeJsonRecord } from './record-json.js';

const NL = 10;
const P = 0x50;
const C = 0x43;
const Z = 0x7a;

/** A time as the layout writes it. */
export const time = (ms: number): string => ms.toString(36);

/** What a script compares at byte 3 to know the owner: the token and its line end. */
export const ownerPrefix = (token: string): string => `${token}\n`;

/** Tokens and fingerprints are one line each of the layout. */
function checkLine(name: string, value: string): void {
  if (value.includes('\n')) throw new TypeError(`Expected \`${name}\` without a line break, got ${JSON.stringify(value)}`);
}

/** A new processing record's value; its waiters flag is `-`. */
export function encodeProcessing(token: string, fingerprint: string, createdAt: number, leaseUntil: number): string {
  checkLine('token', token);
  checkLine('fingerprint', fingerprint);
  return `P-${token}\n${fingerprint}\n${time(createdAt)}\n${time(leaseUntil)}`;
}

/** The response part of a completed value (after `status`'s line start): status, headers, body. */
export function encodeResponseTail(response: StoredResponse): Buffer {
  const payload = compressedPayload(response);
  if (payload) {
    const out = Buffer.allocUnsafe(1 + payload.byteLength);
    out[0] = Z;
    out.set(payload, 1);
    return out;
  }
  const head = `${response.status}\n${JSON.stringify(response.headers)}\n${response.body === null ? 'n' : 'b'}`;
  if (response.body === null || response.body.byteLength === 0) return Buffer.from(head);
  const headBytes = Buffer.byteLength(head);
  const out = Buffer.allocUnsafe(headBytes + response.body.byteLength);
  out.write(head, 0, 'utf8');
  out.set(response.body, headBytes);
  return out;
}

/** What a completion appends after the copied `token \n fingerprint \n createdAt \n`. */
export function encodeCompletedTail(expiresAt: number, response: StoredResponse): Buffer {
  const tail = encodeResponseTail(response);
  const prefix = `${time(expiresAt)}\n`;
  const out = Buffer.allocUnsafe(prefix.length + tail.length);
  out.write(prefix, 0, 'latin1');
  out.set(tail, prefix.length);
  return out;
}

/** A whole completed value (tests and fixtures; the driver builds it in its script). */
export function encodeCompleted(record: Extract<IdempotencyRecord, { state: 'completed' }>): Buffer {
  checkLine('token', record.token);
  checkLine('fingerprint', record.fingerprint);
  const head = Buffer.from(`C-${record.token}\n${record.fingerprint}\n${time(record.createdAt)}\n`);
  return Buffer.concat([head, encodeCompletedTail(record.expiresAt, record.response)]);
}

/** Inverse of the layout (and of record-json.ts for values of earlier releases). Throws a TypeError on anything else. */
export function decodeValue(value: Buffer | string): IdempotencyRecord {
  const buf = typeof value === 'string' ? Buffer.from(value, 'utf8') : value;
  const kind = buf[0];
  if (kind === 0x7b) return decodeJsonRecord(buf.toString('utf8')); // `{`: a release before this layout
  if ((kind !== P && kind !== C) || buf.length < 2) throw new TypeError('idempotency-kit: stored record has an unknown shape');
  let at = 2;
  const line = (): string => {
    const end = buf.indexOf(NL, at);
    if (end === -1) throw new TypeError('idempotency-kit: stored record is cut short');
    const text = buf.toString('utf8', at, end);
    at = end + 1;
    return text;
  };
  // Base 36 (8 characters for today's times); 12 or more decimal digits are a time written
  // in decimal by builds before base 36, read as such.
  const number = (text: string): number => {
    const n = /^[0-9a-z]{1,11}$/.test(text) ? parseInt(text, 36) : /^\d{12,16}$/.test(text) ? Number(text) : NaN;
    if (!Number.isSafeInteger(n)) throw new TypeError('idempotency-kit: stored record has a malformed number');
    return n;
  };
  const token = line();
  const fingerprint = line();
  const createdAt = number(line());
  if (kind === P) {
    return { state: 'processing', fingerprint, token, createdAt, leaseUntil: number(buf.toString('latin1', at)) };
  }
  const expiresAt = number(line());
  if (buf[at] === Z) {
    return { state: 'completed', fingerprint, token, createdAt, expiresAt, response: fromCompressedPayload(buf.subarray(at + 1)) };
  }
  const statusText = line();
  if (!/^\d{1,4}$/.test(statusText)) throw new TypeError('idempotency-kit: stored record has a malformed status');
  const status = Number(statusText);
  const headers = JSON.parse(line()) as Record<string, string | string[]>;
  const marker = buf[at];
  let body: Uint8Array | null;
  if (marker === 0x6e) body = null;
  // A copy: the reply's buffer may be a slice of a much larger socket read.
  else if (marker === 0x62) body = new Uint8Array(buf.subarray(at + 1));
  else throw new TypeError('idempotency-kit: stored record has an unknown body marker');
  return { state: 'completed', fingerprint, token, createdAt, expiresAt, response: { status, headers, body } };
}

/** Whether a value is a processing record nobody is known to wait for (its waiters flag is `-`). */
export const unmarkedProcessing = (value: Buffer): boolean => value[0] === P && value[1] === 0x2d;
