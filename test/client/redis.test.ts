/**
 * The fetch client against two servers sharing one Redis store, behind one faulty proxy that
 * sends connections to either: a retry often lands on the other server, which must replay
 * what the first one ran (set REDIS_URL; fails when CI is set and Redis is unreachable).
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createIdempotentFetch } from '../../client/index.js';
import { redisStore } from '../../drivers/redis.js';
import type { IdempotencyStore } from '../../src/store.js';
import { seeded, startFaultyProxy, type FaultyProxy } from '../helpers/faulty-proxy.js';
import { REDIS_URL, serviceAvailable } from '../helpers/services.js';
import { expectOncePerCall, startOrderServer, type OrderServer } from './server.js';

const available = await serviceAvailable('Redis', REDIS_URL);

describe.skipIf(!available)('createIdempotentFetch on Redis, two servers', () => {
  const namespace = `client-test-${randomUUID()}`;
  const stores: IdempotencyStore[] = [];
  const servers: OrderServer[] = [];
  let proxy: FaultyProxy;

  beforeAll(async () => {
    for (let i = 0; i < 2; i++) {
      const store = redisStore({ url: REDIS_URL, namespace });
      stores.push(store);
      servers.push(await startOrderServer(store));
    }
    proxy = await startFaultyProxy(
      servers.map((s) => s.url),
      seeded(31, { drop: 0.3, reset: 0.2 }),
    );
  });
  afterAll(async () => {
    await proxy?.close();
    await Promise.all(servers.map((s) => s.close()));
    await Promise.all(stores.map((s) => s.close()));
  });

  it('H9 S5: 30 calls, 6 at a time, dropped and reset at random: each runs once on one of the servers and gets that answer', async () => {
    const fetch = createIdempotentFetch({ maxAttempts: 40, minDelayMs: 5, maxDelayMs: 50 });
    await expectOncePerCall(servers, {
      calls: 30,
      concurrency: 6,
      send: async (key) => {
        const res = await fetch(`${proxy.url}/orders`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'idempotency-key': key },
          body: '{"sku":"R"}',
        });
        expect(res.status, key).toBe(201);
        return res.text();
      },
    });
    expect(proxy.log.filter((a) => a === 'drop').length).toBeGreaterThan(5);
    // Both servers did work, so answers crossed between them through Redis.
    expect(servers[0]!.totalExecutions()).toBeGreaterThan(3);
    expect(servers[1]!.totalExecutions()).toBeGreaterThan(3);
  });
});
