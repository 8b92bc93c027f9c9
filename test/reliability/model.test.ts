/**
 * Model-based test of the engine: fast-check drives random interleavings
 * of begin / complete / release / renew / clock advance (so leases and records expire)
 * and concurrent begin races for 2–5 actors, over two scopes sharing key names, against
 * a small reference model of SPEC §1. After every step the engine must agree with the
 * model, and the invariants hold:
 * - at most one execution per key per lease (never two live owners; an execute only when
 *   the model says the key is free);
 * - a replay equals the stored response, byte for byte;
 * - no cross-scope read: a replay carries the scope and key it was asked for.
 */
import fc from 'fast-check';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { sqliteStore } from '../../drivers/sqlite.js';
import { memoryStore } from '../../drivers/memory.js';
import { Engine } from '../../src/engine.js';
import { storageKey } from '../../src/key.js';
import type { Lease } from '../../src/lease.js';
import { RequestInProgressError, KeyReusedError, ResponseNotReplayableError } from '../../src/errors.js';
import type { IdempotencyStore, StoredResponse } from '../../src/store.js';
import { figure } from './fixtures/cluster.js';

// Long in real time, so that the engine's renewal timer (every leaseMs/3 of real time)
// never fires during a run: renewal is the explicit `renew` command instead.
const LEASE_MS = 600_000;
const TTL_MS = 4 * LEASE_MS;
const SCOPES = ['tenant-a', 'tenant-b', undefined] as const;
const KEYS = ['k1', "k2'; DROP TABLE t; --"] as const;
const FINGERPRINTS = ['fp-1', 'fp-2'] as const;

type Scope = (typeof SCOPES)[number];
type Outcome = 'execute' | 'replay' | 'conflict' | 'mismatch' | 'not-replayable';

interface ModelRecord {
  state: 'processing' | 'completed';
  fingerprint: string;
  /** Claim id of the owner (processing). */
  owner?: number;
  leaseUntil: number;
  expiresAt: number;
  response?: StoredResponse;
  scope: Scope;
  key: string;
}

interface Model {
  now: number;
  records: Map<string, ModelRecord>;
  /** Actor -> the claim it holds (if any). */
  held: Map<number, { claim: number; skey: string }>;
  nextClaim: number;
  actors: number;
}

interface Real {
  /** One engine and store connection per actor, as if each were its own process. */
  engines: Engine[];
  stores: IdempotencyStore[];
  leases: Map<number, Lease>;
  lost: string[];
}

const dir = mkdtempSync(join(tmpdir(), 'idk-rel-model-'));
let runs = 0;
const stats = { failed: false, runs: 0, commands: 0, executions: 0, replays: 0, conflicts: 0, mismatches: 0, races: 0, lostWrites: 0 };

function live(m: Model, skey: string): ModelRecord | undefined {
  const r = m.records.get(skey);
  if (!r) return undefined;
  const alive = r.state === 'processing' ? r.leaseUntil > m.now : r.expiresAt > m.now;
  if (!alive) {
    m.records.delete(skey);
    return undefined;
  }
  return r;
}

function predict(m: Model, skey: string, fingerprint: string): Outcome {
  const r = live(m, skey);
  if (!r) return 'execute';
  if (r.fingerprint !== fingerprint) return 'mismatch';
  if (r.state === 'processing') return 'conflict';
  return r.response!.body === null ? 'not-replayable' : 'replay';
}

async function realBegin(real: Real, actor: number, key: string, scope: Scope, fingerprint: string) {
  try {
    const acquired = await real.engines[actor]!.acquire(key, scope, fingerprint);
    if (acquired.type === 'execute') return { outcome: 'execute' as const, lease: acquired.lease };
    return { outcome: 'replay' as const, response: acquired.record.response };
  } catch (error) {
    if (error instanceof RequestInProgressError) return { outcome: 'conflict' as const };
    if (error instanceof KeyReusedError) return { outcome: 'mismatch' as const };
    if (error instanceof ResponseNotReplayableError) return { outcome: 'not-replayable' as const };
    throw error;
  }
}

