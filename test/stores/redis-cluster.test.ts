/**
 * The Redis store on a real Redis Cluster (3 primaries + 3 replicas started by the test):
 * the store contract, the multi-process race, claims over all shards, and failover (a
 * primary SIGKILLed in the middle of a race) without and with `waitForReplicas`.
 *
 * REDIS_FAILOVER_ROUNDS (default 1) sets the failovers per mode; the figures in
 * docs/drivers/redis.md come from REDIS_FAILOVER_ROUNDS=5.
 */
import { randomUUID } from 'node:crypto';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import KeyvRedis, { createClient, createCluster } from '@keyv/redis';
import Keyv from 'keyv';
import { afterAll, describe, expect, it } from 'vitest';
import { createStore } from '../../drivers/create-store.js';
import { redisStore } from '../../drivers/redis.js';
import { parseRedisClusterUrl } from '../../drivers/redis-url.js';
import { retryUntilAnswered, waitUntil } from '../helpers/failover-race.js';
import { redisServerAvailable, startRedisCluster } from '../helpers/redis-cluster.js';
import { storeSuite } from '../suites/store.suite.js';
import { redisFailoverSuite } from '../suites/redis-failover.suite.js';
import { storeWakeUpSuite } from '../suites/store-wake-up.suite.js';
import { startWorker } from '../helpers/worker-process.js';

const RACE_WORKER = fileURLToPath(new URL('./race-worker.ts', import.meta.url));
const GROUP_WORKER = fileURLToPath(new URL('../helpers/server-group-worker.ts', import.meta.url));
const ROUNDS = Number(process.env.REDIS_FAILOVER_ROUNDS ?? 1);

const haveServer = redisServerAvailable();
if (!haveServer) {
  const message = 'redis-server / redis-cli are not installed: cannot start a Redis Cluster';
  if (process.env.CI) throw new Error(`${message} (CI is set: store tests must run)`);
  console.warn(`\n!!!!!!!! SKIPPING REDIS CLUSTER TESTS: ${message} !!!!!!!!\n`);
}
const cluster = haveServer ? await startRedisCluster({ nodeTimeoutMs: 1000 }) : undefined;
afterAll(async () => {
  await cluster?.stop();
});

const claimOf = (token: string) => ({ token, fingerprint: 'fp', createdAt: Date.now() });
const response = { status: 201, headers: { 'content-type': 'text/plain' }, body: new Uint8Array(Buffer.from('ok')) };

storeSuite(
  'redis cluster (redis+cluster:// URL)',
  cluster
    ? {
        create: async () => redisStore({ url: cluster.url }),
        // No cluster node listens on port 1: every call must reject, in bounded time.
        broken: async () => ({ store: redisStore({ url: 'redis+cluster://127.0.0.1:1', timeoutMs: 1000 }), failingKey: 'k', allOperations: true }),
      }
    : undefined,
);

// Wake-ups for waiting duplicates: classic pub/sub through a duplicate of the client.
storeWakeUpSuite('redis cluster (redis+cluster:// URL)', cluster ? async () => redisStore({ url: cluster.url }) : undefined);

