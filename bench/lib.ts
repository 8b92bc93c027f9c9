/**
 * Harness pieces: spawn a benchmark server in its own process, drive it with autocannon
 * from this one, fire duplicate storms, read Redis command counters.
 * @module
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import { runtimeArgs, runtimeBinary, type RuntimeName } from './runtimes.js';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));

export interface ServerHandle {
  port: number;
  url: string;
  /** The server's stderr so far (500s print their errors there). */
  stderr(): string;
  /** Server counters; per-key figures only for keys starting with `prefix`. */
  stats(prefix?: string): Promise<ServerStats>;
  stop(): Promise<void>;
  /** Send the server a signal (SIGUSR2 starts and stops heap sampling under `--heap-sample`). */
  signal(name: NodeJS.Signals): void;
}

export interface ServerStats {
  executions: number;
  keys: number;
  keyedExecutions: number;
  doubleExecutions: number;
  maxRssBytes: number;
  rssBytes: number;
  cpuMicros: number;
  cpuSystemMicros: number;
  pgQueries?: number;
  pgByKind?: Record<string, number>;
}

export interface ServerEnv {
  ADAPTER: string;
  IMPL: string;
  STYLE?: string;
  STORE_URL?: string;
  PEER_STORE?: string;
  REDIS_URL?: string;
  NAMESPACE?: string;
  COUNT_PG?: '1';
  COUNT_KEYS?: '1';
  COUNT_OPS?: '1';
  /** Bun or Deno instead of Node: bench/runtime-server.ts on the runtime's own server. */
  RUNTIME?: RuntimeName;
}

const entries: Record<'server' | 'runtime-server' | 'fingerprint' | 'breakdown' | 'pairs' | 'encryption' | 'transactions', string[]> = {
  server: ['--import', 'tsx', 'bench/server.ts'],
  // Run by Bun or Deno, not Node: the last element is the script (Bun runs the TypeScript itself).
  'runtime-server': ['bench/runtime-server.ts'],
  fingerprint: ['--import', 'tsx', 'bench/fingerprint.ts'],
  breakdown: ['--import', 'tsx', 'bench/breakdown.ts'],
  pairs: ['--import', 'tsx', 'bench/pairs.ts'],
  encryption: ['--import', 'tsx', 'bench/encryption.ts'],
  transactions: ['--import', 'tsx', 'bench/transactions.ts'],
};

/** The node arguments that run a bench entry (bundled when `bundleEntries()` succeeded). */
export const entryArgs = (name: keyof typeof entries): string[] => entries[name];

/**
 * Bundle the bench entries with esbuild (as tsup builds the package: no keep-names
 * helpers, no loader thread), so they run the code as shipped and start fast. Packages
 * stay external and load from node_modules. Without esbuild they run under tsx.
 */
export async function bundleEntries(): Promise<string> {
  if (process.env.BENCH_SERVER) {
    // A server bundle built elsewhere (e.g. to compare an experimental change).
    entries.server = [path.resolve(process.env.BENCH_SERVER)];
  }
  try {
    const esbuild = await import('esbuild');
    // In the checkout, not in node_modules: a worktree whose node_modules links to another
    // checkout's would otherwise overwrite that checkout's bundles (and run them).
    const outdir = path.join(ROOT, 'bench/.build');
    for (const name of Object.keys(entries) as (keyof typeof entries)[]) {
      if (name === 'server' && process.env.BENCH_SERVER) continue;
      const outfile = path.join(outdir, `${name}.mjs`);
      await esbuild.build({
        entryPoints: [path.join(ROOT, `bench/${name}.ts`)],
        outfile,
        bundle: true,
        platform: 'node',
        format: 'esm',
        target: 'node20',
        packages: 'external',
        sourcemap: 'linked',
        logLevel: 'error',
      });
      entries[name] = [outfile];
    }
    return `bundled with esbuild ${esbuild.version}${process.env.BENCH_SERVER ? ` (server from BENCH_SERVER=${process.env.BENCH_SERVER})` : ''}`;
  } catch (error) {
    return `run under tsx (esbuild failed: ${(error as Error).message.split('\n')[0]})`;
  }
}

