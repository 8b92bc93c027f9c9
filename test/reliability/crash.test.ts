/**
 * Crash recovery on every store shared across processes:
 * - a server killed with SIGKILL mid-handler: duplicates get 409 until its lease ends,
 *   then exactly one re-execution, then replays (H8, H9, H17);
 * - a server paused past its lease (SIGSTOP / SIGCONT): another takes over and executes;
 *   the paused one's completion is refused by token, its own client still gets its
 *   response, and it emits `lease-lost` (H17, H18).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  execLog,
  figure,
  request,
  sleep,
  startServer,
  stopAllServers,
  uniqueKey,
  type Reply,
  type ServerProcess,
} from './fixtures/cluster.js';
import { storeReachable, storeTarget, type StoreKind } from './fixtures/stores.js';

// Short for a fast suite, long enough that a loaded 2-core CI machine still shows the 409s.
const LEASE_MS = 3000;
const CRASHES_PER_STORE = 2;
const KINDS: StoreKind[] = ['redis', 'postgres', 'sqlite', 'mysql', 'dynamodb'];
const survived = { crashes: 0, pauses: 0 };

afterAll(async () => {
  await stopAllServers();
  figure(`crash recovery: ${survived.crashes} SIGKILLs mid-handler and ${survived.pauses} SIGSTOP/SIGCONT stale owners survived (leaseMs ${LEASE_MS})`);
});

for (const kind of KINDS) {
  const available = await storeReachable(kind);
  const target = storeTarget(kind);

  describe.skipIf(!available)(`crash recovery on ${kind}`, () => {
    const log = execLog();
    const env = { STORE: target.url, NAMESPACE: target.namespace, EXEC_LOG: log.path, LEASE_MS, WAIT_MS: 0, STORE_TIMEOUT_MS: 2000 };
    let b: ServerProcess;
    let c: ServerProcess;

    beforeAll(async () => {
      [b, c] = await Promise.all([startServer(env), startServer(env)]);
    }, 30_000);
    afterAll(async () => {
      await Promise.all([b?.stop(), c?.stop()]);
      await target.dispose().catch(() => {});
      log.dispose();
    });

    it(`H8/H9/H17: SIGKILL mid-handler -> duplicates get 409 until the lease ends, then exactly one re-execution (${CRASHES_PER_STORE} crashes)`, async () => {
      for (let round = 0; round < CRASHES_PER_STORE; round++) {
        const a = await startServer(env);
        const key = uniqueKey(`crash-${kind}`);
        const body = { amount: 100, round };
        const doomed = request(a.url, { key, body, delayMs: 60_000 }).then(
          () => 'answered',
          () => 'connection lost',
        );
        await a.waitFor((l) => l.type === 'exec' && l.key === key);
        process.kill(a.pid, 'SIGKILL');
        await a.exited;
        const killedAt = performance.now();
        expect(await doomed).toBe('connection lost');

        // Two duplicates at a time, one to each surviving server, until one executes.
        const rounds: (Reply & { at: number })[][] = [];
        let winner: (Reply & { at: number }) | undefined;
        while (!winner && performance.now() - killedAt < LEASE_MS + 5000) {
          const round2 = await Promise.all(
            [b, c].map(async (s) => {
              const reply = await request(s.url, { key, body });
              return { ...reply, at: performance.now() - killedAt };
            }),
          );
          rounds.push(round2);
          winner = round2.find((r) => r.status === 201 && !r.replayed);
          if (!winner) await sleep(50);
        }
        expect(winner, 'a duplicate executed once the lease ended').toBeDefined();
        // Until then every duplicate was refused with 409 (H8), with Retry-After.
        const before = rounds.slice(0, -1).flat();
        expect(before.length).toBeGreaterThan(0);
        for (const r of before) {
          expect(r.status).toBe(409);
          expect(r.json().code).toBe('request-in-progress');
          expect(r.headers['retry-after']).toBe('1');
        }
        // In the winner's round the other duplicate lost the claim race (409) or came
        // after the completion (replay of the same response).
        for (const r of rounds.at(-1)!) {
          if (r === winner) continue;
          if (r.status === 201) {
            expect(r.replayed).toBe(true);
            expect(r.body).toBe(winner!.body);
          } else expect(r.status).toBe(409);
        }
        // The lease was renewed at most leaseMs/3 before the kill, and not after it.
        expect(winner!.at).toBeGreaterThan((2 * LEASE_MS) / 3 - 250);
        expect(winner!.at).toBeLessThan(LEASE_MS + 3000);

        // A storm of duplicates on both servers now: all replay the re-execution.
        const storm = await Promise.all(Array.from({ length: 8 }, (_, i) => request([b, c][i % 2]!.url, { key, body })));
        for (const r of storm) {
          expect(r.status).toBe(201);
          expect(r.replayed).toBe(true);
          expect(r.body).toBe(winner!.body);
        }
        const runs = log.entries().filter((e) => e.key === key);
        expect(runs.map((e) => e.pid)).toEqual([a.pid, winner!.json().pid]);
        survived.crashes++;
      }
      expect(b.alive() && c.alive()).toBe(true);
    }, 60_000);

    it('H17/H18: a server paused past its lease loses the key; its late completion is refused by token, its client still gets its answer', async () => {
      const a = await startServer(env);
      try {
        const key = uniqueKey(`pause-${kind}`);
        const body = { amount: 7 };
        const slow = request(a.url, { key, body, delayMs: 400, timeoutMs: 20_000 });
        slow.catch(() => {}); // awaited below; this only keeps an early failure from going unhandled
        await a.waitFor((l) => l.type === 'exec' && l.key === key);
        process.kill(a.pid, 'SIGSTOP');
        const stoppedAt = performance.now();
        try {
          const early = await request(b.url, { key, body });
          expect(early.status).toBe(409);
          // The paused owner cannot renew: after at most one lease the key is free.
          await sleep(LEASE_MS + 300 - (performance.now() - stoppedAt));
          const takeover = await request(b.url, { key, body });
          expect(takeover.status).toBe(201);
          expect(takeover.replayed).toBe(false);
          expect(takeover.json().pid).toBe(b.pid);

          process.kill(a.pid, 'SIGCONT');
          const late = await slow;
          // Its own client still gets the response its handler produced (not a replay).
          expect(late.status).toBe(201);
          expect(late.replayed).toBe(false);
          expect(late.json().pid).toBe(a.pid);
          const lost = await a.waitFor((l) => l.type === 'event' && l.event === 'lease-lost' && l.key === key, 5000);
          expect(['complete', 'extend']).toContain(lost.operation);

          // The record holds the new owner's response: the late write was refused (H18).
          for (const s of [a, b, c]) {
            const replay = await request(s.url, { key, body });
            expect(replay.status).toBe(201);
            expect(replay.replayed).toBe(true);
            expect(replay.body).toBe(takeover.body);
          }
          expect(log.entries().filter((e) => e.key === key).map((e) => e.pid)).toEqual([a.pid, b.pid]);
          survived.pauses++;
        } finally {
          process.kill(a.pid, 'SIGCONT');
        }
      } finally {
        await a.stop();
      }
    }, 30_000);
  });
}
