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