/**
 * Cores for the server and for the load generator (this process), when the machine has two
 * or more and `taskset` runs: the server on the last core, this process (autocannon, and
 * the child benches it starts) on the others, so the generator never takes the server's
 * core. `undefined` when the run cannot pin (one core, no taskset): the note says so.
 */
export interface Pinning {
  server: string;
  generator: string;
}

let pinning: Pinning | undefined;

/** Pin this process (all its threads) to the generator's cores; returns what was done, or why not. */
export function pinCores(): { pinning?: Pinning; note: string } {
  const cores = os.cpus().length;
  if (cores < 2) return { note: `not pinned: the machine has ${cores} core` };
  const server = String(cores - 1);
  const generator = cores === 2 ? '0' : `0-${cores - 2}`;
  try {
    execFileSync('taskset', ['-a', '-p', '-c', generator, String(process.pid)], { stdio: 'ignore' });
    execFileSync('taskset', ['-c', server, 'true'], { stdio: 'ignore' });
  } catch (error) {
    return { note: `not pinned: taskset failed (${(error as Error).message.split('\n')[0]})` };
  }
  pinning = { server, generator };
  return { pinning, note: `servers pinned to core ${server}, the load generator (autocannon in the bench process) to core ${generator} (taskset)` };
}

/** Start the benchmark server in a child process; resolves once it listens. */
export function startServer(
  env: ServerEnv,
  options: { cpuProfDir?: string; cpuProfName?: string; heapSampleOut?: string; timeoutMs?: number } = {},
): Promise<ServerHandle> {
  const nodeArgs: string[] = [];
  if (options.heapSampleOut) nodeArgs.push('--import', './bench/heap-sampling.mjs');
  // `nestjs:10`: NestJS 10 and @node-idempotency/nestjs from the bench/nest10 workspace.
  const loader = env.ADAPTER === 'nestjs' && env.STYLE === '10';
  const profileName = options.cpuProfName && `${options.cpuProfName.replace(/[^\w.-]+/g, '_')}-${Date.now()}.cpuprofile`;
  // A module loader's hooks run on a thread of their own, which writes a profile too: under
  // one --cpu-prof-name the two would overwrite each other, so such a server profiles into a
  // directory of its own and its main thread's profile is moved to the case's name on stop.
  if (options.cpuProfDir && loader) mkdirSync(options.cpuProfDir, { recursive: true });
  const threadsDir = options.cpuProfDir && loader ? mkdtempSync(path.join(options.cpuProfDir, '.threads-')) : undefined;
  if (options.cpuProfDir) {
    nodeArgs.push('--cpu-prof', `--cpu-prof-dir=${threadsDir ?? options.cpuProfDir}`);
    // V8 samples every 1,000 µs by default: too coarse to compare two layers a few µs apart.
    if (process.env.BENCH_CPU_PROF_INTERVAL) nodeArgs.push(`--cpu-prof-interval=${process.env.BENCH_CPU_PROF_INTERVAL}`);
    if (profileName && !threadsDir) nodeArgs.push(`--cpu-prof-name=${profileName}`);
  }
  if (loader) nodeArgs.push('--import', './bench/nest10/register.mjs');
  let executable = process.execPath;
  let argv = [...nodeArgs, ...entries.server];
  if (env.RUNTIME) {
    const binary = runtimeBinary(ROOT, env.RUNTIME);
    if (!binary) return Promise.reject(new Error(`${env.RUNTIME} is not installed under node_modules`));
    executable = binary;
    argv = runtimeArgs(env.RUNTIME, entries['runtime-server'].at(-1)!);
    // Bun writes a CPU profile on exit as Node does (Deno has no such flag: --cpu-prof skips it).
    if (env.RUNTIME === 'bun' && options.cpuProfDir) argv.unshift('--cpu-prof', `--cpu-prof-dir=${options.cpuProfDir}`);
  }
  const [command, args] = pinning ? ['taskset', ['-c', pinning.server, executable, ...argv]] : [executable, argv];
  const child: ChildProcess = spawn(command, args, {
    cwd: ROOT,
    env: { ...process.env, ...env, ...(options.heapSampleOut ? { HEAP_SAMPLE_OUT: options.heapSampleOut } : {}) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  let stdout = '';
  child.stderr!.on('data', (d: Buffer) => {
    if (stderr.length < 100_000) stderr += d.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const label = `${env.IMPL} ${env.ADAPTER}${env.STORE_URL ? ` ${env.STORE_URL}` : ''}${env.PEER_STORE ? ` (${env.PEER_STORE})` : ''}`;

  return new Promise<ServerHandle>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`server ${label} did not start within ${options.timeoutMs ?? 20_000} ms\n${stderr}`));
    }, options.timeoutMs ?? 20_000);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`server ${label} exited with code ${code} before it was ready\n${stderr}`));
    });
    child.stdout!.on('data', (d: Buffer) => {
      stdout += d.toString();
      const line = stdout.split('\n').find((l) => l.startsWith('{"ready"'));
      if (!line) return;
      clearTimeout(timer);
      const { port } = JSON.parse(line) as { port: number };
      const url = `http://127.0.0.1:${port}`;
      resolve({
        port,
        url,
        stderr: () => stderr,
        async stats(prefix = '') {
          const res = await fetch(`${url}/__stats?prefix=${encodeURIComponent(prefix)}`);
          return (await res.json()) as ServerStats;
        },
        signal(name) {
          if (child.exitCode === null) child.kill(name);
        },
        async stop() {
          if (child.exitCode === null) child.kill('SIGTERM');
          const code = await Promise.race([exited, new Promise((r) => setTimeout(r, 5000, 'timeout'))]);
          if (code === 'timeout') {
            child.kill('SIGKILL');
            await exited;
          }
          if (threadsDir) keepMainThreadProfile(threadsDir, path.join(options.cpuProfDir!, profileName ?? `${path.basename(threadsDir)}.cpuprofile`));
        },
      });
    });
  });
}

