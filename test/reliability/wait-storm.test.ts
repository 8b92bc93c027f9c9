/**
 * The duplicate storm, on every store several processes can share: 4 server
 * processes (Node adapter, default options) on one store, 100 keys x 8 identical requests
 * sent at once (2 per key to each server), a 50 ms handler, and CPU-bound load processes
 * started here beside them (each bounded in time, killed afterwards). Every request must
 * get the handler's response or its replay: no 409, no 5xx, and exactly one execution per
 * key. Before duplicates waited without polling, loaded runs answered hundreds of 409s
 * and dozens of 503s on PostgreSQL.
 *
 * Knobs: WAIT_STORM_ROUNDS (default 1) storms per store, WAIT_STORM_LOAD (default 2) load
 * processes, WAIT_STORM_DEBUG=1 prints the timeline of the first 409s.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execLog, figure, request, startServer, stopAllServers, uniqueKey, type Reply, type ServerProcess } from './fixtures/cluster.js';
import { storeReachable, storeTarget, type StoreKind } from './fixtures/stores.js';

const SERVERS = 4;
const KEYS = 100;
const COPIES = 8;
const HANDLER_MS = 50;
const ROUNDS = Number(process.env.WAIT_STORM_ROUNDS ?? 1);
const LOAD_PROCESSES = Number(process.env.WAIT_STORM_LOAD ?? 2);
/** No load process outlives this, even if the test runner dies. */
const LOAD_MAX_MS = 40_000;
const KINDS: StoreKind[] = ['postgres', 'redis', 'sqlite'];
const summaries: string[] = [];

afterAll(async () => {
  await stopAllServers();
  figure(`wait storm (${SERVERS} processes, ${KEYS} keys x ${COPIES}, handler ${HANDLER_MS} ms, ${LOAD_PROCESSES} CPU load processes): ${summaries.join('; ')}`);
});

/** CPU-bound processes spinning until killed (or LOAD_MAX_MS at most). */
function startLoad(count: number): { stop(): Promise<void> } {
  const children: ChildProcess[] = [];
  for (let i = 0; i < count; i++) {
    children.push(
      spawn(process.execPath, ['-e', `const end = Date.now() + ${LOAD_MAX_MS}; let x = 0; while (Date.now() < end) x = (x + Math.sqrt(x + 1)) % 1e9;`], {
        stdio: 'ignore',
      }),
    );
  }
  return {
    async stop() {
      await Promise.all(
        children.map(
          (child) =>
            new Promise<void>((resolve) => {
              if (child.exitCode !== null || child.signalCode !== null) return resolve();
              child.once('exit', () => resolve());
              child.kill('SIGKILL');
            }),
        ),
      );
    },
  };
}

const percentile = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;
};

