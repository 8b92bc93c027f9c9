import { randomUUID } from 'node:crypto';
import net from 'node:net';
import KeyvRedis, { createClient } from '@keyv/redis';
import Keyv from 'keyv';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { redisStore } from '../../drivers/redis.js';
import { REDIS_URL, serviceAvailable } from '../helpers/services.js';
import { storeMaintenanceSuite } from '../suites/store-maintenance.suite.js';
import { storeSuite } from '../suites/store.suite.js';
import { storeWakeUpSuite } from '../suites/store-wake-up.suite.js';

const available = await serviceAvailable('Redis', REDIS_URL);

const claimOf = (token: string, fingerprint = 'fp') => ({ token, fingerprint, createdAt: Date.now() });
const response = { status: 201, headers: { 'content-type': 'text/plain' }, body: new Uint8Array(Buffer.from('ok')) };

storeSuite(
  'redis',
  available
    ? {
        create: async () => redisStore({ url: REDIS_URL }),
        // Nothing listens on port 1: connection refused, every call must reject (S4, S6).
        broken: async () => ({ store: redisStore({ url: 'redis://127.0.0.1:1', timeoutMs: 1000 }), failingKey: 'k', allOperations: true }),
      }
    : undefined,
);

const settleNamespace = `idk-settle-${randomUUID()}`;
storeWakeUpSuite('redis', available ? async () => redisStore({ url: REDIS_URL, namespace: settleNamespace }) : undefined);

/** A TCP proxy to Redis that the test can cut and restore, to play "Redis went down". */
async function proxyTo(target: string) {
  const { hostname, port } = new URL(target);
  const sockets = new Set<net.Socket>();
  let server: net.Server | undefined;
  let listenPort = 0;
  const start = () =>
    new Promise<void>((resolve) => {
      server = net.createServer((client) => {
        const upstream = net.connect(Number(port), hostname);
        sockets.add(client).add(upstream);
        client.pipe(upstream).pipe(client);
        const drop = () => {
          client.destroy();
          upstream.destroy();
        };
        client.on('error', drop).on('close', drop);
        upstream.on('error', drop).on('close', drop);
      });
      server.listen(listenPort, '127.0.0.1', () => {
        listenPort = (server!.address() as net.AddressInfo).port;
        resolve();
      });
    });
  const stop = () =>
    new Promise<void>((resolve) => {
      for (const socket of sockets) socket.destroy();
      sockets.clear();
      server?.close(() => resolve());
    });
  await start();
  return { url: () => `redis://127.0.0.1:${listenPort}`, start, stop };
}

