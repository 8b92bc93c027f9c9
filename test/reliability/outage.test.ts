/**
 * Store outages: Redis paused (`CLIENT PAUSE`) or its connections
 * killed, PostgreSQL connections terminated (`pg_terminate_backend`), each during the
 * claim and during the completion. Before the handler: 503 `store-unavailable`, fail
 * closed, handler not run (H16). After it: the client still gets the handler's response
 * and an event says what failed. No request waits longer than `storeTimeoutMs` (S6), and
 * the same server process recovers by itself once the store answers again.
 *
 * Nothing here disturbs the other suites running at the same time: the Redis outages
 * happen on a Redis server of this file's own (pausing the shared one made other suites'
 * requests time out under load), and only this test's own PostgreSQL backends are
 * terminated, found by their application_name.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient } from '@redis/client';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MYSQL_URL, POSTGRES_URL } from '../helpers/services.js';
import { execLog, figure, request, sleep, startServer, stopAllServers, uniqueKey, type Reply, type ServerProcess } from './fixtures/cluster.js';
import { storeReachable, storeTarget } from './fixtures/stores.js';
import { freePort } from '../helpers/ports.js';

const STORE_TIMEOUT_MS = 500;
/** Slack for process scheduling on a loaded 2-core CI machine. */
const SLACK_MS = 400;
const LEASE_MS = 3000;
const PAUSE_MS = 1200;
const outages: string[] = [];

afterAll(async () => {
  await stopAllServers();
  figure(`store outages: ${outages.length} survived (${outages.join('; ')}), storeTimeoutMs ${STORE_TIMEOUT_MS}`);
});

function expectUnavailable(reply: Reply): void {
  expect(reply.status).toBe(503);
  expect(reply.headers['content-type']).toBe('application/problem+json');
  expect(reply.json().code).toBe('store-unavailable');
  expect(Number(reply.headers['retry-after'])).toBeGreaterThan(0);
}

/** The local ports of `pid`'s TCP connections to `port`. */
function connectionsOf(pid: number, port: number): number[] {
  const out = execFileSync('ss', ['-tnpH', 'state', 'established', `( dport = :${port} )`], { encoding: 'utf8' });
  return out
    .split('\n')
    .filter((line) => line.includes(`pid=${pid},`))
    .map((line) => Number(/127\.0\.0\.1:(\d+)\s+127\.0\.0\.1:\d+/.exec(line)?.[1] ?? /\]:(\d+)\s/.exec(line)?.[1]))
    .filter((p) => Number.isInteger(p) && p > 0);
}

/** Several requests at once with fresh keys; each must fail closed within the time bound. */
async function expectFailClosed(server: ServerProcess, log: ReturnType<typeof execLog>, prefix: string): Promise<string[]> {
  const keys = Array.from({ length: 4 }, () => uniqueKey(prefix));
  const replies = await Promise.all(keys.map((key) => request(server.url, { key, body: { key } })));
  for (const reply of replies) {
    expectUnavailable(reply);
    expect(reply.ms).toBeLessThan(STORE_TIMEOUT_MS + SLACK_MS);
  }
  for (const key of keys) expect(log.count(key), 'handler not run (fail closed)').toBe(0);
  return keys;
}

/** The same server answers normally again within a few seconds, without a restart. */
async function expectRecovered(server: ServerProcess, prefix: string): Promise<void> {
  const deadline = performance.now() + 5000;
  let last: Reply | undefined;
  while (performance.now() < deadline) {
    last = await request(server.url, { key: uniqueKey(prefix) });
    if (last.status === 201) break;
    expect(last.status).toBe(503);
    await sleep(100);
  }
  expect(last?.status, 'recovered by itself').toBe(201);
  expect(server.alive()).toBe(true);
}