/** Node names a profile CPU.<date>.<time>.<pid>.<thread id>.<seq>.cpuprofile; the main thread's id is 0. */
function keepMainThreadProfile(dir: string, to: string): void {
  const main = readdirSync(dir).find((file) => /^CPU\.\d+\.\d+\.\d+\.0\.\d+\.cpuprofile$/.test(file));
  if (main) renameSync(path.join(dir, main), to);
  rmSync(dir, { recursive: true, force: true });
}

export type Scenario = 'bare' | 'first' | 'replay' | 'storm';

/** Requests that share one key in a storm: the first executes, the rest wait or replay. */
export const STORM_GROUP = 10;

export const ORDER_BODY = JSON.stringify({
  amount: 1000,
  currency: 'EUR',
  customer: 'cus_4QFJOjw2pOmAGJ',
  items: [
    { sku: 'sku_basic', quantity: 2, price: 250 },
    { sku: 'sku_pro', quantity: 1, price: 500 },
  ],
  metadata: { orderRef: 'A-1001', channel: 'web' },
});

export interface LoadResult {
  requests: number;
  reqPerSec: number;
  p50: number;
  p99: number;
  non2xx: number;
  errors: number;
  timeouts: number;
  statusCodes: Record<string, number>;
  durationS: number;
}

export interface LoadOptions {
  durationS: number;
  connections: number;
  /** Prefix for the idempotency keys of this run, so runs never share keys. */
  keyPrefix: string;
}

