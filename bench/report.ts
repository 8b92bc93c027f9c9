/**
 * Turns a bench run into the generated part of docs/benchmarks.md (tables, target check)
 * and docs/benchmarks.svg (a hand-rolled bar chart of req/s against the bare handler).
 * @module
 */
import type { BurstResult, LoadResult, Scenario } from './lib.js';
import type { BreakdownRow } from './breakdown.js';
import type { WaitingRow } from './waiting.js';
import type { EncryptionResult } from './encryption.js';
import type { FingerprintResult } from './fingerprint.js';
import type { PairsReport } from './pairs.js';
import type { TransactionRow } from './transactions.js';

export interface Row extends LoadResult {
  adapter: string;
  impl: 'bare' | 'ours' | 'floor' | 'express-idempotency' | 'node-idempotency';
  store: string;
  scenario: Scenario;
  /** Handler executions during the measured window. */
  executions: number;
  doubleExecutions: number;
  maxRssBytes: number;
  /** Server CPU time (user + system) per completed request, µs. */
  cpuMicrosPerRequest: number;
  /** req/s of each run when the row is the median of several (peer comparison). */
  samples?: number[];
  /** Server CPU µs per request of each run when the row is the median of several. */
  cpuSamples?: number[];
  burst?: BurstResult;
}

export interface RoundTripRow {
  store: 'redis' | 'postgres';
  impl: Row['impl'];
  path: string;
  requests: number;
  perRequest: number;
  /** Per request, by Redis command or SQL keyword. */
  breakdown: Record<string, number>;
}

export interface BenchResults {
  mode: 'quick' | 'full';
  command: string;
  date: string;
  durationS: number;
  warmupS: number;
  connections: number;
  elapsedS: number;
  loadBefore: number[];
  loadAfter: number[];
  machine: { cpu: string; memoryGiB: number; os: string; node: string; autocannon: string; commit: string };
  rows: Row[];
  roundTrips: RoundTripRow[];
  /** Store client CPU per claim + complete pair (bench/pairs.ts). */
  pairs?: PairsReport | undefined;
  /** Effect and record in one transaction, raw `pg` and Drizzle, with and without the layer (bench/transactions.ts). */
  transactions?: Array<TransactionRow & { samples: number[] }> | undefined;
  /** How duplicates wait (bench/waiting.ts); absent in runs before it existed. */
  waiting?: WaitingRow[];
  fingerprint: FingerprintResult | undefined;
  /** Absent in results recorded before encryption at rest existed. */
  encryption?: EncryptionResult | undefined;
  breakdown?: BreakdownRow[] | undefined;
  skipped: string[];
  notes: string[];
  problems: string[];
}

const IMPL_LABEL: Record<Row['impl'], string> = {
  bare: 'bare handler',
  ours: 'idempotency-kit',
  floor: 'minimal Map layer (the floor)',
  'express-idempotency': 'express-idempotency@1.0.6',
  'node-idempotency': '@node-idempotency/core@1.0.11',
};

/** The peer in the `nestjs:10` block (its impl is `node-idempotency`, as on Express). */
const NEST_PEER = '@node-idempotency/nestjs@1.0.4';

const SCENARIO_LABEL: Record<Scenario, string> = {
  bare: 'bare handler',
  first: 'first execution',
  replay: 'replay',
  storm: 'duplicate storm',
};

const n0 = (n: number) => Math.round(n).toLocaleString('en-US');
const n1 = (n: number) => n.toLocaleString('en-US', { minimumFractionDigits: 1, maximumFractionDigits: 1 });
const n2 = (n: number) => n.toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 });
const mib = (bytes: number) => `${n0(bytes / 2 ** 20)}`;

const STORE_ORDER = ['none', 'memory', 'sqlite', 'redis', 'postgres'];
const SCENARIO_ORDER: Scenario[] = ['bare', 'first', 'replay', 'storm'];
/** Rows in table order: by store, then scenario (the bare runs keep their place first and last). */
function inStoreOrder(rows: Row[]): Row[] {
  // Within a store and scenario, ours before a peer.
  const rank = (r: Row) => STORE_ORDER.indexOf(r.store) * 100 + SCENARIO_ORDER.indexOf(r.scenario) * 10 + (r.impl === 'ours' ? 0 : 1);
  const bare = rows.filter((r) => r.impl === 'bare');
  const rest = rows.filter((r) => r.impl !== 'bare').sort((a, b) => rank(a) - rank(b));
  return [...bare.slice(0, 1), ...rest, ...bare.slice(1)];
}