/** A Redis server of this file's own, on a free port, gone when the suite ends. */
async function privateRedis(): Promise<{ url: string; stop: () => Promise<void> }> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'idem-outage-redis-'));
  const child: ChildProcess = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], {
    stdio: 'ignore',
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const deadline = performance.now() + 10_000;
  for (;;) {
    const open = await new Promise<boolean>((resolve) => {
      const socket = net.connect(port, '127.0.0.1');
      socket.once('connect', () => (socket.destroy(), resolve(true)));
      socket.once('error', () => resolve(false));
    });
    if (open) break;
    if (child.exitCode !== null || performance.now() > deadline) throw new Error(`redis-server did not start on port ${port}`);
    await sleep(50);
  }
  return {
    url: `redis://127.0.0.1:${port}`,
    stop: async () => {
      child.kill('SIGKILL');
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

const redisAvailable = await storeReachable('redis');
describe.skipIf(!redisAvailable)('Redis outages', () => {
  const target = storeTarget('redis');
  const log = execLog();
  let server: ServerProcess;
  let admin: ReturnType<typeof createClient>;
  let redis: Awaited<ReturnType<typeof privateRedis>>;

  beforeAll(async () => {
    redis = await privateRedis();
    target.url = redis.url;
    admin = createClient({ url: target.url });
    admin.on('error', () => undefined);
    await admin.connect();
    server = await startServer({
      STORE: target.url,
      NAMESPACE: target.namespace,
      EXEC_LOG: log.path,
      LEASE_MS,
      WAIT_MS: 0,
      STORE_TIMEOUT_MS,
    });
    await expectRecovered(server, 'warm-up'); // connected before the first outage
  });
  afterAll(async () => {
    await server?.stop();
    // Nothing stays paused: a pause ends by itself, and this ends one early if a test failed.
    await admin?.sendCommand(['CLIENT', 'UNPAUSE']).catch(() => undefined);
    await admin?.close().catch(() => undefined);
    await redis?.stop();
    log.dispose();
  });

  it('H16/S6: Redis paused during claim -> 503 store-unavailable within storeTimeoutMs, handler not run; recovers by itself', async () => {
    await admin.sendCommand(['CLIENT', 'PAUSE', String(PAUSE_MS), 'WRITE']);
    const pausedAt = performance.now();
    try {
      const keys = await expectFailClosed(server, log, 'redis-pause-claim');
      expect(performance.now() - pausedAt).toBeLessThan(PAUSE_MS); // all answered during the pause
      const events = await server.waitFor((l) => l.type === 'event' && l.event === 'store-error' && l.operation === 'claim');
      expect(events.error).toMatch(/timed out/);
      await sleep(PAUSE_MS - (performance.now() - pausedAt) + 100);
      await expectRecovered(server, 'redis-after-pause');
      const retry = await request(server.url, { key: keys[0]!, body: { key: keys[0] } });
      // A key refused with 503 is usable again at once: the engine released the claim
      // that reached Redis only after it had given up on it.
      expect(retry.status).toBe(201);
      expect(log.count(keys[0])).toBe(1);
      outages.push('Redis paused during claim');
    } finally {
      await admin.sendCommand(['CLIENT', 'UNPAUSE']).catch(() => undefined);
    }
  }, 20_000);

  it('H16/S6: Redis paused during complete -> the client still gets its 201 within storeTimeoutMs, a store-error event; the late write lands', async () => {
    const key = uniqueKey('redis-pause-complete');
    const pending = request(server.url, { key, body: { key }, delayMs: 300 });
    await server.waitFor((l) => l.type === 'exec' && l.key === key);
    await admin.sendCommand(['CLIENT', 'PAUSE', String(PAUSE_MS), 'WRITE']);
    try {
      const reply = await pending;
      expect(reply.status).toBe(201);
      expect(reply.replayed).toBe(false);
      expect(reply.ms).toBeLessThan(300 + STORE_TIMEOUT_MS + SLACK_MS);
      const event = await server.waitFor((l) => l.type === 'event' && l.event === 'store-error' && l.key === key);
      expect(event.operation).toBe('complete');
      await sleep(PAUSE_MS + 100);
      await expectRecovered(server, 'redis-after-pause-complete');
      // The completion was queued, not lost: it ran when the pause ended, within the lease.
      const replay = await request(server.url, { key, body: { key } });
      expect(replay.status).toBe(201);
      expect(replay.replayed).toBe(true);
      expect(replay.body).toBe(reply.body);
      expect(log.count(key)).toBe(1);
      outages.push('Redis paused during complete');
    } finally {
      await admin.sendCommand(['CLIENT', 'UNPAUSE']).catch(() => undefined);
    }
  }, 20_000);

  it("H16/S6: the server's Redis connections killed (CLIENT KILL), before and during a request -> 503 or success, never 500; recovers by itself", async () => {
    const kill = async () => {
      const ports = connectionsOf(server.pid, Number(new URL(target.url).port));
      expect(ports.length).toBeGreaterThan(0);
      for (const port of ports) await admin.sendCommand(['CLIENT', 'KILL', 'ADDR', `127.0.0.1:${port}`]).catch(() => undefined);
    };
    await kill();
    const key = uniqueKey('redis-kill');
    const first = await request(server.url, { key, body: { key } });
    expect([201, 503]).toContain(first.status);
    expect(first.ms).toBeLessThan(STORE_TIMEOUT_MS + SLACK_MS);
    if (first.status === 503) expect(log.count(key)).toBe(0);
    await expectRecovered(server, 'redis-after-kill');

    // Killed while the handler runs: the completion goes to a new connection or fails as an event.
    const key2 = uniqueKey('redis-kill-complete');
    const pending = request(server.url, { key: key2, body: { key: key2 }, delayMs: 200 });
    await server.waitFor((l) => l.type === 'exec' && l.key === key2);
    await kill();
    const reply = await pending;
    expect(reply.status).toBe(201);
    expect(reply.ms).toBeLessThan(200 + STORE_TIMEOUT_MS + SLACK_MS);
    await expectRecovered(server, 'redis-after-kill-complete');
    const retry = await request(server.url, { key: key2, body: { key: key2 } });
    // Either the completion reached Redis (replay) or the key is still held (409); never a second run now.
    expect([201, 409]).toContain(retry.status);
    if (retry.status === 201) expect(retry.body).toBe(reply.body);
    expect(log.count(key2)).toBe(1);
    outages.push('Redis connections killed');
  }, 20_000);
});

const postgresAvailable = await storeReachable('postgres');
describe.skipIf(!postgresAvailable)('PostgreSQL outages', () => {
  const target = storeTarget('postgres');
  // Our backends carry the namespace as application_name: only they get terminated.
  const url = `${POSTGRES_URL}${POSTGRES_URL.includes('?') ? '&' : '?'}application_name=${target.namespace}`;
  const log = execLog();
  let server: ServerProcess;
  let admin: pg.Client;

  const terminate = async (): Promise<number> => {
    const { rows } = await admin.query<{ ok: boolean }>(
      'SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()',
      [target.namespace],
    );
    return rows.filter((r) => r.ok).length;
  };
  /** Hold the table's lock so the store's statements wait, as they would on a sick server. */
  const lockTable = async (): Promise<pg.Client> => {
    const locker = new pg.Client({ connectionString: POSTGRES_URL });
    await locker.connect();
    await locker.query('BEGIN');
    await locker.query(`LOCK TABLE "${target.namespace}" IN ACCESS EXCLUSIVE MODE`);
    return locker;
  };
  /** Wait until `n` of our backends wait on a lock (their statement is in flight). */
  const lockWaiters = async (n: number, timeoutMs = 1000): Promise<number> => {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const { rows } = await admin.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'",
        [target.namespace],
      );
      if (rows[0]!.n >= n || performance.now() > deadline) return rows[0]!.n;
      await sleep(10);
    }
  };
  const unlock = async (locker: pg.Client) => {
    await locker.query('ROLLBACK').catch(() => undefined);
    await locker.end().catch(() => undefined);
  };

  beforeAll(async () => {
    admin = new pg.Client({ connectionString: POSTGRES_URL });
    await admin.connect();
    server = await startServer({
      STORE: url,
      NAMESPACE: target.namespace,
      EXEC_LOG: log.path,
      LEASE_MS,
      WAIT_MS: 0,
      STORE_TIMEOUT_MS,
    });
    await expectRecovered(server, 'warm-up'); // table created, pool connected
  });
  afterAll(async () => {
    await server?.stop();
    await admin?.end().catch(() => undefined);
    await target.dispose().catch(() => {});
    log.dispose();
  });

  it('H16: idle connections terminated -> the next requests reconnect and succeed; the server does not crash', async () => {
    expect(await terminate()).toBeGreaterThan(0);
    const replies = await Promise.all(Array.from({ length: 4 }, () => request(server.url, { key: uniqueKey('pg-idle') })));
    for (const reply of replies) {
      expect([201, 503]).toContain(reply.status);
      expect(reply.ms).toBeLessThan(STORE_TIMEOUT_MS + SLACK_MS);
    }
    await expectRecovered(server, 'pg-after-idle');
    expect(server.lines.filter((l) => l.type === 'fatal')).toEqual([]);
    outages.push('PostgreSQL idle connections terminated');
  }, 20_000);

  it('H16/S6: connections terminated during claim -> 503 store-unavailable within storeTimeoutMs, handler not run; recovers by itself', async () => {
    const locker = await lockTable();
    try {
      const keys = Array.from({ length: 4 }, () => uniqueKey('pg-claim'));
      const pending = Promise.all(keys.map((key) => request(server.url, { key, body: { key } })));
      expect(await lockWaiters(keys.length, STORE_TIMEOUT_MS / 2)).toBeGreaterThan(0); // claims in flight
      expect(await terminate()).toBeGreaterThan(0);
      for (const reply of await pending) {
        expectUnavailable(reply);
        expect(reply.ms).toBeLessThan(STORE_TIMEOUT_MS + SLACK_MS);
      }
      for (const key of keys) expect(log.count(key)).toBe(0);
      await server.waitFor((l) => l.type === 'event' && l.event === 'store-error' && l.operation === 'claim');
    } finally {
      await unlock(locker);
    }
    await expectRecovered(server, 'pg-after-claim');
    outages.push('PostgreSQL terminated during claim');
  }, 20_000);

  it('H16/S6: connections terminated during complete -> the client still gets its 201 within storeTimeoutMs and a store-error event', async () => {
    const key = uniqueKey('pg-complete');
    const pending = request(server.url, { key, body: { key }, delayMs: 300 });
    await server.waitFor((l) => l.type === 'exec' && l.key === key);
    const locker = await lockTable();
    let reply: Reply;
    try {
      // The handler finished; its completion is in flight, waiting on the lock.
      expect(await lockWaiters(1)).toBe(1);
      expect(await terminate()).toBeGreaterThan(0);
      reply = await pending;
    } finally {
      await unlock(locker);
    }
    expect(reply.status).toBe(201);
    expect(reply.replayed).toBe(false);
    expect(reply.ms).toBeLessThan(300 + STORE_TIMEOUT_MS + SLACK_MS);
    const event = await server.waitFor((l) => l.type === 'event' && l.event === 'store-error' && l.key === key);
    expect(event.operation).toBe('complete');
    await expectRecovered(server, 'pg-after-complete');
    // The completion died with its connection; the engine retries it in the background
    // while the lease is still its own, so the retry replays instead of running again.
    let retry = await request(server.url, { key, body: { key } });
    for (let i = 0; i < 20 && retry.status === 409; i++) {
      await new Promise((resolve) => setTimeout(resolve, 250));
      retry = await request(server.url, { key, body: { key } });
    }
    expect(retry.status).toBe(201);
    expect(retry.replayed).toBe(true);
    expect(log.count(key)).toBe(1);
    outages.push('PostgreSQL terminated during complete');
  }, 20_000);
});

const mysqlAvailable = await storeReachable('mysql');
describe.skipIf(!mysqlAvailable)('MySQL outages', () => {
  const target = storeTarget('mysql');
  const log = execLog();
  let server: ServerProcess;
  let admin: import('mysql2/promise').Connection;
  const mysqlPort = Number(new URL(MYSQL_URL).port || 3306);

  /** The server's own connections (found by their client ports), as processlist ids. */
  const ours = async (): Promise<Array<{ id: number; state: string | null }>> => {
    const ports = new Set(connectionsOf(server.pid, mysqlPort));
    const [rows] = await admin.query('SELECT id, host, state FROM information_schema.processlist');
    return (rows as Array<{ id: number; host: string; state: string | null }>)
      .filter((row) => ports.has(Number(row.host.split(':').at(-1))))
      .map(({ id, state }) => ({ id, state }));
  };
  const kill = async (): Promise<number> => {
    const threads = await ours();
    for (const { id } of threads) await admin.query(`KILL ${Number(id)}`).catch(() => undefined);
    return threads.length;
  };
  /** Hold the table's write lock so the store's statements wait, as they would on a sick server. */
  const lockTable = async () => {
    const { default: mysql } = await import('mysql2/promise');
    const locker = await mysql.createConnection(MYSQL_URL);
    await locker.query(`LOCK TABLES \`${target.namespace}\` WRITE`);
    return locker;
  };
  /** Wait until `n` of our connections wait on a lock (their statement is in flight). */
  const lockWaiters = async (n: number, timeoutMs = 1000): Promise<number> => {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const waiting = (await ours()).filter((t) => /lock/i.test(t.state ?? '')).length;
      if (waiting >= n || performance.now() > deadline) return waiting;
      await sleep(10);
    }
  };
  const unlock = async (locker: import('mysql2/promise').Connection) => {
    await locker.query('UNLOCK TABLES').catch(() => undefined);
    await locker.end().catch(() => undefined);
  };

  beforeAll(async () => {
    const { default: mysql } = await import('mysql2/promise');
    admin = await mysql.createConnection(MYSQL_URL);
    server = await startServer({
      STORE: target.url,
      NAMESPACE: target.namespace,
      EXEC_LOG: log.path,
      LEASE_MS,
      WAIT_MS: 0,
      STORE_TIMEOUT_MS,
    });
    await expectRecovered(server, 'warm-up'); // table created, pool connected
  });
  afterAll(async () => {
    await server?.stop();
    await admin?.end().catch(() => undefined);
    await target.dispose().catch(() => {});
    log.dispose();
  });

  it('H16: idle connections killed -> the next requests reconnect and succeed; the server does not crash', async () => {
    expect(await kill()).toBeGreaterThan(0);
    const replies = await Promise.all(Array.from({ length: 4 }, () => request(server.url, { key: uniqueKey('mysql-idle') })));
    for (const reply of replies) {
      expect([201, 503]).toContain(reply.status);
      expect(reply.ms).toBeLessThan(STORE_TIMEOUT_MS + SLACK_MS);
    }
    await expectRecovered(server, 'mysql-after-idle');
    expect(server.lines.filter((l) => l.type === 'fatal')).toEqual([]);
    outages.push('MySQL idle connections killed');
  }, 20_000);

  it('H16/S6: connections killed during claim -> 503 store-unavailable within storeTimeoutMs, handler not run; recovers by itself', async () => {
    const locker = await lockTable();
    try {
      const keys = Array.from({ length: 4 }, () => uniqueKey('mysql-claim'));
      const pending = Promise.all(keys.map((key) => request(server.url, { key, body: { key } })));
      expect(await lockWaiters(1, STORE_TIMEOUT_MS / 2)).toBeGreaterThan(0); // claims in flight
      expect(await kill()).toBeGreaterThan(0);
      for (const reply of await pending) {
        expectUnavailable(reply);
        expect(reply.ms).toBeLessThan(STORE_TIMEOUT_MS + SLACK_MS);
      }
      for (const key of keys) expect(log.count(key)).toBe(0);
      await server.waitFor((l) => l.type === 'event' && l.event === 'store-error' && l.operation === 'claim');
    } finally {
      await unlock(locker);
    }
    await expectRecovered(server, 'mysql-after-claim');
    outages.push('MySQL killed during claim');
  }, 20_000);

  it('H16/S6: connections killed during complete -> the client still gets its 201 within storeTimeoutMs and a store-error event', async () => {
    const key = uniqueKey('mysql-complete');
    const pending = request(server.url, { key, body: { key }, delayMs: 300 });
    await server.waitFor((l) => l.type === 'exec' && l.key === key);
    const locker = await lockTable();
    let reply: Reply;
    try {
      // The handler finished; its completion is in flight, waiting on the lock.
      expect(await lockWaiters(1)).toBeGreaterThanOrEqual(1);
      expect(await kill()).toBeGreaterThan(0);
      reply = await pending;
    } finally {
      await unlock(locker);
    }
    expect(reply.status).toBe(201);
    expect(reply.replayed).toBe(false);
    expect(reply.ms).toBeLessThan(300 + STORE_TIMEOUT_MS + SLACK_MS);
    const event = await server.waitFor((l) => l.type === 'event' && l.event === 'store-error' && l.key === key);
    expect(event.operation).toBe('complete');
    await expectRecovered(server, 'mysql-after-complete');
    // The completion died with its connection; the engine retries it in the background
    // while the lease is still its own, so the retry replays instead of running again.
    let retry = await request(server.url, { key, body: { key } });
    for (let i = 0; i < 20 && retry.status === 409; i++) {
      await new Promise((resolve) => setTimeout(resolve, 250));
      retry = await request(server.url, { key, body: { key } });
    }
    expect(retry.status).toBe(201);
    expect(retry.replayed).toBe(true);
    expect(log.count(key)).toBe(1);
    outages.push('MySQL killed during complete');
  }, 20_000);
});
