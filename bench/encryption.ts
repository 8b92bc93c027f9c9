/**
 * Encryption at rest's cost (target: at most 10 µs more per first execution and per replay
 * of a 1 KiB response). Two measures, CPU time in one process:
 *
 * - *seal* / *open*: the engine's AES-256-GCM seal of a stored response (what a first
 *   execution adds) and its open (what a replay adds), 1 KiB and 64 KiB bodies;
 * - *HTTP layer*: the fetch adapter called in-process with a `Request` on the memory store
 *   (no sockets: their cost is the same either way and would only add noise), a first
 *   execution (new key) and a replay, with and without `encryption`, in paired rounds; the
 *   median of the per-round differences is what encryption adds.
 *
 * `node --import tsx bench/encryption.ts [--quick] [--json]`.
 * @module
 */
import { createCipheriv, createSecretKey, randomBytes } from 'node:crypto';
import { withIdempotency } from '../adapters/fetch.js';
import { memoryStore } from '../drivers/memory.js';
import { inflateResponse, resolveCompression } from '../src/compression.js';
import { resolveEncryption } from '../src/encryption.js';

export interface EncryptionCase {
  name: string;
  bytes: number;
  /** CPU µs per operation. */
  us: number;
  /** compress: the stored body's size. */
  storedBytes?: number;
}

export interface EncryptionResult {
  /** seal / open of one stored response. */
  cases: EncryptionCase[];
  /** In-process HTTP layer, 1 KiB response: µs per request without and with encryption, and the median paired difference. */
  http: { scenario: 'first' | 'replay'; plainUs: number; sealedUs: number; addedUs: number; spread: [number, number] }[];
  /** Whether every figure is within the 10 µs target (1 KiB). */
  withinTarget: boolean;
}

const argv = process.argv.slice(2);
const quick = argv.includes('--quick');
const budgetMs = quick ? 40 : 200;
const rounds = quick ? 3 : 7;

/** CPU time (user + system) per call of `fn`, over at least `budgetMs` of CPU. */
function cpuTime(fn: () => unknown, budget: number): number {
  for (let i = 0; i < 200; i++) fn();
  let iterations = 0;
  const start = process.cpuUsage();
  let used = 0;
  while (iterations < 3 || used < budget * 1000) {
    for (let i = 0; i < 50; i++) fn();
    iterations += 50;
    const delta = process.cpuUsage(start);
    used = delta.user + delta.system;
  }
  return used / iterations;
}

