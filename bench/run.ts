/**
 * `npm run bench [-- options]`: overhead per adapter and store against the bare handler,
 * store round trips per request, peers side by side, fingerprint cost. Servers run in
 * child processes (bench/server.ts); autocannon drives them from this process.
 *
 * Options:
 *   --quick              a smoke run (< 1 min): node, express, fetch:text (on Node, Bun and Deno) and nestjs on memory, short runs
 *   --duration=S         seconds per measured run (default 5, quick 1)
 *   --warmup=S           seconds of warm-up load before each measured run (default 1, quick 0.3)
 *   --connections=N      autocannon connections (default 32)
 *   --repeats=N          runs of every case (a fresh server each), median reported (default 3, quick 1)
 *   --adapters=a,b       subset of node,express,fastify,koa,hono,hono:<style>,fetch:<style>,bun:<style>,deno:<style>,nestjs,nestjs:10
 *                        (styles: bench/apps.ts, bench/web-handlers.ts; bun: and deno: are the fetch adapter on Bun.serve and
 *                        Deno.serve, run when the runtime is installed under node_modules;
 *                        nestjs:10 is NestJS 10 from bench/nest10, beside @node-idempotency/nestjs@1.0.4)
 *   --stores=a,b         subset of memory,sqlite,redis,postgres
 *   --scenarios=a,b      subset of first,replay,storm (the bare handler always runs)
 *   --no-matrix --no-peers --no-round-trips --no-fingerprint --no-pairs --no-waiting --no-encryption --no-transactions   skip a part
 *   --no-express-idempotency   the Express peer rows without express-idempotency (about a quarter of their time on memory)
 *   --write / --no-write write docs/benchmarks.md (generated part) and docs/benchmarks.svg
 *                        (default: write in full mode, not in quick mode)
 *   --cpu-prof           servers write V8 CPU profiles to bench/profiles/, named <adapter>_<layer>_<store>_<scenario>-<time>
 *                        (BENCH_CPU_PROF_INTERVAL=µs samples more often than V8's default 1,000 µs)
 *   --heap-sample        servers sample every allocation over each measured run (V8's sampling heap profiler,
 *                        freed objects included): the log gives bytes allocated per request, and the profiles
 *                        go to bench/profiles/ as <case>-<time>.heapprofile (open them in Chrome DevTools)
 *   --store-cost         only what each request costs Redis, PostgreSQL and MariaDB themselves, ours beside
 *                        the peer and a minimal SQL floor, on servers the run starts (bench/store-cost.ts)
 *   --render             only re-render the docs from bench/results/full.json (the last full run)
 *
 * Exit code 1 when a server does not start, a run has connection errors, timeouts or
 * 5xx answers, our layer answers a non-2xx where it must not, or our layer executes a
 * request twice. Slow numbers never fail the run.
 * @module
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  bundleEntries,
  burst,
  pinCores,
  entryArgs,
  load,
  prime,
  reachable,
  redisMonitor,
  ROOT,
  sequential,
  startPrivateRedis,
  startServer,
  type BurstResult,
  type LoadResult,
  type Scenario,
  type ServerEnv,
  type ServerHandle,
} from './lib.js';
import { renderMarkdown, renderSvg, type BenchResults, type RoundTripRow, type Row } from './report.js';
import type { BreakdownRow } from './breakdown.js';
import type { EncryptionResult } from './encryption.js';
import type { FingerprintResult } from './fingerprint.js';
import type { PairsReport } from './pairs.js';
import { measureWaiting, type WaitingRow } from './waiting.js';
import { FETCH_STYLES, HONO_STYLES } from './apps.js';
import { runtimeBinary, type RuntimeName } from './runtimes.js';

const argv = process.argv.slice(2);
const flag = (name: string) => argv.includes(`--${name}`);
const opt = (name: string) => argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);

const quick = flag('quick');
const durationS = Number(opt('duration') ?? (quick ? 1 : 5));
const warmupS = Number(opt('warmup') ?? (quick ? 0.3 : 1));
const connections = Number(opt('connections') ?? 32);
const repeats = Number(opt('repeats') ?? (quick ? 1 : 3));
/**
 * `hono:<style>` and `fetch:<style>` are one handler style each (bench/apps.ts), each with
 * its own bare handler; plain `hono` is the `body` style, and runs every store.
 */
