/**
 * Store client cost per claim + complete pair: `tsx bench/pairs.ts [url ...]`, or imported
 * by bench/run.ts. One process, `concurrency` callers each running claim then complete on
 * fresh keys; reports pairs/s and process CPU (user + system, all threads) per pair.
 * Raw baselines: `raw-pg` runs the PostgreSQL driver's two statements on a `pg` pool of
 * the same size; `raw-redis` runs the Redis driver's two scripts on one node-redis client.
 * @module
 */
import { randomUUID } from 'node:crypto';

export interface PairResult {
  store: string;
  pairs: number;
  pairsPerSec: number;
  /** Process CPU (all threads) per pair, microseconds. */
  cpuUsPerPair: number;
}

/** Something that runs one claim + complete pair on key `k`. */
export type PairRunner = { name: string; pair(k: string): Promise<void>; close(): Promise<void> };

const RESPONSE = { status: 201, headers: { 'content-type': 'application/json' }, body: new TextEncoder().encode('{"id":"ord_1","total":42}') };

/** A pair on an idempotency-kit store. */
export async function storeRunner(name: string, url: string): Promise<PairRunner> {
  const { createStore } = await import('../drivers/create-store.js');
  const store = createStore(url, { sweepIntervalMs: 0 });
  return {
    name,
    async pair(k) {
      const token = randomUUID();
      const result = await store.claim(k, { fingerprint: 'fp-0123456789abcdef', token, createdAt: Date.now() }, 30_000);
      if (!result.claimed) throw new Error(`pair ${k}: not claimed`);
      if (!(await store.complete(k, token, RESPONSE, 60_000))) throw new Error(`pair ${k}: not completed`);
    },
    close: () => store.close(),
  };
}

/**
 * Raw `pg`: the PostgreSQL driver's claim and complete statements as they were before
 * the wake-up `pg_notify` (so the gap to the driver includes the wake-ups' cost), named, on a pool of the driver's default size (10), with the
 * same values the driver binds. No timeout wrapper, no key hashing, no row mapping.
 */
export async function rawPgRunner(url: string, poolSize = 10): Promise<PairRunner> {
  const { default: pg } = await import('pg');
  const pool = new pg.Pool({ connectionString: url, max: poolSize });
  const table = `bench_raw_pg_${Date.now().toString(36)}_${process.pid}`;
  const NOW = `(extract(epoch from statement_timestamp()) * 1000)::bigint`;
  const COLUMNS = 'state, fingerprint, token, created_at, expires_at, status, headers, body';
  await pool.query(`CREATE TABLE "${table}" (key text PRIMARY KEY, state text NOT NULL, fingerprint text NOT NULL, token text NOT NULL,
    created_at bigint NOT NULL, expires_at bigint NOT NULL, status integer, headers jsonb, body bytea)`);
  await pool.query(`CREATE INDEX ON "${table}" (expires_at)`);
  const CLAIM = `WITH claimed AS (
  INSERT INTO "${table}" AS r (key, state, fingerprint, token, created_at, expires_at)
  VALUES ($1, 'processing', $2, $3, $4, ${NOW} + $5::bigint)
  ON CONFLICT (key) DO UPDATE
    SET state = 'processing', fingerprint = EXCLUDED.fingerprint, token = EXCLUDED.token,
        created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at,
        status = NULL, headers = NULL, body = NULL
    WHERE r.expires_at <= ${NOW}
  RETURNING true AS claimed, r.state, r.fingerprint, r.token, r.created_at, r.expires_at, r.status, r.headers, r.body
)
SELECT * FROM claimed
UNION ALL
SELECT false, ${COLUMNS} FROM "${table}"
WHERE key = $1 AND expires_at > ${NOW} AND NOT EXISTS (SELECT 1 FROM claimed)`;
  const COMPLETE = `UPDATE "${table}"
SET state = 'completed', expires_at = ${NOW} + $3::bigint, status = $4, headers = $5::jsonb, body = $6
WHERE key = $1 AND token = $2 AND state = 'processing' AND expires_at > ${NOW} RETURNING 1 AS n`;
  const body = Buffer.from(RESPONSE.body);
  return {
    name: 'raw pg',
    async pair(k) {
      const token = randomUUID();
      const claimed = await pool.query({ name: `${table}_claim`, text: CLAIM, values: [k, 'fp-0123456789abcdef', token, Date.now(), 30_000] });
      if (claimed.rows[0]?.claimed !== true) throw new Error(`raw pg ${k}: not claimed`);
      const done = await pool.query({ name: `${table}_complete`, text: COMPLETE, values: [k, token, 60_000, 201, JSON.stringify(RESPONSE.headers), body] });
      if (done.rows.length !== 1) throw new Error(`raw pg ${k}: not completed`);
    },
    async close() {
      await pool.query(`DROP TABLE IF EXISTS "${table}"`);
      await pool.end();
    },
  };
}

