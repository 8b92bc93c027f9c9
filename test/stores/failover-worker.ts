/**
 * One process of the Redis failover race (test/stores/redis-cluster.test.ts).
 * argv: JSON { url, runId, lanes, leaseMs, waitForReplicas? }. Prints "ready", waits for
 * "go", then works through keys key-0, key-1, … in `lanes` parallel lanes until "stop":
 * every process walks the same keys, so each key is contended by all of them. Per key it
 * behaves like a client with retries: claim; when it wins, "run the handler" (recorded)
 * and complete (retrying the completion while its lease lasts); when another owner holds
 * the key, poll; on a store error, retry. While it runs it prints "settled <n>" lines (the
 * keys it is done with so far), so that the round can wait for progress instead of a
 * fixed time; it ends with one JSON line with what it saw.
 */
import { randomUUID } from 'node:crypto';
import { redisStore, type WaitForReplicas } from '../../drivers/redis.js';

interface Config {
  url: string;
  runId: string;
  lanes: number;
  leaseMs: number;
  waitForReplicas?: WaitForReplicas;
}

const config = JSON.parse(process.argv[2]!) as Config;
const store = redisStore({ url: config.url, timeoutMs: 1000, ...(config.waitForReplicas ? { waitForReplicas: config.waitForReplicas } : {}) });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const response = { status: 200, headers: {}, body: new Uint8Array(Buffer.from('done')) };

const executions: { key: number; token: string; at: number }[] = [];
const errors: { at: number; operation: string; message: string }[] = [];
/** Claim-to-completed time of each execution that met no error, in ms. */
const latencies: number[] = [];
let stuck = 0;
/** Keys this process is done with: completed by it, or seen completed by another. */
let settled = 0;
let nextKey = 0;
let stopping = false;
/** What each lane is doing, for the "dump" command (a round that waited too long asks). */
const doing: { lane: number; key: number; operation: string; since: number }[] = [];
const track = <T>(lane: number, key: number, operation: string, call: Promise<T>): Promise<T> => {
  const entry = { lane, key, operation, since: Date.now() };
  doing[lane] = entry;
  return call.finally(() => {
    if (doing[lane] === entry) doing[lane] = { ...entry, operation: `after ${operation}`, since: Date.now() };
  });
};

async function settle(lane: number, key: number): Promise<void> {
  const id = `${config.runId}:key-${key}`;
  // Give up on a key after two leases: a claim that landed but whose reply was lost holds
  // the key until its lease ends, and then another process takes it over.
  const deadline = Date.now() + 2 * config.leaseMs + 2000;
  while (Date.now() < deadline) {
    const token = randomUUID();
    const started = performance.now();
    let result;
    try {
      result = await track(lane, key, 'claim', store.claim(id, { token, fingerprint: 'f', createdAt: Date.now() }, config.leaseMs));
    } catch (error) {
      errors.push({ at: Date.now(), operation: 'claim', message: (error as Error).message });
      await sleep(50);
      continue;
    }
    if (!result.claimed) {
      if (result.record.state === 'completed') {
        settled++;
        return;
      }
      await sleep(20);
      continue;
    }
    executions.push({ key, token, at: Date.now() });
    let clean = true;
    for (;;) {
      try {
        await track(lane, key, 'complete', store.complete(id, token, response, 60_000));
        break; // stored, or refused because the claim is gone: either way nothing to redo
      } catch (error) {
        clean = false;
        errors.push({ at: Date.now(), operation: 'complete', message: (error as Error).message });
        // A completion written on a primary but not acknowledged by its replicas can still
        // be read back; once it is there (or the lease is over) stop retrying.
        const record = await track(lane, key, 'get', store.get(id)).catch(() => undefined);
        if (record?.state === 'completed' && record.token === token) break;
        if (Date.now() > deadline) break;
        await sleep(50);
      }
    }
    if (clean) latencies.push(performance.now() - started);
    settled++;
    return;
  }
  stuck++;
}

async function lane(n: number): Promise<void> {
  while (!stopping) await settle(n, nextKey++);
  doing[n] = { lane: n, key: -1, operation: 'done', since: Date.now() };
}

// Connect before the race. The 1 s call bound is for the failover; a first connection on a
// busy machine (sentinel, then primary) may take longer, so the warm-up tries again.
for (let attempt = 1; ; attempt++) {
  try {
    await store.get(`${config.runId}:warm-up`);
    break;
  } catch (error) {
    if (attempt === 20) throw error;
  }
}
process.stdout.write('ready\n');
await new Promise<void>((resolve) => {
  process.stdin.on('data', (chunk) => {
    const text = String(chunk);
    if (text.includes('go')) resolve();
    if (text.includes('stop')) stopping = true;
    if (text.includes('dump')) {
      const now = Date.now();
      process.stderr.write(`lanes: ${JSON.stringify(doing.map((d) => ({ ...d, forMs: now - d.since })))}; active: ${JSON.stringify(process.getActiveResourcesInfo())}\n`);
    }
  });
});
let reported = 0;
const progress = setInterval(() => {
  if (settled === reported) return;
  reported = settled;
  process.stdout.write(`settled ${settled}\n`);
}, 100);
await Promise.all(Array.from({ length: config.lanes }, (_, n) => lane(n)));
clearInterval(progress);
await store.close();
process.stdout.write(`${JSON.stringify({ pid: process.pid, executions, errors, latencies, stuck })}\n`);
process.stdin.destroy();
// A closed store leaves nothing behind: if the process is still alive 5 s later, say what
// holds it open and fail, rather than leave the test to time out with no clue.
setTimeout(() => {
  process.stderr.write(`the process did not exit after store.close(); still active: ${JSON.stringify(process.getActiveResourcesInfo())}\n`);
  process.exit(3);
}, 5000).unref();