const ALL_ADAPTERS = [
  'node',
  'express',
  'fastify',
  'koa',
  'hono',
  ...HONO_STYLES.filter((s) => s !== 'body').map((s) => `hono:${s}`),
  ...FETCH_STYLES.map((s) => `fetch:${s}`),
  // The fetch adapter on Bun.serve and Deno.serve (the runtimes from node_modules), same styles.
  ...(['bun', 'deno'] as const).flatMap((runtime) => FETCH_STYLES.map((s) => `${runtime}:${s}`)),
  // NestJS on its Express platform: IdempotencyModule + @Idempotent() against a bare Nest handler.
  'nestjs',
  // The same on NestJS 10 (bench/nest10), beside @node-idempotency/nestjs@1.0.4, which supports NestJS 9 and 10 only.
  'nestjs:10',
];
const ALL_STORES = ['memory', 'sqlite', 'redis', 'postgres'] as const;
type AdapterName = string;
type StoreName = (typeof ALL_STORES)[number];
const adapters = (opt('adapters')?.split(',') ?? (quick ? ['node', 'express', 'fetch:text', 'bun:text', 'deno:text', 'nestjs'] : [...ALL_ADAPTERS])) as AdapterName[];
/** The framework of an adapter name (`fetch:text` -> fetch) and its handler style. */
const baseOf = (adapter: AdapterName) => adapter.split(':')[0]!;
/** Whether an adapter's source is there: `adapters/<name>.ts`, or its folder's `index.ts`. */
const adapterLanded = (name: string) => existsSync(path.join(ROOT, `adapters/${name}.ts`)) || existsSync(path.join(ROOT, `adapters/${name}/index.ts`));
const styleOf = (adapter: AdapterName) => adapter.split(':')[1];
/** A handler style's block (and Nest's): first executions and replays on memory only. */
const styled = (adapter: AdapterName) => styleOf(adapter) !== undefined || adapter === 'fetch' || adapter === 'nestjs';
/** Bun or Deno for `bun:<style>` and `deno:<style>`: the fetch adapter on that runtime's server. */
const runtimeOf = (adapter: AdapterName): RuntimeName | undefined => {
  const base = baseOf(adapter);
  return base === 'bun' || base === 'deno' ? base : undefined;
};
const stores = (opt('stores')?.split(',') ?? (quick ? ['memory'] : [...ALL_STORES])) as StoreName[];
const peers = !flag('no-peers');
const expressIdempotencyPeer = !flag('no-express-idempotency');
const roundTrips = !flag('no-round-trips');
const waitingPart = !flag('no-waiting');
const fingerprint = !flag('no-fingerprint');
const encryption = !flag('no-encryption');
const pairsPart = !flag('no-pairs');
const transactionsPart = !flag('no-transactions');
const write = flag('write') || (!quick && !flag('no-write'));
const cpuProfDir = flag('cpu-prof') ? path.join(ROOT, 'bench/profiles') : undefined;
const heapSample = flag('heap-sample');
if (heapSample) mkdirSync(path.join(ROOT, 'bench/profiles'), { recursive: true });
const POSTGRES_URL = process.env.POSTGRES_URL ?? 'postgresql://postgres@127.0.0.1:5432/test';
const NAMESPACE = 'bench_idempotency';
const runId = `b${Date.now().toString(36)}`;
let runCounter = 0;

const problems: string[] = [];
const notes: string[] = [];
const skipped: string[] = [];
const started = Date.now();
const log = (line: string) => process.stdout.write(`${line}\n`);