/**
 * Raw node-redis: one client running the Redis driver's claim and complete scripts by
 * EVALSHA, with the same arguments the driver sends, as they were before the wake-up
 * `PUBLISH` (so the gap to the driver includes the wake-ups' cost).
 */
export async function rawRedisRunner(url: string): Promise<PairRunner> {
  const { createClient } = await import('@redis/client');
  const client = createClient({ url });
  client.on('error', () => undefined);
  await client.connect();
  const CLAIM = `
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return '' end
local current = redis.call('GET', KEYS[1])
if current then return current end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return ''
`;
  const COMPLETE = `
local current = redis.call('GET', KEYS[1])
if not current then return 0 end
local record = cjson.decode(current)
if record.s ~= 'p' or record.t ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], '{"s":"c","f":' .. cjson.encode(record.f) .. ',"t":' .. cjson.encode(record.t)
  .. ',"c":' .. string.format('%.0f', record.c) .. ',"e":' .. ARGV[3] .. ',"r":' .. ARGV[2] .. '}', 'PX', ARGV[4])
return 1
`;
  const claimSha = String(await client.scriptLoad(CLAIM));
  const completeSha = String(await client.scriptLoad(COMPLETE));
  const prefix = `bench-raw-redis:${Date.now().toString(36)}:`;
  return {
    name: 'raw redis',
    async pair(k) {
      const token = randomUUID();
      const now = Date.now();
      const record = JSON.stringify({ s: 'p', f: 'fp-0123456789abcdef', t: token, c: now, l: now + 30_000 });
      const key = prefix + k;
      if ((await client.evalSha(claimSha, { keys: [key], arguments: [record, '30000'] })) !== '') throw new Error(`raw redis ${k}: not claimed`);
      const response = JSON.stringify({ s: RESPONSE.status, h: RESPONSE.headers, b: Buffer.from(RESPONSE.body).toString('base64') });
      const done = await client.evalSha(completeSha, { keys: [key], arguments: [token, response, String(Date.now() + 60_000), '60000'] });
      if (done !== 1) throw new Error(`raw redis ${k}: not completed`);
    },
    async close() {
      client.destroy();
    },
  };
}

/** Run `pairs` pairs with `concurrency` callers after a warm-up; CPU and wall time of the measured part. */
export async function measurePairs(runner: PairRunner, o: { pairs: number; concurrency: number; warmup?: number }): Promise<PairResult> {
  const prefix = `pairs-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
  let next = 0;
  const drive = async (total: number, tag: string) => {
    let i = 0;
    const worker = async () => {
      while (i < total) {
        const n = i++;
        await runner.pair(`${prefix}-${tag}-${n}-${next}`);
      }
    };
    await Promise.all(Array.from({ length: o.concurrency }, worker));
    next++;
  };
  await drive(o.warmup ?? Math.min(500, o.pairs), 'w');
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  await drive(o.pairs, 'm');
  const wallS = Number(process.hrtime.bigint() - t0) / 1e9;
  const cpu = process.cpuUsage(cpu0);
  return { store: runner.name, pairs: o.pairs, pairsPerSec: o.pairs / wallS, cpuUsPerPair: (cpu.user + cpu.system) / o.pairs };
}

/** The SQLite store as it was before its own connection: @keyv/sqlite's query() per statement, synchronous FULL. */
export async function sqliteBeforeRunner(file: string): Promise<PairRunner> {
  const { default: KeyvSqlite } = await import('@keyv/sqlite');
  const { sqliteStore } = await import('../drivers/sqlite.js');
  const adapter = new KeyvSqlite({ uri: `sqlite://${file}` });
  const store = sqliteStore({ adapter, synchronous: 'full', sweepIntervalMs: 0 });
  return {
    name: 'sqlite (before)',
    async pair(k) {
      const token = randomUUID();
      const result = await store.claim(k, { fingerprint: 'fp-0123456789abcdef', token, createdAt: Date.now() }, 30_000);
      if (!result.claimed || !(await store.complete(k, token, RESPONSE, 60_000))) throw new Error(`pair ${k} failed`);
    },
    async close() {
      await store.close();
      await adapter.disconnect();
    },
  };
}

