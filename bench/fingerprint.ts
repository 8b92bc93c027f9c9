/**
 * Fingerprint cost by body size (H14): our canonical-JSON + SHA-256 path against
 * `object-hash` (the fallback for values that are not plain JSON), on 1 KB, 100 KB and
 * 1 MB JSON bodies. A CPU-bound micro-benchmark, so it runs in one process:
 * `node --import tsx bench/fingerprint.ts [--quick] [--json]`.
 * @module
 */
import { createHash } from 'node:crypto';
import objectHash from 'object-hash';
import { canonicalJson, fingerprintRequest, hashValue } from '../src/fingerprint.js';

export interface FingerprintCase {
  size: string;
  bytes: number;
  method: string;
  /** Mean time per operation, ms. */
  ms: number;
  opsPerSec: number;
  iterations: number;
}

export interface FingerprintResult {
  cases: FingerprintCase[];
  /** object-hash time / canonical fast-path time, per size. */
  ratios: { size: string; objectHashOverFastPath: number; fullRequestOverParse: number }[];
  /** Whether both paths see key order as irrelevant (checked, not assumed). */
  orderInsensitive: boolean;
}

/** A JSON order of about `target` bytes: nested objects, arrays, strings and numbers. */
export function makeBody(target: number): unknown {
  const items: unknown[] = [];
  const body = {
    orderId: 'ord_7d1f2a',
    customer: { id: 'cus_4QFJOjw2pOmAGJ', email: 'ada@example.com', address: { city: 'Zürich', zip: '8001' } },
    currency: 'EUR',
    items,
    metadata: { channel: 'web', campaign: null, gift: false },
  };
  // Track the length as items go in (re-serialising the whole body each time is quadratic).
  let length = JSON.stringify(body).length;
  for (let i = 0; length < target; i++) {
    const item = {
      sku: `sku_${i.toString(36).padStart(6, '0')}`,
      name: `Product number ${i} with a longer description ✓`,
      quantity: (i % 7) + 1,
      price: Math.round(((i * 7919) % 100_000) / 3) / 100,
      tags: ['a', 'b', `t${i % 13}`],
      attributes: { color: i % 2 ? 'red' : 'blue', size: ['S', 'M', 'L'][i % 3], weightKg: (i % 50) / 10 },
    };
    items.push(item);
    length += JSON.stringify(item).length + (items.length > 1 ? 1 : 0);
  }
  return body;
}

/** Reverse every object's key order (deeply): same data, different bytes. */
function reversed(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(reversed);
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(
      Object.entries(value)
        .reverse()
        .map(([k, v]) => [k, reversed(v)]),
    );
  }
  return value;
}

function time(fn: () => unknown, budgetMs: number, minIterations: number): { ms: number; iterations: number } {
  fn(); // warm up (and JIT) once
  let iterations = 0;
  const start = process.hrtime.bigint();
  let elapsed = 0;
  while (iterations < minIterations || elapsed < budgetMs) {
    fn();
    iterations++;
    elapsed = Number(process.hrtime.bigint() - start) / 1e6;
  }
  return { ms: elapsed / iterations, iterations };
}

export function runFingerprintBench(quick: boolean): FingerprintResult {
  const sizes: [string, number][] = [
    ['1 KB', 1024],
    ['100 KB', 100 * 1024],
    ['1 MB', 1024 * 1024],
  ];
  const budget = quick ? 60 : 600;
  const cases: FingerprintCase[] = [];
  const ratios: FingerprintResult['ratios'] = [];
  let orderInsensitive = true;
  const ohOptions = { algorithm: 'sha256', unorderedObjects: true } as const;

  for (const [size, target] of sizes) {
    const value = makeBody(target);
    const text = JSON.stringify(value);
    const raw = Buffer.from(text);
    const other = reversed(value);
    orderInsensitive &&= hashValue(value) === hashValue(other) && objectHash(value as object, ohOptions) === objectHash(other as object, ohOptions);
    const headers = { 'content-type': 'application/json' };
    const methods: [string, () => unknown][] = [
      ['JSON.parse (floor)', () => JSON.parse(text)],
      ['SHA-256 of the raw bytes (floor, order-sensitive)', () => createHash('sha256').update(raw).digest('base64url')],
      ['canonical JSON text only', () => canonicalJson(value)],
      ['canonical JSON + SHA-256 (fast path, parsed value)', () => hashValue(value)],
      ['object-hash sha256, unorderedObjects (parsed value)', () => objectHash(value as object, ohOptions)],
      ['fingerprintRequest, raw JSON bytes (node adapter)', () =>
        fingerprintRequest({ method: 'POST', url: '/orders', headers, body: raw })],
      ['fingerprintRequest, parsed body (framework adapters)', () =>
        fingerprintRequest({ method: 'POST', url: '/orders', headers, body: value })],
    ];
    const byMethod: Record<string, number> = {};
    for (const [method, fn] of methods) {
      const t = time(fn, budget, quick ? 2 : 5);
      byMethod[method] = t.ms;
      cases.push({ size, bytes: raw.length, method, ms: t.ms, opsPerSec: 1000 / t.ms, iterations: t.iterations });
    }
    ratios.push({
      size,
      objectHashOverFastPath: byMethod['object-hash sha256, unorderedObjects (parsed value)']! / byMethod['canonical JSON + SHA-256 (fast path, parsed value)']!,
      fullRequestOverParse: byMethod['fingerprintRequest, raw JSON bytes (node adapter)']! / byMethod['JSON.parse (floor)']!,
    });
  }
  return { cases, ratios, orderInsensitive };
}

const isMain = /fingerprint\.(ts|mjs)$/.test(process.argv[1] ?? '');
if (isMain) {
  const result = runFingerprintBench(process.argv.includes('--quick'));
  if (process.argv.includes('--json')) process.stdout.write(`${JSON.stringify(result)}\n`);
  else {
    console.table(result.cases.map((c) => ({ ...c, ms: c.ms.toFixed(3), opsPerSec: Math.round(c.opsPerSec) })));
    console.table(result.ratios);
    console.log('order-insensitive:', result.orderInsensitive);
  }
}