function fmt(n: number, digits = 0): string {
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

// ---------------------------------------------------------------- services and stores
let privateRedis: Awaited<ReturnType<typeof startPrivateRedis>>;
let redisUrl: string | undefined;
let redisNote = '';
let sqliteDir: string | undefined;
const storeUrls: Partial<Record<StoreName, string>> = {};

async function setUpStores(): Promise<void> {
  const wanted = new Set<string>(stores);
  if (peers) wanted.add('redis');
  if (roundTrips || pairsPart || waitingPart) {
    wanted.add('redis');
    wanted.add('postgres');
  }
  if (pairsPart) wanted.add('sqlite');
  if (transactionsPart) wanted.add('postgres');
  const { createStore } = await import('../drivers/create-store.js');
  const driverMissing = (name: StoreName, url: string): string | undefined => {
    if (name !== 'memory' && !existsSync(path.join(ROOT, `drivers/${name}.ts`))) return `drivers/${name}.ts has not landed`;
    try {
      // createStore is lazy: this checks the scheme only, it does not connect.
      void createStore(url).close();
    } catch (error) {
      return `createStore(${JSON.stringify(url)}) refuses it: ${(error as Error).message.split('. ')[0]}`;
    }
    return undefined;
  };
  storeUrls.memory = 'memory://';
  if (wanted.has('sqlite')) {
    sqliteDir = mkdtempSync(path.join(os.tmpdir(), 'idempotency-bench-'));
    const url = `sqlite://${path.join(sqliteDir, 'bench.sqlite')}`;
    const why = driverMissing('sqlite', url);
    if (why) skipped.push(`sqlite: ${why}`);
    else storeUrls.sqlite = url;
  }
  if (wanted.has('redis')) {
    privateRedis = await startPrivateRedis();
    if (privateRedis) redisUrl = privateRedis.url;
    else {
      const shared = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
      const u = new URL(shared);
      if (await reachable(u.hostname, Number(u.port || 6379))) {
        redisUrl = shared;
        redisNote = 'redis-server could not be started for the run: the shared instance was used, so command counts may include other clients';
      }
    }
    if (!redisUrl) skipped.push('redis: no redis-server binary and nothing listens at REDIS_URL');
    else {
      const why = driverMissing('redis', redisUrl);
      if (why) skipped.push(`redis: ${why}`);
      else storeUrls.redis = redisUrl;
    }
  }
  if (wanted.has('postgres')) {
    const u = new URL(POSTGRES_URL);
    if (!(await reachable(u.hostname, Number(u.port || 5432)))) skipped.push(`postgres: nothing listens at ${u.host}`);
    else {
      const why = driverMissing('postgres', POSTGRES_URL);
      if (why) skipped.push(`postgres: ${why}`);
      else {
        storeUrls.postgres = POSTGRES_URL;
        await dropBenchTable();
      }
    }
  }
}

async function tearDownStores(): Promise<void> {
  await privateRedis?.stop();
  if (sqliteDir) rmSync(sqliteDir, { recursive: true, force: true });
  if (storeUrls.postgres) await dropBenchTable();
}

/** The bench's own table only (its namespace); the test database stays as it was. */
async function dropBenchTable(): Promise<void> {
  {
    const pg = (await import('pg')).default;
    const client = new pg.Client({ connectionString: POSTGRES_URL });
    try {
      await client.connect();
      await client.query(`DROP TABLE IF EXISTS ${NAMESPACE}`);
    } catch {
      // left for the next run (it only holds bench keys)
    } finally {
      await client.end().catch(() => {});
    }
  }
}

// ---------------------------------------------------------------- one measured run
interface Spec {
  adapter: AdapterName;
  impl: Row['impl'];
  store: StoreName | 'none';
  scenario: Scenario;
  /** Also fire the double-execution burst (storm only). */
  withBurst?: boolean;
}

function envFor(spec: Spec, extra: Partial<ServerEnv> = {}): ServerEnv {
  const runtime = runtimeOf(spec.adapter);
  const env: ServerEnv = { ADAPTER: runtime ? 'fetch' : baseOf(spec.adapter), IMPL: spec.impl, NAMESPACE, ...extra };
  if (runtime) env.RUNTIME = runtime;
  const style = styleOf(spec.adapter);
  if (style !== undefined) env.STYLE = style;
  if (spec.impl === 'ours') env.STORE_URL = storeUrls[spec.store as StoreName];
  if (spec.impl === 'express-idempotency' || spec.impl === 'node-idempotency') {
    env.PEER_STORE = spec.store;
    if (spec.store === 'redis') env.REDIS_URL = redisUrl;
  }
  if (spec.scenario === 'storm') env.COUNT_KEYS = '1';
  return env;
}

const isOurs = (spec: Spec) => spec.impl === 'ours';

function check(spec: Spec, label: string, r: LoadResult, executions: number, doubles: number, b?: BurstResult): void {
  const say = (what: string) => problems.push(`${label}: ${what}`);
  if (r.errors > 0) say(`${r.errors} connection errors`);
  if (r.timeouts > 0) say(`${r.timeouts} timeouts`);
  if (r.requests === 0) say('no request completed');
  const fivexx = Object.entries(r.statusCodes).filter(([c]) => Number(c) >= 500);
  // A peer's 5xx is its measured behaviour (reported); ours fails the run.
  if (fivexx.length > 0 && isOurs(spec)) say(`5xx answers ${JSON.stringify(Object.fromEntries(fivexx))}`);
  if (spec.impl === 'bare' || spec.impl === 'floor' || isOurs(spec)) {
    // A redirect style answers 303 and the empty one 204: anything below 400 is the handler's.
    const non2xx = Object.entries(r.statusCodes).filter(([c]) => Number(c) < 200 || Number(c) >= 400);
    const allowed = spec.scenario === 'storm' ? non2xx.filter(([c]) => c !== '409') : non2xx;
    if (allowed.length > 0) say(`unexpected answers ${JSON.stringify(Object.fromEntries(allowed))}`);
  }
  if (isOurs(spec)) {
    if (spec.scenario === 'replay' && executions > 0) say(`the handler ran ${executions} times during replays`);
    if (doubles > 0) say(`${doubles} double executions`);
    if (b && b.doubleExecutions > 0) say(`${b.doubleExecutions} double executions in the burst`);
    if (b && Object.keys(b.statusCodes).some((c) => c === 'error' || Number(c) >= 500)) {
      say(`burst answers ${JSON.stringify(b.statusCodes)}`);
    }
  }
}

/**
 * One measured run. A run of ours on a database store whose only problems are store
 * errors (503 or connection errors: the shared PostgreSQL or Redis was busy with other
 * work, e.g. out of connections) is run once more; the first attempt is kept as a note.
 * Double executions and anything else are never retried.
 */
async function measure(spec: Spec): Promise<Row | undefined> {
  const before = problems.length;
  const row = await measureOnce(spec);
  const fresh = problems.slice(before);
  const storeTrouble = (p: string) => /: (5xx answers \{"503"|unexpected answers \{"503"|\d+ connection errors|\d+ timeouts)/.test(p);
  if (fresh.length === 0 || !isOurs(spec) || spec.store === 'memory' || !fresh.every(storeTrouble)) return row;
  problems.splice(before);
  notes.push(`retried once after store errors: ${fresh.join('; ')}`);
  log('    store errors: run once more');
  return measureOnce(spec);
}

/** The median of `values` (the lower middle one of an even count). */
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor((values.length - 1) / 2)]!;

/**
 * `repeats` runs of one case, each in a fresh server, reported as their median: req/s and
 * its row by req/s, server CPU per request and p99 each the median of their own samples
 * (single runs on a shared machine swing by ±30 %). The burst runs on the last run only;
 * double executions are the sum over all runs.
 */
async function measureMedian(spec: Spec): Promise<Row | undefined> {
  const runs: Row[] = [];
  for (let i = 0; i < repeats; i++) {
    const r = await measure({ ...spec, withBurst: spec.withBurst === true && i === repeats - 1 });
    if (r) runs.push(r);
  }
  if (runs.length === 0) return undefined;
  if (runs.length === 1) return runs[0];
  const row = medianRow(runs);
  row.burst = runs.find((r) => r.burst)?.burst;
  if (runs.length > 1) log(`    median of ${runs.length}: ${fmt(row.reqPerSec)} req/s, cpu ${fmt(row.cpuMicrosPerRequest, 1)} µs/req, p99 ${fmt(row.p99, 1)} ms`);
  return row;
}

/** Several runs of one case as one row: the median run by req/s, with the CPU and p99 medians, every sample and the summed executions. */
function medianRow(runs: Row[]): Row {
  const byRate = [...runs].sort((a, b) => a.reqPerSec - b.reqPerSec);
  const row: Row = { ...byRate[Math.floor((byRate.length - 1) / 2)]! };
  row.samples = runs.map((r) => Math.round(r.reqPerSec));
  row.cpuSamples = runs.map((r) => Math.round(r.cpuMicrosPerRequest * 10) / 10);
  row.cpuMicrosPerRequest = median(runs.map((r) => r.cpuMicrosPerRequest));
  row.p99 = median(runs.map((r) => r.p99));
  row.executions = runs.reduce((n, r) => n + r.executions, 0);
  row.doubleExecutions = runs.reduce((n, r) => n + r.doubleExecutions, 0);
  return row;
}

/** `contenders` taking turns, `repeats` rounds, each reported as in measureMedian (req/s, CPU and p99 medians). */
async function measureInTurns(contenders: Spec[]): Promise<Row[]> {
  const samples = contenders.map(() => [] as Row[]);
  for (let i = 0; i < repeats; i++) {
    for (const [n, c] of contenders.entries()) {
      // The double-execution burst (storm) once per contender, on its last run.
      const r = await measure({ ...c, withBurst: c.withBurst === true && i === repeats - 1 });
      if (r) samples[n]!.push(r);
    }
  }
  const rows: Row[] = [];
  for (const runs of samples) {
    if (runs.length === 0) continue;
    const row = runs.length === 1 ? runs[0]! : medianRow(runs);
    row.burst = runs.find((r) => r.burst)?.burst;
    log(`    ${row.impl}/${row.scenario} median of ${runs.length}: ${fmt(row.reqPerSec)} req/s, cpu ${fmt(row.cpuMicrosPerRequest, 1)} µs/req, p99 ${fmt(row.p99, 1)} ms`);
    rows.push(row);
  }
  return rows;
}

async function measureOnce(spec: Spec): Promise<Row | undefined> {
  const label = `${spec.adapter}/${spec.impl}/${spec.store}/${spec.scenario}`;
  let server: ServerHandle;
  let heapOut: string | undefined;
  try {
    heapOut = heapSample ? path.join(ROOT, 'bench', 'profiles', `${label.replace(/[^\w.-]+/g, '_')}-${Date.now()}.heapprofile`) : undefined;
    server = await startServer(envFor(spec), { cpuProfDir, cpuProfName: label, heapSampleOut: heapOut });
  } catch (error) {
    problems.push(`${label}: ${(error as Error).message}`);
    log(`  ${label.padEnd(44)} FAILED TO START`);
    return undefined;
  }
  try {
    const keyPrefix = `${runId}-${runCounter++}`;
    // Keys: `<run>-m-…` measured, `<run>-w-…` warm-up, `<run>-burst-…` burst; the replay
    // scenario's one key is measured, primed and warmed up alike.
    const measured = `${keyPrefix}-m`;
    if (spec.scenario === 'replay') {
      const status = await prime(server.url, `${measured}-replay`);
      if (status < 200 || status >= 400) problems.push(`${label}: priming request answered ${status}`);
    }
    if (warmupS > 0) {
      const warmPrefix = spec.scenario === 'replay' ? measured : `${keyPrefix}-w`;
      await load(server.url, spec.scenario, { durationS: warmupS, connections, keyPrefix: warmPrefix });
    }
    const before = await server.stats(`${measured}-`);
    if (heapOut) await heapSampling(server, 'start');
    const r = await load(server.url, spec.scenario, { durationS, connections, keyPrefix: measured });
    const allocated = heapOut ? await heapSampling(server, 'stop', heapOut) : undefined;
    const after = await server.stats(`${measured}-`);
    const executions = after.executions - before.executions;
    const doubles = after.doubleExecutions;
    let b: BurstResult | undefined;
    if (spec.withBurst) {
      b = await burst(server, { keys: quick ? 5 : 20, perKey: 25, delayMs: 20, keyPrefix });
    }
    check(spec, label, r, executions, doubles, b);
    const row: Row = {
      adapter: spec.adapter,
      impl: spec.impl,
      store: spec.store,
      scenario: spec.scenario,
      ...r,
      executions,
      doubleExecutions: doubles,
      maxRssBytes: after.maxRssBytes,
      cpuMicrosPerRequest: (after.cpuMicros - before.cpuMicros) / Math.max(1, r.requests),
      burst: b,
    };
    log(
      `  ${label.padEnd(44)} ${fmt(r.reqPerSec).padStart(7)} req/s  p50 ${fmt(r.p50, 1).padStart(5)} ms  p99 ${fmt(r.p99, 1).padStart(6)} ms  ` +
        `cpu ${fmt((after.cpuMicros - before.cpuMicros) / Math.max(1, r.requests))} µs/req (sys ${fmt((after.cpuSystemMicros - before.cpuSystemMicros) / Math.max(1, r.requests))})  rss ${fmt(after.maxRssBytes / 2 ** 20)} MiB${r.non2xx ? `  non-2xx ${JSON.stringify(r.statusCodes)}` : ''}` +
        `${b ? `  burst: ${b.executions} executions for ${b.keys} keys` : ''}` +
        `${allocated === undefined ? '' : `  allocated ${fmt(allocated / Math.max(1, r.requests) / 1000, 1)} KB/req`}`,
    );
    const stderr = server.stderr().trim();
    if (stderr && isOurs(spec)) log(`    server stderr: ${stderr.split('\n').slice(0, 5).join('\n    ')}`);
    return row;
  } catch (error) {
    problems.push(`${label}: ${(error as Error).message}`);
    log(`  ${label.padEnd(44)} FAILED: ${(error as Error).message}`);
    return undefined;
  } finally {
    await server.stop();
  }
}

/**
 * `--heap-sample`: start the server's sampling heap profiler, or stop it and return the bytes
 * it counted (every allocation, freed ones included) once the profile is written.
 */
async function heapSampling(server: ServerHandle, step: 'start' | 'stop', file?: string): Promise<number | undefined> {
  server.signal('SIGUSR2');
  if (step === 'start') {
    await new Promise((r) => setTimeout(r, 100)); // the signal is handled between requests
    return undefined;
  }
  for (let i = 0; i < 100 && !existsSync(file!); i++) await new Promise((r) => setTimeout(r, 50));
  if (!existsSync(file!)) {
    problems.push(`heap sampling: no profile written to ${file}`);
    return undefined;
  }
  interface HeapNode {
    selfSize: number;
    children: HeapNode[];
  }
  const sum = (n: HeapNode): number => n.children.reduce((total, c) => total + sum(c), n.selfSize);
  return sum((JSON.parse(readFileSync(file!, 'utf8')) as { head: HeapNode }).head);
}

// ---------------------------------------------------------------- round trips
async function countRoundTrips(): Promise<RoundTripRow[]> {
  const rows: RoundTripRow[] = [];
  const n = quick ? 20 : 200;
  const slow = { count: 10, delayMs: quick ? 300 : 1000 };
  const targets: { store: 'redis' | 'postgres'; impl: Row['impl']; adapter: AdapterName }[] = [];
  if (storeUrls.redis) targets.push({ store: 'redis', impl: 'ours', adapter: 'node' });
  if (storeUrls.postgres) targets.push({ store: 'postgres', impl: 'ours', adapter: 'node' });
  if (peers && redisUrl && !quick) targets.push({ store: 'redis', impl: 'node-idempotency', adapter: 'express' });
  for (const t of targets) {
    if (t.impl === 'ours' && !adapterLanded(t.adapter)) continue;
    const spec: Spec = { adapter: t.adapter, impl: t.impl, store: t.store, scenario: 'first' };
    const label = `${t.impl} ${t.store}`;
    let server: ServerHandle;
    try {
      server = await startServer(envFor(spec, t.store === 'postgres' ? { COUNT_PG: '1' } : {}));
    } catch (error) {
      problems.push(`round trips ${label}: ${(error as Error).message}`);
      continue;
    }
    try {
      const prefix = `${runId}-rt-${runCounter++}`;
      // Redis: MONITOR around each batch (client commands only, not those a script runs).
      // PostgreSQL: the server's counting wrapper around pg's Client#query.
      let monitor: Awaited<ReturnType<typeof redisMonitor>> | undefined;
      const snapshot = async (phase: 'before' | 'after'): Promise<Record<string, number>> => {
        if (t.store === 'redis') {
          if (phase === 'before') {
            monitor = await redisMonitor(redisUrl!);
            return {};
          }
          const seen = await monitor!.stop();
          return seen.client;
        }
        const stats = await server.stats();
        return stats.pgByKind ?? {};
      };
      const delta = (a: Record<string, number>, b: Record<string, number>, per: number) => {
        const out: Record<string, number> = {};
        let total = 0;
        for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) {
          const d = (b[k] ?? 0) - (a[k] ?? 0);
          if (d !== 0) out[k] = d / per;
          total += d;
        }
        return { perRequest: total / per, breakdown: out };
      };
      const expectAll = (statuses: number[], status: number, what: string) => {
        const bad = statuses.filter((s) => s !== status);
        if (bad.length > 0) problems.push(`round trips ${label} ${what}: ${bad.length} answers were not ${status} (${bad.slice(0, 3).join(', ')})`);
      };
      // Warm up: connection set-up, script loading, table creation are not per request.
      await sequential(server.url, Array.from({ length: 5 }, (_, i) => `${prefix}-warm-${i}`));
      await sequential(server.url, Array.from({ length: 5 }, () => `${prefix}-warm-0`));

      let before = await snapshot('before');
      expectAll(await sequential(server.url, Array.from({ length: n }, (_, i) => `${prefix}-first-${i}`)), 201, 'first');
      let after = await snapshot('after');
      rows.push({ store: t.store, impl: t.impl, path: 'first execution', requests: n, ...delta(before, after, n) });

      await sequential(server.url, [`${prefix}-replayed`]);
      before = await snapshot('before');
      expectAll(await sequential(server.url, Array.from({ length: n }, () => `${prefix}-replayed`)), 201, 'replay');
      after = await snapshot('after');
      rows.push({ store: t.store, impl: t.impl, path: 'replay', requests: n, ...delta(before, after, n) });

      before = await snapshot('before');
      const statuses = await Promise.all(
        Array.from({ length: slow.count }, (_, i) =>
          sequential(server.url, [`${prefix}-slow-${i}`], { 'x-delay-ms': String(slow.delayMs) }).then((s) => s[0]!),
        ),
      );
      expectAll(statuses, 201, 'slow handler');
      after = await snapshot('after');
      rows.push({
        store: t.store,
        impl: t.impl,
        path: `first execution, handler takes ${slow.delayMs} ms`,
        requests: slow.count,
        ...delta(before, after, slow.count),
      });
      for (const r of rows.filter((x) => x.store === t.store && x.impl === t.impl)) {
        log(`  ${label.padEnd(24)} ${r.path.padEnd(40)} ${fmt(r.perRequest, 2)} round trips/request  ${JSON.stringify(r.breakdown)}`);
      }
    } catch (error) {
      problems.push(`round trips ${label}: ${(error as Error).message}`);
    } finally {
      await server.stop();
    }
  }
  return rows;
}

// ---------------------------------------------------------------- fingerprint
function runFingerprint(): FingerprintResult | undefined {
  const out = spawnSync(process.execPath, [...entryArgs('fingerprint'), '--json', ...(quick ? ['--quick'] : [])], {
    cwd: ROOT,
    encoding: 'utf8',
    maxBuffer: 10 * 2 ** 20,
  });
  if (out.status !== 0) {
    problems.push(`fingerprint bench failed: ${out.stderr}`);
    return undefined;
  }
  const result = JSON.parse(out.stdout.trim().split('\n').pop()!) as FingerprintResult;
  if (!result.orderInsensitive) problems.push('fingerprint: key order changed a hash (H14)');
  for (const r of result.ratios) log(`  ${r.size.padEnd(7)} object-hash / fast path: ${fmt(r.objectHashOverFastPath, 1)}×`);
  return result;
}

// ---------------------------------------------------------------- encryption at rest
function runEncryption(): EncryptionResult | undefined {
  const out = spawnSync(process.execPath, [...entryArgs('encryption'), '--json', ...(quick ? ['--quick'] : [])], {
    cwd: ROOT,
    encoding: 'utf8',
    maxBuffer: 10 * 2 ** 20,
  });
  if (out.status !== 0) {
    problems.push(`encryption bench failed: ${out.stderr}`);
    return undefined;
  }
  const result = JSON.parse(out.stdout.trim().split('\n').pop()!) as EncryptionResult;
  for (const c of result.cases) log(`  ${c.name.padEnd(7)} ${String(c.bytes).padStart(6)} B  ${fmt(c.us, 2)} µs`);
  for (const h of result.http) log(`  http ${h.scenario.padEnd(6)} +${fmt(h.addedUs, 1)} µs per request (plain ${fmt(h.plainUs, 1)}, sealed ${fmt(h.sealedUs, 1)})`);
  return result;
}

// ---------------------------------------------------------------- store CPU per pair
function runPairs(): PairsReport | undefined {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'idempotency-pairs-'));
  const targets = ['memory=memory://'];
  if (storeUrls.sqlite) targets.push(`sqlite=${path.join(dir, 'pairs.sqlite')}`, `sqlite (before)=${path.join(dir, 'before.sqlite')}`);
  if (redisUrl) targets.push(`redis=${redisUrl}`, `raw redis=${redisUrl}`);
  if (storeUrls.postgres) targets.push(`postgres=${POSTGRES_URL}`, `raw pg=${POSTGRES_URL}`);
  if (process.env.MYSQL_URL) targets.push(`mysql=${process.env.MYSQL_URL}`);
  const out = spawnSync(process.execPath, ['--expose-gc', ...entryArgs('pairs'), '--json', ...(quick ? ['--quick'] : []), ...targets], {
    cwd: ROOT,
    encoding: 'utf8',
  });
  rmSync(dir, { recursive: true, force: true });
  if (out.status !== 0) {
    problems.push(`store pairs bench failed: ${out.stderr}`);
    return undefined;
  }
  const report = JSON.parse(out.stdout.trim().split('\n').pop()!) as PairsReport;
  for (const r of report.rows) log(`  ${r.store.padEnd(16)} ${fmt(r.pairsPerSec).padStart(7)} pairs/s  ${fmt(r.cpuUsPerPair, 1).padStart(6)} µs CPU/pair`);
  const m = report.memory;
  log(`  memory bound: ${fmt(m.recordsKept)} records kept of maxEntries ${fmt(m.maxEntries)} after ${fmt(m.pairs)} pairs; heap growth ${fmt(m.heapGrowthMiB, 1)} MiB`);
  if (m.recordsKept > m.maxEntries) problems.push(`memory store kept ${m.recordsKept} records past maxEntries ${m.maxEntries}`);
  return report;
}