export interface MemoryBound {
  maxEntries: number;
  pairs: number;
  recordsKept: number;
  heapGrowthMiB: number;
}

/** A first-execution run of 10 × maxEntries pairs on a memory store: records kept and heap growth after GC. */
export async function memoryBound(maxEntries = 10_000): Promise<MemoryBound> {
  const { memoryStore } = await import('../drivers/memory.js');
  const map = new Map();
  const store = memoryStore({ map, maxEntries, sweepIntervalMs: 0 });
  const gc = (globalThis as { gc?: () => void }).gc;
  const pairs = maxEntries * 10;
  let heapBefore = 0;
  for (let i = 0; i < pairs; i++) {
    if (i === maxEntries) {
      gc?.();
      heapBefore = process.memoryUsage().heapUsed;
    }
    const token = randomUUID();
    await store.claim(`m${i}`, { fingerprint: 'fp-0123456789abcdef', token, createdAt: Date.now() }, 30_000);
    await store.complete(`m${i}`, token, RESPONSE, 600_000);
  }
  gc?.();
  const heapGrowthMiB = (process.memoryUsage().heapUsed - heapBefore) / 2 ** 20;
  const recordsKept = map.size;
  await store.close();
  return { maxEntries, pairs, recordsKept, heapGrowthMiB };
}

export interface PairsReport {
  rows: Array<PairResult & { samples: number[] }>;
  memory: MemoryBound;
}

/**
 * `--json name=url ...`: each store and baseline `repeats` times, taking turns, median by
 * CPU per pair. Names starting `raw-pg`/`raw-redis`/`sqlite-before` pick the baselines.
 */
async function jsonMain(args: string[]): Promise<void> {
  const quick = args.includes('--quick');
  const pairs = quick ? 2500 : 6000;
  const repeats = quick ? 1 : 3;
  const targets = args.filter((a) => a.includes('=')).map((a) => [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)] as const);
  const samples = new Map<string, PairResult[]>();
  for (let i = 0; i < repeats; i++) {
    for (const [name, url] of targets) {
      const runner = name === 'raw pg'
        ? await rawPgRunner(url)
        : name === 'raw redis'
          ? await rawRedisRunner(url)
          : name === 'sqlite (before)'
            ? await sqliteBeforeRunner(`${url}.${i}`)
            : await storeRunner(name, name === 'sqlite' ? `sqlite://${url}.${i}` : url);
      try {
        const r = await measurePairs(runner, { pairs: name.includes('sqlite') && quick ? 1000 : pairs, concurrency: 32 });
        samples.set(name, [...(samples.get(name) ?? []), r]);
      } finally {
        await runner.close();
      }
    }
  }
  const rows = [...samples].map(([, runs]) => {
    const sorted = [...runs].sort((a, b) => a.cpuUsPerPair - b.cpuUsPerPair);
    return { ...sorted[Math.floor((sorted.length - 1) / 2)]!, samples: runs.map((r) => Math.round(r.cpuUsPerPair)) };
  });
  const memory = await memoryBound(quick ? 2000 : 10_000);
  process.stdout.write(`${JSON.stringify({ rows, memory } satisfies PairsReport)}\n`);
}

if (process.argv.includes('--json')) {
  await jsonMain(process.argv.slice(2));
} else if (import.meta.url === `file://${process.argv[1]}` || process.argv[1]?.endsWith('bench/pairs.ts')) {
  const args = process.argv.slice(2);
  const pairs = Number(process.env.PAIRS ?? 5000);
  const concurrency = Number(process.env.CONCURRENCY ?? 32);
  for (const url of args) {
    const runner = url.startsWith('raw-pg:')
      ? await rawPgRunner(url.slice('raw-pg:'.length))
      : url.startsWith('raw-redis:')
        ? await rawRedisRunner(url.slice('raw-redis:'.length))
        : await storeRunner(url.split(':')[0]!, url);
    const r = await measurePairs(runner, { pairs, concurrency });
    await runner.close();
    process.stdout.write(`${url}\t${r.pairsPerSec.toFixed(0)} pairs/s\t${r.cpuUsPerPair.toFixed(1)} us CPU/pair\n`);
  }
}
