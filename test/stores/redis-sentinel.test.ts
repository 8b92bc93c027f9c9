/**
 * The Redis store on a real Redis Sentinel set-up (a primary, a replica and three
 * sentinels, started by the test): the store contract through `redis+sentinel://`, the
 * client forms, and failover (the primary SIGKILLed) without and with `waitForReplicas`.
 *
 * REDIS_FAILOVER_ROUNDS (default 1) sets the failovers per mode.
 */
import { randomUUID } from 'node:crypto';
import KeyvRedis from '@keyv/redis';
import { afterAll, describe, expect, it } from 'vitest';
import { createStore } from '../../drivers/create-store.js';
import { redisStore } from '../../drivers/redis.js';
import { parseRedisSentinelUrl } from '../../drivers/redis-url.js';
import { retryUntilAnswered, waitUntil } from '../helpers/failover-race.js';
import { redisServerAvailable } from '../helpers/redis-cluster.js';
import { SENTINEL_MASTER, startRedisSentinel } from '../helpers/redis-sentinel.js';
import { storeSuite } from '../suites/store.suite.js';
import { redisFailoverSuite } from '../suites/redis-failover.suite.js';
import { storeWakeUpSuite } from '../suites/store-wake-up.suite.js';

const ROUNDS = Number(process.env.REDIS_FAILOVER_ROUNDS ?? 1);

const haveServer = redisServerAvailable();
if (!haveServer) {
  const message = 'redis-server / redis-cli are not installed: cannot start Redis Sentinel';
  if (process.env.CI) throw new Error(`${message} (CI is set: store tests must run)`);
  console.warn(`\n!!!!!!!! SKIPPING REDIS SENTINEL TESTS: ${message} !!!!!!!!\n`);
}
const sentinel = haveServer ? await startRedisSentinel() : undefined;
afterAll(async () => {
  await sentinel?.stop();
});

const claimOf = (token: string) => ({ token, fingerprint: 'fp', createdAt: Date.now() });
const response = { status: 201, headers: {}, body: new Uint8Array(Buffer.from('ok')) };

storeSuite(
  'redis sentinel (redis+sentinel:// URL)',
  sentinel
    ? {
        create: async () => redisStore({ url: sentinel.url }),
        broken: async () => ({ store: redisStore({ url: `redis+sentinel://127.0.0.1:1/${SENTINEL_MASTER}`, timeoutMs: 1000 }), failingKey: 'k', allOperations: true }),
      }
    : undefined,
);

// Wake-ups for waiting duplicates: classic pub/sub through a duplicate of the client.
storeWakeUpSuite('redis sentinel (redis+sentinel:// URL)', sentinel ? async () => redisStore({ url: sentinel.url }) : undefined);

describe('Redis Sentinel URLs', () => {
  it('parses sentinels (default port 26379), the primary name, credentials and TLS', () => {
    expect(parseRedisSentinelUrl('rediss+sentinel://app:p%40ss@s1:26380,s2/my%20primary')).toEqual({
      tls: true,
      username: 'app',
      password: 'p@ss',
      name: 'my primary',
      nodes: [
        { host: 's1', port: 26380 },
        { host: 's2', port: 26379 },
      ],
    });
  });

  it('refuses a URL without the primary name, with a precise error', () => {
    expect(() => parseRedisSentinelUrl('redis+sentinel://u:secret@s1:26379')).toThrow(
      'Expected a Redis Sentinel URL of the form redis+sentinel://[user:password@]sentinel:port[,sentinel:port…]/primary-name, got "redis+sentinel://u:***@s1:26379"',
    );
    expect(() => createStore('redis+sentinel://s1:26379,:1/p')).toThrow(/cannot create a store from .*sentinel node/);
  });
});