// ---------------------------------------------------------------- transactions
function runTransactions(): BenchResults['transactions'] {
  const out = spawnSync(process.execPath, [...entryArgs('transactions'), '--json', ...(quick ? ['--quick'] : []), POSTGRES_URL], { cwd: ROOT, encoding: 'utf8' });
  if (out.status !== 0) {
    problems.push(`transactions bench failed: ${out.stderr}`);
    return undefined;
  }
  const { rows } = JSON.parse(out.stdout.trim().split('\n').pop()!) as { rows: NonNullable<BenchResults['transactions']> };
  for (const r of rows) log(`  ${r.name.padEnd(26)} ${fmt(r.callsPerSec).padStart(7)} calls/s  ${fmt(r.cpuUsPerCall, 1).padStart(6)} µs CPU/call`);
  return rows;
}

// ---------------------------------------------------------------- breakdown
function runBreakdownChild(): BreakdownRow[] | undefined {
  const out = spawnSync(process.execPath, [...entryArgs('breakdown'), '--json', ...(quick ? ['--quick'] : [])], {
    cwd: ROOT,
    encoding: 'utf8',
  });
  if (out.status !== 0) {
    problems.push(`breakdown bench failed: ${out.stderr}`);
    return undefined;
  }
  const rows = JSON.parse(out.stdout.trim().split('\n').pop()!) as BreakdownRow[];
  for (const r of rows) log(`  ${r.step.padEnd(72)} ${fmt(r.micros, 2)} µs`);
  return rows;
}