/** The invariant behind "at most one execution per key per lease". */
function checkSingleOwner(m: Model): void {
  const owners = new Map<string, number>();
  for (const { claim, skey } of m.held.values()) {
    const r = live(m, skey);
    if (r?.state === 'processing' && r.owner === claim) owners.set(skey, (owners.get(skey) ?? 0) + 1);
  }
  for (const [skey, n] of owners) expect(n, `live owners of ${skey}`).toBeLessThanOrEqual(1);
}

function checkReplay(response: StoredResponse, scope: Scope, key: string, expected: StoredResponse | undefined): void {
  stats.replays++;
  expect(response.status).toBe(expected!.status);
  expect(response.headers).toEqual(expected!.headers);
  expect(Buffer.from(response.body!).equals(Buffer.from(expected!.body!))).toBe(true);
  // No cross-scope read: the body names the scope and key that stored it.
  const [bodyScope, bodyKey] = JSON.parse(Buffer.from(response.body!).toString('utf8')) as [string | null, string];
  expect(bodyScope).toBe(scope ?? null);
  expect(bodyKey).toBe(key);
}

function applyExecute(m: Model, actor: number, skey: string, scope: Scope, key: string, fingerprint: string): void {
  const claim = m.nextClaim++;
  m.records.set(skey, { state: 'processing', fingerprint, owner: claim, leaseUntil: m.now + LEASE_MS, expiresAt: 0, scope, key });
  m.held.set(actor, { claim, skey });
  stats.executions++;
}

class Begin implements fc.AsyncCommand<Model, Real> {
  constructor(
    readonly actor: number,
    readonly scope: Scope,
    readonly key: string,
    readonly fingerprint: string,
  ) {}
  check(m: Readonly<Model>) {
    return this.actor < m.actors && !m.held.has(this.actor);
  }
  async run(m: Model, real: Real) {
    const skey = storageKey(this.scope, this.key);
    const expected = predict(m, skey, this.fingerprint);
    const expectedResponse = m.records.get(skey)?.response;
    const got = await realBegin(real, this.actor, this.key, this.scope, this.fingerprint);
    expect(got.outcome, this.toString()).toBe(expected);
    if (got.outcome === 'execute') {
      applyExecute(m, this.actor, skey, this.scope, this.key, this.fingerprint);
      real.leases.set(this.actor, got.lease);
    } else if (got.outcome === 'replay') checkReplay(got.response, this.scope, this.key, expectedResponse);
    else if (got.outcome === 'conflict') stats.conflicts++;
    else if (got.outcome === 'mismatch') stats.mismatches++;
    checkSingleOwner(m);
  }
  toString() {
    return `begin(actor ${this.actor}, ${String(this.scope)}, ${this.key}, ${this.fingerprint})`;
  }
}

/** Several actors begin the same key at the same moment: a real race on the store. */
class Race implements fc.AsyncCommand<Model, Real> {
  constructor(
    readonly actors: number[],
    readonly scope: Scope,
    readonly key: string,
    readonly fingerprints: string[],
  ) {}
  check(m: Readonly<Model>) {
    return this.actors.every((a) => a < m.actors && !m.held.has(a));
  }
  async run(m: Model, real: Real) {
    stats.races++;
    const skey = storageKey(this.scope, this.key);
    const before = predict(m, skey, this.fingerprints[0]!);
    const expectedResponse = m.records.get(skey)?.response;
    const results = await Promise.all(this.actors.map((a, i) => realBegin(real, a, this.key, this.scope, this.fingerprints[i]!)));
    const winners = results.flatMap((r, i) => (r.outcome === 'execute' ? [i] : []));
    if (before === 'execute') {
      // The key was free: exactly one racer runs; the others see its claim.
      expect(winners.length, this.toString()).toBe(1);
      const w = winners[0]!;
      results.forEach((r, i) => {
        if (i === w) return;
        expect(r.outcome, this.toString()).toBe(this.fingerprints[i] === this.fingerprints[w] ? 'conflict' : 'mismatch');
      });
      applyExecute(m, this.actors[w]!, skey, this.scope, this.key, this.fingerprints[w]!);
      real.leases.set(this.actors[w]!, (results[w] as { lease: Lease }).lease);
    } else {
      expect(winners, this.toString()).toEqual([]);
      results.forEach((r, i) => {
        expect(r.outcome, this.toString()).toBe(predict(m, skey, this.fingerprints[i]!));
        if (r.outcome === 'replay') checkReplay(r.response, this.scope, this.key, expectedResponse);
      });
    }
    checkSingleOwner(m);
  }
  toString() {
    return `race(actors ${this.actors.join('+')}, ${String(this.scope)}, ${this.key}, ${this.fingerprints.join('/')})`;
  }
}