/** The bare handler's req/s and p99 for an adapter: the mean of its runs in this bench. */
export function bareOf(results: BenchResults, adapter: string): { reqPerSec: number; p99: number; runs: Row[] } | undefined {
  const runs = results.rows.filter((r) => r.adapter === adapter && r.impl === 'bare');
  if (runs.length === 0) return undefined;
  return {
    reqPerSec: runs.reduce((s, r) => s + r.reqPerSec, 0) / runs.length,
    p99: runs.reduce((s, r) => s + r.p99, 0) / runs.length,
    runs,
  };
}

/** Server CPU µs per request over the same adapter's bare handler (the mean of its bare runs). */
export function cpuOverBare(results: BenchResults, row: Row): number | undefined {
  const bare = bareOf(results, row.adapter);
  if (!bare) return undefined;
  return row.cpuMicrosPerRequest - bare.runs.reduce((s, r) => s + r.cpuMicrosPerRequest, 0) / bare.runs.length;
}

export function ratio(results: BenchResults, row: Row): number | undefined {
  const bare = bareOf(results, row.adapter);
  return bare ? row.reqPerSec / bare.reqPerSec : undefined;
}

function answers(row: Row): string {
  const entries = Object.entries(row.statusCodes).sort();
  if (entries.length === 1 && entries[0]![0] === '201') return 'all 201';
  return entries.map(([code, count]) => `${n0(count)}×${code}`).join(', ');
}

function doubles(row: Row): string {
  if (row.scenario !== 'storm') return '';
  const parts = [`${row.doubleExecutions}`];
  if (row.burst) parts.push(`burst ${row.burst.doubleExecutions} (${row.burst.executions} runs / ${row.burst.keys} keys)`);
  return parts.join('; ');
}

function table(header: string[], rows: string[][]): string {
  const line = (cells: string[]) => `| ${cells.join(' | ')} |`;
  return [line(header), line(header.map((h, i) => (i === 0 || /store|scenario|layer|answers|path|method|size|commands/i.test(h) ? '---' : '---:'))), ...rows.map(line)].join('\n');
}

function rowCells(results: BenchResults, r: Row, first: string[]): string[] {
  const x = ratio(results, r);
  const bare = bareOf(results, r.adapter);
  return [
    ...first,
    n0(r.reqPerSec),
    x === undefined ? '' : `**${n2(x)}×**`,
    n1(r.p50),
    n1(r.p99),
    bare && r.impl !== 'bare' ? `${n2(r.p99 / Math.max(bare.p99, 0.001))}×` : '',
    n0(r.cpuMicrosPerRequest),
    r.impl === 'bare' ? '' : (() => {
      const over = cpuOverBare(results, r);
      return over === undefined ? '' : n1(over);
    })(),
    mib(r.maxRssBytes),
    answers(r),
    doubles(r),
  ];
}

interface Target {
  target: string;
  figure: string;
  met: boolean | undefined;
}

