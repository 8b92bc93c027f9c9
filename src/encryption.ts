/**
 * Encryption at rest of stored responses (docs/security.md): the engine seals the
 * response (status, headers, body) with AES-256-GCM before any store sees it, and opens
 * it when a replay reads it back, so every store gets it without a driver change.
 *
 * A sealed response is an ordinary {@link StoredResponse} to a driver: status 0 (which no
 * HTTP response has), no headers, and as body one self-describing envelope:
 *
 *     "IKe1" | id length (1 byte) | key id (UTF-8) | IV (12 bytes) | tag (16 bytes) | ciphertext
 *
 * The associated data is the envelope's head (version and key id), the storage key and the
 * record's fingerprint: an envelope copied under another key or record does not open, and
 * neither does one whose key id was changed. Each seal takes a fresh random IV.
 *
 * Built on `node:crypto`'s synchronous cipher, like the fingerprint's hashing (Node, Bun,
 * Deno and workerd with `nodejs_compat` have it): sealing 1 KiB takes a few µs, where
 * WebCrypto would make every completion and replay asynchronous.
 * @module
 */
import { createCipheriv, createDecipheriv, createSecretKey, randomFillSync, type KeyObject } from 'node:crypto';
import { RecordUnreadableError } from './errors.js';
import type { CompletedRecord, StoredResponse } from './store.js';
import { inflateResponse } from './compression.js';
import { decodePlain, encodePlain } from './response-bytes.js';
import { describeValue } from './validate.js';

/** One encryption key: an id stored with each record it seals, and 32 bytes of key. */
export interface EncryptionKey {
  /** Names the key in each record it seals (stored in clear): 1 to 255 bytes, printable ASCII. */
  id: string;
  /** 32 bytes: a Buffer / Uint8Array, or a string of 64 hex digits or of base64 (44 characters). */
  key: Uint8Array | string;
}

/** The `encryption` option. */
export interface EncryptionOptions {
  /**
   * The first key seals every new record; every listed key opens. Rotation: put the new
   * key first and deploy, then (once the records under the old key expired or were
   * re-sealed) drop the old one.
   */
  keys: readonly EncryptionKey[];
  /**
   * Whether a record stored in clear (written before encryption was turned on) is still
   * replayed. `false` answers it like a record no key opens.
   * @default true
   */
  allowPlaintext?: boolean;
}

const MAGIC = Buffer.from('IKe1', 'latin1');
const IV_BYTES = 12;
const TAG_BYTES = 16;
const KEY_BYTES = 32;
/** The status a sealed response carries in the store: no HTTP response has it. */
export const SEALED_STATUS = 0;

interface Key {
  id: string;
  secret: KeyObject;
  /** MAGIC | id length | id: the envelope's head, also the first part of the associated data. */
  head: Buffer;
}

/** The keys, checked and ready to use. */
export class Keyring {
  readonly #keys: Key[];
  readonly #byId = new Map<string, Key>();
  readonly allowPlaintext: boolean;

  constructor(keys: Key[], allowPlaintext: boolean) {
    this.#keys = keys;
    for (const key of keys) this.#byId.set(key.id, key);
    this.allowPlaintext = allowPlaintext;
  }

  /** The key id that seals new records. */
  get sealingKeyId(): string {
    return this.#keys[0]!.id;
  }

  /** Seal `response` for the record at `storageKey` with `fingerprint`. */
  seal(response: StoredResponse, storageKey: string, fingerprint: string): StoredResponse {
    const key = this.#keys[0]!;
    const plain = encodePlain(response);
    const iv = randomIv();
    const cipher = createCipheriv('aes-256-gcm', key.secret, iv);
    cipher.setAAD(associatedData(key.head, storageKey, fingerprint));
    const first = cipher.update(plain);
    const last = cipher.final();
    const tag = cipher.getAuthTag();
    const out = Buffer.allocUnsafe(key.head.length + IV_BYTES + TAG_BYTES + first.length + last.length);
    let at = key.head.copy(out, 0);
    at += iv.copy(out, at);
    at += tag.copy(out, at);
    at += first.copy(out, at);
    last.copy(out, at);
    return { status: SEALED_STATUS, headers: {}, body: new Uint8Array(out.buffer, out.byteOffset, out.byteLength) };
  }