class Complete implements fc.AsyncCommand<Model, Real> {
  constructor(
    readonly actor: number,
    readonly status: number,
    readonly replayable: boolean,
  ) {}
  check(m: Readonly<Model>) {
    return m.held.has(this.actor);
  }
  async run(m: Model, real: Real) {
    const { claim, skey } = m.held.get(this.actor)!;
    m.held.delete(this.actor);
    const r = live(m, skey);
    const owns = r?.state === 'processing' && r.owner === claim;
    const lease = real.leases.get(this.actor)!;
    real.leases.delete(this.actor);
    const response: StoredResponse = {
      status: this.status,
      headers: { 'content-type': 'application/json', etag: `"${claim}"` },
      body: this.replayable ? new Uint8Array(Buffer.from(JSON.stringify([lease.scope ?? null, lease.key, claim]))) : null,
    };
    const lostBefore = real.lost.length;
    const ok = await lease.complete(response);
    // H18: a lease that was taken over (or ran out) cannot write.
    expect(ok, this.toString()).toBe(owns);
    if (owns) {
      m.records.set(skey, { ...r!, state: 'completed', owner: undefined, expiresAt: m.now + TTL_MS, response });
    } else {
      stats.lostWrites++;
      expect(real.lost.length, 'lease-lost event').toBe(lostBefore + 1);
    }
  }
  toString() {
    return `complete(actor ${this.actor}, ${this.status}${this.replayable ? '' : ', no body'})`;
  }
}

class Release implements fc.AsyncCommand<Model, Real> {
  constructor(readonly actor: number) {}
  check(m: Readonly<Model>) {
    return m.held.has(this.actor);
  }
  async run(m: Model, real: Real) {
    const { claim, skey } = m.held.get(this.actor)!;
    m.held.delete(this.actor);
    const r = live(m, skey);
    const owns = r?.state === 'processing' && r.owner === claim;
    const lease = real.leases.get(this.actor)!;
    real.leases.delete(this.actor);
    const ok = await lease.release();
    expect(ok, this.toString()).toBe(owns);
    if (owns) m.records.delete(skey);
    else stats.lostWrites++;
  }
  toString() {
    return `release(actor ${this.actor})`;
  }
}

/** The renewal tick of a running handler (H17), with the lease's own key and token. */
class Renew implements fc.AsyncCommand<Model, Real> {
  constructor(readonly actor: number) {}
  check(m: Readonly<Model>) {
    return m.held.has(this.actor);
  }
  async run(m: Model, real: Real) {
    const { claim, skey } = m.held.get(this.actor)!;
    const r = live(m, skey);
    const owns = r?.state === 'processing' && r.owner === claim;
    const lease = real.leases.get(this.actor)!;
    const ok = await real.stores[this.actor]!.extend(lease.storageKey, lease.token, LEASE_MS);
    expect(ok, this.toString()).toBe(owns);
    if (owns) r!.leaseUntil = m.now + LEASE_MS;
  }
  toString() {
    return `renew(actor ${this.actor})`;
  }
}

class Advance implements fc.AsyncCommand<Model, Real> {
  constructor(readonly ms: number) {}
  check() {
    return true;
  }
  async run(m: Model) {
    m.now += this.ms;
    vi.setSystemTime(m.now);
  }
  toString() {
    return `advance(${this.ms} ms)`;
  }
}

const actor = (n: number) => fc.integer({ min: 0, max: n - 1 });
const scope = fc.constantFrom(...SCOPES);
const key = fc.constantFrom(...KEYS);
// Mostly the same request, so replays and conflicts are common; sometimes another (H14).
const fingerprint = fc.oneof({ arbitrary: fc.constant(FINGERPRINTS[0]), weight: 4 }, { arbitrary: fc.constant(FINGERPRINTS[1]), weight: 1 });
/** Steps around the lease and ttl boundaries, where off-by-one bugs live. */
const step = fc.constantFrom(1, 1000, LEASE_MS / 3, LEASE_MS - 1, LEASE_MS, LEASE_MS + 1, TTL_MS - 1, TTL_MS);