describe('Redis Cluster URLs', () => {
  it('parses seed nodes, credentials and TLS', () => {
    expect(parseRedisClusterUrl('redis+cluster://a:7000,b:7001,[::1]:7002,c')).toEqual({
      tls: false,
      nodes: [
        { host: 'a', port: 7000 },
        { host: 'b', port: 7001 },
        { host: '::1', port: 7002 },
        { host: 'c', port: 6379 },
      ],
    });
    expect(parseRedisClusterUrl('rediss+cluster://app:p%40ss@h:6380/')).toEqual({
      tls: true,
      username: 'app',
      password: 'p@ss',
      nodes: [{ host: 'h', port: 6380 }],
    });
  });

  it('refuses bad cluster URLs with precise TypeErrors, passwords masked', () => {
    expect(() => parseRedisClusterUrl('redis+cluster://h:7000/2')).toThrow(/no database number .* a cluster has only database 0/);
    expect(() => parseRedisClusterUrl('redis+cluster://u:secret@h:99999')).toThrow(
      'Expected each seed node of the Redis URL "redis+cluster://u:***@h:99999" to be host[:port], got "h:99999"',
    );
    expect(() => parseRedisClusterUrl('redis+cluster://h1:1,,h2:2')).toThrow(/got ""/);
    expect(() => parseRedisClusterUrl('redis+cluster://h:1?x=1')).toThrow(/no query/);
    expect(() => createStore('redis+cluster://u:secret@h:1/0')).toThrow(/cannot create a store from "redis\+cluster:\/\/u:\*\*\*@h:1\/0": expected no database number/);
    expect(() => redisStore({ url: 'redis+cluster://' })).toThrow(/host\[:port\]/);
    expect(() => redisStore({ waitForReplicas: { replicas: 0, timeoutMs: 100 } })).toThrow(
      'Expected `waitForReplicas.replicas` to be a positive integer, got 0',
    );
    expect(() => redisStore({ waitForReplicas: { replicas: 1, timeoutMs: 0 } })).toThrow(
      'Expected `waitForReplicas.timeoutMs` to be a positive integer, got 0',
    );
  });

  it('every Lua script touches KEYS[1] only, so each record operation stays in one hash slot', () => {
    const source = readFileSync(fileURLToPath(new URL('../../drivers/redis.ts', import.meta.url)), 'utf8');
    // PUBLISH (the wake-up for waiting duplicates) names a channel, not a key: no slot.
    const calls = [...source.matchAll(/redis\.call\('(\w+)', ([^,)]+)/g)].filter((m) => m[1] !== 'PUBLISH').map((m) => m[2]);
    expect(calls.length).toBeGreaterThanOrEqual(6);
    for (const key of calls) expect(key).toBe('KEYS[1]');
    expect(source).not.toMatch(/KEYS\[[2-9]\]/);
  });
});

describe.skipIf(!cluster)('the cluster fixture', () => {
  it('a SIGKILLed test process leaves no redis-server and no temp dir behind (the reaper)', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', GROUP_WORKER, ...(process.env.REDIS_CLUSTER_PORTS ? [String(Number(process.env.REDIS_CLUSTER_PORTS) + 50)] : [])], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const started = await new Promise<{ dir: string; pid: number }>((resolve, reject) => {
      let out = '';
      child.stdout.on('data', (chunk) => {
        out += chunk;
        if (out.includes('\n')) resolve(JSON.parse(out.split('\n')[0]!) as { dir: string; pid: number });
      });
      child.on('exit', (code) => reject(new Error(`worker exited with ${code}`)));
    });
    expect(existsSync(started.dir)).toBe(true);
    process.kill(started.pid, 0); // the server runs
    child.kill('SIGKILL');
    await waitUntil(async () => {
      try {
        process.kill(started.pid, 0);
        return false;
      } catch {
        return !existsSync(started.dir);
      }
    }, 10_000);
  });
});

