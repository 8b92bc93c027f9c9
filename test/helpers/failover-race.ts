/**
 * Failover under load, for any replicated Redis topology: 4 worker processes
 * (test/stores/failover-worker.ts) contend on the same keys; once the race has settled
 * `minKeys` keys (and at least a second has passed) a primary is SIGKILLed, its replica
 * takes over, the dead node is restarted (as an orchestrator would) and the race goes on
 * until it has settled `minKeys` more keys once all is healthy. Waiting on progress rather
 * than on the clock keeps the round meaningful on a starved machine, where a second may
 * settle almost nothing. Counts double executions, errors, stuck keys and the time until
 * claims succeed again. The tests that run it are test/suites/redis-failover.suite.ts.
 */
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import type { WaitForReplicas } from '../../drivers/redis.js';
import type { ClaimResult, IdempotencyStore } from '../../src/store.js';
import { startWorker } from './worker-process.js';

const FAILOVER_WORKER = fileURLToPath(new URL('../stores/failover-worker.ts', import.meta.url));

export interface FailoverTopology {
  url: string;
  /** The primary to kill in this round. */
  victim(round: number): Promise<number>;
  kill(port: number): void;
  /** Whether a replica has taken over from the killed primary. */
  promoted(victim: number): Promise<boolean>;
  restart(port: number): Promise<void>;
  waitHealthy(timeoutMs: number): Promise<void>;
}

interface WorkerReport {
  executions: { key: number; token: string; at: number }[];
  errors: { at: number; operation: string; message: string }[];
  latencies: number[];
  stuck: number;
}

export interface FailoverFigures {
  mode: string;
  round: number;
  /** Keys settled during the round. */
  keys: number;
  /** Keys settled before the kill, and from the all-healthy point on (as the workers counted). */
  keysBeforeKill: number;
  keysOnceHealthy: number;
  /** How long the race ran before the kill, and once all was healthy again. */
  msBeforeKill: number;
  msOnceHealthy: number;
  /** Keys whose handler ran more than once. */
  doubleExecutions: number;
  /** Of those, runs that started while the previous owner's lease still held: a lost write. */
  withinLease: number;
  /** Runs that started after the previous owner's lease ended (it could not complete in time). */
  afterLease: number;
  /** Failed store calls (each retried by the worker). */
  errors: number;
  /** Keys no worker could settle within two leases. */
  stuckKeys: number;
  promotedAfterMs: number;
  /**
   * From the kill to the last call that failed before all was healthy again: after that,
   * every call succeeded until then.
   */
  claimsSucceedAgainAfterMs: number;
  /** Calls that failed once all was healthy again (a call bound run out on a starved machine). */
  errorsOnceHealthy: number;
  /** Claim-to-completed time of executions that met no error. */
  p50Ms: number;
  p99Ms: number;
  /** The most frequent store errors, with their counts. */
  topErrors: string[];
}

export async function waitUntil(check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check().catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const percentile = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted.length === 0 ? NaN : Math.round(sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]! * 10) / 10;
};

type Worker = ReturnType<typeof startWorker<WorkerReport>>;

/** Keys the race has settled so far: every worker walks the same keys, so the furthest one's count. */
function settledSoFar(workers: Worker[]): number {
  let most = 0;
  for (const w of workers) {
    const out = w.stdout();
    const at = out.lastIndexOf('settled ');
    if (at >= 0) most = Math.max(most, Number.parseInt(out.slice(at + 8), 10) || 0);
  }
  return most;
}

/**
 * Let the race run for at least `minMs` and until it has settled `keys` more keys, or
 * `maxMs` at most (the round's figures then show the shortfall). Returns the keys settled
 * and the time it ran.
 */
async function runUntilSettled(workers: Worker[], keys: number, minMs: number, maxMs: number): Promise<{ keys: number; ms: number }> {
  const start = Date.now();
  const from = settledSoFar(workers);
  for (;;) {
    await new Promise((r) => setTimeout(r, 50));
    const ms = Date.now() - start;
    const settled = settledSoFar(workers) - from;
    if ((ms >= minMs && settled >= keys) || ms >= maxMs) return { keys: settled, ms };
  }
}

/**
 * `each` of the workers, within `ms`. Past it, each live worker is asked to say what its
 * lanes are doing (a store call that never settled, or a handle that keeps it from
 * exiting), and a second later the round fails with what the workers printed, instead of
 * leaving the test to its timeout with no clue.
 */
async function allWithin<T>(workers: Worker[], round: string, stage: string, ms: number, each: (w: Worker) => Promise<T>): Promise<T[]> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(async () => {
      const alive = workers.filter((w) => w.child.exitCode === null && w.child.signalCode === null);
      for (const w of alive) w.send('dump');
      await new Promise((r) => setTimeout(r, 1000));
      reject(new Error(`${round}: ${alive.length} worker(s) still running ${ms} ms into "${stage}"\n${alive.map((w) => `pid ${w.child.pid}\n${w.output()}`).join('\n')}`));
    }, ms);
  });
  try {
    return await Promise.race([Promise.all(workers.map(each)), late]);
  } finally {
    clearTimeout(timer);
  }
}

