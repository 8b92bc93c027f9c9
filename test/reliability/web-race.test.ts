/**
 * H9 across processes for the fetch and Hono adapters: 3 server processes on one Redis
 * (the fetch adapter behind a Node bridge, Hono behind @hono/node-server) get the same
 * keys at the same moment, several requests per key on each process. Every key runs its
 * handler exactly once in all processes together, and every client gets that one answer.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execLog, figure, request, startServer, stopAllServers, uniqueKey, type Reply, type ServerProcess } from './fixtures/cluster.js';
import { storeReachable, storeTarget } from './fixtures/stores.js';

const PROCESSES = 3;
const KEYS = 20;
const PER_PROCESS = 4; // concurrent requests per key on each process
const ADAPTERS = ['fetch', 'hono'] as const;
const raced: string[] = [];

const available = await storeReachable('redis');

afterAll(async () => {
  await stopAllServers();
  if (raced.length > 0) figure(`multi-process race: ${raced.join('; ')}`);
});

for (const adapter of ADAPTERS) {
  describe.skipIf(!available)(`${adapter} adapter: multi-process race on Redis`, () => {
    const target = storeTarget('redis');
    const log = execLog();
    let servers: ServerProcess[] = [];

    beforeAll(async () => {
      // A long waitMs: this proves that exactly one runs, not how fast duplicates are answered
      // on a loaded 2-core machine.
      const env = { STORE: target.url, NAMESPACE: target.namespace, EXEC_LOG: log.path, WAIT_MS: 20_000, STORE_TIMEOUT_MS: 10_000, ADAPTER: adapter };
      servers = await Promise.all(Array.from({ length: PROCESSES }, () => startServer(env)));
      // Connected and warm (modules loaded, Redis connection open) before the race starts.
      for (const server of servers) expect((await request(server.url, { key: uniqueKey('warm-up') })).status).toBe(201);
    }, 60_000);
    afterAll(async () => {
      await Promise.all(servers.map((s) => s.stop()));
      await target.dispose().catch(() => {});
      log.dispose();
    });

    it(`H9: ${PROCESSES} processes x ${KEYS} keys x ${PER_PROCESS} concurrent requests per process -> one execution per key, one answer`, async () => {
      const warmUps = log.count();
      const keys = Array.from({ length: KEYS }, () => uniqueKey(`${adapter}-race`));
      const replies = await Promise.all(
        keys.map(async (key) => {
          const sends: Promise<Reply>[] = [];
          for (const server of servers) {
            for (let i = 0; i < PER_PROCESS; i++) {
              sends.push(request(server.url, { key, body: { amount: 7 }, delayMs: 50, timeoutMs: 30_000 }));
            }
          }
          return { key, replies: await Promise.all(sends) };
        }),
      );
      for (const { key, replies: forKey } of replies) {
        expect(log.count(key), `${key}: executions in all processes`).toBe(1);
        expect(forKey.map((r) => r.status)).toEqual(forKey.map(() => 201));
        expect(new Set(forKey.map((r) => r.body)).size, `${key}: one answer`).toBe(1);
        expect(forKey.filter((r) => !r.replayed)).toHaveLength(1);
      }
      // Where the executions ran is reported, not asserted: every process received a share
      // of each key's requests (above), and which one wins the claims depends on scheduling
      // (on a loaded machine one process can win them all).
      const pids = new Set(log.entries().slice(warmUps).map((e) => e.pid));
      raced.push(`${adapter}: ${KEYS * PROCESSES * PER_PROCESS} requests, ${KEYS} executions over ${pids.size} processes`);
    });
  });
}
