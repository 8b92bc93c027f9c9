import { afterEach, describe, expect, it, vi } from 'vitest';
import { memoryStore } from '../../drivers/memory.js';
import { storeContract } from '../helpers/store-contract.js';

storeContract('memory', {
  create: async () => memoryStore(),
  broken: async () => {
    // A full memory store refuses a new claim: the error must surface (S4), not "not found".
    const store = memoryStore({ maxEntries: 1 });
    await store.claim('occupied', { token: 't', fingerprint: 'f', createdAt: Date.now() }, 60_000);
    return { store, failingKey: 'another' };
  },
});

describe('memory store specifics', () => {
  afterEach(() => {
    vi.unstubAllEnvs();
  });

  it('S3: the sweep removes expired records; the cap evicts completed records before refusing', async () => {
    let now = 1_000;
    const store = memoryStore({ now: () => now, maxEntries: 2, sweepIntervalMs: 0 });
    const req = (token: string) => ({ token, fingerprint: 'f', createdAt: now });
    await store.claim('a', req('a'), 100);
    await store.complete('a', 'a', { status: 200, headers: {}, body: new Uint8Array() }, 10_000);
    await store.claim('b', req('b'), 100);
    // full: 'a' (completed) is evicted to make room, 'b' (processing) is kept
    expect((await store.claim('c', req('c'), 100)).claimed).toBe(true);
    expect(await store.get('a')).toBeUndefined();
    expect(await store.get('b')).toBeDefined();
    // full of processing records: refuse loudly
    await expect(store.claim('d', req('d'), 100)).rejects.toThrow(/full/);
    now += 101; // both leases expire: room again
    expect((await store.claim('d', req('d'), 100)).claimed).toBe(true);
    await store.close();
  });

  it('S5: warns when NODE_ENV is production', async () => {
    vi.stubEnv('NODE_ENV', 'production');
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    const store = memoryStore();
    expect(warn).toHaveBeenCalledWith(expect.stringMatching(/one process only/), expect.anything());
    warn.mockRestore();
    await store.close();
  });

  it('rejects bad options with a precise TypeError', () => {
    expect(() => memoryStore({ maxEntries: -1 })).toThrow('Expected `maxEntries` to be a positive integer, got -1');
    expect(() => memoryStore({ sweepIntervalMs: 1.5 })).toThrow(TypeError);
  });
});
