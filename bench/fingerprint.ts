/**
 * Fingerprint cost by body size (H14): our canonical-JSON + SHA-256 path against
 * `object-hash` (the fallback for values that are not plain JSON), on 1 KB, 100 KB and
 * 1 MB JSON bodies; a multipart upload of a file of that size against hashing the file's
 * bytes alone (the target: within 10 %), in one buffer and in the 64 KiB chunks a socket
 * delivers; a urlencoded form against parsing it with URLSearchParams. A CPU-bound
 * micro-benchmark, so it runs in one process:
 * `node --import tsx bench/fingerprint.ts [--quick] [--json]`.
 * @module
 */
import { createHash } from 'node:crypto';
import objectHash from 'object-hash';
import { canonicalJson, fingerprintRequest, hashValue, RawBody } from '../src/fingerprint.js';

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
  /**
   * Form bodies, per size: multipart fingerprint ÷ SHA-256 of the file alone (one buffer, and
   * 64 KiB chunks), urlencoded fingerprint ÷ URLSearchParams. Each is the median of paired
   * rounds of CPU time (the floor and the fingerprint timed back to back), with the rounds'
   * spread: on a shared machine a ratio of two separate wall-clock means drifts with the load.
   */
  forms?: { size: string; multipartOverFileHash: number; chunkedMultipartOverFileHash: number; urlencodedOverParse: number; spread: Record<string, [min: number, max: number]> }[];
  /** Whether both paths see key order as irrelevant (checked, not assumed). */
  orderInsensitive: boolean;
}

/** A multipart body as a browser or fetch sends it: a text field, then a file of `size` bytes. */
export function makeMultipart(size: number): { type: string; body: Buffer; file: Buffer } {
  const boundary = '----formdata-undici-054870125512';
  const file = Buffer.alloc(size);
  for (let i = 0; i < size; i++) file[i] = (i * 2654435761) >>> 24;
  const body = Buffer.concat([
    Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="title"\r\n\r\nInvoice 7\r\n`),
    Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="document"; filename="scan.pdf"\r\nContent-Type: application/pdf\r\n\r\n`),
    file,
    Buffer.from(`\r\n--${boundary}--\r\n`),
  ]);
  return { type: `multipart/form-data; boundary=${boundary}`, body, file };
}

/** A urlencoded form of about `target` bytes: names in no order, a repeated name, escapes. */
export function makeForm(target: number): string {
  const pairs: string[] = [];
  let length = 0;
  for (let i = 0; length < target; i++) {
    const pair = `${i % 3 === 0 ? 'tag' : `field_${(i * 7919) % 10_007}`}=${encodeURIComponent(`value ${i} ✓ & more`)}`;
    pairs.push(pair);
    length += pair.length + 1;
  }
  return pairs.join('&');
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

/** CPU time (user + system) per call of `fn`, over at least `budgetMs` of CPU: waiting for a core on a loaded machine does not count. */
function cpuTime(fn: () => unknown, budgetMs: number): number {
  fn();
  let iterations = 0;
  const start = process.cpuUsage();
  let used = 0;
  while (iterations < 3 || used < budgetMs * 1000) {
    fn();
    iterations++;
    const delta = process.cpuUsage(start);
    used = delta.user + delta.system;
  }
  return used / 1000 / iterations;
}

/**
 * `fn`'s CPU time over `floor`'s, as the median of `rounds` rounds that time both back to
 * back; with the rounds' min and max.
 */
function pairedRatio(floor: () => unknown, fn: () => unknown, rounds: number, budgetMs: number): { median: number; min: number; max: number } {
  const ratios: number[] = [];
  for (let r = 0; r < rounds; r++) ratios.push(cpuTime(fn, budgetMs) / cpuTime(floor, budgetMs));
  ratios.sort((a, b) => a - b);
  return { median: ratios[Math.floor(ratios.length / 2)]!, min: ratios[0]!, max: ratios.at(-1)! };
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
  const forms: NonNullable<FingerprintResult['forms']> = [];
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

    // Form bodies of the same size.
    const upload = makeMultipart(target);
    const chunks: Buffer[] = [];
    for (let at = 0; at < upload.body.length; at += 64 * 1024) chunks.push(upload.body.subarray(at, at + 64 * 1024));
    const chunked = new RawBody(chunks, upload.body.length);
    const multipartHeaders = { 'content-type': upload.type };
    const form = makeForm(target);
    const formBytes = Buffer.from(form);
    const formHeaders = { 'content-type': 'application/x-www-form-urlencoded' };
    const formMethods: [string, () => unknown][] = [
      ['SHA-256 of the uploaded file alone (floor)', () => createHash('sha256').update(upload.file).digest('base64url')],
      ['fingerprintRequest, multipart upload (one buffer)', () => fingerprintRequest({ method: 'POST', url: '/uploads', headers: multipartHeaders, body: upload.body })],
      ['fingerprintRequest, multipart upload (64 KiB chunks)', () => fingerprintRequest({ method: 'POST', url: '/uploads', headers: multipartHeaders, body: chunked })],
      ['URLSearchParams of a urlencoded form (floor)', () => [...new URLSearchParams(form)]],
      ['fingerprintRequest, urlencoded form', () => fingerprintRequest({ method: 'POST', url: '/forms', headers: formHeaders, body: formBytes })],
    ];
    for (const [method, fn] of formMethods) {
      const t = time(fn, budget, quick ? 2 : 5);
      byMethod[method] = t.ms;
      cases.push({ size, bytes: method.includes('urlencoded') || method.includes('URLSearchParams') ? formBytes.length : upload.body.length, method, ms: t.ms, opsPerSec: 1000 / t.ms, iterations: t.iterations });
    }
    const rounds = quick ? 5 : 9;
    const paired = (floor: string, fn: string) => pairedRatio(formMethods.find(([m]) => m === floor)![1], formMethods.find(([m]) => m === fn)![1], rounds, budget / rounds);
    const one = paired('SHA-256 of the uploaded file alone (floor)', 'fingerprintRequest, multipart upload (one buffer)');
    const inChunks = paired('SHA-256 of the uploaded file alone (floor)', 'fingerprintRequest, multipart upload (64 KiB chunks)');
    const urlencoded = paired('URLSearchParams of a urlencoded form (floor)', 'fingerprintRequest, urlencoded form');
    forms.push({
      size,
      multipartOverFileHash: one.median,
      chunkedMultipartOverFileHash: inChunks.median,
      urlencodedOverParse: urlencoded.median,
      spread: { multipart: [one.min, one.max], chunkedMultipart: [inChunks.min, inChunks.max], urlencoded: [urlencoded.min, urlencoded.max] },
    });
  }
  return { cases, ratios, forms, orderInsensitive };
}

const isMain = /fingerprint\.(ts|mjs)$/.test(process.argv[1] ?? '');
if (isMain) {
  const result = runFingerprintBench(process.argv.includes('--quick'));
  if (process.argv.includes('--json')) process.stdout.write(`${JSON.stringify(result)}\n`);
  else {
    console.table(result.cases.map((c) => ({ ...c, ms: c.ms.toFixed(3), opsPerSec: Math.round(c.opsPerSec) })));
    console.table(result.ratios);
    console.table(result.forms);
    console.log('order-insensitive:', result.orderInsensitive);
  }
}