/** A priming request for the replay scenario (the key's first execution). */
export async function prime(url: string, key: string): Promise<number> {
  const res = await fetch(`${url}/orders`, {
    method: 'POST',
    redirect: 'manual',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: ORDER_BODY,
  });
  await res.arrayBuffer();
  return res.status;
}

/** Drive POST /orders with autocannon (this process; the server is another). */
export async function load(url: string, scenario: Scenario, o: LoadOptions): Promise<LoadResult> {
  let i = 0;
  const key =
    scenario === 'replay'
      ? () => `${o.keyPrefix}-replay`
      : scenario === 'storm'
        ? () => `${o.keyPrefix}-storm-${Math.floor(i++ / STORM_GROUP)}`
        : () => `${o.keyPrefix}-${i++}`;
  const result = await autocannon({
    url: `${url}/orders`,
    method: 'POST',
    connections: o.connections,
    pipelining: 1,
    duration: o.durationS,
    timeout: 10,
    headers: { 'content-type': 'application/json' },
    body: ORDER_BODY,
    requests: [
      {
        setupRequest(req: { headers: Record<string, string> }) {
          req.headers['idempotency-key'] = key();
          return req;
        },
      } as never,
    ],
  });
  const statusCodes: Record<string, number> = {};
  for (const [code, s] of Object.entries(result.statusCodeStats ?? {})) statusCodes[code] = Number((s as { count: number }).count);
  return {
    requests: result.requests.total,
    reqPerSec: result.requests.total / result.duration,
    p50: result.latency.p50,
    p99: result.latency.p99,
    non2xx: result.non2xx,
    errors: result.errors,
    timeouts: result.timeouts,
    statusCodes,
    durationS: result.duration,
  };
}

export interface BurstResult {
  keys: number;
  perKey: number;
  executions: number;
  doubleExecutions: number;
  statusCodes: Record<string, number>;
}

/**
 * The double-execution count: `keys` keys, each sent `perKey` times at once while the
 * handler takes `delayMs`, all keys together. Executions come from the server's counter.
 */
export async function burst(server: ServerHandle, o: { keys: number; perKey: number; delayMs: number; keyPrefix: string }): Promise<BurstResult> {
  const prefix = `${o.keyPrefix}-burst-`;
  const statusCodes: Record<string, number> = {};
  const send = async (key: string) => {
    try {
      const res = await fetch(`${server.url}/orders`, {
        method: 'POST',
        redirect: 'manual',
        headers: { 'content-type': 'application/json', 'idempotency-key': key, 'x-delay-ms': String(o.delayMs) },
        body: ORDER_BODY,
      });
      await res.arrayBuffer();
      statusCodes[res.status] = (statusCodes[res.status] ?? 0) + 1;
    } catch {
      statusCodes.error = (statusCodes.error ?? 0) + 1;
    }
  };
  const all: Promise<void>[] = [];
  for (let k = 0; k < o.keys; k++) for (let j = 0; j < o.perKey; j++) all.push(send(`${prefix}${k}`));
  await Promise.all(all);
  const after = await server.stats(prefix);
  return { keys: o.keys, perKey: o.perKey, executions: after.keyedExecutions, doubleExecutions: after.doubleExecutions, statusCodes };
}

/** Send POST /orders `n` times, one after another (round-trip counting). */
export async function sequential(url: string, keys: string[], headers: Record<string, string> = {}): Promise<number[]> {
  const statuses: number[] = [];
  for (const key of keys) {
    const res = await fetch(`${url}/orders`, {
      method: 'POST',
      redirect: 'manual',
      headers: { 'content-type': 'application/json', 'idempotency-key': key, ...headers },
      body: ORDER_BODY,
    });
    await res.arrayBuffer();
    statuses.push(res.status);
  }
  return statuses;
}

/** Whether something listens at host:port. */
export function reachable(host: string, port: number, timeoutMs = 1000): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}

