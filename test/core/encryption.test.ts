/**
 * The `encryption` option's checks (precise TypeErrors naming the option and the key id,
 * never echoing key material) and the sealed envelope's properties.
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { memoryStore } from '../../drivers/memory.js';
import { isSealed, resolveEncryption, sealedKeyId } from '../../src/encryption.js';
import { idempotent } from '../../src/index.js';

const key = randomBytes(32);
const response = { status: 201, headers: { 'content-type': 'text/plain', 'set-cookie': ['a=1', 'b=2'] }, body: new Uint8Array(Buffer.from('hello')) };

describe('encryption option', () => {
  it('accepts a Buffer, a Uint8Array, 64 hex digits and base64 (padded, unpadded, url-safe)', () => {
    for (const k of [key, new Uint8Array(key), key.toString('hex'), key.toString('hex').toUpperCase(), key.toString('base64'), key.toString('base64url')]) {
      expect(resolveEncryption({ keys: [{ id: 'k', key: k }] })?.sealingKeyId).toBe('k');
    }
  });

  it('refuses bad options with a TypeError naming the option and the key id, never the key', () => {
    const bad: [unknown, RegExp][] = [
      ['k', /`encryption` to be an object/],
      [{}, /`encryption.keys` to be a non-empty array/],
      [{ keys: [] }, /`encryption.keys` to be a non-empty array/],
      [{ keys: [null] }, /`encryption.keys\[0\]` to be an object/],
      [{ keys: [{ key }] }, /`encryption.keys\[0\].id` to be a string/],
      [{ keys: [{ id: 'has space', key }] }, /`encryption.keys\[0\].id`/],
      [{ keys: [{ id: 'a', key }, { id: 'a', key }] }, /listed twice/],
      [{ keys: [{ id: 'old', key: randomBytes(16) }] }, /`encryption.keys\[0\].key` \(key id "old"\) to be 32 bytes.*got 16 bytes/],
      [{ keys: [{ id: 'a', key }, { id: 'b', key: 'c2VjcmV0' }] }, /`encryption.keys\[1\].key` \(key id "b"\) to be 32 bytes.*got a string of 8 characters/],
      [{ keys: [{ id: 'a', key: 42 }] }, /key id "a"\) to be 32 bytes.*got 42/],
      [{ keys: [{ id: 'a', key }], allowPlaintext: 'no' }, /`encryption.allowPlaintext` to be a boolean/],
    ];
    for (const [option, message] of bad) {
      expect(() => resolveEncryption(option)).toThrow(TypeError);
      expect(() => resolveEncryption(option)).toThrow(message);
    }
    expect(() => resolveEncryption({ keys: [{ id: 'a', key: 'c2VjcmV0' }] })).not.toThrow(/c2VjcmV0/);
    // Reached through every entry that takes engine options.
    expect(() => idempotent(async () => 1, { store: memoryStore(), key: () => 'k', encryption: { keys: [{ id: 'x', key: 'short' }] } })).toThrow(
      /`encryption.keys\[0\].key` \(key id "x"\)/,
    );
  });

  it('seals with a fresh IV each time, names its key id, and opens what it sealed (headers, arrays, a null body)', () => {
    const ring = resolveEncryption({ keys: [{ id: 'new', key: randomBytes(32) }, { id: 'old', key }] })!;
    const a = ring.seal(response, 'skey', 'fp');
    const b = ring.seal(response, 'skey', 'fp');
    expect(isSealed(a)).toBe(true);
    expect(isSealed(response)).toBe(false);
    expect(sealedKeyId(a)).toBe('new');
    expect(Buffer.from(a.body!).equals(Buffer.from(b.body!))).toBe(false);
    expect(ring.open(a, 'skey', 'fp')).toEqual(response);
    expect(ring.open(ring.seal({ ...response, body: null }, 'skey', 'fp'), 'skey', 'fp')).toEqual({ ...response, body: null });
    // Bound to the storage key and the fingerprint; an old key still opens its records.
    expect(() => ring.open(a, 'other', 'fp')).toThrow(expect.objectContaining({ code: 'record-unreadable', reason: 'authentication-failed', keyId: 'new' }));
    expect(() => ring.open(a, 'skey', 'fp2')).toThrow(expect.objectContaining({ reason: 'authentication-failed' }));
    const old = resolveEncryption({ keys: [{ id: 'old', key }] })!.seal(response, 'skey', 'fp');
    expect(ring.open(old, 'skey', 'fp')).toEqual(response);
    // Truncated at every length: never opens, never throws anything but the typed error.
    for (let n = 0; n < old.body!.byteLength; n++) {
      const cut = { ...old, body: old.body!.subarray(0, n) };
      if (!isSealed(cut)) continue;
      expect(() => ring.open(cut, 'skey', 'fp')).toThrow(expect.objectContaining({ code: 'record-unreadable' }));
    }
  });
});
