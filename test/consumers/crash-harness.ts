/**
 * The crash proof every broker recipe runs, the way the RabbitMQ test
 * does: several consumer processes on one shared store, every message published at least
 * twice, consumers SIGKILLed at random moments while they hold messages (and restarted,
 * under the same identity where the broker redelivers to it), CPU-bound load processes
 * beside them, and the effects counted in a PostgreSQL table that has no unique constraint.
 *
 * A consumer process (a `*-worker.ts` beside this file, bundled once) prints JSON lines:
 * `ready`; `delivery` {id, delivery}; `run` {id} when the handler starts; `effect` {id}
 * after its insert; `settle` {id, action, outcome, code}; `stopped`. Its handler
 * inserts one row (message_id, worker, pid) per run: autocommit on the plain path, inside
 * the store's transaction with `transaction: true`.
 *
 * What must hold: every message has an effect (nothing lost); with `transaction: true`
 * exactly one (nothing run twice, at any kill point); on the plain path a second row is
 * allowed only where the first came from a process killed after its insert and before it
 * settled that message: the window between the effect and the record that
 * docs/consumers.md names, counted and reported.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import type pg from 'pg';
import { seededRandom } from '../helpers/random.js';

export interface Line {
  w: string;
  pid: number;
  ev: string;
  id?: string;
  action?: string;
  outcome?: string;
  code?: string;
  delivery?: number;
  [field: string]: unknown;
}

/** A consumer process whose JSON stdout lines are collected. */
export class Proc {
  readonly lines: Line[] = [];
  readonly stderr: string[] = [];
  readonly exited: Promise<number | string | null>;
  readonly #waiters = new Set<() => void>();