/** Check each target of the issue against this run's figures. */
export function targets(results: BenchResults): Target[] {
  const out: Target[] = [];
  const find = (adapter: string, impl: Row['impl'], store: string, scenario: Scenario) =>
    results.rows.find((r) => r.adapter === adapter && r.impl === impl && r.store === store && r.scenario === scenario);
  // The HTTP targets of the performance issue: ours against the same adapter's bare handler.
  const httpTargets: Array<[adapter: string, scenario: Scenario, atLeast: number]> = [
    ['node', 'first', 0.65],
    ['node', 'replay', 0.85],
    ['fastify', 'first', 0.5],
    ['fastify', 'replay', 0.7],
    ['koa', 'first', 0.5],
    ['koa', 'replay', 0.7],
  ];
  for (const [adapter, scenario, atLeast] of httpTargets) {
    const row = find(adapter, 'ours', 'memory', scenario);
    const x = row && ratio(results, row);
    const floor = find(adapter, 'floor', 'none', scenario);
    const floorX = floor && ratio(results, floor);
    out.push({
      target: `${adapter} adapter, memory, ${SCENARIO_LABEL[scenario]} ≥ ${n2(atLeast)}× bare req/s`,
      figure: x === undefined ? 'not measured' : `${n2(x)}×${floorX === undefined ? '' : ` (floor: ${n2(floorX)}×)`}`,
      met: x === undefined ? undefined : x >= atLeast,
    });
  }
  // Server CPU per request over the same adapter's bare handler, against the Node adapter's
  // overhead in the same run: fetch and Hono (every handler style) within 1.5×, Fastify
  // and Koa within 1.3×.
  const nodeOver = (scenario: Scenario) => {
    const row = find('node', 'ours', 'memory', scenario);
    return row ? cpuOverBare(results, row) : undefined;
  };
  for (const scenario of ['first', 'replay'] as Scenario[]) {
    const node = nodeOver(scenario);
    const floor = find('node', 'floor', 'none', scenario);
    const floorOver = floor ? cpuOverBare(results, floor) : undefined;
    out.push({
      target: `(reference) node adapter, memory, ${SCENARIO_LABEL[scenario]}: server CPU over bare`,
      figure: node === undefined ? 'not measured' : `${n1(node)} µs/req${floorOver === undefined ? '' : ` (floor: ${n1(floorOver)} µs)`}`,
      met: undefined,
    });
    // Nest has no CPU target against the Node adapter (its own block below compares it with its bare handler).
    const adapters = [...new Set(results.rows.map((r) => r.adapter))].filter((a) => a !== 'node' && a !== 'express' && !a.startsWith('nestjs'));
    for (const adapter of adapters) {
      const row = find(adapter, 'ours', 'memory', scenario);
      const over = row ? cpuOverBare(results, row) : undefined;
      if (over === undefined) continue;
      const factor = adapter === 'fastify' || adapter === 'koa' ? 1.3 : 1.5;
      out.push({
        target: `${adapter}, memory, ${SCENARIO_LABEL[scenario]}: server CPU over bare ≤ ${n1(factor)}× the node adapter's`,
        figure: node === undefined ? `${n1(over)} µs/req (node not measured)` : `${n1(over)} vs ${n1(node)} µs/req (${n2(over / Math.max(node, 0.1))}×)`,
        met: node === undefined ? undefined : over <= factor * node,
      });
    }
  }
  // Store client cost per claim + complete pair, against raw baselines in the same run.
  const pair = (store: string) => results.pairs?.rows.find((r) => r.store === store);
  const redis = pair('redis');
  const rawRedis = pair('raw redis');
  out.push({
    target: 'Redis: ≤ 40 µs client CPU per claim + complete pair',
    figure: redis ? `${n1(redis.cpuUsPerPair)} µs${rawRedis ? ` (raw node-redis, same scripts: ${n1(rawRedis.cpuUsPerPair)} µs)` : ''}` : 'not measured',
    met: redis ? redis.cpuUsPerPair <= 40 : undefined,
  });
  const postgres = pair('postgres');
  const rawPg = pair('raw pg');
  const pgX = postgres && rawPg ? postgres.cpuUsPerPair / rawPg.cpuUsPerPair : undefined;
  out.push({
    target: 'PostgreSQL: CPU per pair within 1.15× raw `pg` (same statements, pool of 10)',
    figure: pgX === undefined ? 'not measured' : `${n2(pgX)}× (${n1(postgres!.cpuUsPerPair)} vs ${n1(rawPg!.cpuUsPerPair)} µs)`,
    met: pgX === undefined ? undefined : pgX <= 1.15,
  });
  const sqlite = pair('sqlite');
  const before = pair('sqlite (before)');
  const sqX = sqlite && before ? sqlite.pairsPerSec / before.pairsPerSec : undefined;
  out.push({
    target: "SQLite: ≥ 5× the pairs/s of the earlier driver (@keyv/sqlite's query(), synchronous FULL), default settings",
    figure: sqX === undefined ? 'not measured' : `${n1(sqX)}× (${n0(sqlite!.pairsPerSec)} vs ${n0(before!.pairsPerSec)} pairs/s)`,
    met: sqX === undefined ? undefined : sqX >= 5,
  });
  const mem = results.pairs?.memory;
  out.push({
    target: 'Memory store bounded: records kept ≤ maxEntries after a first-execution run of 10× maxEntries',
    figure: mem ? `${n0(mem.recordsKept)} of ${n0(mem.maxEntries)} after ${n0(mem.pairs)} pairs; heap growth ${n1(mem.heapGrowthMiB)} MiB after the first fill` : 'not measured',
    met: mem ? mem.recordsKept <= mem.maxEntries : undefined,
  });
  for (const store of ['redis', 'postgres'] as const) {
    const rt = (p: (path: string) => boolean) => results.roundTrips.find((r) => r.store === store && r.impl === 'ours' && p(r.path));
    const f = rt((p) => p === 'first execution');
    const rp = rt((p) => p === 'replay');
    const slow = rt((p) => p.includes('handler takes'));
    out.push({ target: `${store}: 2 round trips for a new key`, figure: f ? n2(f.perRequest) : 'not measured', met: f ? Math.abs(f.perRequest - 2) < 0.005 : undefined });
    out.push({ target: `${store}: 1 round trip for a replay`, figure: rp ? n2(rp.perRequest) : 'not measured', met: rp ? Math.abs(rp.perRequest - 1) < 0.005 : undefined });
    out.push({
      target: `${store}: 0 extra while the handler runs (default lease)`,
      figure: slow ? `${n2(slow.perRequest)} (${slow.path.replace('first execution, ', '')})` : 'not measured',
      met: slow ? Math.abs(slow.perRequest - 2) < 0.005 : undefined,
    });
  }
  // Peers: every scenario where both answered the same way (all 2xx).
  for (const peer of ['express-idempotency', 'node-idempotency'] as const) {
    for (const r of results.rows.filter((x) => x.adapter === 'express' && x.impl === peer)) {
      const ours = find('express', 'ours', r.store, r.scenario);
      const label = `ahead of ${IMPL_LABEL[peer]} (${r.store}, ${SCENARIO_LABEL[r.scenario]})`;
      if (!ours) {
        out.push({ target: label, figure: 'ours not measured', met: undefined });
        continue;
      }
      const comparable = r.non2xx === 0 && ours.non2xx === 0;
      const figure = `req/s ${n0(ours.reqPerSec)} vs ${n0(r.reqPerSec)}, p99 ${n1(ours.p99)} vs ${n1(r.p99)} ms`;
      if (!comparable) {
        out.push({ target: label, figure: `${figure}; not comparable: the peer answered ${answers(r)}`, met: undefined });
        continue;
      }
      // @node-idempotency/core: at least level on first executions, 1.2× on replays.
      const factor = peer === 'node-idempotency' && r.scenario === 'replay' ? 1.2 : 1;
      out.push({
        target: peer === 'node-idempotency' ? `≥ ${n1(factor)}× the req/s of ${IMPL_LABEL[peer]}, p99 no worse (${r.store}, ${SCENARIO_LABEL[r.scenario]})` : label,
        figure: `${figure} (${n2(ours.reqPerSec / r.reqPerSec)}×)`,
        met: ours.reqPerSec >= factor * r.reqPerSec && ours.p99 <= r.p99,
      });
    }
  }
  // NestJS (Express platform): against its bare Nest handler; the peer is not installable here.
  for (const scenario of ['first', 'replay'] as Scenario[]) {
    const row = find('nestjs', 'ours', 'memory', scenario);
    if (!row) continue;
    const x = ratio(results, row);
    const over = cpuOverBare(results, row);
    out.push({
      target: `(reference) nestjs, memory, ${SCENARIO_LABEL[scenario]}: req/s × bare Nest handler, server CPU over bare`,
      figure: `${x === undefined ? '?' : `${n2(x)}×`}, ${over === undefined ? '?' : `${n1(over)} µs/req`}`,
      met: undefined,
    });
  }
  // @node-idempotency/nestjs@1.0.4 supports NestJS 9 and 10 only: both run on NestJS 10 (`nestjs:10`).
  if (results.rows.some((r) => r.adapter.startsWith('nestjs'))) {
    for (const scenario of ['first', 'replay'] as Scenario[]) {
      const factor = scenario === 'replay' ? 1.2 : 1;
      const target = `nestjs (NestJS 10), memory, ${SCENARIO_LABEL[scenario]}: ≥ ${n1(factor)}× the req/s of ${NEST_PEER}`;
      const ours = find('nestjs:10', 'ours', 'memory', scenario);
      const peer = find('nestjs:10', 'node-idempotency', 'memory', scenario);
      if (!ours || !peer) {
        out.push({ target, figure: 'not measured (`--adapters=nestjs:10`, with the peers)', met: undefined });
        continue;
      }
      const comparable = ours.non2xx === 0 && peer.non2xx === 0;
      const figure = `req/s ${n0(ours.reqPerSec)} vs ${n0(peer.reqPerSec)} (${n2(ours.reqPerSec / peer.reqPerSec)}×), server CPU ${n1(ours.cpuMicrosPerRequest)} vs ${n1(peer.cpuMicrosPerRequest)} µs/req, p99 ${n1(ours.p99)} vs ${n1(peer.p99)} ms`;
      out.push({
        target,
        figure: comparable ? figure : `${figure}; not comparable: the peer answered ${answers(peer)}`,
        met: comparable ? ours.reqPerSec >= factor * peer.reqPerSec : undefined,
      });
    }
  }
  for (const store of ['redis', 'postgres'] as const) {
    const rows = (results.waiting ?? []).filter((r) => r.store === store);
    const worst = rows.reduce<WaitingRow | undefined>((w, r) => (w && w.opsPerCrossDuplicate >= r.opsPerCrossDuplicate ? w : r), undefined);
    out.push({
      target: `${store}: ≤ 2 store operations per waiting duplicate, whatever the handler's duration`,
      figure: worst ? `at most ${n2(worst.opsPerCrossDuplicate)} (handlers of ${rows.map((r) => r.handlerMs).join(', ')} ms)` : 'not measured',
      met: worst ? worst.opsPerCrossDuplicate <= 2 : undefined,
    });
    const p50s = rows.map((r) => r.delayP50).filter((v) => Number.isFinite(v));
    const p50 = p50s.length > 0 ? [...p50s].sort((a, b) => a - b)[Math.floor(p50s.length / 2)]! : undefined;
    out.push({
      target: `${store}: owner's completion -> waiting duplicate's answer across processes, p50 ≤ 5 ms`,
      figure: p50 === undefined ? 'not measured' : `${n1(p50)} ms (median of the per-duration p50s)`,
      met: p50 === undefined ? undefined : p50 <= 5,
    });
  }
  const ourDoubles = results.rows
    .filter((r) => r.impl === 'ours' && r.scenario === 'storm')
    .reduce((s, r) => s + r.doubleExecutions + (r.burst?.doubleExecutions ?? 0), 0);
  const storms = results.rows.filter((r) => r.impl === 'ours' && r.scenario === 'storm').length;
  out.push({ target: 'zero double executions (ours)', figure: `${ourDoubles} in ${storms} storms`, met: storms > 0 ? ourDoubles === 0 : undefined });
  return out;
}

