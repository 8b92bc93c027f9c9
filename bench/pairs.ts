/**
 * Store client cost per claim + complete pair: `tsx bench/pairs.ts [url ...]`, or imported
 * by bench/run.ts. One process, `concurrency` callers each running claim then complete on
 * fresh keys; reports pairs/s and process CPU (user + system, all threads) per pair.
 * Raw baselines: `raw-pg` runs the PostgreSQL driver's two statements on a `pg` pool of
 * the same size; `raw-redis` runs the Redis driver's two scripts on one node-redis client.
 * @module
 */
import { randomUUID } from 'node:crypto';

export interface PairResult {
  store: string;
  pairs: number;
  pairsPerSec: number;
  /** Process CPU (all threads) per pair, microseconds. */
  cpuUsPerPair: number;
}

/** Something that runs one claim + complete pair on key `k`. */
export type PairRunner = { name: string; pair(k: string): Promise<void>; close(): Promise<void> };

const RESPONSE = { status: 201, headers: { 'content-type': 'application/json' }, body: new TextEncoder().encode('{"id":"ord_1","total":42}') };

/** A pair on an idempotency-kit store. */
export async function storeRunner(name: string, url: string): Promise<PairRunner> {
  const { createStore } = await import('../drivers/create-store.js');
  const store = createStore(url, { sweepIntervalMs: 0 });
  return {
    name,
    async pair(k) {
      const token = randomUUID();
      const result = await store.claim(k, { fingerprint: 'fp-0123456789abcdef', token, createdAt: Date.now() }, 30_000);
      if (!result.claimed) throw new Error(`pair ${k}: not claimed`);
      if (!(await store.complete(k, token, RESPONSE, 60_000))) throw new Error(`pair ${k}: not completed`);
    },
    close: () => store.close(),
  };
}

/** Run `pairs` pairs with `concurrency` callers after a warm-up; CPU and wall time of the measured part. */
export async function measurePairs(runner: PairRunner, o: { pairs: number; concurrency: number; warmup?: number }): Promise<PairResult> {
  const prefix = `pairs-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
  let next = 0;
  const drive = async (total: number, tag: string) => {
    let i = 0;
    const worker = async () => {
      while (i < total) {
        const n = i++;
        await runner.pair(`${prefix}-${tag}-${n}-${next}`);
      }
    };
    await Promise.all(Array.from({ length: o.concurrency }, worker));
    next++;
  };
  await drive(o.warmup ?? Math.min(500, o.pairs), 'w');
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  await drive(o.pairs, 'm');
  const wallS = Number(process.hrtime.bigint() - t0) / 1e9;
  const cpu = process.cpuUsage(cpu0);
  return { store: runner.name, pairs: o.pairs, pairsPerSec: o.pairs / wallS, cpuUsPerPair: (cpu.user + cpu.system) / o.pairs };
}

if (import.meta.url === `file://${process.argv[1]}` || process.argv[1]?.endsWith('bench/pairs.ts')) {
  const args = process.argv.slice(2);
  const pairs = Number(process.env.PAIRS ?? 5000);
  const concurrency = Number(process.env.CONCURRENCY ?? 32);
  for (const url of args) {
    const runner = await storeRunner(url.split(':')[0]!, url);
    const r = await measurePairs(runner, { pairs, concurrency });
    await runner.close();
    process.stdout.write(`${url}\t${r.pairsPerSec.toFixed(0)} pairs/s\t${r.cpuUsPerPair.toFixed(1)} us CPU/pair\n`);
  }
}