// ---------------------------------------------------------------- main
function machine(): BenchResults['machine'] {
  const cpus = os.cpus();
  let autocannonVersion = '?';
  try {
    autocannonVersion = (JSON.parse(readFileSync(path.join(ROOT, 'node_modules/autocannon/package.json'), 'utf8')) as { version: string }).version;
  } catch {
    // reported as '?'
  }
  let commit = '';
  try {
    commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT, encoding: 'utf8' }).trim();
  } catch {
    // not a git checkout
  }
  return {
    cpu: `${cpus[0]?.model ?? 'unknown CPU'} × ${cpus.length}`,
    memoryGiB: Math.round(os.totalmem() / 2 ** 30),
    os: `${os.type()} ${os.release()}`,
    node: process.version,
    autocannon: autocannonVersion,
    commit,
  };
}

/** Write the generated part of docs/benchmarks.md and docs/benchmarks.svg. */
function writeDocs(results: BenchResults): void {
  writeFileSync(path.join(ROOT, 'docs/benchmarks.svg'), renderSvg(results));
  const docPath = path.join(ROOT, 'docs/benchmarks.md');
  const START = '<!-- bench:start (generated by `npm run bench`; edit outside these markers) -->';
  const END = '<!-- bench:end -->';
  const md = renderMarkdown(results);
  const existing = existsSync(docPath) ? readFileSync(docPath, 'utf8') : `# Benchmarks\n\n${START}\n${END}\n`;
  const s = existing.indexOf(START);
  const e = existing.indexOf(END);
  const next =
    s === -1 || e === -1
      ? `${existing.trimEnd()}\n\n${START}\n${md}\n${END}\n`
      : `${existing.slice(0, s + START.length)}\n${md}\n${existing.slice(e)}`;
  writeFileSync(docPath, next);
  log('wrote docs/benchmarks.md and docs/benchmarks.svg');
}