/** One Redis command over a raw socket (RESP), returning a bulk-string reply as text. */
export function redisCommand(url: string, ...args: string[]): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: hostname, port: Number(port || 6379) });
    let data = Buffer.alloc(0);
    socket.setTimeout(5000, () => {
      socket.destroy();
      reject(new Error('redis command timed out'));
    });
    socket.once('error', reject);
    socket.on('data', (chunk: Buffer) => {
      data = Buffer.concat([data, chunk]);
      const text = data.toString('utf8');
      const type = text[0];
      if (type === '+' || type === '-' || type === ':') {
        if (!text.includes('\r\n')) return;
        socket.end();
        if (type === '-') reject(new Error(text.trim()));
        else resolve(text.slice(1).trim());
      } else if (type === '$') {
        const eol = text.indexOf('\r\n');
        if (eol === -1) return;
        const len = Number(text.slice(1, eol));
        if (len < 0) {
          socket.end();
          resolve('');
          return;
        }
        const start = data.indexOf('\r\n') + 2;
        if (data.length < start + len) return;
        socket.end();
        resolve(data.subarray(start, start + len).toString('utf8'));
      }
    });
    socket.write(`*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`);
  });
}

/**
 * Count the commands clients send to Redis (network round trips), by name, with MONITOR.
 * INFO commandstats would also count the commands a Lua script runs inside Redis; MONITOR
 * tags those `[0 lua]`, so they are counted apart. `stop()` first sends a marker (ECHO)
 * and waits for it, so every command before it has been seen.
 */
export async function redisMonitor(url: string): Promise<{ stop(): Promise<{ client: Record<string, number>; lua: Record<string, number> }> }> {
  const { hostname, port } = new URL(url);
  const socket = net.connect({ host: hostname, port: Number(port || 6379) });
  const client: Record<string, number> = {};
  const lua: Record<string, number> = {};
  const marker = `bench-marker-${Math.random().toString(36).slice(2)}`;
  let buffer = '';
  let started!: () => void;
  let markerSeen!: () => void;
  const ok = new Promise<void>((r) => (started = r));
  const seen = new Promise<void>((r) => (markerSeen = r));
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => {
    buffer += chunk;
    let eol: number;
    while ((eol = buffer.indexOf('\r\n')) !== -1) {
      const line = buffer.slice(0, eol);
      buffer = buffer.slice(eol + 2);
      if (line === '+OK') {
        started();
        continue;
      }
      const m = /^\+[\d.]+ \[\d+ ([^\]]+)\] "([^"]+)"/.exec(line);
      if (!m) continue;
      const name = m[2]!.toLowerCase();
      if (name === 'echo' && line.includes(marker)) {
        markerSeen();
        continue;
      }
      const into = m[1] === 'lua' ? lua : client;
      into[name] = (into[name] ?? 0) + 1;
    }
  });
  socket.write('*1\r\n$7\r\nMONITOR\r\n');
  await ok;
  return {
    async stop() {
      await redisCommand(url, 'ECHO', marker);
      await seen;
      socket.destroy();
      return { client, lua };
    },
  };
}

/** A private redis-server for the run (exact command counts, no other clients). */
export async function startPrivateRedis(): Promise<{ url: string; stop(): Promise<void> } | undefined> {
  const port = await freePort();
  let child: ChildProcess;
  try {
    child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
      stdio: 'ignore',
    });
  } catch {
    return undefined;
  }
  const failed = new Promise<boolean>((resolve) => {
    child.once('error', () => resolve(true));
    child.once('exit', () => resolve(true));
  });
  for (let i = 0; i < 50; i++) {
    if (await reachable('127.0.0.1', port, 200)) {
      return {
        url: `redis://127.0.0.1:${port}`,
        async stop() {
          child.kill('SIGTERM');
          await Promise.race([failed, new Promise((r) => setTimeout(r, 3000))]);
        },
      };
    }
    if (await Promise.race([failed, new Promise<false>((r) => setTimeout(r, 100, false))])) return undefined;
  }
  child.kill('SIGKILL');
  return undefined;
}