export interface FailoverRoundOptions {
  /** Keys the race settles before the kill, and again once all is healthy. */
  minKeys: number;
  waitForReplicas?: WaitForReplicas;
}

export async function failoverRound(topology: FailoverTopology, round: number, { minKeys, waitForReplicas }: FailoverRoundOptions): Promise<FailoverFigures> {
  const runId = `failover-${randomUUID()}`;
  // A lease well above the outage, so that an owner whose completion waits for the new
  // primary still holds its key: a second run then means a lost write, not a takeover.
  const leaseMs = 10_000;
  const config = JSON.stringify({ url: topology.url, runId, lanes: 8, leaseMs, ...(waitForReplicas ? { waitForReplicas } : {}) });
  const workers = Array.from({ length: 4 }, () => startWorker<WorkerReport>(FAILOVER_WORKER, [config]));
  try {
    // Every wait on the workers is bounded (see allWithin).
    await allWithin(workers, `failover round ${round}`, 'ready', 40_000, (w) => w.ready);
    for (const w of workers) w.send('go');
    const beforeKill = await runUntilSettled(workers, minKeys, 1000, 20_000);
    const victim = await topology.victim(round);
    const killedAt = Date.now();
    topology.kill(victim);
    await waitUntil(() => topology.promoted(victim), 30_000);
    const promotedAfterMs = Date.now() - killedAt;
    await topology.restart(victim);
    await topology.waitHealthy(30_000);
    const healthyAt = Date.now();
    const onceHealthy = await runUntilSettled(workers, minKeys, 1000, 20_000);
    for (const w of workers) w.send('stop');
    // A lane finishes the key it holds: at most two leases and a little more.
    const reports = await allWithin(workers, `failover round ${round}`, 'stop', 2 * leaseMs + 15_000, (w) => w.exited);

    const runs = new Map<number, number[]>();
    for (const e of reports.flatMap((r) => r.executions)) runs.set(e.key, [...(runs.get(e.key) ?? []), e.at]);
    let withinLease = 0;
    let afterLease = 0;
    for (const starts of runs.values()) {
      starts.sort((a, b) => a - b);
      for (let i = 1; i < starts.length; i++) {
        if (starts[i]! < starts[i - 1]! + leaseMs) withinLease++;
        else afterLease++;
      }
    }
    const errors = reports.flatMap((r) => r.errors);
    const byMessage = new Map<string, number>();
    for (const e of errors) {
      const what = `${e.operation}: ${e.message}`;
      byMessage.set(what, (byMessage.get(what) ?? 0) + 1);
    }
    const latencies = reports.flatMap((r) => r.latencies);
    return {
      mode: waitForReplicas ? `WAIT ${waitForReplicas.replicas}/${waitForReplicas.timeoutMs}ms` : 'async replication',
      round,
      keys: runs.size,
      keysBeforeKill: beforeKill.keys,
      keysOnceHealthy: onceHealthy.keys,
      msBeforeKill: beforeKill.ms,
      msOnceHealthy: onceHealthy.ms,
      doubleExecutions: [...runs.values()].filter((starts) => starts.length > 1).length,
      withinLease,
      afterLease,
      errors: errors.length,
      stuckKeys: reports.reduce((n, r) => n + r.stuck, 0),
      promotedAfterMs,
      claimsSucceedAgainAfterMs: Math.max(killedAt, ...errors.filter((e) => e.at < healthyAt).map((e) => e.at)) - killedAt,
      errorsOnceHealthy: errors.filter((e) => e.at >= healthyAt).length,
      p50Ms: percentile(latencies, 50),
      p99Ms: percentile(latencies, 99),
      topErrors: [...byMessage].sort((a, b) => b[1] - a[1]).slice(0, 3).map(([what, n]) => `${n}× ${what}`),
    };
  } finally {
    for (const w of workers) w.child.kill();
  }
}

/**
 * Claim `key` until the store answers (after a failover). An attempt that timed out may
 * still have landed, so a later attempt can find that attempt's record: the owner is then
 * one of the retries (`retry-<n>`), and never a claim from before the failover.
 */
export async function retryUntilAnswered(store: IdempotencyStore, key: string): Promise<ClaimResult> {
  let result: ClaimResult | undefined;
  let attempt = 0;
  await waitUntil(async () => {
    result = await store.claim(key, { token: `retry-${++attempt}`, fingerprint: 'fp', createdAt: Date.now() }, 60_000);
    return true;
  }, 30_000);
  return result!;
}