describe.skipIf(!cluster)('redis store on a Redis Cluster (3 primaries, 3 replicas)', () => {
  it('S1/S2/S5: claim, complete and replay for 1500 keys spread over every primary and most slots', async () => {
    const namespace = `ik-cluster-${randomUUID()}`;
    const store = createStore(cluster!.url, { namespace });
    // Random keys, as the engine sends hashes: sequential names share CRC16 slots far more often.
    const keys = Array.from({ length: 1500 }, (_, i) => `spread-${i}-${randomUUID()}`);
    const claims = await Promise.all(keys.map((k) => store.claim(k, claimOf(`a-${k}`), 30_000)));
    expect(claims.every((c) => c.claimed)).toBe(true);
    const completed = await Promise.all(keys.map((k) => store.complete(k, `a-${k}`, response, 60_000)));
    expect(completed.every(Boolean)).toBe(true);
    const replays = await Promise.all(keys.map((k) => store.claim(k, claimOf(`b-${k}`), 30_000)));
    for (const [i, replay] of replays.entries()) {
      expect(replay).toMatchObject({ claimed: false, record: { state: 'completed', token: `a-${keys[i]}`, response: { status: 201 } } });
    }
    const released = await Promise.all(keys.slice(0, 100).map((k) => store.release(k, `a-${k}`)));
    expect(released.every((r) => r === false)).toBe(true); // completed records are not released

    await store.close();

    // Where did the records land? Scan each primary, and ask the cluster for each key's slot.
    const recordKeys: string[] = [];
    for (const port of await cluster!.primaries()) {
      const out = await cluster!.cli(port, '--scan', '--pattern', `${namespace}:*`);
      recordKeys.push(...out.trim().split('\n').filter(Boolean));
    }
    expect(new Set(recordKeys).size).toBe(keys.length); // one key per record, each on the primary owning its slot
    const inspector = createClient({ url: cluster!.rootNodes[0]!.url });
    inspector.on('error', () => undefined);
    await inspector.connect();
    try {
      const slots = new Set(await Promise.all(recordKeys.map((k) => inspector.clusterKeySlot(k))));
      const owners = await cluster!.slotOwners();
      expect(new Set([...slots].map((slot) => owners[slot]))).toEqual(new Set(await cluster!.primaries()));
      expect(slots.size).toBeGreaterThan(1400); // 1500 keys over 16384 slots: nearly all distinct
    } finally {
      await inspector.close();
    }
  });

  it('runs on a node-redis cluster client (KeyvRedis), a Keyv over it, and createStore(adapter); leaves it open', async () => {
    // createCluster()'s generic type does not match KeyvRedis's constructor type (a typing
    // gap in the packages; the object is the one KeyvRedis expects).
    const adapter = new KeyvRedis(createCluster({ rootNodes: cluster!.rootNodes }) as unknown as ConstructorParameters<typeof KeyvRedis>[0]);
    const key = randomUUID();
    const viaAdapter = redisStore({ adapter });
    expect((await viaAdapter.claim(key, claimOf('a'), 5000)).claimed).toBe(true);
    expect(await viaAdapter.complete(key, 'a', response, 60_000)).toBe(true);
    await viaAdapter.close();
    expect(adapter.client.isOpen).toBe(true);

    const viaKeyv = createStore(new Keyv(adapter));
    expect(await viaKeyv.claim(key, claimOf('b'), 5000)).toMatchObject({ claimed: false, record: { state: 'completed', token: 'a' } });
    const viaCreate = createStore(adapter);
    expect(await viaCreate.claim(key, claimOf('c'), 5000)).toMatchObject({ claimed: false, record: { token: 'a' } });
    await viaKeyv.close();
    await viaCreate.close();

    // The same record through the URL form: both reach the same cluster.
    const viaUrl = createStore(cluster!.url);
    expect(await viaUrl.get(key)).toMatchObject({ state: 'completed', token: 'a' });
    await viaUrl.close();
    await adapter.disconnect();

    // KeyvRedis given cluster options builds the cluster client itself.
    const fromOptions = new KeyvRedis({ rootNodes: cluster!.rootNodes });
    const viaOptions = createStore(fromOptions);
    expect(await viaOptions.get(key)).toMatchObject({ state: 'completed', token: 'a' });
    await viaOptions.close();
    await fromOptions.disconnect();
  });

  it('waitForReplicas: claims and completions return once a replica has them; the cost in latency', async () => {
    const plain = redisStore({ url: cluster!.url });
    const store = redisStore({ url: cluster!.url, waitForReplicas: { replicas: 1, timeoutMs: 1000 } });
    // Sequential claim + complete on a healthy cluster, one client: the latency WAIT adds.
    const timings = { plain: [] as number[], wait: [] as number[] };
    for (let i = 0; i < 200; i++) {
      for (const [mode, s] of [['plain', plain], ['wait', store]] as const) {
        const k = randomUUID();
        const started = performance.now();
        expect((await s.claim(k, claimOf('w'), 5000)).claimed).toBe(true);
        if (i === 0) expect(await s.extend(k, 'w', 5000)).toBe(true);
        expect(await s.complete(k, 'w', response, 60_000)).toBe(true);
        timings[mode].push(performance.now() - started);
      }
    }
    const median = (values: number[]) => [...values].sort((a, b) => a - b)[values.length >> 1]!.toFixed(2);
    console.log(`claim + complete, median of 200 on a healthy cluster: ${median(timings.plain)} ms without, ${median(timings.wait)} ms with waitForReplicas`);
    await plain.close();
    await store.close();

    // A lease extension or completion the replica does not acknowledge rejects (it stays
    // on the primary).
    const quick = redisStore({ url: cluster!.url, waitForReplicas: { replicas: 1, timeoutMs: 100 } });
    const key = randomUUID();
    expect((await quick.claim(key, claimOf('c'), 5000)).claimed).toBe(true);
    const probe = createClient({ url: cluster!.rootNodes[0]!.url });
    probe.on('error', () => undefined);
    await probe.connect();
    // The store keeps a record at `<namespace>:<key>` (keys arrive hashed by the engine).
    const slot = await probe.clusterKeySlot(`idempotency-kit:${key}`);
    await probe.close();
    const primary = (await cluster!.slotOwners())[slot]!;
    const [replica] = await cluster!.replicasOf(primary);
    const direct = createClient({ url: `redis://127.0.0.1:${primary}` });
    direct.on('error', () => undefined);
    await direct.connect();
    cluster!.pause(replica!);
    try {
      await direct.sendCommand(['CLIENT', 'KILL', 'TYPE', 'replica']);
      await expect(quick.extend(key, 'c', 5000)).rejects.toThrow(
        'Redis replicas did not acknowledge the lease extension (0 of 1 within 100 ms); it may not survive a failover',
      );
      await expect(quick.complete(key, 'c', response, 60_000)).rejects.toThrow(
        'Redis replicas did not acknowledge the completion (0 of 1 within 100 ms); it may not survive a failover',
      );
    } finally {
      cluster!.resume(replica!);
    }
    await direct.close();
    expect(await quick.get(key)).toMatchObject({ state: 'completed', token: 'c' });
    await quick.close();
    await cluster!.waitHealthy(30_000);

    // Asking for more replicas than exist fails closed, and frees the key again.
    const greedy = redisStore({ url: cluster!.url, waitForReplicas: { replicas: 2, timeoutMs: 50 } });
    const lonely = randomUUID();
    await expect(greedy.claim(lonely, claimOf('g'), 5000)).rejects.toThrow(
      'Redis replicas did not acknowledge the claim (1 of 2 within 50 ms); it may not survive a failover',
    );
    expect(await greedy.get(lonely)).toBeUndefined();
    await greedy.close();
  });

  it('S1/S5: 4 processes x 100 keys x 10 concurrent claims through redis+cluster:// -> exactly 100 winners', async () => {
    const runId = `race-${randomUUID()}`;
    type Outcome = { key: number; token: string; claimed: boolean; seen: string };
    const workers = Array.from({ length: 4 }, () => startWorker<{ results: Outcome[] }>(RACE_WORKER, [cluster!.url, runId, '100', '10']));
    try {
      await Promise.all(workers.map((w) => w.ready));
      for (const w of workers) w.send('go');
      const outcomes = (await Promise.all(workers.map((w) => w.exited))).flatMap((r) => r.results);
      expect(outcomes).toHaveLength(4 * 100 * 10);
      const winners = outcomes.filter((o) => o.claimed);
      const winnerOf = new Map(winners.map((w) => [w.key, w.token]));
      expect(winners).toHaveLength(100);
      expect(winnerOf.size).toBe(100);
      for (const o of outcomes) expect(o.seen).toBe(winnerOf.get(o.key));
    } finally {
      for (const w of workers) w.child.kill();
    }
  }, 60_000);

  describe('failover: an acknowledged claim the replica never received', () => {
    // The hazard, made deterministic: pause the replica (SIGSTOP), cut the primary's link
    // to it so nothing more reaches its socket, claim, SIGKILL the primary and resume the
    // replica. The replica that takes over never saw the claim.

    /** Cut P's replica links, run `act` against P, SIGKILL P; resolves once its replica serves the slot. */
    async function claimThenFailover<T>(namespace: string, key: string, act: () => Promise<T>) {
      const owners = await cluster!.slotOwners();
      const probe = createClient({ url: cluster!.rootNodes[0]!.url });
      probe.on('error', () => undefined);
      await probe.connect();
      const slot = await probe.clusterKeySlot(`${namespace}:${key}`);
      await probe.close();
      const primary = owners[slot]!;
      const [replica] = await cluster!.replicasOf(primary);
      expect(replica, `slot ${slot} has a replica`).toBeDefined();
      const direct = createClient({ url: `redis://127.0.0.1:${primary}` });
      direct.on('error', () => undefined);
      await direct.connect();
      cluster!.pause(replica!);
      let outcome;
      try {
        await direct.sendCommand(['CLIENT', 'KILL', 'TYPE', 'replica']);
        outcome = await act().then(
          (value) => ({ ok: true as const, value }),
          (error: unknown) => ({ ok: false as const, error }),
        );
        cluster!.kill(primary);
      } finally {
        cluster!.resume(replica!);
      }
      await direct.close().catch(() => undefined);
      await waitUntil(async () => (await cluster!.slotOwners())[slot] === replica, 30_000);
      return { outcome, primary, replica: replica! };
    }

    async function restore(primary: number) {
      await cluster!.restart(primary);
      await cluster!.waitHealthy(30_000);
    }

    it('async replication: the claim is lost and a retry runs again (a double execution)', async () => {
      const namespace = `ik-lost-${randomUUID()}`;
      const store = redisStore({ url: cluster!.url, namespace, timeoutMs: 1000 });
      try {
        const key = 'order-1';
        await store.get(key); // connected, and the slot map is current
        const { outcome, primary } = await claimThenFailover(namespace, key, () => store.claim(key, claimOf('first'), 60_000));
        expect(outcome).toMatchObject({ ok: true, value: { claimed: true } });
        const retry = await retryUntilAnswered(store, key);
        await restore(primary);
        expect(retry.record.token, 'the promoted replica never saw the first claim').toMatch(/^retry-/);
      } finally {
        await store.close();
      }
    }, 90_000);

    it('waitForReplicas: the unreplicated claim is refused (the handler never runs), so a retry is the only execution', async () => {
      const namespace = `ik-durable-${randomUUID()}`;
      const store = redisStore({ url: cluster!.url, namespace, timeoutMs: 1000, waitForReplicas: { replicas: 1, timeoutMs: 100 } });
      try {
        const key = 'order-1';
        await store.get(key);
        const { outcome, primary } = await claimThenFailover(namespace, key, () => store.claim(key, claimOf('first'), 60_000));
        expect(outcome).toMatchObject({ ok: false });
        expect(String((outcome as { error: unknown }).error)).toMatch(/replicas did not acknowledge the claim \(0 of 1 within 100 ms\)/);
        await restore(primary); // waitForReplicas needs a replica again
        const retry = await retryUntilAnswered(store, key);
        // The refused claim never ran the handler: a retry is the first and only execution.
        expect(retry.record.token).toMatch(/^retry-/);
      } finally {
        await store.close();
      }
    }, 90_000);
  });

  redisFailoverSuite(
    'Redis Cluster',
    () => ({
      url: cluster!.url,
      victim: async (round) => {
        const primaries = await cluster!.primaries();
        return primaries[round % primaries.length]!;
      },
      kill: (port) => cluster!.kill(port),
      promoted: async (victim) => {
        const primaries = await cluster!.primaries();
        return !primaries.includes(victim) && primaries.length === 3;
      },
      restart: (port) => cluster!.restart(port),
      waitHealthy: (ms) => cluster!.waitHealthy(ms),
    }),
    { rounds: ROUNDS, minKeys: 50 },
  );
});
