/**
 * How duplicates waitMs: two server processes on one store, an owner request on
 * the first, then duplicates of it on both while its handler runs. Counted per waiting
 * duplicate: the store operations its process makes (every store method call, like a
 * round trip; the owner's own claim and complete are taken out), and the delay from the
 * owner's answer (sent once its record is stored) to the duplicate's answer, as seen by
 * this process. Runs for several handler durations: the operations must not grow with it.
 * @module
 */
import { randomUUID } from 'node:crypto';
import { ORDER_BODY, startServer, type ServerEnv, type ServerHandle } from './lib.js';

export interface WaitingRow {
  store: string;
  handlerMs: number;
  keys: number;
  /** Store operations per duplicate waiting in the other process (one duplicate per key there). */
  opsPerCrossDuplicate: number;
  /** Their breakdown per duplicate, by operation. */
  crossBreakdown: Record<string, number>;
  /** Store operations per duplicate waiting in the owner's process. */
  opsPerLocalDuplicate: number;
  /** Owner's answer -> the other process's duplicate's answer, ms. */
  delayP50: number;
  delayP95: number;
  /** Keys with an answer other than 201 (a 409 or 5xx): a problem. */
  bad: number;
  /** Keys whose duplicates came too late or too early to wait (not counted in the figures). */
  unordered: number;
}

interface Answer {
  status: number;
  replayed: boolean;
  at: number;
  /** From sending to the answer. */
  waitedMs: number;
}

async function post(url: string, key: string, delayMs: number): Promise<Answer> {
  const sent = performance.now();
  const res = await fetch(`${url}/orders`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key, 'x-delay-ms': String(delayMs) },
    body: ORDER_BODY,
  });
  await res.arrayBuffer();
  const at = performance.now();
  return { status: res.status, replayed: res.headers.get('idempotent-replayed') === 'true', at, waitedMs: at - sent };
}

const opsOf = async (server: ServerHandle) => ((await server.stats()) as unknown as { storeOps?: Record<string, number> }).storeOps ?? {};

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** One store: both processes, every handler duration. */
export async function measureWaiting(o: {
  store: string;
  url: string;
  namespace: string;
  durations: number[];
  keys: number;
  batch: number;
  log: (line: string) => void;
}): Promise<WaitingRow[]> {
  const env: ServerEnv = { ADAPTER: 'node', IMPL: 'ours', STORE_URL: o.url, NAMESPACE: o.namespace, COUNT_OPS: '1', COUNT_KEYS: '1' };
  const [owner, other] = await Promise.all([startServer(env), startServer(env)]);
  const rows: WaitingRow[] = [];
  try {
    // Warm-up: connections, schema, scripts and the wake-up subscription of both processes.
    for (let i = 0; i < 3; i++) {
      const key = `warm-${randomUUID()}`;
      const first = post(owner.url, key, 100);
      await sleep(30);
      await Promise.all([first, post(other.url, key, 0), post(owner.url, key, 0)]);
    }
    for (const handlerMs of o.durations) {
      // Durations shorter than the time to see the owner start would leave nothing to wait for.
      const before = { owner: await opsOf(owner), other: await opsOf(other) };
      const delays: number[] = [];
      let bad = 0;
      let unordered = 0;
      for (let done = 0; done < o.keys; done += o.batch) {
        const n = Math.min(o.batch, o.keys - done);
        await Promise.all(
          Array.from({ length: n }, async () => {
            const key = `wait-${randomUUID()}`;
            const first = post(owner.url, key, handlerMs);
            // The duplicates go once the owner's handler runs (it claimed the key).
            while ((await owner.stats(key)).keyedExecutions === 0) await sleep(2);
            const [a, cross, local] = await Promise.all([first, post(other.url, key, 0), post(owner.url, key, 0)]);
            if (a.status !== 201 || cross.status !== 201 || local.status !== 201) bad++;
            else if (a.replayed || !cross.replayed || !local.replayed || cross.waitedMs < handlerMs / 4) unordered++;
            else delays.push(cross.at - a.at);
          }),
        );
      }
      const after = { owner: await opsOf(owner), other: await opsOf(other) };
      const delta = (b: Record<string, number>, a: Record<string, number>) => {
        const out: Record<string, number> = {};
        for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) {
          const d = (a[k] ?? 0) - (b[k] ?? 0);
          if (d !== 0) out[k] = d;
        }
        return out;
      };
      const cross = delta(before.other, after.other);
      const local = delta(before.owner, after.owner);
      const total = (r: Record<string, number>) => Object.values(r).reduce((s, v) => s + v, 0);
      // The owner's process also made the owner's claim and complete (2 per key).
      const row: WaitingRow = {
        store: o.store,
        handlerMs,
        keys: o.keys,
        opsPerCrossDuplicate: total(cross) / o.keys,
        crossBreakdown: Object.fromEntries(Object.entries(cross).map(([k, v]) => [k, v / o.keys])),
        opsPerLocalDuplicate: (total(local) - 2 * o.keys) / o.keys,
        delayP50: percentile(delays, 50),
        delayP95: percentile(delays, 95),
        bad,
        unordered,
      };
      rows.push(row);
      o.log(
        `  ${o.store.padEnd(9)} handler ${String(handlerMs).padStart(5)} ms: store ops per waiting duplicate ${row.opsPerCrossDuplicate.toFixed(2)} (other process: ${Object.entries(
          row.crossBreakdown,
        )
          .map(([k, v]) => `${k} ${v.toFixed(2)}`)
          .join(', ')}), ${row.opsPerLocalDuplicate.toFixed(2)} (owner's process); owner answer -> duplicate answer p50 ${row.delayP50.toFixed(1)} ms, p95 ${row.delayP95.toFixed(1)} ms${bad ? `; ${bad} keys answered 409 or 5xx` : ''}${unordered ? `; ${unordered} keys' duplicates did not wait (sent late), left out of the delay` : ''}`,
      );
    }
  } finally {
    await Promise.all([owner.stop(), other.stop()]);
  }
  return rows;
}
