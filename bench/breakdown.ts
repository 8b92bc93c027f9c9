/**
 * Where a request's time goes inside the layer, without HTTP: CPU time per call of each
 * step the Node adapter runs for one POST /orders (250-byte JSON body) on the memory
 * store. Complements the HTTP runs, whose figures also hold Node's HTTP work and the GC.
 * `node --import tsx bench/breakdown.ts [--quick] [--json]`
 * @module
 */
import { Engine } from '../src/engine.js';
import { fingerprintRequest } from '../src/fingerprint.js';
import { createIdempotency } from '../src/http.js';
import { parseIdempotencyKey, storageKey } from '../src/key.js';
import { memoryStore } from '../drivers/memory.js';
import { ORDER_BODY } from './lib.js';

export interface BreakdownRow {
  step: string;
  /** CPU time (user + system) per call, µs. */
  micros: number;
}

async function cpuPerCall(calls: number, fn: (i: number) => unknown): Promise<number> {
  for (let i = 0; i < Math.min(2000, calls); i++) await fn(-1 - i); // warm-up, own keys
  const start = process.cpuUsage();
  for (let i = 0; i < calls; i++) await fn(i);
  const used = process.cpuUsage(start);
  return (used.user + used.system) / calls;
}

export async function runBreakdown(quick: boolean): Promise<BreakdownRow[]> {
  const n = quick ? 3000 : 30_000;
  const raw = Buffer.from(ORDER_BODY);
  const headers = { 'content-type': 'application/json', 'content-length': String(raw.length), 'idempotency-key': 'k' };
  const rows: BreakdownRow[] = [];
  const add = async (step: string, fn: (i: number) => unknown) => rows.push({ step, micros: await cpuPerCall(n, fn) });

  await add('parse the Idempotency-Key header', () => parseIdempotencyKey(['3f1c2a9e-key'], 255));
  await add('fingerprint (raw 250-byte JSON body: parse, canonical JSON, SHA-256)', () =>
    fingerprintRequest({ method: 'POST', url: '/orders', headers, body: raw }));
  await add('JSON.parse of the body (reference)', () => JSON.parse(raw.toString('utf8')));
  await add('storage key (SHA-256 of scope and key)', (i) => storageKey(undefined, `key-${i}`));

  const engine = new Engine({ store: memoryStore() });
  await add('engine: claim a new key, then complete it (memory store)', async (i) => {
    const acquired = await engine.acquire(`first-${i}`, undefined, 'fp');
    if (acquired.type === 'execute') await acquired.lease.complete({ status: 201, headers: { 'content-type': 'application/json' }, body: raw });
  });
  await engine.acquire('replayed', undefined, 'fp').then((a) => a.type === 'execute' && a.lease.complete({ status: 201, headers: {}, body: raw }));
  await add('engine: replay a completed key (memory store)', () => engine.acquire('replayed', undefined, 'fp'));

  const layer = createIdempotency({ store: memoryStore(), scope: 'shared' });
  const captured = { status: 201, headers: { 'content-type': 'application/json; charset=utf-8', date: 'x' }, body: raw };
  await add('HTTP layer: begin + finish, first execution (all of the above)', async (i) => {
    const d = await layer.begin({ method: 'POST', url: '/orders', headers, keyHeaderLines: [`k-${i}`], body: () => raw, raw: null });
    if (d.type === 'execute') await d.claim.finish(captured);
  });
  await layer.begin({ method: 'POST', url: '/orders', headers, keyHeaderLines: ['k-replayed'], body: () => raw, raw: null }).then((d) =>
    d.type === 'execute' ? d.claim.finish(captured) : undefined);
  await add('HTTP layer: begin, replay', () =>
    layer.begin({ method: 'POST', url: '/orders', headers, keyHeaderLines: ['k-replayed'], body: () => raw, raw: null }));
  return rows;
}

const isMain = /breakdown\.(ts|mjs)$/.test(process.argv[1] ?? '');
if (isMain) {
  const rows = await runBreakdown(process.argv.includes('--quick'));
  if (process.argv.includes('--json')) process.stdout.write(`${JSON.stringify(rows)}\n`);
  else console.table(rows.map((r) => ({ ...r, micros: r.micros.toFixed(2) })));
}
