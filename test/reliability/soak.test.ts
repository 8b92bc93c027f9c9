/**
 * Soak: 60 s of mixed traffic — new keys, replays, duplicate storms
 * across both servers, mismatches — on two server processes sharing Redis, and at the
 * same time on two sharing PostgreSQL. Executions must equal unique keys, no request
 * may fail, and at the end the servers' memory and active handles (timers, sockets)
 * must be back near their warm baseline: no leak from waiters, timers or listeners.
 *
 * RELIABILITY_SOAK_MS shortens the run for local iterations; CI runs the full 60 s.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { execLog, figure, request, sleep, startServer, stopAllServers, type Reply, type ServerProcess } from './fixtures/cluster.js';
import { storeReachable, storeTarget, type StoreKind } from './fixtures/stores.js';

const SOAK_MS = Number(process.env.RELIABILITY_SOAK_MS ?? 60_000);
const WARM_UP_MS = Math.min(5000, SOAK_MS / 6);
const WORKERS_PER_STORE = 6;
const STORM_SIZE = 8;

interface Stats {
  pid: number;
  rss: number;
  heapUsed: number;
  resources: string[];
}

interface SoakResult {
  kind: StoreKind;
  requests: number;
  byStatus: Record<number, number>;
  uniqueKeys: number;
  executions: number;
  storms: number;
  replaysChecked: number;
  mismatches: number;
  /** 503s (a store call slower than storeTimeoutMs on a loaded machine), retried like a client would. */
  retried: number;
  failures: string[];
  memory: { pid: number; warm: Stats; half: Stats; end: Stats }[];
}

const stats = async (server: ServerProcess): Promise<Stats> =>
  (await request(server.url, { method: 'GET', path: '/__stats', body: '' })).json() as Stats;

const count = (list: string[]) => list.reduce<Record<string, number>>((acc, r) => ((acc[r] = (acc[r] ?? 0) + 1), acc), {});

async function soak(kind: StoreKind): Promise<SoakResult> {
  const target = storeTarget(kind);
  const log = execLog();
  const env = { STORE: target.url, NAMESPACE: target.namespace, EXEC_LOG: log.path, LEASE_MS: 5000, WAIT_MS: 2000 };
  const servers = await Promise.all([startServer(env), startServer(env)]);
  const result: SoakResult = {
    kind,
    requests: 0,
    byStatus: {},
    uniqueKeys: 0,
    executions: 0,
    storms: 0,
    replaysChecked: 0,
    mismatches: 0,
    retried: 0,
    failures: [],
    memory: [],
  };
  const completed: { key: string; body: unknown; response: string }[] = [];
  const keys = new Set<string>();
  const pick = <T>(list: readonly T[]): T => list[Math.floor(Math.random() * list.length)]!;
  const fail = (what: string) => {
    if (result.failures.length < 20) result.failures.push(what);
  };
  const send = async (server: ServerProcess, key: string, body: unknown, delayMs = 0): Promise<Reply | undefined> => {
    result.requests++;
    try {
      const reply = await request(server.url, { key, body, delayMs, timeoutMs: 10_000 });
      result.byStatus[reply.status] = (result.byStatus[reply.status] ?? 0) + 1;
      return reply;
    } catch (error) {
      fail(`${key}: ${(error as Error).message}`);
      return undefined;
    }
  };

  /**
   * Send until the answer is not 503, as a client honouring Retry-After would (sooner, to
   * keep the test short). A 503 never ran the handler (H16), so the key stays unused.
   */
  const sendRetrying = async (server: ServerProcess, key: string, body: unknown, delayMs = 0) => {
    for (let attempt = 0; ; attempt++) {
      const reply = await send(server, key, body, delayMs);
      if (reply?.status !== 503 || attempt === 20) return reply;
      result.retried++;
      await sleep(100);
    }
  };
  const newKey = async () => {
    const key = `soak-${kind}-${randomUUID()}`;
    const body = { amount: Math.floor(Math.random() * 1000), key };
    keys.add(key);
    const reply = await sendRetrying(pick(servers), key, body, Math.floor(Math.random() * 20));
    // A 503 held no claim, so the first 201 after retries is this key's only execution.
    if (reply?.status === 201 && !reply.replayed) completed.push({ key, body, response: reply.body });
    else fail(`new key ${key}: ${reply?.status} replayed=${reply?.replayed} ${reply?.body}`);
  };
  const replay = async () => {
    if (completed.length === 0) return newKey();
    const { key, body, response } = pick(completed);
    const reply = await sendRetrying(pick(servers), key, body);
    if (reply?.status === 201 && reply.replayed && reply.body === response) result.replaysChecked++;
    else fail(`replay ${key}: ${reply?.status} replayed=${reply?.replayed}`);
  };
  const storm = async () => {
    const key = `soak-storm-${kind}-${randomUUID()}`;
    const body = { storm: key };
    keys.add(key);
    result.storms++;
    // Duplicates reach both processes at once while the first is still running (H8, H9).
    const replies = await Promise.all(Array.from({ length: STORM_SIZE }, (_, i) => send(servers[i % 2]!, key, body, 50)));
    // Had every request of the storm met a slow store (503), the client retries once more.
    if (replies.every((r) => r?.status === 503)) replies.push(await sendRetrying(servers[0]!, key, body, 50));
    const fresh = replies.filter((r) => r?.status === 201 && !r.replayed);
    if (fresh.length !== 1) fail(`storm ${key}: ${fresh.length} fresh executions`);
    for (const r of replies) {
      if (r && r.status === 201 && r.replayed && r.body !== fresh[0]?.body) fail(`storm ${key}: replay differs`);
      if (r && r.status !== 201 && r.status !== 409 && r.status !== 503) fail(`storm ${key}: status ${r.status}`);
      if (r?.status === 503) result.retried++;
    }
    if (fresh[0]) completed.push({ key, body, response: fresh[0].body });
  };
  const mismatch = async () => {
    if (completed.length === 0) return newKey();
    const { key } = pick(completed);
    const reply = await sendRetrying(pick(servers), key, { different: randomUUID() });
    if (reply?.status === 422 && reply.json().code === 'key-reused') result.mismatches++;
    else fail(`mismatch ${key}: ${reply?.status}`);
  };
  const operations = [newKey, newKey, newKey, newKey, newKey, replay, replay, storm, mismatch, mismatch];

  const started = performance.now();
  const deadline = started + SOAK_MS;
  let warm: Stats[] | undefined;
  let half: Stats[] | undefined;
  const samples = (async () => {
    await sleep(WARM_UP_MS);
    warm = await Promise.all(servers.map(stats));
    await sleep(SOAK_MS / 2 - WARM_UP_MS);
    half = await Promise.all(servers.map(stats));
  })();
  try {
    await Promise.all(
      Array.from({ length: WORKERS_PER_STORE }, async () => {
        while (performance.now() < deadline) {
          await pick(operations)();
          await sleep(2); // leave CPU for the servers and the other suites
        }
      }),
    );
    await samples;
    await sleep(300); // let the last completions and timers settle
    const end = await Promise.all(servers.map(stats));
    result.memory = servers.map((s, i) => ({ pid: s.pid, warm: warm![i]!, half: half![i]!, end: end[i]! }));
    const entries = log.entries();
    result.executions = entries.length;
    result.uniqueKeys = keys.size;
    const perKey = count(entries.map((e) => e.key));
    for (const [key, n] of Object.entries(perKey)) if (n !== 1) fail(`${key} executed ${n} times`);
    for (const key of keys) if (!perKey[key]) fail(`${key} never executed`);
    for (const s of servers) if (!s.alive()) fail(`server ${s.pid} died`);
    return result;
  } finally {
    await Promise.all(servers.map((s) => s.stop()));
    await target.dispose().catch(() => {});
    log.dispose();
  }
}