const commands = (actors: number) =>
  fc.commands(
    [
      fc.tuple(actor(actors), scope, key, fingerprint).map(([a, s, k, f]) => new Begin(a, s, k, f)),
      fc.tuple(actor(actors), scope, key, fingerprint).map(([a, s, k, f]) => new Begin(a, s, k, f)),
      fc
        .uniqueArray(actor(actors), { minLength: 2, maxLength: actors })
        .chain((as) =>
          fc.tuple(fc.constant(as), scope, key, fc.array(fingerprint, { minLength: as.length, maxLength: as.length })),
        )
        .map(([as, s, k, fs]) => new Race(as, s, k, fs)),
      fc.tuple(actor(actors), fc.constantFrom(200, 201, 400, 404), fc.boolean()).map(([a, st, r]) => new Complete(a, st, r || st !== 201)),
      actor(actors).map((a) => new Release(a)),
      actor(actors).map((a) => new Renew(a)),
      step.map((ms) => new Advance(ms)),
    ],
    { maxCommands: 60, size: 'max' },
  );

export interface ModelStoreFactory {
  name: string;
  /**
   * Fresh, empty storage and one store object per actor over it (the same object where
   * the store is in-process only). Stores read the clock from `Date.now()`, faked here.
   */
  create(actors: number): Promise<IdempotencyStore[]>;
  numRuns: number;
}

export function runModel(factory: ModelStoreFactory): void {
  it(`H6–H9/H14/H15/H17/H18/S1/S2: engine agrees with the reference model on ${factory.name} (2–5 actors)`, async () => {
    const run = fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 2, max: 5 }).chain((actors) => fc.tuple(fc.constant(actors), commands(actors))),
        async ([actors, cmds]) => {
          stats.runs++;
          const start = 1_700_000_000_000;
          vi.setSystemTime(start);
          const stores = await factory.create(actors);
          const lost: string[] = [];
          const engines = stores.map(
            (store) =>
              new Engine({
                store,
                waitMs: 0,
                leaseMs: LEASE_MS,
                ttlMs: TTL_MS,
                storeTimeoutMs: 10_000,
                onEvent: (e) => {
                  if (e.type === 'lease-lost') lost.push(e.key);
                },
              }),
          );
          const real: Real = { engines, stores, leases: new Map(), lost };
          const model: Model = { now: start, records: new Map(), held: new Map(), nextClaim: 1, actors };
          try {
            await fc.asyncModelRun(() => ({ model, real }), cmds);
            stats.commands += [...cmds].length;
          } finally {
            // Stop the renewal timers of leases still held when the run ended.
            for (const lease of real.leases.values()) await lease.release().catch(() => false);
            for (const store of new Set(stores)) await store.close();
          }
        },
      ),
      { numRuns: factory.numRuns, interruptAfterTimeLimit: 30_000 },
    );
    await run.catch((error: unknown) => {
      stats.failed = true;
      throw error;
    });
  }, 60_000);
}

describe('model-based test of the engine', () => {
  // Only Date is faked: the engine and every store read the clock from Date.now(), and
  // `advance` moves it; timers and I/O stay real.
  beforeAll(() => {
    vi.useFakeTimers({ toFake: ['Date'] });
  });
  afterAll(() => {
    vi.useRealTimers();
    rmSync(dir, { recursive: true, force: true });
    figure(
      `model: ${stats.runs} runs, ${stats.commands} commands, ${stats.executions} executions, ${stats.races} races, ` +
        `${stats.replays} replays checked, ${stats.conflicts} conflicts, ${stats.mismatches} mismatches, ${stats.lostWrites} fenced writes; ${stats.failed ? 'INVARIANT VIOLATED' : 'engine and model agreed'}`,
    );
  });

  runModel({
    name: 'memory',
    numRuns: 300,
    create: async (actors) => {
      const store = memoryStore({ sweepIntervalMs: 0 });
      return Array.from({ length: actors }, () => store);
    },
  });

  // Each actor has its own connection to one database file: races are real.
  runModel({
    name: 'SQLite (one connection per actor)',
    numRuns: 150,
    create: async (actors) => {
      const file = join(dir, `model-${runs++}.sqlite`);
      return Array.from({ length: actors }, () => sqliteStore({ url: `sqlite://${file}`, sweepIntervalMs: 0 }));
    },
  });
});