  /**
   * Open a sealed response; throws RecordUnreadableError when no configured key opens it
   * (unknown key id, failed authentication, truncated or malformed envelope).
   */
  open(sealed: StoredResponse, storageKey: string, fingerprint: string): StoredResponse {
    return openWith(sealed, storageKey, fingerprint, (id) => this.#byId.get(id));
  }
}

// The message reaches HTTP clients as the problem's detail: it names no key id (that is
// on the error's `keyId` and in the `record-unreadable` event).
const unreadable = (keyId: string | undefined, reason: RecordUnreadableError['reason']): RecordUnreadableError =>
  new RecordUnreadableError(
    keyId,
    reason,
    reason === 'key-missing'
      ? 'it is sealed under an encryption key this server was not given'
      : reason === 'authentication-failed'
        ? 'it failed authentication (tampered with, truncated, or sealed for another record)'
        : reason === 'plaintext'
          ? 'it is stored in clear and this server accepts only encrypted records'
          : 'its sealed envelope is malformed',
  );

/** Whether `response` is sealed (by this module's envelope), whatever keys this process has. */
export function isSealed(response: StoredResponse): boolean {
  const body = response.body;
  return (
    response.status === SEALED_STATUS &&
    body !== null &&
    body.byteLength >= MAGIC.length &&
    body[0] === MAGIC[0] &&
    body[1] === MAGIC[1] &&
    body[2] === MAGIC[2] &&
    body[3] === MAGIC[3]
  );
}

/** The key id a sealed response names, or undefined when the envelope is too short to say. */
export function sealedKeyId(response: StoredResponse): string | undefined {
  const body = response.body;
  if (body === null || body.byteLength < MAGIC.length + 1) return undefined;
  const length = body[MAGIC.length]!;
  if (body.byteLength < MAGIC.length + 1 + length) return undefined;
  return Buffer.from(body.buffer, body.byteOffset + MAGIC.length + 1, length).toString('latin1');
}

/**
 * The record as its caller can use it: opened when sealed, inflated when compressed. A
 * plaintext record is given back as it is, unless `keyring` refuses plaintext. Throws
 * RecordUnreadableError.
 */
export function openRecord(record: CompletedRecord, storageKey: string, keyring: Keyring | undefined): CompletedRecord {
  if (!isSealed(record.response)) {
    if (keyring && !keyring.allowPlaintext) throw unreadable(undefined, 'plaintext');
    const inflated = inflateResponse(record.response);
    return inflated === record.response ? record : { ...record, response: inflated };
  }
  if (!keyring) throw unreadable(sealedKeyId(record.response), 'key-missing');
  // Compressed before sealing: inflated once opened.
  return { ...record, response: inflateResponse(keyring.open(record.response, storageKey, record.fingerprint)) };
}

function openWith(sealed: StoredResponse, storageKey: string, fingerprint: string, find: (id: string) => Key | undefined): StoredResponse {
  const body = sealed.body!;
  const id = sealedKeyId(sealed);
  if (id === undefined) throw unreadable(undefined, 'malformed');
  const key = find(id);
  if (!key) throw unreadable(id, 'key-missing');
  const bytes = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  const headEnd = key.head.length;
  if (bytes.length < headEnd + IV_BYTES + TAG_BYTES) throw unreadable(id, 'authentication-failed');
  let plain: Buffer;
  try {
    const decipher = createDecipheriv('aes-256-gcm', key.secret, bytes.subarray(headEnd, headEnd + IV_BYTES));
    decipher.setAuthTag(bytes.subarray(headEnd + IV_BYTES, headEnd + IV_BYTES + TAG_BYTES));
    decipher.setAAD(associatedData(key.head, storageKey, fingerprint));
    const first = decipher.update(bytes.subarray(headEnd + IV_BYTES + TAG_BYTES));
    const last = decipher.final();
    plain = last.length === 0 ? first : Buffer.concat([first, last]);
  } catch {
    throw unreadable(id, 'authentication-failed');
  }
  try {
    return decodePlain(plain);
  } catch {
    // Authenticated, so ours, yet not a response: a bug, never a replay.
    throw unreadable(id, 'malformed');
  }
}

function associatedData(head: Buffer, storageKey: string, fingerprint: string): Buffer {
  // One allocation: head | 0 | storage key | 0 | fingerprint (both ASCII in practice, UTF-8 in any case).
  const tail = `\0${storageKey}\0${fingerprint}`;
  const out = Buffer.allocUnsafe(head.length + Buffer.byteLength(tail));
  head.copy(out, 0);
  out.write(tail, head.length);
  return out;
}

const IV_POOL_BYTES = IV_BYTES * 256;
let ivPool: Buffer | undefined;
let ivOffset = IV_POOL_BYTES;

/** 12 fresh random bytes, cut from a pool filled 256 IVs at a time (never reused). */
function randomIv(): Buffer {
  if (ivOffset + IV_BYTES > IV_POOL_BYTES) {
    ivPool = randomFillSync(Buffer.allocUnsafeSlow(IV_POOL_BYTES));
    ivOffset = 0;
  }
  const iv = ivPool!.subarray(ivOffset, ivOffset + IV_BYTES);
  ivOffset += IV_BYTES;
  return iv;
}


/** Check the `encryption` option (precise TypeErrors naming the option and the key id) and make its keyring. */
export function resolveEncryption(option: unknown, name = 'encryption'): Keyring | undefined {
  if (option === undefined) return undefined;
  if (typeof option !== 'object' || option === null || Array.isArray(option)) {
    throw new TypeError(`Expected \`${name}\` to be an object like { keys: [{ id: 'k1', key: <32 bytes> }] }, got ${describeValue(option)}`);
  }
  const { keys, allowPlaintext = true } = option as { keys?: unknown; allowPlaintext?: unknown };
  if (typeof allowPlaintext !== 'boolean') throw new TypeError(`Expected \`${name}.allowPlaintext\` to be a boolean, got ${describeValue(allowPlaintext)}`);
  if (!Array.isArray(keys) || keys.length === 0) {
    throw new TypeError(`Expected \`${name}.keys\` to be a non-empty array of { id, key } (the first one seals), got ${describeValue(keys)}`);
  }
  const resolved: Key[] = [];
  const seen = new Set<string>();
  keys.forEach((entry: unknown, i) => {
    const at = `${name}.keys[${i}]`;
    if (typeof entry !== 'object' || entry === null) throw new TypeError(`Expected \`${at}\` to be an object { id, key }, got ${describeValue(entry)}`);
    const { id, key } = entry as { id?: unknown; key?: unknown };
    if (typeof id !== 'string' || !/^[\x21-\x7e]{1,255}$/.test(id)) {
      throw new TypeError(`Expected \`${at}.id\` to be a string of 1 to 255 printable ASCII characters (no spaces), got ${describeValue(id)}`);
    }
    if (seen.has(id)) throw new TypeError(`\`${at}.id\` ${JSON.stringify(id)} is listed twice: each key needs an id of its own`);
    seen.add(id);
    const bytes = keyBytes(key, `${at}.key`, id);
    resolved.push({ id, secret: createSecretKey(bytes), head: Buffer.concat([MAGIC, Buffer.from([id.length]), Buffer.from(id, 'latin1')]) });
    bytes.fill(0);
  });
  return new Keyring(resolved, allowPlaintext);
}

function keyBytes(key: unknown, at: string, id: string): Buffer {
  const expected = `Expected \`${at}\` (key id ${JSON.stringify(id)}) to be ${KEY_BYTES} bytes: a Buffer or Uint8Array, or a string of 64 hex digits or of base64 (44 characters)`;
  if (key instanceof Uint8Array) {
    if (key.byteLength !== KEY_BYTES) throw new TypeError(`${expected}, got ${key.byteLength} bytes`);
    return Buffer.from(key); // a copy: the caller's buffer may change
  }
  if (typeof key !== 'string') throw new TypeError(`${expected}, got ${describeValue(key)}`);
  if (/^[0-9a-fA-F]{64}$/.test(key)) return Buffer.from(key, 'hex');
  if (/^[A-Za-z0-9+/_-]{43}=?$/.test(key)) {
    const bytes = Buffer.from(key, 'base64');
    if (bytes.length === KEY_BYTES) return bytes;
  }
  // Never echo the string: it may be (most of) a key.
  throw new TypeError(`${expected}, got a string of ${key.length} characters that is neither`);
}

/** What {@link resealRecord} made of one completed record. */
export type ResealOutcome =
  /** Sealed under the first key now: store `response` in place of the old one. */
  | { action: 'reseal'; response: StoredResponse; from: string | null }
  /** Already sealed under the first key: nothing to do (not opened). */
  | { action: 'current' }
  /** Stored in clear and `encryptPlaintext` not asked for: left as it is. */
  | { action: 'plaintext' }
  /** No listed key opens it: left as it is, never deleted. */
  | { action: 'unreadable'; keyId: string | undefined; reason: RecordUnreadableError['reason'] };

/**
 * Re-seal one completed record under the keyring's first key, for a key rotation
 * (docs/security.md#keys-and-rotation): a record sealed under another listed key is opened
 * and sealed again with the same storage key and fingerprint; one already under the
 * first key is skipped without being opened; one in clear is sealed only with
 * `encryptPlaintext`. Pure: the caller writes the result back (compare-and-set by token).
 */
export function resealRecord(record: CompletedRecord, storageKey: string, keyring: Keyring, options: { encryptPlaintext?: boolean } = {}): ResealOutcome {
  const { response } = record;
  if (!isSealed(response)) {
    if (!options.encryptPlaintext) return { action: 'plaintext' };
    return { action: 'reseal', response: keyring.seal(response, storageKey, record.fingerprint), from: null };
  }
  const keyId = sealedKeyId(response);
  if (keyId === keyring.sealingKeyId) return { action: 'current' };
  let opened: StoredResponse;
  try {
    opened = keyring.open(response, storageKey, record.fingerprint);
  } catch (error) {
    if (error instanceof RecordUnreadableError) return { action: 'unreadable', keyId: error.keyId, reason: error.reason };
    throw error;
  }
  return { action: 'reseal', response: keyring.seal(opened, storageKey, record.fingerprint), from: keyId ?? null };
}