describe.skipIf(!sentinel)('redis store on Redis Sentinel (a primary, a replica, 3 sentinels)', () => {
  it('runs from createStore(url) and on a KeyvRedis sentinel adapter; leaves the adapter open', async () => {
    const key = randomUUID();
    const viaUrl = createStore(sentinel!.url);
    expect((await viaUrl.claim(key, claimOf('a'), 5000)).claimed).toBe(true);
    expect(await viaUrl.complete(key, 'a', response, 60_000)).toBe(true);
    await viaUrl.close();

    const adapter = new KeyvRedis({
      name: SENTINEL_MASTER,
      sentinelRootNodes: sentinel!.sentinelPorts.map((port) => ({ host: '127.0.0.1', port })),
    });
    const viaAdapter = createStore(adapter);
    expect(await viaAdapter.claim(key, claimOf('b'), 5000)).toMatchObject({ claimed: false, record: { state: 'completed', token: 'a' } });
    await viaAdapter.close();
    expect(adapter.client.isOpen).toBe(true);
    await adapter.disconnect();
  });

  it('waitForReplicas: the claim and completion wait for the replica; more replicas than exist fail closed', async () => {
    const store = redisStore({ url: sentinel!.url, waitForReplicas: { replicas: 1, timeoutMs: 1000 } });
    const key = randomUUID();
    expect((await store.claim(key, claimOf('w'), 5000)).claimed).toBe(true);
    expect(await store.complete(key, 'w', response, 60_000)).toBe(true);
    await store.close();
    const greedy = redisStore({ url: sentinel!.url, waitForReplicas: { replicas: 2, timeoutMs: 50 } });
    const other = randomUUID();
    await expect(greedy.claim(other, claimOf('g'), 5000)).rejects.toThrow('Redis replicas did not acknowledge the claim (1 of 2 within 50 ms)');
    expect(await greedy.get(other)).toBeUndefined();
    await greedy.close();
  });

  describe('failover: an acknowledged claim the replica never received', () => {
    /** Pause the replica, cut its link, run `act`, SIGKILL the primary, resume; resolves once the replica is promoted. */
    async function claimThenFailover<T>(act: () => Promise<T>) {
      const primary = await sentinel!.primary();
      const replica = sentinel!.dataPorts.find((p) => p !== primary)!;
      sentinel!.pause(replica);
      let outcome;
      try {
        await sentinel!.cli(primary, 'client', 'kill', 'type', 'replica');
        outcome = await act().then(
          (value) => ({ ok: true as const, value }),
          (error: unknown) => ({ ok: false as const, error }),
        );
        sentinel!.kill(primary);
      } finally {
        sentinel!.resume(replica);
      }
      await waitUntil(async () => (await sentinel!.primary()) === replica, 30_000);
      await sentinel!.restart(primary);
      await sentinel!.waitHealthy(30_000);
      return outcome;
    }

    it('async replication: the claim is lost and a retry runs again (a double execution)', async () => {
      const store = redisStore({ url: sentinel!.url, namespace: `ik-lost-${randomUUID()}`, timeoutMs: 1000 });
      try {
        await store.get('order-1');
        const outcome = await claimThenFailover(() => store.claim('order-1', claimOf('first'), 60_000));
        expect(outcome).toMatchObject({ ok: true, value: { claimed: true } });
        const retry = await retryUntilAnswered(store, 'order-1');
        expect(retry.record.token, 'the promoted replica never saw the first claim: a retry owns the key').toMatch(/^retry-/);
      } finally {
        await store.close();
      }
    }, 90_000);

    it('waitForReplicas: the unreplicated claim is refused, so a retry is the only execution', async () => {
      const store = redisStore({ url: sentinel!.url, namespace: `ik-durable-${randomUUID()}`, timeoutMs: 1000, waitForReplicas: { replicas: 1, timeoutMs: 100 } });
      try {
        await store.get('order-1');
        const outcome = await claimThenFailover(() => store.claim('order-1', claimOf('first'), 60_000));
        expect(outcome).toMatchObject({ ok: false });
        expect(String((outcome as { error: unknown }).error)).toMatch(/replicas did not acknowledge the claim \(0 of 1 within 100 ms\)/);
        // The refused claim never ran the handler: a retry is the first and only execution.
        expect((await retryUntilAnswered(store, 'order-1')).record.token).toMatch(/^retry-/);
      } finally {
        await store.close();
      }
    }, 90_000);
  });

  redisFailoverSuite(
    'Redis Sentinel',
    () => ({
      url: sentinel!.url,
      victim: () => sentinel!.primary(),
      kill: (port) => sentinel!.kill(port),
      promoted: async (victim) => (await sentinel!.primary()) !== victim,
      restart: (port) => sentinel!.restart(port),
      waitHealthy: (ms) => sentinel!.waitHealthy(ms),
    }),
    { rounds: ROUNDS, minKeys: 20 },
  );
});