  constructor(
    readonly name: string,
    readonly child: ChildProcess,
    sink: Line[],
  ) {
    createInterface({ input: child.stdout! }).on('line', (text) => {
      let line: Line;
      try {
        line = JSON.parse(text) as Line;
      } catch {
        this.stderr.push(text);
        return;
      }
      this.lines.push(line);
      sink.push(line);
      for (const wake of this.#waiters) wake();
    });
    createInterface({ input: child.stderr! }).on('line', (text) => this.stderr.push(text));
    this.exited = new Promise((resolve) =>
      child.once('exit', (code, signal) => {
        resolve(signal ?? code);
        for (const wake of this.#waiters) wake();
      }),
    );
  }

  get alive(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  waitFor(what: string, done: () => boolean, timeoutMs = 30_000): Promise<void> {
    return new Promise((resolve, reject) => {
      const check = () => {
        if (done()) finish();
        else if (!this.alive) {
          const last = this.lines.slice(-5).map((l) => JSON.stringify(l));
          finish(new Error(`${this.name} exited (${this.child.exitCode ?? this.child.signalCode}) before ${what}:\n${[...this.stderr, ...last].join('\n')}`));
        }
      };
      const finish = (error?: Error) => {
        clearTimeout(timer);
        this.#waiters.delete(check);
        if (error) reject(error);
        else resolve();
      };
      const timer = setTimeout(() => finish(new Error(`${this.name}: timed out waiting for ${what}\n${this.stderr.join('\n')}`)), timeoutMs);
      this.#waiters.add(check);
      check();
    });
  }

  /** Messages this process received and has not settled for good yet. */
  holding(): string[] {
    const open = new Map<string, number>();
    for (const l of this.lines) {
      if (!l.id) continue;
      if (l.ev === 'delivery') open.set(l.id, (open.get(l.id) ?? 0) + 1);
      else if (l.ev === 'settle') open.set(l.id, (open.get(l.id) ?? 1) - 1);
    }
    return [...open].filter(([, n]) => n > 0).map(([id]) => id);
  }

  /** Messages whose handler is running in this process right now. */
  inHandler(): string[] {
    const running = new Set<string>();
    for (const l of this.lines) {
      if (l.ev === 'run') running.add(l.id!);
      else if (l.ev === 'settle') running.delete(l.id!);
    }
    return [...running];
  }

  kill(signal: NodeJS.Signals): void {
    if (this.alive) this.child.kill(signal);
  }
}

/** Bundle a worker once into plain JavaScript (packages stay external): a restart then costs little CPU. */
export async function bundleWorker(source: URL): Promise<{ file: string; dispose(): void }> {
  const file = fileURLToPath(new URL(`../../node_modules/.cache/ik-consumer-${randomUUID().slice(0, 8)}.mjs`, import.meta.url));
  await build({ entryPoints: [fileURLToPath(source)], outfile: file, bundle: true, packages: 'external', platform: 'node', format: 'esm', target: 'node20', logLevel: 'error' });
  return { file, dispose: () => rmSync(file, { force: true }) };
}

/** CPU-bound processes spinning until stopped (or `maxMs` at most, even if this process dies). */
export function startLoad(count: number, maxMs: number): { stop(): Promise<void> } {
  const children = Array.from({ length: count }, () =>
    spawn(process.execPath, ['-e', `const end = Date.now() + ${maxMs}; let x = 0; while (Date.now() < end) x = (x + Math.sqrt(x + 1)) % 1e9;`], { stdio: 'ignore' }),
  );
  return {
    stop: () =>
      Promise.all(
        children.map(
          (child) =>
            new Promise<void>((resolve) => {
              if (child.exitCode !== null || child.signalCode !== null) return resolve();
              child.once('exit', () => resolve());
              child.kill('SIGKILL');
            }),
        ),
      ).then(() => undefined),
  };
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export interface CrashProofOptions {
  /** For the figures: 'nats', 'bullmq', 'mqtt'. */
  system: string;
  mode: 'plain' | 'transaction';
  ids: string[];
  db: pg.Pool | pg.Client;
  /** The effects table (message_id, worker, pid). */
  table: string;
  /** Consumer identities; a killed one is restarted under its name. */
  workers: string[];
  start(name: string, sink: Line[]): Proc;
  /** Publish every message (at least twice); may keep publishing in the background. */
  publish(): Promise<void>;
  /** At most this many kills; the test asserts how many happened (they need messages in flight). */
  kills: number;
  /** Consumers killed at random moments between these bounds (ms). */
  killEveryMs: [number, number];
  /** Wait after a kill before the restart (a restarted process is what redelivers, for MQTT). */
  restartAfterMs?: number;
  loadProcesses?: number;
  /** Whether the broker has nothing left to deliver (no message pending or unacknowledged). */
  drained?: () => Promise<boolean>;
  /** The whole run's bound: past it the test fails with what it saw. */
  timeoutMs: number;
  seed?: number;
}

export interface CrashFigures {
  system: string;
  mode: string;
  messages: number;
  published: number;
  deliveries: number;
  minDeliveriesPerMessage: number;
  kills: number;
  killsHolding: number;
  killsInHandler: number;
  heldByKilled: number;
  /** Messages a killed consumer had inside its handler that another process settled afterwards. */
  recoveredFromKilled: number;
  runs: number;
  replays: number;
  conflicts: number;
  handlerErrors: number;
  terms: number;
  effects: number;
  distinctIds: number;
  windowHits: number;
  restarts: number;
  /** BullMQ: lock renewals that failed on the loaded machine (the job went to another worker meanwhile). */
  locksLost: number;
  loadProcesses: number;
  seconds: number;
}

/** Run the crash proof; returns the figures and every line, the caller asserts. */
export async function crashProof(options: CrashProofOptions & { published: number }): Promise<{ figures: CrashFigures; lines: Line[]; procs: Proc[]; problems: string[] }> {
  const started = Date.now();
  const random = seededRandom(options.seed ?? Math.floor(Math.random() * 2 ** 31));
  const lines: Line[] = [];
  const procs: Proc[] = [];
  const current = new Map<string, Proc>();
  const load = startLoad(options.loadProcesses ?? 2, options.timeoutMs + 10_000);
  const killed: { proc: Proc; holding: string[]; inHandler: string[]; at: number }[] = [];
  let restarts = 0;
  const spawnWorker = (name: string) => {
    const proc = options.start(name, lines);
    procs.push(proc);
    current.set(name, proc);
    return proc;
  };
  const ready = (proc: Proc) => proc.waitFor('ready', () => proc.lines.some((l) => l.ev === 'ready'), 30_000);
  const settledDone = () => new Set(lines.filter((l) => l.ev === 'settle' && l.outcome === 'done').map((l) => l.id!));
  const deliveredTwice = () => {
    const seen = new Map<string, number>();
    for (const l of lines) if (l.ev === 'delivery') seen.set(l.id!, (seen.get(l.id!) ?? 0) + 1);
    return options.ids.every((id) => (seen.get(id) ?? 0) >= 2);
  };
  try {
    await Promise.all(options.workers.map((name) => ready(spawnWorker(name))));
    if (process.env.CONSUMER_CRASH_DEBUG) console.log(`[${options.system}/${options.mode}] consumers ready after ${Date.now() - started} ms`);
    const publishing = options.publish().then(() => {
      if (process.env.CONSUMER_CRASH_DEBUG) console.log(`[${options.system}/${options.mode}] published after ${Date.now() - started} ms; ${settledDone().size} settled`);
    });
    const deadline = started + options.timeoutMs;
    let nextKill = Date.now() + options.killEveryMs[0];
    for (;;) {
      if (Date.now() > deadline) {
        const missing = options.ids.filter((id) => !settledDone().has(id));
        throw new Error(`${options.system}/${options.mode}: ${missing.length} messages never settled within ${options.timeoutMs} ms (e.g. ${missing.slice(0, 5).join(', ')}); ${killed.length} kills\n${procs.flatMap((p) => p.stderr).slice(-20).join('\n')}`);
      }
      if (settledDone().size === options.ids.length && deliveredTwice() && [...current.values()].every((p) => !p.alive || p.holding().length === 0)) {
        if (!options.drained || (await options.drained())) break;
      }
      if (killed.length < options.kills && Date.now() >= nextKill) {
        // A consumer that holds messages now, preferably one inside its handler.
        const live = [...current.values()].filter((p) => p.alive && p.holding().length > 0);
        const inside = live.filter((p) => p.inHandler().length > 0);
        const pool = inside.length > 0 ? inside : live;
        if (pool.length > 0) {
          const victim = pool[Math.floor(random() * pool.length)]!;
          killed.push({ proc: victim, holding: victim.holding(), inHandler: victim.inHandler(), at: Date.now() });
          victim.kill('SIGKILL');
          await victim.exited;
          const name = victim.name;
          setTimeout(() => {
            restarts++;
            void ready(spawnWorker(name)).catch(() => undefined);
          }, options.restartAfterMs ?? 100);
          nextKill = Date.now() + options.killEveryMs[0] + random() * (options.killEveryMs[1] - options.killEveryMs[0]);
        }
      }
      await sleep(20);
    }
    await publishing;
    if (process.env.CONSUMER_CRASH_DEBUG) console.log(`[${options.system}/${options.mode}] all settled and drained after ${Date.now() - started} ms`);
    await sleep(300); // a late duplicate would show now
    const alive = [...current.values()].filter((p) => p.alive);
    // A restarted consumer still starting has no SIGTERM handler yet.
    await Promise.all(alive.map(ready));
    for (const p of alive) p.kill('SIGTERM');
    await Promise.all(alive.map((p) => p.waitFor('stopped', () => p.lines.some((l) => l.ev === 'stopped'), 20_000)));
  } finally {
    for (const p of procs) p.kill('SIGKILL');
    await Promise.all(procs.map((p) => p.exited));
    await load.stop();
  }

  const { rows } = await options.db.query<{ message_id: string; pid: number }>(`SELECT message_id, pid FROM ${options.table} ORDER BY id`);
  const byId = new Map<string, number[]>();
  for (const r of rows) byId.set(r.message_id, [...(byId.get(r.message_id) ?? []), Number(r.pid)]);
  const killedPids = new Set(killed.map((k) => k.proc.child.pid!));
  // A process settled a message only if a settle line of its own follows its last run of
  // it: an earlier settle (a conflict answered before it later ran the handler) does not count.
  const settledBy = (pid: number, id: string) => {
    const own = lines.filter((l) => l.pid === pid && l.id === id);
    let lastRun = -1;
    own.forEach((l, i) => { if (l.ev === 'run') lastRun = i; });
    return own.some((l, i) => i > lastRun && l.ev === 'settle');
  };
  const problems: string[] = [];
  let windowHits = 0;
  for (const [id, pids] of byId) {
    // Every row but the last must be from a process killed before it settled that message.
    for (const pid of pids.slice(0, -1)) {
      if (options.mode === 'plain' && killedPids.has(pid) && !settledBy(pid, id)) {
        windowHits++;
        if (process.env.CONSUMER_CRASH_DEBUG) {
          const t0 = killed.find((k) => k.proc.child.pid === pid)!.at;
          console.log(`[${options.system}/plain] window hit ${id}: ${lines.filter((l) => l.id === id).map((l) => `${l.w}/${l.pid}:${l.ev}:${l.action ?? ''}${l.code ?? ''}@${(l.t as number) - t0}`).join(' ')}`);
        }
      }
      else problems.push(`${id}: ran twice (rows by pids ${pids.join(', ')}; the earlier one was ${killedPids.has(pid) ? 'killed after it settled' : 'not killed'})`);
    }
  }
  for (const l of lines) if (l.ev === 'worker-error') problems.push(`${l.w}: ${String(l.error)}`);
  const deliveriesOf = new Map<string, number>();
  for (const l of lines) if (l.ev === 'delivery') deliveriesOf.set(l.id!, (deliveriesOf.get(l.id!) ?? 0) + 1);
  const count = (pred: (l: Line) => boolean) => lines.filter(pred).length;
  const figures: CrashFigures = {
    system: options.system,
    mode: options.mode,
    messages: options.ids.length,
    published: options.published,
    deliveries: count((l) => l.ev === 'delivery'),
    minDeliveriesPerMessage: Math.min(...options.ids.map((id) => deliveriesOf.get(id) ?? 0)),
    kills: killed.length,
    killsHolding: killed.filter((k) => k.holding.length > 0).length,
    killsInHandler: killed.filter((k) => k.inHandler.length > 0).length,
    heldByKilled: killed.reduce((n, k) => n + k.holding.length, 0),
    recoveredFromKilled: killed.reduce(
      (n, k) => n + k.inHandler.filter((id) => lines.some((l) => l.id === id && l.ev === 'settle' && l.outcome === 'done' && l.pid !== k.proc.child.pid)).length,
      0,
    ),
    runs: count((l) => l.ev === 'run'),
    replays: count((l) => l.ev === 'settle' && l.outcome === 'done' && l.replayed === true),
    // Settlements that met a conflict (nak, delay), or conflicts retried in place (MQTT).
    conflicts: count((l) => (l.ev === 'settle' && l.code === 'request-in-progress') || l.ev === 'conflict'),
    handlerErrors: count((l) => (l.ev === 'settle' && l.outcome === 'failed') || l.ev === 'handler-error'),
    terms: count((l) => l.ev === 'settle' && l.outcome === 'reject'),
    effects: rows.length,
    distinctIds: byId.size,
    windowHits,
    restarts,
    locksLost: count((l) => l.ev === 'lock-lost'),
    loadProcesses: options.loadProcesses ?? 2,
    seconds: (Date.now() - started) / 1000,
  };
  if (process.env.CONSUMER_CRASH_DEBUG) {
    for (const k of killed) {
      for (const id of k.inHandler) {
        const after = lines.filter((l) => l.id === id && (l.t as number) > k.at && l.ev !== 'delivery').map((l) => `${l.ev}:${l.outcome ?? ''}:${l.code ?? ''}@+${(l.t as number) - k.at}`);
        console.log(`[${options.system}/${options.mode}] killed ${k.proc.name} holding ${id} in its handler; then ${after.join(' ')}`);
      }
    }
  }
  const lost = options.ids.filter((id) => !byId.has(id));
  if (lost.length > 0) problems.push(`${lost.length} messages had no effect (lost): ${lost.slice(0, 5).join(', ')}`);
  return { figures, lines, procs, problems };
}