const BATCH = 25;
const cpuSince = (start: NodeJS.CpuUsage) => {
  const delta = process.cpuUsage(start);
  return delta.user + delta.system;
};
/** CPU µs of BATCH sequential calls. */
async function batchCpu(fn: () => Promise<unknown>): Promise<number> {
  const start = process.cpuUsage();
  for (let i = 0; i < BATCH; i++) await fn();
  return cpuSince(start);
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

function responseOf(bytes: number) {
  return {
    status: 201,
    headers: { 'content-type': 'application/json', location: '/orders/ord_7d1f2a' },
    body: new Uint8Array(randomBytes(bytes)),
  };
}

export async function measureEncryption(): Promise<EncryptionResult> {
  const ring = resolveEncryption({ keys: [{ id: 'bench', key: randomBytes(32) }] })!;
  const cases: EncryptionCase[] = [];
  for (const bytes of [1024, 65_536]) {
    const response = responseOf(bytes);
    const sealed = ring.seal(response, 'storage-key-hash-43-chars-xxxxxxxxxxxxxxxxxx', 'v2:fingerprint');
    // The floor: node:crypto's AES-256-GCM alone on the same bytes (what any implementation pays).
    const secret = createSecretKey(randomBytes(32));
    const iv = randomBytes(12);
    const aad = Buffer.alloc(70);
    const plainBytes = Buffer.from(response.body);
    cases.push({
      name: 'aes-gcm',
      bytes,
      us: cpuTime(() => {
        const cipher = createCipheriv('aes-256-gcm', secret, iv);
        cipher.setAAD(aad);
        cipher.update(plainBytes);
        cipher.final();
        return cipher.getAuthTag();
      }, budgetMs),
    });
    cases.push({ name: 'seal', bytes, us: cpuTime(() => ring.seal(response, 'storage-key-hash-43-chars-xxxxxxxxxxxxxxxxxx', 'v2:fingerprint'), budgetMs) });
    cases.push({ name: 'open', bytes, us: cpuTime(() => ring.open(sealed, 'storage-key-hash-43-chars-xxxxxxxxxxxxxxxxxx', 'v2:fingerprint'), budgetMs) });
  }

  // `compress`: the same per KiB, on JSON (random bytes do not shrink and are stored as they are).
  const zstdThere = (() => {
    try {
      resolveCompression({ algorithm: 'zstd' });
      return true;
    } catch {
      return false;
    }
  })();
  for (const algorithm of ['gzip', 'brotli', ...(zstdThere ? ['zstd' as const] : [])] as const) {
    const compressor = resolveCompression({ algorithm, minBytes: 0 })!;
    for (const bytes of [1024, 65_536]) {
      const text = JSON.stringify(Array.from({ length: Math.ceil(bytes / 60) }, (_, i) => ({ id: `pi_${i}`, status: 'succeeded', amount: i * 7 }))).slice(0, bytes);
      const response = { ...responseOf(0), body: new Uint8Array(Buffer.from(text)) };
      const packed = compressor.compress(response);
      cases.push({ name: `compress ${algorithm}`, bytes, us: cpuTime(() => compressor.compress(response), budgetMs), storedBytes: packed.body!.byteLength });
      cases.push({ name: `inflate ${algorithm}`, bytes, us: cpuTime(() => inflateResponse(packed), budgetMs) });
    }
  }

  // The HTTP layer in-process: the same handler and store kind, with and without keys.
  const body = Buffer.from(JSON.stringify({ id: 'ord_7d1f2a', pad: 'x'.repeat(1024 - 30) })).subarray(0, 1024);
  const make = (encrypted: boolean) => {
    const handle = withIdempotency(async () => new Response(body, { status: 201, headers: { 'content-type': 'application/json' } }), {
      store: memoryStore({ maxEntries: 1_000_000, maxBytes: 2 ** 31, sweepIntervalMs: 0 }),
      scope: 'shared',
      ...(encrypted ? { encryption: { keys: [{ id: 'bench', key: randomBytes(32) }] } } : {}),
    });
    let n = 0;
    const send = async (key: string) => {
      const response = await handle(new Request('http://bench/orders', { method: 'POST', headers: { 'idempotency-key': key, 'content-type': 'application/json' }, body: '{"a":1}' }));
      await response.arrayBuffer();
      if (response.status !== 201) throw new Error(`bench: got ${response.status}`);
    };
    return { first: () => send(`k${encrypted ? 's' : 'p'}${n++}`), replay: () => send('replayed') };
  };
  const plain = make(false);
  const sealed = make(true);
  await plain.replay();
  await sealed.replay();
  const http: EncryptionResult['http'] = [];
  for (const scenario of ['first', 'replay'] as const) {
    const p: number[] = [];
    const s: number[] = [];
    const d: number[] = [];
    for (let r = 0; r < rounds; r++) {
      // Interleaved in batches of 25, so both sides see the same machine (load, GC, turbo).
      let plainUs = 0;
      let sealedUs = 0;
      let n = 0;
      const until = process.cpuUsage();
      while (n < 40 || cpuSince(until) < budgetMs * 1000) {
        plainUs += await batchCpu(plain[scenario]);
        sealedUs += await batchCpu(sealed[scenario]);
        n++;
      }
      p.push(plainUs / (n * BATCH));
      s.push(sealedUs / (n * BATCH));
      d.push((sealedUs - plainUs) / (n * BATCH));
    }
    http.push({ scenario, plainUs: median(p), sealedUs: median(s), addedUs: median(d), spread: [Math.min(...d), Math.max(...d)] });
  }
  const small = cases.filter((c) => c.bytes === 1024 && (c.name === 'seal' || c.name === 'open'));
  const withinTarget = small.every((c) => c.us <= 10) && http.every((h) => h.addedUs <= 10);
  return { cases, http, withinTarget };
}

if (import.meta.url === `file://${process.argv[1]}` || process.argv[1]?.endsWith('encryption.mjs')) {
  const result = await measureEncryption();
  if (argv.includes('--json')) console.log(JSON.stringify(result));
  else {
    for (const c of result.cases) console.log(`${c.name.padEnd(7)} ${String(c.bytes).padStart(6)} B  ${c.us.toFixed(2).padStart(7)} µs`);
    for (const h of result.http) {
      console.log(
        `http ${h.scenario.padEnd(6)} plain ${h.plainUs.toFixed(1)} µs, sealed ${h.sealedUs.toFixed(1)} µs, added ${h.addedUs.toFixed(1)} µs (rounds ${h.spread[0].toFixed(1)}…${h.spread[1].toFixed(1)})`,
      );
    }
    console.log(result.withinTarget ? 'within the 10 µs target' : 'OVER the 10 µs target');
  }
}
