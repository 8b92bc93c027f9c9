/**
 * The engine compares a stored fingerprint under the scheme that made it (H14): a record an
 * earlier release wrote (first scheme, unprefixed) replays to the same request fingerprinted
 * now, waits while it is processing (never 422), and a different request is still refused.
 */
import { describe, expect, it } from 'vitest';
import { memoryStore } from '../../drivers/memory.js';
import { Engine } from '../../src/engine.js';
import { storageKey } from '../../src/key.js';
import { newToken } from '../../src/lease.js';
import { KeyReusedError } from '../../src/errors.js';
import { requestFingerprint, type FingerprintInput } from '../../src/fingerprint.js';
import { fingerprintRequestV1 } from '../../src/fingerprint-v1.js';
import type { StoredResponse } from '../../src/store.js';

const response: StoredResponse = { status: 201, headers: {}, body: new Uint8Array([7]) };
const request: FingerprintInput = { method: 'POST', url: '/payments?b=1&a=2', headers: { 'content-type': 'application/json' }, body: Buffer.from('{"amount":1}') };
const other: FingerprintInput = { ...request, body: Buffer.from('{"amount":2}') };

async function withLegacyRecord(state: 'completed' | 'processing', leaseMs = 30_000) {
  const store = memoryStore({ sweepIntervalMs: 0 });
  const engine = new Engine({ store, wait: 200 });
  const key = `k-${newToken()}`;
  const skey = storageKey(undefined, key);
  const token = newToken();
  // What an earlier release's claim wrote.
  await store.claim(skey, { fingerprint: fingerprintRequestV1(request), token, createdAt: Date.now() }, leaseMs);
  if (state === 'completed') await store.complete(skey, token, response, 60_000);
  return { store, engine, key, skey, token };
}

describe('fingerprint versions in the engine (H14)', () => {
  it('H14: a completed record of the first scheme replays to the same request fingerprinted now', async () => {
    const { engine, key } = await withLegacyRecord('completed');
    const acquired = await engine.acquire(key, undefined, requestFingerprint(request));
    expect(acquired.type).toBe('replay');
  });

  it('H14: a different request with that key is still 422, under either scheme', async () => {
    const { engine, key } = await withLegacyRecord('completed');
    await expect(engine.acquire(key, undefined, requestFingerprint(other))).rejects.toBeInstanceOf(KeyReusedError);
  });

  it('H8 H14: a record of the first scheme still processing (an old process mid-deploy) is waited for, then replayed', async () => {
    const { engine, store, key, skey, token } = await withLegacyRecord('processing');
    const waiting = engine.acquire(key, undefined, requestFingerprint(request));
    await new Promise((resolve) => setTimeout(resolve, 30));
    await store.complete(skey, token, response, 60_000);
    expect((await waiting).type).toBe('replay');
  });

  it('H14: new records store the current scheme’s value', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const engine = new Engine({ store });
    const fingerprint = requestFingerprint(request);
    const acquired = await engine.acquire('fresh', undefined, fingerprint);
    expect(acquired.type).toBe('execute');
    expect((await store.get(storageKey(undefined, 'fresh')))?.fingerprint).toBe(fingerprint.value);
    expect(fingerprint.value).toMatch(/^v2:/);
  });
});
