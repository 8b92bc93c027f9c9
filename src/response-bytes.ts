/**
 * A stored response as one byte string (status, headers and body), the form that is
 * sealed (encryption.ts) and compressed (compression.ts).
 * @module
 */
import type { StoredResponse } from './store.js';

/** The plaintext: 4-byte length of a JSON head ({ s, h, n: body is null }), the head, then the body bytes. */
export function encodePlain(response: StoredResponse): Buffer {
  const head = JSON.stringify(response.body === null ? { s: response.status, h: response.headers, n: 1 } : { s: response.status, h: response.headers });
  const headBytes = Buffer.byteLength(head);
  const body = response.body;
  const out = Buffer.allocUnsafe(4 + headBytes + (body?.byteLength ?? 0));
  out.writeUInt32BE(headBytes, 0);
  out.write(head, 4);
  if (body) out.set(body, 4 + headBytes);
  return out;
}

export function decodePlain(plain: Buffer): StoredResponse {
  const length = plain.readUInt32BE(0);
  const head = JSON.parse(plain.toString('utf8', 4, 4 + length)) as { s: number; h: Record<string, string | string[]>; n?: 1 };
  if (typeof head.s !== 'number' || typeof head.h !== 'object' || head.h === null) throw new TypeError('not a response');
  const body = head.n === 1 ? null : new Uint8Array(plain.buffer, plain.byteOffset + 4 + length, plain.length - 4 - length);
  return { status: head.s, headers: head.h, body };
}

/*
 * The compact form, what compression.ts compresses: a response's head in a few bytes, so
 * that a small compressed body is not mostly head. Like HTTP/2's static header table, the
 * usual header names, and the usual name and value pairs, are one byte each.
 *
 *     status (2 bytes) · header count (varint) · each header · the body bytes
 *     a header: 0x80 | i   the pair PAIRS[i]
 *               0x40 | i   the name NAMES[i], then its value
 *               0x00       a name (varint length, UTF-8), then its value
 *     a value:  varint 2n, then n bytes (a string), or varint 2n + 1, then n strings (a list)
 *
 * The tables are part of the stored format: entries are only ever appended.
 */
const NAMES = [
  'content-type', 'etag', 'cache-control', 'location', 'content-language', 'content-disposition', 'link', 'vary',
  'last-modified', 'expires', 'x-request-id', 'set-cookie', 'content-encoding', 'retry-after', 'x-ratelimit-remaining',
  'access-control-allow-origin',
] as const;
const PAIRS: readonly (readonly [string, string])[] = [
  ['content-type', 'application/json; charset=utf-8'],
  ['content-type', 'application/json'],
  ['content-type', 'text/plain; charset=utf-8'],
  ['content-type', 'text/html; charset=utf-8'],
  ['content-type', 'application/problem+json'],
  ['content-type', 'application/octet-stream'],
  ['content-type', 'application/graphql-response+json; charset=utf-8'],
  ['cache-control', 'no-store'],
  ['cache-control', 'no-cache'],
  ['cache-control', 'private'],
  ['vary', 'Accept-Encoding'],
  ['vary', 'Origin'],
  ['content-encoding', 'gzip'],
  ['content-encoding', 'br'],
];
const nameIndex = new Map<string, number>(NAMES.map((name, i) => [name, i]));
const pairIndex = new Map<string, number>(PAIRS.map(([name, value], i) => [`${name}\n${value}`, i]));

class Writer {
  private parts: (Buffer | number)[] = [];
  private size = 0;
  byte(b: number): void {
    this.parts.push(b);
    this.size++;
  }
  varint(n: number): void {
    while (n >= 0x80) {
      this.byte((n & 0x7f) | 0x80);
      n = Math.floor(n / 0x80);
    }
    this.byte(n);
  }
  bytes(b: Uint8Array): void {
    const buf = Buffer.from(b.buffer, b.byteOffset, b.byteLength);
    this.parts.push(buf);
    this.size += buf.length;
  }
  text(s: string): void {
    const buf = Buffer.from(s, 'utf8');
    this.varint(buf.length);
    this.bytes(buf);
  }
  finish(): Buffer {
    const out = Buffer.allocUnsafe(this.size);
    let at = 0;
    for (const part of this.parts) {
      if (typeof part === 'number') out[at++] = part;
      else at += part.copy(out, at);
    }
    return out;
  }
}

/** A response with a body (compression only takes those) in the compact form. */
export function encodeCompact(response: StoredResponse & { body: Uint8Array }): Buffer {
  const w = new Writer();
  w.byte(response.status >>> 8);
  w.byte(response.status & 0xff);
  const entries = Object.entries(response.headers);
  w.varint(entries.length);
  for (const [name, value] of entries) {
    const pair = typeof value === 'string' ? pairIndex.get(`${name}\n${value}`) : undefined;
    if (pair !== undefined) {
      w.byte(0x80 | pair);
      continue;
    }
    const known = nameIndex.get(name);
    if (known !== undefined) w.byte(0x40 | known);
    else {
      w.byte(0);
      w.text(name);
    }
    if (typeof value === 'string') {
      const buf = Buffer.from(value, 'utf8');
      w.varint(buf.length * 2);
      w.bytes(buf);
    } else {
      w.varint(value.length * 2 + 1);
      for (const item of value) w.text(item);
    }
  }
  w.bytes(response.body);
  return w.finish();
}

/** Inverse of {@link encodeCompact}. Throws a TypeError on bytes that are not one. */
export function decodeCompact(buf: Buffer): StoredResponse {
  let at = 0;
  const need = (n: number) => {
    if (at + n > buf.length) throw new TypeError('not a compact response: cut short');
  };
  const byte = () => {
    need(1);
    return buf[at++]!;
  };
  const varint = () => {
    let n = 0;
    for (let scale = 1; ; scale *= 0x80) {
      const b = byte();
      n += (b & 0x7f) * scale;
      if (b < 0x80) return n;
      if (scale > 2 ** 28) throw new TypeError('not a compact response: a length is too long');
    }
  };
  const chars = (length: number) => {
    need(length);
    const s = buf.toString('utf8', at, at + length);
    at += length;
    return s;
  };
  const status = (byte() << 8) | byte();
  // Every header, and every item of a list, takes at least a byte: a count past the bytes
  // left is a damaged value, refused before anything is allocated for it.
  const count = varint();
  need(count);
  const headers: [string, string | string[]][] = [];
  for (let i = 0; i < count; i++) {
    const t = byte();
    if (t & 0x80) {
      const pair = PAIRS[t & 0x7f];
      if (!pair) throw new TypeError('not a compact response: an unknown header pair');
      headers.push([pair[0], pair[1]]);
      continue;
    }
    let name: string;
    if (t & 0x40) {
      const known = NAMES[t & 0x3f];
      if (!known) throw new TypeError('not a compact response: an unknown header name');
      name = known;
    } else if (t === 0) name = chars(varint());
    else throw new TypeError('not a compact response: an unknown header form');
    const n = varint();
    if (n % 2 === 0) headers.push([name, chars(n / 2)]);
    else {
      need((n - 1) / 2);
      headers.push([name, Array.from({ length: (n - 1) / 2 }, () => chars(varint()))]);
    }
  }
  // fromEntries: a header named `__proto__` stays a header.
  return { status, headers: Object.fromEntries(headers), body: new Uint8Array(buf.buffer, buf.byteOffset + at, buf.length - at) };
}