const kinds: StoreKind[] = [];
for (const kind of ['redis', 'postgres'] as const) if (await storeReachable(kind)) kinds.push(kind);

afterAll(async () => {
  await stopAllServers();
});

describe.skipIf(kinds.length === 0)('soak', () => {
  it(`H6–H9/H14/H17: ${SOAK_MS / 1000} s of mixed traffic on 2 processes per store (${kinds.join(' and ')} at once): executions = unique keys, memory and handles stable`, async () => {
    const results = await Promise.all(kinds.map(soak));
    const MB = 1024 * 1024;
    const mb = (bytes: number) => (bytes / MB).toFixed(1);
    for (const r of results) {
      const statuses = Object.entries(r.byStatus)
        .map(([s, n]) => `${s}×${n}`)
        .join(' ');
      figure(
        `soak ${r.kind}: ${SOAK_MS / 1000} s, ${r.requests} requests (${statuses}), ${r.executions} executions for ${r.uniqueKeys} unique keys, ` +
          `${r.storms} storms of ${STORM_SIZE}, ${r.replaysChecked} replays checked, ${r.mismatches} mismatches refused, ` +
          `${r.retried} slow-store 503s retried`,
      );
      for (const m of r.memory) {
        const timers = (s: Stats) => s.resources.filter((x) => x === 'Timeout').length;
        figure(
          `soak ${r.kind} server ${m.pid}: RSS ${mb(m.warm.rss)} -> ${mb(m.half.rss)} -> ${mb(m.end.rss)} MB (${WARM_UP_MS / 1000} s, ${SOAK_MS / 2000} s, end), ` +
            `heap after GC ${mb(m.warm.heapUsed)} -> ${mb(m.half.heapUsed)} -> ${mb(m.end.heapUsed)} MB, ` +
            `active handles ${m.warm.resources.length} -> ${m.end.resources.length} (timers ${timers(m.warm)} -> ${timers(m.end)})`,
        );
      }
    }
    for (const r of results) {
      expect(r.failures, `${r.kind} failures`).toEqual([]);
      expect(r.executions, `${r.kind}: executions = unique keys`).toBe(r.uniqueKeys);
      expect(r.uniqueKeys).toBeGreaterThan(100);
      expect(r.storms).toBeGreaterThan(5);
      for (const status of Object.keys(r.byStatus).map(Number)) expect([201, 409, 422, 503]).toContain(status);
      // A 503 is fail-closed behaviour under load, not an outage: it must stay rare.
      expect(r.retried).toBeLessThan(r.requests / 100);
      for (const m of r.memory) {
        // Records live in the store, not the server: after GC the heap is back near its
        // warm size, and nothing (lease timers, store-call timers, pollers, sockets) piles up.
        expect(m.end.heapUsed - m.warm.heapUsed, `${r.kind} heap growth`).toBeLessThan(16 * MB);
        expect(m.end.heapUsed - m.half.heapUsed, `${r.kind} heap growth in the second half`).toBeLessThan(8 * MB);
        // RSS settles once the allocator has grown to the load: flat over the second half.
        expect(m.end.rss - m.half.rss, `${r.kind} RSS growth in the second half`).toBeLessThan(32 * MB);
        expect(m.end.resources.length, `${r.kind} active handles`).toBeLessThanOrEqual(m.warm.resources.length + 4);
      }
    }
  }, SOAK_MS + 60_000);
});
