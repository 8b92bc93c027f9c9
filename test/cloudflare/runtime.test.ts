/**
 * An application's order route (the fetch adapter) on workerd, in two isolates sharing one
 * Durable Object namespace and one D1 database, as Workers on Cloudflare share them:
 * duplicates sent to both at once run the handler once (with CPU-bound processes competing
 * for the cores); a workerd killed and started again on the same storage still replays;
 * a store that hangs answers 503 in every request, not only the first.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, send, sendAndAbort, type Reply } from '../adapters/client.js';
import { buildHarness, startHarness } from './harness-runtime.js';
import { scratchDir, workerdAvailable, type Workerd } from './workerd.js';

const run = workerdAvailable();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function executions(workerd: Workerd, socket: string): Promise<number> {
  return ((await (await fetch(`${workerd.url(socket)}/count`)).json()) as { executions: number }).executions;
}

/** Processes that keep the cores busy for at most `ms` (each ends by itself, and is killed at the end). */
function burnCpu(count: number, ms: number): ChildProcess[] {
  return Array.from({ length: count }, () =>
    spawn(process.execPath, ['-e', `const end = Date.now() + ${ms}; while (Date.now() < end) {}`], { stdio: 'ignore' }),
  );
}

const order = (key: string, kind: string, amount = 1200) => ({ path: `/orders?store=${kind}`, key, body: { amount } });

describe.skipIf(!run)('an order route on workerd, two isolates on one store', () => {
  const scratch = scratchDir('cf-runtime');
  let workerd: Workerd;
  beforeAll(async () => {
    await buildHarness(scratch.dir);
    workerd = await startHarness(scratch.dir);
  }, 60_000);
  afterAll(async () => {
    await workerd?.stop();
    scratch.remove();
  });

  for (const kind of ['do', 'd1']) {
    it(`H9: 3 keys × 40 simultaneous duplicates split over both isolates run the handler once per key (${kind}, cores busy)`, async () => {
      const burners = burnCpu(2, 20_000);
      try {
        const before = (await executions(workerd, 'edge-a')) + (await executions(workerd, 'edge-b'));
        const keys = Array.from({ length: 3 }, () => `race-${kind}-${randomUUID()}`);
        const replies = await Promise.all(
          keys.map((key) =>
            Promise.all(Array.from({ length: 40 }, (_, i) => send(workerd.url(i % 2 === 0 ? 'edge-a' : 'edge-b'), order(key, kind)))),
          ),
        );
        const after = (await executions(workerd, 'edge-a')) + (await executions(workerd, 'edge-b'));
        expect(after - before).toBe(3);
        for (const forKey of replies) {
          expect(forKey.map((r) => r.status)).toEqual(Array(40).fill(201));
          expect(new Set(forKey.map((r) => r.text)).size).toBe(1);
          expect(forKey.filter((r) => r.headers['idempotent-replayed'] === undefined)).toHaveLength(1);
        }
      } finally {
        for (const burner of burners) burner.kill('SIGKILL');
      }
    }, 60_000);
  }

  it('H16 S6: a store that hangs answers 503 within storeTimeoutMs in every request, not only the first', async () => {
    for (let i = 0; i < 3; i++) {
      const started = Date.now();
      const reply = await send(workerd.url(i % 2 === 0 ? 'edge-a' : 'edge-b'), order(`hang-${randomUUID()}`, 'hanging'));
      expect(reply.status, reply.text).toBe(503);
      expect(Date.now() - started).toBeLessThan(2000);
    }
  });

  for (const [adapter, path] of [['fetch', '/stream?store=do'], ['Hono', '/hono/stream']] as const) it(`H12 H13 (${adapter}): a client gone in the middle of a streamed answer: the claim still settles (waitUntil), so the retry gets 409 and the handler never runs twice`, async () => {
    const key = `gone-${randomUUID()}`;
    const request = { path, key, body: { amount: 5 } };
    const before = await executions(workerd, 'edge-a');
    await sendAndAbort(workerd.url('edge-a'), request, 250); // after the first part, before the last
    await sleep(1000); // the rest of the stream: 450 ms more
    const started = Date.now();
    const retry = await send(workerd.url('edge-a'), request);
    expectProblem(retry, 409, 'response-not-replayable');
    expect(Date.now() - started, 'answered at once, not after the lease').toBeLessThan(2000);
    expect((await executions(workerd, 'edge-a')) - before).toBe(1);
  });
});

describe.skipIf(!run)('workerd killed and started again on the same storage', () => {
  const scratch = scratchDir('cf-restart');
  let workerd: Workerd | undefined;
  beforeAll(async () => {
    await buildHarness(scratch.dir);
  }, 60_000);
  afterAll(async () => {
    await workerd?.stop();
    scratch.remove();
  });

  it('a completed request is still replayed after the restart (Durable Objects and D1), and the handler does not run', async () => {
    workerd = await startHarness(scratch.dir);
    const firsts: Record<string, Reply> = {};
    for (const kind of ['do', 'd1']) {
      firsts[kind] = await send(workerd.url('edge-a'), order(`restart-${kind}`, kind));
      expect(firsts[kind]!.status).toBe(201);
    }
    await workerd.stop('SIGKILL'); // as a crash: nothing flushed on the way out
    workerd = await startHarness(scratch.dir);
    for (const kind of ['do', 'd1']) {
      const retry = await send(workerd.url('edge-b'), order(`restart-${kind}`, kind));
      expect(retry.status).toBe(201);
      expect(retry.headers['idempotent-replayed']).toBe('true');
      expect(retry.body.equals(firsts[kind]!.body)).toBe(true);
      expect(retry.headers.location).toBe(firsts[kind]!.headers.location);
    }
    expect((await executions(workerd, 'edge-a')) + (await executions(workerd, 'edge-b'))).toBe(0);
  }, 60_000);

  it('H17: a claim whose workerd was killed mid-handler frees after its lease, and the retry runs', async () => {
    workerd ??= await startHarness(scratch.dir);
    const key = `crash-${randomUUID()}`;
    const before = await executions(workerd, 'edge-a');
    const inFlight = send(workerd.url('edge-a'), order(key, 'do')).catch(() => undefined);
    // Killed only once the handler runs (so the key is claimed), however slow a loaded machine is.
    for (const deadline = Date.now() + 20_000; (await executions(workerd, 'edge-a')) === before; ) {
      if (Date.now() > deadline) throw new Error('the handler never started');
      await sleep(10);
    }
    await workerd.stop('SIGKILL');
    await inFlight;
    const killedAt = Date.now();
    workerd = await startHarness(scratch.dir);
    const retry = await send(workerd.url('edge-b'), order(key, 'do')); // waits (waitMs: 8 s) for the 5 s lease
    expect(retry.status).toBe(201);
    expect(retry.headers['idempotent-replayed']).toBeUndefined();
    expect(Date.now() - killedAt).toBeGreaterThan(4000);
    expect(await executions(workerd, 'edge-b')).toBe(1);
  }, 60_000);
});