let how = '';

async function main(): Promise<void> {
  const loadBefore = os.loadavg();
  log(`idempotency-kit bench (${quick ? 'quick' : 'full'}): ${durationS} s per run after ${warmupS} s warm-up, ${connections} connections`);
  log(`load average before: ${loadBefore.map((l) => l.toFixed(2)).join(' ')}`);
  how = await bundleEntries();
  log(`servers: ${how}`);
  const pinned = pinCores();
  notes.push(pinned.note);
  log(pinned.note);
  await setUpStores();
  for (const s of skipped) log(`SKIPPED ${s}`);

  const rows: Row[] = [];
  const push = (r: Row | undefined) => {
    if (r) rows.push(r);
  };
  const scenarios = (opt('scenarios')?.split(',') ?? ['first', 'replay', 'storm']) as Scenario[];
  for (const adapter of flag('no-matrix') ? [] : adapters) {
    const runtime = runtimeOf(adapter);
    if (runtime && !runtimeBinary(ROOT, runtime)) {
      skipped.push(`adapter ${adapter}: ${runtime} is not installed under node_modules (dev dependency \`${runtime}\`)`);
      log(`SKIPPED adapter ${adapter}: ${runtime} is not installed under node_modules`);
      continue;
    }
    if (!runtime && baseOf(adapter) !== 'node' && !adapterLanded(baseOf(adapter))) {
      skipped.push(`adapter ${adapter}: adapters/${baseOf(adapter)}.ts has not landed`);
      log(`SKIPPED adapter ${adapter}: adapters/${baseOf(adapter)}.ts has not landed`);
      continue;
    }
    log(`\n${adapter} (${fmt((Date.now() - started) / 1000, 1)} s)`);
    if (baseOf(adapter) === 'nestjs' && !quick) {
      // Nest: the bare handler and ours (and on NestJS 10 the peer) take turns, `repeats`
      // times, so that drift on a shared machine lands on all of them alike; each is
      // reported as its median run.
      const contenders: Spec[] = [{ adapter, impl: 'bare', store: 'none', scenario: 'bare' }];
      for (const scenario of scenarios) {
        if (scenario === 'storm') continue;
        if (storeUrls.memory) contenders.push({ adapter, impl: 'ours', store: 'memory', scenario });
        if (adapter === 'nestjs:10' && peers) contenders.push({ adapter, impl: 'node-idempotency', store: 'memory', scenario });
      }
      for (const r of await measureInTurns(contenders)) push(r);
      continue;
    }
    // The bare handler, ours on each store and scenario (and beside the Node adapter the
    // floor) take turns, `repeats` times, each reported as its median run: run case after
    // case, the host's drift within a block (up to twice the bare handler's CPU on a
    // shared virtual machine) would land on some cases and not others.
    const block: Spec[] = [{ adapter, impl: 'bare', store: 'none', scenario: 'bare' }];
    // On Express, memory and Redis run in the peer block below, interleaved with the peers.
    const peerStores = adapter === 'express' && peers ? (['memory', 'redis'] as StoreName[]) : [];
    for (const store of stores) {
      if (!storeUrls[store] || peerStores.includes(store)) continue;
      if (styled(adapter) && store !== 'memory') continue;
      for (const scenario of scenarios) {
        // Quick: the Node adapter's three scenarios; other adapters first execution only.
        if (quick && adapter !== 'node' && scenario !== 'first') continue;
        if (styled(adapter) && scenario === 'storm') continue;
        block.push({ adapter, impl: 'ours', store, scenario, withBurst: scenario === 'storm' });
      }
    }
    // The floor (a minimal Map-backed layer) beside the Node adapter: what the job costs here.
    if (adapter === 'node') {
      for (const scenario of scenarios) {
        if (scenario === 'storm' || (quick && scenario !== 'first')) continue;
        block.push({ adapter, impl: 'floor', store: 'none', scenario });
      }
    }
    for (const r of await measureInTurns(block)) push(r);
    if (peerStores.length > 0) {
      // Ours and the peers take turns, `repeats` times each, and the median run (by req/s)
      // is reported: single runs on a shared 2-core machine swing by ±30 %.
      for (const store of peerStores) {
        if (store === 'redis' && !redisUrl) continue;
        if (quick && store === 'redis') continue;
        for (const scenario of quick ? (['first'] as Scenario[]) : scenarios) {
          const contenders: Spec[] = [];
          if (storeUrls[store]) contenders.push({ adapter, impl: 'ours', store, scenario });
          if (store === 'memory' && expressIdempotencyPeer) contenders.push({ adapter, impl: 'express-idempotency', store, scenario });
          contenders.push({ adapter, impl: 'node-idempotency', store, scenario });
          const samples = new Map<Spec, Row[]>(contenders.map((c) => [c, []]));
          for (let i = 0; i < repeats; i++) {
            for (const c of contenders) {
              // The double-execution burst once per contender (on its last run).
              const r = await measure({ ...c, withBurst: scenario === 'storm' && i === repeats - 1 });
              if (r) samples.get(c)!.push(r);
            }
          }
          for (const [, runs] of samples) {
            if (runs.length === 0) continue;
            const sorted = [...runs].sort((a, b) => a.reqPerSec - b.reqPerSec);
            const median: Row = { ...sorted[Math.floor((sorted.length - 1) / 2)]! };
            median.samples = runs.map((r) => Math.round(r.reqPerSec));
            median.burst = runs.find((r) => r.burst)?.burst;
            median.doubleExecutions = runs.reduce((n, r) => n + r.doubleExecutions, 0);
            push(median);
          }
        }
      }
    }
    // After the peer block (Express), a second bare run closes it: the ratio uses both, so
    // drift over the block shows. Elsewhere the bare handler took its turns with the rest.
    if (!quick && peerStores.length > 0) push(await measureMedian({ adapter, impl: 'bare', store: 'none', scenario: 'bare' }));
  }

  let rt: RoundTripRow[] = [];
  if (roundTrips) {
    log(`\nround trips per request, counted (${fmt((Date.now() - started) / 1000, 1)} s)`);
    if (redisNote) log(`  note: ${redisNote}`);
    rt = await countRoundTrips();
  }
  let pairs: PairsReport | undefined;
  if (pairsPart) {
    log(`\nstore client CPU per claim + complete pair, 32 concurrent callers (${fmt((Date.now() - started) / 1000, 1)} s)`);
    pairs = runPairs();
  }
  let transactions: BenchResults['transactions'];
  if (transactionsPart && storeUrls.postgres) {
    log(`\neffect and record in one transaction, raw pg and Drizzle (${fmt((Date.now() - started) / 1000, 1)} s)`);
    transactions = runTransactions();
  }
  const waiting: WaitingRow[] = [];
  if (waitingPart) {
    log(`\nwaiting duplicates: store operations and wake-up delay (${fmt((Date.now() - started) / 1000, 1)} s)`);
    for (const store of ['redis', 'postgres', 'sqlite'] as const) {
      const url = storeUrls[store];
      if (!url) continue;
      try {
        const rows = await measureWaiting({
          store,
          url,
          namespace: NAMESPACE,
          durations: quick ? [200, 1000] : [100, 300, 1000, 1800],
          keys: quick ? 10 : 40,
          batch: 10,
          log,
        });
        waiting.push(...rows);
        for (const r of rows) if (r.bad > 0) problems.push(`waiting ${store} handler ${r.handlerMs} ms: ${r.bad} keys had a 409 or 5xx answer`);
      } catch (error) {
        problems.push(`waiting ${store}: ${(error as Error).message}`);
      }
    }
  }
  let fp: FingerprintResult | undefined;
  if (fingerprint) {
    log(`\nfingerprint cost (${fmt((Date.now() - started) / 1000, 1)} s)`);
    fp = runFingerprint();
  }
  let enc: EncryptionResult | undefined;
  if (encryption) {
    log(`\nencryption at rest, CPU µs (${fmt((Date.now() - started) / 1000, 1)} s)`);
    enc = runEncryption();
  }
  let breakdown: BreakdownRow[] | undefined;
  if (fingerprint) {
    log(`\nwhere the time goes, in-process CPU µs per call (${fmt((Date.now() - started) / 1000, 1)} s)`);
    breakdown = runBreakdownChild();
  }
  const loadAfter = os.loadavg();
  await tearDownStores();

  const results: BenchResults = {
    mode: quick ? 'quick' : 'full',
    command: `npm run bench${argv.length ? ` -- ${argv.join(' ')}` : ''}`,
    date: new Date().toISOString(),
    durationS,
    warmupS,
    connections,
    elapsedS: (Date.now() - started) / 1000,
    loadBefore,
    loadAfter,
    machine: machine(),
    rows,
    roundTrips: rt,
    pairs,
    transactions,
    waiting,
    fingerprint: fp,
    encryption: enc,
    breakdown,
    skipped,
    notes: [`servers ${how}`, ...(redisNote ? [redisNote] : []), ...notes],
    problems,
  };
  const md = renderMarkdown(results);
  log(`\n${md.split('\n').filter((l) => l.startsWith('|') || l.startsWith('#')).length} table lines rendered`);
  if (write) {
    mkdirSync(path.join(ROOT, 'bench/results'), { recursive: true });
    writeFileSync(path.join(ROOT, `bench/results/${results.mode}.json`), `${JSON.stringify(results, null, 1)}\n`);
    writeDocs(results);
  } else {
    log(md);
  }
  log(`\nelapsed ${fmt((Date.now() - started) / 1000, 1)} s; load average after: ${loadAfter.map((l) => l.toFixed(2)).join(' ')}`);
  if (problems.length > 0) {
    log(`\n${problems.length} PROBLEM(S):`);
    for (const p of problems) log(`  - ${p}`);
    process.exitCode = 1;
  } else log('no errors, no double executions');
}

if (flag('store-cost')) {
  // What each request costs Redis, PostgreSQL and MariaDB themselves (bench/store-cost.ts).
  const { renderStoreCost, runStoreCost } = await import('./store-cost.js');
  const results = await runStoreCost(argv);
  mkdirSync(path.join(ROOT, 'bench/results'), { recursive: true });
  writeFileSync(path.join(ROOT, `bench/results/store-cost${quick ? '-quick' : ''}.json`), `${JSON.stringify(results, null, 1)}\n`);
  log(`\n${renderStoreCost(results)}`);
} else if (flag('render')) {
  // Re-render the docs from the last full run's results, without measuring.
  const file = path.join(ROOT, `bench/results/${quick ? 'quick' : 'full'}.json`);
  writeDocs(JSON.parse(readFileSync(file, 'utf8')) as BenchResults);
} else {
  main().catch(async (error: unknown) => {
    console.error(error);
    await tearDownStores().catch(() => {});
    process.exit(1);
  });
}