export function renderMarkdown(results: BenchResults): string {
  const out: string[] = [];
  const m = results.machine;
  out.push(`## Results (${results.mode} run, ${results.date.slice(0, 16).replace('T', ' ')} UTC)`);
  out.push('');
  out.push(`- Machine: ${m.cpu}, ${m.memoryGiB} GiB, ${m.os}; Node ${m.node}; autocannon ${m.autocannon}${m.commit ? `; commit ${m.commit}` : ''}`);
  out.push(`- Command: \`${results.command}\` (took ${n0(results.elapsedS)} s)`);
  out.push(
    `- Each run: a fresh server process, ${results.warmupS} s warm-up, then ${results.durationS} s of autocannon with ${results.connections} connections from the bench process (pipelining 1); one POST /orders with a 250-byte JSON body per request.`,
  );
  out.push(`- Load average (1, 5, 15 min) before: ${results.loadBefore.map(n2).join(', ')}; after: ${results.loadAfter.map(n2).join(', ')} (2 cores; other work on the machine lowers every figure, ratios are taken within this run).`);
  for (const s of results.skipped) out.push(`- **Skipped:** ${s}`);
  for (const n of results.notes) out.push(`- Note: ${n}`);
  out.push('');
  out.push('![req/s against the bare handler](benchmarks.svg)');
  out.push('');

  out.push('### Targets');
  out.push('');
  out.push(table(['target', 'this run', 'met'], targets(results).map((t) => [t.target, t.figure, t.met === undefined ? '–' : t.met ? 'yes' : '**no**'])));
  out.push('');

  if (results.pairs) {
    out.push('### Store client cost per claim + complete pair');
    out.push('');
    out.push(
      'One process, 32 concurrent callers, each running claim then complete on fresh keys (`bench/pairs.ts`); CPU is the whole process (all threads, so SQLite\'s worker threads count). Median of the runs by CPU; the samples are each run\'s µs. `raw pg` runs the PostgreSQL driver\'s two statements on a `pg` pool of 10; `raw redis` runs the Redis driver\'s two scripts on one node-redis client; `sqlite (before)` is the earlier SQLite path (`@keyv/sqlite`\'s `query()` per statement, `synchronous` FULL).',
    );
    out.push('');
    out.push(table(['store', 'pairs/s', 'CPU µs per pair', 'samples (µs)'], results.pairs.rows.map((r) => [r.store, n0(r.pairsPerSec), n1(r.cpuUsPerPair), r.samples.join(', ')])));
    out.push('');
  }

  if (results.transactions?.length) {
    out.push('### Effect and record in one transaction (PostgreSQL)');
    out.push('');
    out.push(
      'One process, 16 concurrent callers, each placing an order on a fresh key: its INSERT in a transaction, alone (BEGIN, INSERT, COMMIT) and under the layer (the claim, then the transaction with the record\'s completion before COMMIT), on a raw `pg` pool (`transaction: true`) and through Drizzle (`drizzleTransactions(db)`) (`bench/transactions.ts`). Median of the runs by CPU.',
    );
    out.push('');
    out.push(table(['case', 'calls/s', 'CPU µs per call', 'samples (µs)'], results.transactions.map((r) => [r.name, n0(r.callsPerSec), n1(r.cpuUsPerCall), r.samples.join(', ')])));
    out.push('');
  }

  const header = ['store', 'scenario', 'req/s', '× bare', 'p50 ms', 'p99 ms', 'p99 × bare', 'server CPU µs/req', 'CPU µs over bare', 'peak RSS MiB', 'answers', 'double executions'];
  for (const adapter of [...new Set(results.rows.map((r) => r.adapter))]) {
    const bare = bareOf(results, adapter);
    // On NestJS 10 the peer's rows sit in the adapter's own table (the same bare Nest handler).
    const nestPeer = adapter === 'nestjs:10';
    const rows = inStoreOrder(results.rows.filter((r) => r.adapter === adapter && (r.impl === 'ours' || r.impl === 'bare' || r.impl === 'floor' || (nestPeer && r.impl === 'node-idempotency'))));
    if (rows.length === 0) continue;
    out.push(`### ${adapter} adapter`);
    out.push('');
    if (bare && bare.runs.length > 1) {
      out.push(`Bare handler: ${bare.runs.map((r) => n0(r.reqPerSec)).join(' and ')} req/s (start and end of the block); ratios use the mean, ${n0(bare.reqPerSec)}.`);
      out.push('');
    }
    const storeCell = (r: Row) => (r.impl === 'bare' ? '–' : r.impl === 'floor' ? 'floor (Map)' : r.impl === 'node-idempotency' ? `${r.store}, ${NEST_PEER}` : r.store);
    if (nestPeer) {
      out.push(`NestJS 10 (bench/nest10), where ${NEST_PEER} runs: the bare Nest handler, ours and the peer take turns.`);
      out.push('');
    }
    out.push(table(header, rows.map((r) => rowCells(results, r, [storeCell(r), SCENARIO_LABEL[r.scenario]]))));
    if (rows.some((r) => r.impl === 'floor')) {
      out.push('');
      out.push('*floor (Map)*: a minimal layer written only for comparison (no lease, fencing, time bound or canonical JSON; SHA-256 of the raw body, a Map of 10,000 keys), so the gap between it and the bare handler is what the job itself costs on this machine.');
    }
    out.push('');
  }

  const peerRows = results.rows.filter((r) => r.adapter === 'express' && (r.impl === 'express-idempotency' || r.impl === 'node-idempotency'));
  if (peerRows.length > 0) {
    out.push('### Peers on Express (same handler, same store kind)');
    out.push('');
    const stores = [...new Set(peerRows.map((r) => r.store))];
    const rows: Row[] = [];
    for (const store of stores) {
      for (const scenario of ['first', 'replay', 'storm'] as Scenario[]) {
        for (const impl of ['ours', 'express-idempotency', 'node-idempotency'] as Row['impl'][]) {
          const r = results.rows.find((x) => x.adapter === 'express' && x.impl === impl && x.store === store && x.scenario === scenario);
          if (r) rows.push(r);
        }
      }
    }
    const repeated = rows.some((r) => (r.samples?.length ?? 0) > 1);
    if (repeated) {
      out.push('Each contender ran several times, taking turns with the others; the table shows its median run by req/s, and every run\'s req/s in the last column.');
      out.push('');
    }
    out.push(table(['layer', 'store', 'scenario', 'req/s', '× bare', 'p50 ms', 'p99 ms', 'p99 × bare', 'server CPU µs/req', 'CPU µs over bare', 'peak RSS MiB', 'answers', 'double executions', ...(repeated ? ['runs, req/s'] : [])],
      rows.map((r) => [
        ...rowCells(results, r, [IMPL_LABEL[r.impl], r.store, SCENARIO_LABEL[r.scenario]]),
        ...(repeated ? [(r.samples ?? []).map(n0).join(' · ')] : []),
      ])));
    out.push('');
  }

  if (results.roundTrips.length > 0) {
    out.push('### Store round trips per request (counted)');
    out.push('');
    out.push(table(['layer', 'store', 'path', 'requests', 'round trips / request', 'commands / statements per request'],
      results.roundTrips.map((r) => [
        IMPL_LABEL[r.impl],
        r.store,
        r.path,
        String(r.requests),
        `**${n2(r.perRequest)}**`,
        Object.entries(r.breakdown).map(([k, v]) => `${k} ${n2(v)}`).join(', '),
      ])));
    out.push('');
  }

  if ((results.waiting ?? []).length > 0) {
    out.push('### Waiting duplicates (two processes on one store)');
    out.push('');
    out.push(
      'One request per key on process A, then while its handler runs one duplicate on process B and one on A. Store operations are store method calls (each about one round trip); delay is from A\'s first answer (sent once the record is stored) to B\'s duplicate answer (negative when B answers first). Redis and PostgreSQL wake B up with the record; SQLite has no wake-ups, so B polls.',
    );
    out.push('');
    out.push(table(['store', 'handler ms', 'keys', 'ops per duplicate in B', 'B ops by kind', 'ops per duplicate in A', 'delay p50 ms', 'delay p95 ms'],
      (results.waiting ?? []).map((r) => [
        r.store,
        String(r.handlerMs),
        String(r.keys),
        `**${n2(r.opsPerCrossDuplicate)}**`,
        Object.entries(r.crossBreakdown).map(([k, v]) => `${k} ${n2(v)}`).join(', '),
        n2(r.opsPerLocalDuplicate),
        n1(r.delayP50),
        n1(r.delayP95),
      ])));
    out.push('');
  }

  const fp = results.fingerprint;
  if (fp) {
    out.push('### Fingerprint cost by body size');
    out.push('');
    const sizes = [...new Set(fp.cases.map((c) => c.size))];
    const methods = [...new Set(fp.cases.map((c) => c.method))];
    out.push(table(['method', ...sizes.map((s) => `${s} (ms)`)],
      methods.map((meth) => [meth, ...sizes.map((s) => {
        const c = fp.cases.find((x) => x.method === meth && x.size === s);
        return c ? (c.ms < 1 ? c.ms.toFixed(4) : n1(c.ms)) : '';
      })])));
    out.push('');
    out.push(`object-hash ÷ canonical fast path: ${fp.ratios.map((r) => `${r.size} **${n1(r.objectHashOverFastPath)}×**`).join(', ')}. Key order changes no hash on either path: ${fp.orderInsensitive ? 'checked' : '**failed**'}.`);
    out.push('');
    if (fp.forms) {
      out.push(
        `A multipart upload's fingerprint ÷ SHA-256 of its file alone (target ≤ 1.10×): ${fp.forms.map((r) => `${r.size} **${n2(r.multipartOverFileHash)}×** (in 64 KiB chunks ${n2(r.chunkedMultipartOverFileHash)}×)`).join(', ')}. ` +
          `A urlencoded form's fingerprint ÷ URLSearchParams: ${fp.forms.map((r) => `${r.size} ${n2(r.urlencodedOverParse)}×`).join(', ')}.`,
      );
      out.push('');
    }
  }

  const enc = results.encryption;
  if (enc) {
    out.push('### Encryption at rest');
    out.push('');
    const label = (name: string) =>
      name === 'aes-gcm'
        ? 'AES-256-GCM alone (floor)'
        : name === 'seal'
          ? 'seal (per first execution)'
          : name === 'open'
            ? 'open (per replay)'
            : name.startsWith('compress')
              ? `\`compress\`: ${name.slice(9)} (per first execution)`
              : `\`compress\`: ${name.slice(8)} inflate (per replay)`;
    out.push(
      table(
        ['operation', 'body', 'CPU µs', 'µs per KiB', 'stored'],
        enc.cases.map((c) => [label(c.name), `${c.bytes / 1024} KiB`, n2(c.us), n2(c.us / (c.bytes / 1024)), c.storedBytes === undefined ? '' : `${c.storedBytes} B`]),
      ),
    );
    out.push('');
    out.push(
      `Fetch adapter in-process on the memory store, 1 KiB response, CPU µs per request without → with \`encryption\` (median of paired rounds): ` +
        `${enc.http.map((h) => `${h.scenario === 'first' ? 'first execution' : 'replay'} ${n1(h.plainUs)} → ${n1(h.sealedUs)}, **+${n1(h.addedUs)}** (rounds ${n1(h.spread[0])} … ${n1(h.spread[1])})`).join('; ')}. ` +
        `Target: at most 10 µs more for 1 KiB: ${enc.withinTarget ? 'met' : '**not met in this run**'}.`,
    );
    out.push('');
  }

  if (results.breakdown) {
    out.push('### Where the time goes (Node adapter, memory store)');
    out.push('');
    const cpu = (impl: Row['impl'], scenario: Scenario) =>
      results.rows.find((r) => r.adapter === 'node' && r.impl === impl && (impl === 'bare' || r.store === 'memory') && r.scenario === scenario)?.cpuMicrosPerRequest;
    const bare = cpu('bare', 'bare');
    const first = cpu('ours', 'first');
    const replay = cpu('ours', 'replay');
    if (bare !== undefined && first !== undefined && replay !== undefined) {
      out.push(
        `Server CPU per request over HTTP in this run: bare handler ${n0(bare)} µs, first execution ${n0(first)} µs (+${n0(first - bare)}), replay ${n0(replay)} µs (+${n0(replay - bare)}). ` +
          'The load generator needs about as much CPU per request as the bare server, so the bare handler saturates the client, not the server: ' +
          'a layer that adds more than a few µs per request lowers req/s in proportion.',
      );
      out.push('');
    }
    out.push('In-process CPU time per call of each step (no HTTP, no socket):');
    out.push('');
    out.push(table(['step', 'CPU µs per call'], results.breakdown.map((b) => [b.step, n2(b.micros)])));
    out.push('');
  }

  if (results.problems.length > 0) {
    out.push('### Problems in this run');
    out.push('');
    for (const p of results.problems) out.push(`- ${p.split('\n')[0]}`);
    out.push('');
  }
  return out.join('\n');
}

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/** A horizontal bar chart: req/s ÷ the same adapter's bare handler, per scenario. */
export function renderSvg(results: BenchResults): string {
  interface Group {
    label: string;
    /** A section heading drawn above the group. */
    heading?: string;
    bars: { scenario: Scenario; value: number }[];
  }
  const groups: Group[] = [];
  const keys = new Map<string, Group>();
  // idempotency-kit first (by adapter), then the peers on Express.
  const adapters = [...new Set(results.rows.map((r) => r.adapter))];
  const ours = adapters.flatMap((a) => inStoreOrder(results.rows.filter((r) => r.adapter === a && r.impl === 'ours')));
  const ordered = [...ours, ...results.rows.filter((r) => r.impl !== 'ours' && r.impl !== 'bare' && r.impl !== 'floor')];
  for (const r of ordered) {
    const x = ratio(results, r);
    if (x === undefined) continue;
    const label = r.impl === 'ours' ? `${r.adapter} · ${r.store}` : `${IMPL_LABEL[r.impl].replace(/@[\d.]+$/, '')} · ${r.store}`;
    let g = keys.get(label);
    if (!g) {
      g = { label, bars: [] };
      if (groups.length === 0) g.heading = 'idempotency-kit (adapter · store)';
      else if (r.impl !== 'ours' && !groups.some((x) => x.heading?.startsWith('peers'))) g.heading = 'peers on Express (package · store)';
      keys.set(label, g);
      groups.push(g);
    }
    g.bars.push({ scenario: r.scenario, value: x });
  }
  const colors: Record<string, string> = { first: '#3b6fb6', replay: '#2e9e6a', storm: '#d08a2c' };
  const labelW = 250;
  const plotW = 560;
  const barH = 9;
  const gap = 8;
  const top = 56;
  const maxValue = Math.max(1.2, ...groups.flatMap((g) => g.bars.map((b) => b.value))) * 1.05;
  const x = (v: number) => labelW + (v / maxValue) * plotW;
  const headingH = 18;
  const groupH = (g: Group) => g.bars.length * barH + gap + (g.heading ? headingH : 0);
  const height = top + groups.reduce((s, g) => s + groupH(g), 0) + 40;
  const width = labelW + plotW + 70;
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, -apple-system, Segoe UI, sans-serif" font-size="12">`);
  out.push(`<rect width="100%" height="100%" fill="#ffffff"/>`);
  out.push(`<text x="12" y="20" font-size="15" font-weight="600">req/s ÷ the same framework's bare handler (higher is better)</text>`);
  out.push(`<text x="12" y="38" fill="#555">${esc(`${results.mode} run ${results.date.slice(0, 10)}, ${results.machine.cpu}, Node ${results.machine.node}; peers on Express`)}</text>`);
  let lx = labelW;
  for (const [scenario, color] of Object.entries(colors)) {
    out.push(`<rect x="${lx}" y="44" width="10" height="10" fill="${color}"/><text x="${lx + 14}" y="53">${SCENARIO_LABEL[scenario as Scenario]}</text>`);
    lx += 130;
  }
  // Grid: every 0.25.
  const plotBottom = height - 32;
  for (let v = 0; v <= maxValue + 1e-9; v += 0.25) {
    const gx = x(v).toFixed(1);
    const strong = Math.abs(v - 1) < 1e-9;
    out.push(`<line x1="${gx}" y1="${top - 4}" x2="${gx}" y2="${plotBottom}" stroke="${strong ? '#222' : '#e2e2e2'}" stroke-width="${strong ? 1.5 : 1}"/>`);
    out.push(`<text x="${gx}" y="${plotBottom + 14}" text-anchor="middle" fill="#555">${v.toFixed(2)}×</text>`);
  }
  const t85 = x(0.85).toFixed(1);
  out.push(`<line x1="${t85}" y1="${top - 4}" x2="${t85}" y2="${plotBottom}" stroke="#b33" stroke-dasharray="4 3"/>`);
  out.push(`<text x="${t85}" y="${plotBottom + 26}" text-anchor="middle" fill="#b33">0.85× target</text>`);
  let y = top;
  for (const g of groups) {
    if (g.heading) {
      out.push(`<text x="12" y="${y + 12}" font-weight="600" fill="#333">${esc(g.heading)}</text>`);
      y += headingH;
    }
    const midY = y + (g.bars.length * barH) / 2 + 4;
    out.push(`<text x="${labelW - 8}" y="${midY.toFixed(1)}" text-anchor="end">${esc(g.label)}</text>`);
    for (const b of g.bars) {
      const w = Math.max(1, x(b.value) - labelW);
      out.push(`<rect x="${labelW}" y="${y}" width="${w.toFixed(1)}" height="${barH - 1}" fill="${colors[b.scenario] ?? '#888'}"><title>${esc(`${g.label}, ${SCENARIO_LABEL[b.scenario]}: ${n2(b.value)}×`)}</title></rect>`);
      out.push(`<text x="${(labelW + w + 4).toFixed(1)}" y="${y + barH - 1}" font-size="9" fill="#333">${n2(b.value)}</text>`);
      y += barH;
    }
    y += gap;
  }
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}