for (const kind of KINDS) {
  const target = storeTarget(kind);
  const available = await storeReachable(kind);

  describe.skipIf(!available)(`wait storm on ${kind}`, () => {
    const log = execLog();
    const env = { STORE: target.url, NAMESPACE: target.namespace, EXEC_LOG: log.path };
    let servers: ServerProcess[] = [];

    beforeAll(async () => {
      servers = await Promise.all(Array.from({ length: SERVERS }, () => startServer(env, 30_000)));
      // One request per server first: connections, schema and the wake-up subscription are
      // set up outside the storm, as in a running service.
      // (A first claim on a loaded machine can outlast storeTimeoutMs while the connection opens.)
      await Promise.all(
        servers.map(async (s) => {
          for (let attempt = 0; attempt < 10; attempt++) if ((await request(s.url, { key: uniqueKey('warm') })).status === 201) return;
          throw new Error(`server ${s.pid} never answered 201 to a warm-up request`);
        }),
      );
    }, 60_000);
    afterAll(async () => {
      await Promise.all(servers.map((s) => s.stop()));
      await target.dispose().catch(() => {});
      log.dispose();
    });

    it(`H8/H9: ${KEYS} keys x ${COPIES} identical requests over ${SERVERS} processes under CPU load -> no 409, no 5xx, one execution per key (${ROUNDS} round(s))`, async () => {
      for (let round = 0; round < ROUNDS; round++) {
        const keys = Array.from({ length: KEYS }, () => uniqueKey(`storm-${kind}`));
        const cpu = async () => (await Promise.all(servers.map(async (s) => (await request(s.url, { method: 'GET', path: '/__stats', body: undefined })).json().cpuMicros as number))).reduce((a, b) => a + b, 0);
        const cpuBefore = await cpu();
        for (const s of servers) s.lines.length = 0; // count this storm's events only
        const load = startLoad(LOAD_PROCESSES);
        let replies: { key: string; reply: Reply; sentAt: number }[];
        const t0 = Date.now();
        try {
          replies = await Promise.all(
            keys.flatMap((key, k) =>
              Array.from({ length: COPIES }, (_, copy) => {
                const sentAt = Date.now();
                return request(servers[(copy + k) % SERVERS]!.url, { key, body: { order: k }, delayMs: HANDLER_MS, timeoutMs: 20_000 }).then((reply) => ({
                  key,
                  reply,
                  sentAt,
                }));
              }),
            ),
          );
        } finally {
          await load.stop();
        }
        const serverCpuMs = ((await cpu()) - cpuBefore) / 1000;
        const byStatus: Record<number, number> = {};
        for (const { reply } of replies) byStatus[reply.status] = (byStatus[reply.status] ?? 0) + 1;
        const executions = log.entries().filter((e) => keys.includes(e.key));
        const ms = replies.map((r) => r.reply.ms);
        summaries.push(
          `${kind} round ${round + 1}: ${JSON.stringify(byStatus)}, ${executions.length} executions, answer p50 ${percentile(ms, 50).toFixed(0)} ms, p99 ${percentile(ms, 99).toFixed(0)} ms, server CPU ${serverCpuMs.toFixed(0)} ms`,
        );
        const events: Record<string, number> = {};
        for (const s of servers) {
          for (const e of s.events()) {
            const name = `${e.event}${e.operation ? `:${e.operation}` : ''}${e.error ? `:${String(e.error).slice(0, 60)}` : ''}`;
            events[name] = (events[name] ?? 0) + 1;
          }
        }
        if (Object.keys(events).length > 0) summaries.push(`${kind} events ${JSON.stringify(events)}`);
        if (process.env.WAIT_STORM_DEBUG) {
          const execAt = new Map(executions.map((e) => [e.key, e.t - t0]));
          for (const r of replies.filter((x) => x.reply.status === 409).slice(0, 8)) {
            const owner = replies.find((x) => x.key === r.key && !x.reply.replayed && x.reply.status === 201);
            console.log(
              `409 key exec@${execAt.get(r.key)} sent@${(r.sentAt - t0).toFixed(0)} answered@${(r.sentAt - t0 + r.reply.ms).toFixed(0)} owner answered@${owner ? (owner.sentAt - t0 + owner.reply.ms).toFixed(0) : '-'}`,
            );
          }
        }
        const problems = replies.filter((r) => r.reply.status !== 201).slice(0, 3).map((r) => `${r.reply.status} ${r.reply.body}`);
        expect(problems, `statuses ${JSON.stringify(byStatus)}`).toEqual([]);
        expect(executions).toHaveLength(KEYS);
        expect(new Set(executions.map((e) => e.key)).size).toBe(KEYS);
        // Every answer for a key is the one execution's response (first or replay).
        for (const key of keys) {
          const bodies = new Set(replies.filter((r) => r.key === key).map((r) => r.reply.json().id as string));
          expect(bodies.size).toBe(1);
        }
        expect(replies.filter((r) => r.reply.replayed)).toHaveLength(KEYS * (COPIES - 1));
      }
    }, 60_000 * ROUNDS);
  });
}