describe.skipIf(!available)('redis store specifics', () => {
  const inspector = createClient({ url: REDIS_URL });
  beforeAll(async () => {
    await inspector.connect();
  });
  afterAll(async () => {
    await inspector.close();
  });

  it('S7: one key per record, <namespace>:<storage key> (the engine\'s hash, not hashed again), expiring by PX (lease, then ttl)', async () => {
    const namespace = `ik-test-${randomUUID()}`;
    const store = redisStore({ url: REDIS_URL, namespace });
    const key = "user text 'with' *glob* [chars]";
    await store.claim(key, claimOf('t'), 5000);
    const keys = await inspector.keys(`${namespace}:*`);
    expect(keys).toEqual([`${namespace}:${key}`]);
    const leasePttl = await inspector.pTTL(keys[0]!);
    expect(leasePttl).toBeGreaterThan(4000);
    expect(leasePttl).toBeLessThanOrEqual(5000);
    await store.complete(key, 't', response, 60_000);
    expect(await inspector.pTTL(keys[0]!)).toBeGreaterThan(59_000);
    // The layout of drivers/redis-record.ts: state, waiters flag, token, fingerprint, then the rest.
    expect((await inspector.get(keys[0]!))!).toMatch(/^C-t\nfp\n[0-9a-z]{8}\n[0-9a-z]{8}\n201\n\{/);
    await store.close();
  });

  it('S2/H17: extend pushes the key expiry, not only the stored leaseUntil', async () => {
    const namespace = `ik-test-${randomUUID()}`;
    const store = redisStore({ url: REDIS_URL, namespace });
    await store.claim('k', claimOf('t'), 1000);
    expect(await store.extend('k', 't', 30_000)).toBe(true);
    expect(await inspector.pTTL(`${namespace}:k`)).toBeGreaterThan(29_000);
    const record = await store.get('k');
    expect(record?.state === 'processing' && record.leaseUntil).toBeGreaterThan(Date.now() + 29_000);
    await store.close();
  });

  it('one round trip per claim, complete and replay (bench target: 2 for a new key, 1 for a replay)', async () => {
    const adapter = new KeyvRedis(REDIS_URL);
    const client = adapter.client as unknown as Record<string, (...args: unknown[]) => unknown>;
    const store = redisStore({ adapter });
    await store.get('warm-up'); // connects
    // Loads the scripts, which another test may have flushed from the server.
    const warm = `warm-${randomUUID()}`;
    await store.claim(warm, claimOf('w'), 1000);
    await store.complete(warm, 'w', response, 1000);
    const calls = ['evalSha', 'eval', 'get', 'sendCommand'].map((m) => vi.spyOn(client, m as never));
    const count = () => calls.reduce((n, spy) => n + spy.mock.calls.length, 0);

    const key = randomUUID();
    await store.claim(key, claimOf('first'), 5000);
    await store.complete(key, 'first', response, 60_000);
    expect(count()).toBe(2);
    const replay = await store.claim(key, claimOf('retry'), 5000);
    expect(replay).toMatchObject({ claimed: false, record: { state: 'completed', token: 'first' } });
    expect(count()).toBe(3);
    for (const spy of calls) spy.mockRestore();
    await store.close();
    await adapter.disconnect();
  });

  it('a server that lost its scripts (SCRIPT FLUSH, a restart) is sent their source again, and every operation still works', async () => {
    const namespace = `ik-test-${randomUUID()}`;
    const store = redisStore({ url: REDIS_URL, namespace });
    await store.claim('warm', claimOf('w'), 5000); // the claim script is known to the server now
    const flushes = async () => {
      expect(await inspector.sendCommand(['SCRIPT', 'FLUSH', 'SYNC'])).toBe('OK');
    };
    await flushes();
    expect(await store.claim('k', claimOf('t'), 5000)).toMatchObject({ claimed: true });
    await flushes();
    expect(await store.extend('k', 't', 5000)).toBe(true);
    await flushes();
    expect(await store.complete('k', 't', response, 60_000)).toBe(true);
    await flushes();
    expect(await store.claim('k', claimOf('u'), 5000)).toMatchObject({ claimed: false, record: { state: 'completed', token: 't' } });
    await store.claim('r', claimOf('x'), 5000);
    await flushes();
    expect(await store.release('r', 'x')).toBe(true);
    expect(await store.get('r')).toBeUndefined();
    // A value it did not write is nobody's to release, and reads of it fail loudly.
    await inspector.set(`${namespace}:not-a-record`, 'not a record');
    expect(await store.release('not-a-record', 'y')).toBe(false);
    await expect(store.get('not-a-record')).rejects.toThrow(/unknown shape/);
    // A script's own error (here GET on a hash) reaches the caller as it is.
    await inspector.hSet(`${namespace}:hash`, 'a', 'b');
    await expect(store.release('hash', 'y')).rejects.toThrow(/WRONGTYPE/);
    await store.close();
  });

  it('runs on a @keyv/redis adapter or a Keyv instance it is given, and leaves the client open', async () => {
    const adapter = new KeyvRedis(REDIS_URL);
    const store = redisStore({ adapter });
    const key = randomUUID();
    expect((await store.claim(key, claimOf('a'), 5000)).claimed).toBe(true);
    await store.close();
    expect(adapter.client.isOpen).toBe(true);

    const viaKeyv = redisStore({ keyv: new Keyv(adapter) });
    expect(await viaKeyv.claim(key, claimOf('b'), 5000)).toMatchObject({ claimed: false, record: { token: 'a' } });
    await viaKeyv.close();
    await adapter.disconnect();
  });

  it('uses the database number of the URL', async () => {
    const namespace = `ik-test-${randomUUID()}`;
    const url = new URL(REDIS_URL);
    url.pathname = '/15';
    const store = redisStore({ url: url.toString(), namespace });
    await store.claim('k', claimOf('t'), 5000);
    expect(await inspector.keys(`${namespace}:*`)).toEqual([]);
    const db15 = inspector.duplicate({ database: 15 });
    await db15.connect();
    expect(await db15.keys(`${namespace}:*`)).toHaveLength(1);
    await db15.del(`${namespace}:k`);
    await db15.close();
    await store.close();
  });

  it('S6: a server that accepts but never answers fails each call within timeoutMs', async () => {
    // Reads and drops everything (a paused socket would never see the client hang up).
    const silent = net.createServer((socket) => socket.resume());
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', () => r()));
    const { port } = silent.address() as net.AddressInfo;
    const store = redisStore({ url: `redis://127.0.0.1:${port}`, timeoutMs: 300 });
    for (const call of [() => store.claim('k', claimOf('t'), 5000), () => store.get('k')]) {
      const started = Date.now();
      await expect(call()).rejects.toThrow(/Redis/);
      expect(Date.now() - started).toBeLessThan(1500);
    }
    await store.close();
    await new Promise((r) => silent.close(r));
  });

  it('S6: while Redis is down calls reject at once; after it is back they work again', async () => {
    const proxy = await proxyTo(REDIS_URL);
    const store = redisStore({ url: proxy.url(), timeoutMs: 1000 });
    const key = randomUUID();
    expect((await store.claim(key, claimOf('t'), 5000)).claimed).toBe(true);

    await proxy.stop();
    await new Promise((r) => setTimeout(r, 100));
    for (let i = 0; i < 3; i++) {
      const started = Date.now();
      await expect(store.get(key)).rejects.toThrow();
      expect(Date.now() - started).toBeLessThan(1200);
    }

    await proxy.start();
    await vi.waitFor(async () => expect(await store.get(key)).toMatchObject({ token: 't' }), { timeout: 5000, interval: 100 });
    expect(await store.release(key, 't')).toBe(true);
    await store.close();
    await proxy.stop();
  });

  it('H8: a dropped wake-up subscription reports down, reconnects by itself, reports ready and delivers again', async () => {
    const proxy = await proxyTo(REDIS_URL);
    const namespace = `idk-settle-${randomUUID()}`;
    const reader = redisStore({ url: proxy.url(), namespace, timeoutMs: 1000 });
    const writer = redisStore({ url: REDIS_URL, namespace });
    const events: string[] = [];
    const seen: string[] = [];
    reader.subscribe!({ settled: (k) => seen.push(k), ready: () => events.push('ready'), down: () => events.push('down') });
    await vi.waitFor(() => expect(events).toEqual(['ready']), { timeout: 5000, interval: 20 });

    await proxy.stop();
    await vi.waitFor(() => expect(events).toEqual(['ready', 'down']), { timeout: 5000, interval: 20 });
    await proxy.start();
    await vi.waitFor(() => expect(events).toEqual(['ready', 'down', 'ready']), { timeout: 10_000, interval: 20 });
    const key = randomUUID();
    await writer.claim(key, claimOf('t'), 5000);
    // A duplicate's claim marks the record waited for: its completion then publishes.
    expect(await reader.claim(key, claimOf('w'), 5000)).toMatchObject({ claimed: false });
    expect(await writer.complete(key, 't', response, 60_000)).toBe(true);
    await vi.waitFor(() => expect(seen).toContain(key), { timeout: 5000, interval: 20 });
    expect(await reader.get(key)).toMatchObject({ state: 'completed' });
    await Promise.all([reader.close(), writer.close()]);
    await proxy.stop();
  });

  it('rejects bad options with precise TypeErrors', () => {
    expect(() => redisStore({ url: 'http://x' })).toThrow('Expected `url` to start with redis://, rediss://, redis+cluster://, rediss+cluster://, redis+sentinel:// or rediss+sentinel://, got "http://x"');
    expect(() => redisStore({ url: 'redis://127.0.0.1:6379/db' })).toThrow(/database number/);
    expect(() => redisStore({ timeoutMs: -1 })).toThrow('Expected `timeoutMs` to be a positive integer, got -1');
    expect(() => redisStore({ namespace: '' })).toThrow('Expected `namespace` to be a non-empty string, got ""');
    expect(() => redisStore({ adapter: {} as never })).toThrow(/@keyv\/redis adapter/);
    expect(() => redisStore({ keyv: new Keyv() })).toThrow(/Keyv instance over a @keyv\/redis adapter/);
    expect(() => redisStore({ url: REDIS_URL, keyv: new Keyv() })).toThrow('Expected only one of `url`, `adapter` or `keyv`');
  });

  it('a closed store rejects calls', async () => {
    const store = redisStore({ url: REDIS_URL });
    await store.get('k');
    await store.close();
    await expect(store.get('k')).rejects.toThrow(/closed/);
  });
});

// The maintenance methods (delete, stats, sweep), each on a store of its own.
storeMaintenanceSuite(
  'redis',
  available ? { create: async () => redisStore({ url: REDIS_URL, namespace: `ik-maint-${randomUUID()}` }), nativeExpiry: true } : undefined,
);

describe.skipIf(!available)('redis maintenance specifics', () => {
  it('stats visits every record of its namespace in several SCAN batches, and only those', async () => {
    const namespace = `ik-maint-[x]*-${randomUUID()}`;
    const store = redisStore({ url: REDIS_URL, namespace });
    // A sibling namespace that a glob-unsafe pattern would also match.
    const sibling = redisStore({ url: REDIS_URL, namespace: namespace.replace('[x]*', 'x-other') });
    try {
      const n = 1200;
      for (let i = 0; i < n; i += 200) {
        await Promise.all(
          Array.from({ length: 200 }, (_, j) => store.claim(`k${i + j}`, { token: 't', fingerprint: 'f', createdAt: Date.now() }, 60_000)),
        );
      }
      await sibling.claim('other', { token: 't', fingerprint: 'f', createdAt: Date.now() }, 60_000);
      const progress: number[] = [];
      const stats = await store.stats!({ onProgress: (visited) => progress.push(visited) });
      expect(stats).toMatchObject({ processing: n, completed: 0, expired: 0 });
      expect(progress.length).toBeGreaterThan(1);
      expect(progress.at(-1)).toBe(n);
    } finally {
      await store.close();
      await sibling.close();
    }
  });

  it('a dead server fails stats, delete and sweep within the timeout (S6)', async () => {
    const store = redisStore({ url: 'redis://127.0.0.1:1', timeoutMs: 500 });
    try {
      const started = Date.now();
      await expect(store.stats!()).rejects.toThrow(/Redis/);
      await expect(store.delete!('k')).rejects.toThrow(/Redis/);
      await expect(store.sweep!()).rejects.toThrow(/Redis/);
      expect(Date.now() - started).toBeLessThan(5000);
    } finally {
      await store.close();
    }
  });
});
