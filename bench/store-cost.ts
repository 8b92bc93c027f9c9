/**
 * `npm run bench -- --store-cost`: what each request costs the store itself, ours beside
 * @node-idempotency/core + its Redis adapter and beside a minimal SQL floor. It starts its
 * own `redis-server` and its own PostgreSQL (`initdb` into a temporary folder with
 * pg_stat_statements, as the `postgres` user when run as root), and its own MariaDB
 * (`mariadb-install-db` into a temporary folder, performance_schema on) when the binaries
 * are there, so that nothing else runs on them. Express serves POST /orders answering a
 * 1,152-byte Stripe-like payment intent.
 *
 *   Redis: `FIRST` first executions then as many replays, 32 in flight over one store
 *   connection; Redis CPU (INFO cpu, user + system, the whole process) per request, commands
 *   per request (INFO commandstats; a script's inner commands are listed apart), bytes per
 *   record (MEMORY USAGE over every key), and the pub/sub bytes sent per completion to the
 *   subscribed instances (counted on the wire by raw subscribers), with 2, 8 and 32
 *   instances subscribed; then a round of keys each with a waiting duplicate.
 *   SQL: the same one request at a time; execution time per request from
 *   pg_stat_statements (performance_schema statement timers on MariaDB), statements per
 *   request, table + index + TOAST bytes per record.
 *
 * Options: --first=N (default 2000; --quick 200), --subscribers=2,8,32, --repeats=N (default 3,
 * --quick 1: timings are the median run's), --no-redis, --no-postgres, --no-mariadb.
 * @module
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomUUID, createHash } from 'node:crypto';
import { chmodSync, chownSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import http, { type Server } from 'node:http';
import net, { type AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import autocannon from 'autocannon';
import type { RequestHandler } from 'express';
import { freePort, reachable, redisCommand, startPrivateRedis } from './lib.js';
import type { IdempotencyStore } from '../src/store.js';

/** A Stripe-like payment intent of exactly 1,152 bytes of JSON. */
export function paymentIntent(n: number): string {
  const intent = {
    id: `pi_3Q${String(n).padStart(22, '0')}`,
    object: 'payment_intent',
    amount: 2000,
    amount_capturable: 0,
    amount_received: 2000,
    capture_method: 'automatic',
    client_secret: `pi_3Q${String(n).padStart(22, '0')}_secret_Wd6GzhyfRyq0ZkVRcO7tN3jKh`,
    confirmation_method: 'automatic',
    created: 1733400000,
    currency: 'eur',
    customer: 'cus_RQ2l2D6GzhyfRy',
    description: 'Order A-1001',
    latest_charge: 'ch_3QSZ7fLkdIwHu7ix0xJ1F5Vb',
    livemode: false,
    metadata: { orderRef: 'A-1001', channel: 'web' },
    payment_method: 'pm_1QSZ7eLkdIwHu7ixQk3c1Rr9',
    payment_method_options: { card: { installments: null, mandate_options: null, network: null, request_three_d_secure: 'automatic' } },
    payment_method_types: ['card'],
    receipt_email: 'jenny.rosen@example.com',
    shipping: { address: { city: 'Berlin', country: 'DE', line1: 'Alexanderplatz 1', postal_code: '10178' }, name: 'Jenny Rosen' },
    statement_descriptor_suffix: 'ORDER',
    status: 'succeeded',
    pad: '',
  };
  const base = JSON.stringify(intent).length;
  intent.pad = 'x'.repeat(Math.max(0, 1152 - base));
  return JSON.stringify(intent);
}

const log = (line: string) => process.stdout.write(`${line}\n`);
const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------- the app under load

type Layer = (respond: RequestHandler) => Promise<{ handlers: RequestHandler[]; close(): Promise<void> }>;

/** Express with `layer` before a handler answering the payment intent (an `x-delay-ms` header makes it wait). */
async function startExpress(layer: Layer): Promise<{ url: string; executions: () => number; close(): Promise<void> }> {
  const { default: express } = await import('express');
  const app = express();
  let executions = 0;
  const respond: RequestHandler = (req, res) => {
    const n = ++executions;
    const delay = Number(req.headers['x-delay-ms'] ?? 0);
    const send = () => res.status(201).type('application/json').send(paymentIntent(n));
    if (delay > 0) setTimeout(send, delay);
    else send();
  };
  const built = await layer(respond);
  app.post('/orders', express.json(), ...built.handlers);
  const server: Server = http.createServer(app);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    executions: () => executions,
    async close() {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      await built.close();
    },
  };
}

const ORDER = JSON.stringify({ amount: 2000, currency: 'eur', customer: 'cus_RQ2l2D6GzhyfRy', metadata: { orderRef: 'A-1001' } });

/** `keys.length` requests, `connections` in flight; returns the status counts. */
async function drive(url: string, keys: string[], connections: number, headers: Record<string, string> = {}): Promise<Record<string, number>> {
  let i = 0;
  const result = await autocannon({
    url: `${url}/orders`,
    method: 'POST',
    connections: Math.min(connections, keys.length),
    pipelining: 1,
    amount: keys.length,
    timeout: 10,
    headers: { 'content-type': 'application/json', ...headers },
    body: ORDER,
    requests: [
      {
        setupRequest(req: { headers: Record<string, string> }) {
          req.headers['idempotency-key'] = keys[i++ % keys.length]!;
          return req;
        },
      } as never,
    ],
  });
  const codes: Record<string, number> = {};
  for (const [code, s] of Object.entries(result.statusCodeStats ?? {})) codes[code] = Number((s as { count: number }).count);
  if (result.errors > 0) codes.error = result.errors;
  return codes;
}

async function post(url: string, key: string, delayMs = 0): Promise<number> {
  const res = await fetch(`${url}/orders`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key, ...(delayMs ? { 'x-delay-ms': String(delayMs) } : {}) },
    body: ORDER,
  });
  await res.arrayBuffer();
  return res.status;
}

// ---------------------------------------------------------------- Redis

function redisInfo(url: string, section: string): Promise<Record<string, string>> {
  return redisCommand(url, 'INFO', section).then((text) => {
    const out: Record<string, string> = {};
    for (const line of text.split('\r\n')) {
      const at = line.indexOf(':');
      if (at > 0) out[line.slice(0, at)] = line.slice(at + 1);
    }
    return out;
  });
}

async function redisCpuS(url: string): Promise<number> {
  const cpu = await redisInfo(url, 'cpu');
  return Number(cpu.used_cpu_user) + Number(cpu.used_cpu_sys);
}

/** calls per command name (cmdstat_evalsha -> evalsha). */
async function commandCalls(url: string): Promise<Record<string, number>> {
  const stats = await redisInfo(url, 'commandstats');
  const out: Record<string, number> = {};
  for (const [name, value] of Object.entries(stats)) {
    const calls = /calls=(\d+)/.exec(value);
    if (calls) out[name.replace(/^cmdstat_/, '')] = Number(calls[1]);
  }
  return out;
}

/** Every key's MEMORY USAGE, summed, and the key count. */
async function memoryOfAllKeys(url: string): Promise<{ bytes: number; keys: number }> {
  const { createClient } = await import('@redis/client');
  const client = createClient({ url });
  await client.connect();
  let bytes = 0;
  let keys = 0;
  try {
    let cursor = '0';
    do {
      const page = await client.scan(cursor, { COUNT: 500 });
      cursor = String(page.cursor);
      for (const key of page.keys) {
        const usage = await client.sendCommand(['MEMORY', 'USAGE', key, 'SAMPLES', '0']);
        if (typeof usage === 'number') {
          bytes += usage;
          keys++;
        }
      }
    } while (cursor !== '0');
  } finally {
    await client.close();
  }
  return { bytes, keys };
}

/**
 * A subscribed instance as the wire sees it: a raw connection that SUBSCRIBEs to `channel`
 * and counts the bytes Redis sends it after the subscription is confirmed.
 */
async function rawSubscriber(url: string, channel: string): Promise<{ bytes(): number; reset(): void; close(): void }> {
  const { hostname, port } = new URL(url);
  const socket = net.connect({ host: hostname, port: Number(port) });
  let bytes = 0;
  let confirmed = false;
  await new Promise<void>((resolve, reject) => {
    socket.once('error', reject);
    socket.on('data', (chunk: Buffer) => {
      if (!confirmed) {
        confirmed = true;
        resolve();
        return;
      }
      bytes += chunk.length;
    });
    socket.write(`*2\r\n$9\r\nSUBSCRIBE\r\n$${Buffer.byteLength(channel)}\r\n${channel}\r\n`);
  });
  return { bytes: () => bytes, reset: () => void (bytes = 0), close: () => socket.destroy() };
}

export interface RedisCostRow {
  impl: 'ours' | 'node-idempotency';
  /** Ours with `compress: true`. */
  compress?: boolean;
  subscribers: number;
  /** Redis CPU µs per request. */
  firstCpuUs: number;
  replayCpuUs: number;
  /** Commands the clients sent per request, and commands run inside scripts. */
  firstCommands: string;
  replayCommands: string;
  bytesPerRecord: number;
  /** Pub/sub bytes Redis sent per completion to all the subscribed instances, without a waiter. */
  wakeBytesNoWaiter: number;
  /** The same for keys with one waiting duplicate each (undefined: not measured). */
  wakeBytesWithWaiter?: number;
  waiterStatuses?: string;
}

function describeCalls(before: Record<string, number>, after: Record<string, number>, requests: number): string {
  const parts: string[] = [];
  for (const [name, calls] of Object.entries(after)) {
    const d = calls - (before[name] ?? 0);
    if (d <= 0 || name === 'info' || name === 'config|resetstat' || name === 'subscribe') continue;
    parts.push(`${name} ${fmt(d / requests, 2)}`);
  }
  return parts.sort().join(', ');
}

async function redisRun(
  url: string,
  impl: RedisCostRow['impl'],
  subscribers: number,
  first: number,
  withWaiters: boolean,
  compress = false,
): Promise<RedisCostRow> {
  await redisCommand(url, 'FLUSHALL');
  const namespace = 'cost';
  const channel = `${namespace}:settled`;
  const stores: IdempotencyStore[] = [];
  const raw: Awaited<ReturnType<typeof rawSubscriber>>[] = [];
  const layer: Layer =
    impl === 'ours'
      ? async (respond) => {
          const { redisStore } = await import('../drivers/redis.js');
          const { idempotency } = await import('../adapters/express.js');
          const store = redisStore({ url, namespace });
          stores.push(store);
          // The app's own instance is subscribed, as once any duplicate waited on it.
          store.subscribe?.({ settled: () => undefined, ready: () => undefined, down: () => undefined });
          return { handlers: [idempotency({ store, scope: 'shared', ...(compress ? { compress: true } : {}) }), respond], close: () => store.close() };
        }
      : async (respond) => {
          const core = await import('@node-idempotency/core');
          const { RedisStorageAdapter } = await import('@node-idempotency/storage-adapter-redis');
          const storage = new RedisStorageAdapter({ url });
          await storage.connect();
          const idem = new core.Idempotency(storage, {});
          const handler: RequestHandler = (req, res, next) => {
            const params = { method: req.method, path: req.path, headers: req.headers, body: req.body as Record<string, unknown> };
            idem.onRequest(params).then(
              (cached) => {
                if (cached) {
                  res.status(Number(cached.additional?.status ?? 200)).type('application/json').send(cached.body as string);
                  return;
                }
                const send = res.send.bind(res);
                res.send = ((body: string) => {
                  res.send = send;
                  void idem.onResponse(params, { body, additional: { status: res.statusCode } }).then(
                    () => send(body),
                    (error: unknown) => next(error),
                  );
                  return res;
                }) as typeof res.send;
                next();
              },
              (error: unknown) => res.status(error instanceof core.IdempotencyError ? 409 : 500).end(),
            );
          };
          return { handlers: [handler, respond], close: () => storage.disconnect?.() ?? Promise.resolve() };
        };
  // The other instances of the fleet, each with its subscription (ours only: the peer has none).
  if (impl === 'ours') for (let i = 1; i < subscribers; i++) raw.push(await rawSubscriber(url, channel));
  const app = await startExpress(layer);
  let other: Awaited<ReturnType<typeof startExpress>> | undefined;
  try {
    // Warm-up: the scripts loaded, the connections open.
    await drive(app.url, Array.from({ length: 50 }, () => randomUUID()), 8);
    await sleep(200);
    for (const s of raw) s.reset();
    const keys = Array.from({ length: first }, () => randomUUID());

    const measure = async (phase: () => Promise<Record<string, number>>) => {
      await redisCommand(url, 'CONFIG', 'RESETSTAT');
      const calls0 = await commandCalls(url);
      const cpu0 = await redisCpuS(url);
      const codes = await phase();
      const cpu1 = await redisCpuS(url);
      const calls1 = await commandCalls(url);
      return { codes, cpuUs: ((cpu1 - cpu0) * 1e6) / keys.length, calls: describeCalls(calls0, calls1, keys.length) };
    };
    const ran0 = app.executions();
    const firstPhase = await measure(() => drive(app.url, keys, 32));
    await sleep(100);
    const wakeBytes = raw.reduce((n, s) => n + s.bytes(), 0);
    const memory = await memoryOfAllKeys(url);
    const replayPhase = await measure(() => drive(app.url, keys, 32));
    if (app.executions() - ran0 !== keys.length) throw new Error(`${impl}: ${app.executions() - ran0} executions for ${keys.length} keys`);
    for (const [phase, codes] of [
      ['first', firstPhase.codes],
      ['replay', replayPhase.codes],
    ] as const) {
      const bad = Object.keys(codes).filter((c) => c !== '201');
      if (bad.length > 0) throw new Error(`${impl} ${phase}: answers ${JSON.stringify(codes)}`);
    }
    const row: RedisCostRow = {
      impl,
      ...(compress ? { compress: true } : {}),
      subscribers: impl === 'ours' ? subscribers : 0,
      firstCpuUs: firstPhase.cpuUs,
      replayCpuUs: replayPhase.cpuUs,
      firstCommands: firstPhase.calls,
      replayCommands: replayPhase.calls,
      bytesPerRecord: memory.bytes / (keys.length + 50),
      // Counted on the N - 1 raw subscribers, for all N subscribed instances.
      wakeBytesNoWaiter: raw.length === 0 ? 0 : (wakeBytes / raw.length / keys.length) * subscribers,
    };
    if (withWaiters && impl === 'ours') {
      // Keys with one duplicate each, sent to another instance while the first runs
      // (120 ms): it waits for the wake-up (a duplicate on the same instance would wait
      // on the in-process flight, not on Redis).
      other = await startExpress(layer);
      await drive(other.url, Array.from({ length: 20 }, () => randomUUID()), 4);
      await sleep(200);
      for (const s of raw) s.reset();
      const waited = Array.from({ length: 100 }, () => randomUUID());
      const statuses: Record<string, number> = {};
      await Promise.all(
        waited.map(async (key) => {
          const a = post(app.url, key, 120);
          await sleep(30);
          const b = post(other!.url, key);
          for (const s of await Promise.all([a, b])) statuses[s] = (statuses[s] ?? 0) + 1;
        }),
      );
      await sleep(100);
      row.wakeBytesWithWaiter = (raw.reduce((n, s) => n + s.bytes(), 0) / raw.length / waited.length) * subscribers;
      row.waiterStatuses = JSON.stringify(statuses);
      if (Object.keys(statuses).some((c) => c !== '201')) throw new Error(`${impl} waiters: answers ${row.waiterStatuses}`);
    }
    return row;
  } finally {
    await other?.close();
    await app.close();
    for (const s of raw) s.close();
    await Promise.all(stores.map((s) => s.close().catch(() => undefined)));
  }
}

// ---------------------------------------------------------------- PostgreSQL

/** A private PostgreSQL 15 with pg_stat_statements, or why not. */
export async function startPrivatePostgres(): Promise<{ url: string; stop(): Promise<void> } | string> {
  const bin = ['/usr/lib/postgresql/15/bin', '/usr/lib/postgresql/16/bin', '/usr/lib/postgresql/17/bin'].find((d) => existsSync(path.join(d, 'initdb')));
  if (!bin) return 'no initdb under /usr/lib/postgresql/*/bin';
  const dir = mkdtempSync(path.join(os.tmpdir(), 'idempotency-cost-pg-'));
  const root = process.getuid?.() === 0;
  // initdb refuses root: the data folder belongs to the postgres user, which runs it.
  const asUser = (cmd: string, args: string[]) => (root ? ['runuser', ['-u', 'postgres', '--', cmd, ...args]] : [cmd, args]) as [string, string[]];
  try {
    if (root) {
      const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
      const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
      chownSync(dir, uid, gid);
      chmodSync(dir, 0o700);
    }
    const [c, a] = asUser(path.join(bin, 'initdb'), ['-D', path.join(dir, 'data'), '-A', 'trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8']);
    execFileSync(c, a, { stdio: 'ignore' });
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    return `initdb failed (${(error as Error).message.split('\n')[0]})`;
  }
  const port = await freePort();
  const [c, a] = asUser(path.join(bin, 'postgres'), [
    '-D',
    path.join(dir, 'data'),
    '-p',
    String(port),
    '-k',
    dir,
    '-c',
    'listen_addresses=127.0.0.1',
    '-c',
    'shared_preload_libraries=pg_stat_statements',
    '-c',
    'pg_stat_statements.track=all',
    // Commits do not wait for the disk (statement execution times do not include it).
    '-c',
    'synchronous_commit=off',
  ]);
  const child: ChildProcess = spawn(c, a, { stdio: 'ignore' });
  const stop = async () => {
    child.kill('SIGINT');
    await Promise.race([new Promise((r) => child.once('exit', r)), sleep(5000)]);
    rmSync(dir, { recursive: true, force: true });
  };
  for (let i = 0; i < 100; i++) {
    if (await reachable('127.0.0.1', port, 200)) {
      await sleep(300);
      const url = `postgresql://postgres@127.0.0.1:${port}/postgres`;
      const pg = (await import('pg')).default;
      const client = new pg.Client({ connectionString: url });
      for (let j = 0; j < 20; j++) {
        try {
          await client.connect();
          break;
        } catch {
          await sleep(200);
        }
      }
      await client.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
      await client.end();
      return { url, stop };
    }
    await sleep(100);
  }
  await stop();
  return 'postgres did not start';
}

export interface SqlCostRow {
  database: 'postgres' | 'mariadb';
  impl: 'ours' | 'floor';
  firstExecUs: number;
  firstStatements: number;
  replayExecUs: number;
  replayStatements: number;
  bytesPerRecord: number;
}

interface SqlProbe {
  reset(): Promise<void>;
  /** Statements and their summed execution time since reset, from the server's own timers. */
  read(): Promise<{ calls: number; execUs: number; breakdown?: string }>;
  bytes(table: string): Promise<{ bytes: number; rows: number }>;
  close(): Promise<void>;
}

async function pgProbe(url: string): Promise<SqlProbe & { query(text: string, values?: unknown[]): Promise<{ rows: Record<string, unknown>[] }> }> {
  const pg = (await import('pg')).default;
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  return {
    query: (text, values) => client.query(text, values),
    async reset() {
      await client.query('SELECT pg_stat_statements_reset()');
    },
    async read() {
      const { rows } = await client.query(
        `SELECT coalesce(sum(calls), 0)::float8 AS calls, coalesce(sum(total_exec_time), 0)::float8 AS ms FROM pg_stat_statements
         WHERE query NOT ILIKE '%pg_stat_statements%' AND userid = (SELECT oid FROM pg_roles WHERE rolname = current_user)
           AND query NOT ILIKE 'LISTEN%' AND query NOT ILIKE 'DO $$%'`,
      );
      const { rows: each } = await client.query(
        `SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 40) AS q, calls::float8 AS calls, mean_exec_time::float8 AS ms FROM pg_stat_statements
         WHERE query NOT ILIKE '%pg_stat_statements%' AND query NOT ILIKE 'LISTEN%' AND query NOT ILIKE 'DO $$%' ORDER BY total_exec_time DESC LIMIT 4`,
      );
      const breakdown = each.map((r) => `${String(r.q)}… ×${Number(r.calls)} ${(Number(r.ms) * 1000).toFixed(1)} µs`).join('; ');
      return { calls: Number(rows[0].calls), execUs: Number(rows[0].ms) * 1000, breakdown };
    },
    async bytes(table) {
      const { rows } = await client.query(`SELECT pg_total_relation_size($1::regclass)::float8 AS bytes, (SELECT count(*) FROM ${table})::float8 AS n`, [table]);
      return { bytes: Number(rows[0].bytes), rows: Number(rows[0].n) };
    },
    close: () => client.end(),
  };
}

/**
 * The floor: the two statements a minimal correct SQL layer runs on a first execution
 * (INSERT … ON CONFLICT DO NOTHING RETURNING; UPDATE with the response) and on a replay
 * (the same INSERT, then SELECT), on a lean table: the hashed key, fingerprint, token,
 * expiry (indexed, for the sweep), status, headers as JSON text and the body as bytes.
 */
function floorLayer(kind: 'postgres' | 'mariadb', url: string, table: string): Layer {
  return async (respond) => {
    let query: (text: string, values: unknown[]) => Promise<Record<string, unknown>[]>;
    let end: () => Promise<void>;
    if (kind === 'postgres') {
      const pg = (await import('pg')).default;
      const pool = new pg.Pool({ connectionString: url, max: 4 });
      query = async (text, values) => (await pool.query({ text, values })).rows as Record<string, unknown>[];
      end = () => pool.end();
      await query(
        `CREATE TABLE ${table} (key text PRIMARY KEY, fingerprint text NOT NULL, token text NOT NULL, expires_at bigint NOT NULL,
          status smallint, headers text, body bytea)`,
        [],
      );
      await query(`CREATE INDEX ON ${table} (expires_at)`, []);
    } else {
      const mysql = await import('mysql2/promise');
      const pool = mysql.createPool({ uri: url, connectionLimit: 4 });
      query = async (text, values) => {
        const [rows] = await pool.query(text, values);
        return (Array.isArray(rows) ? rows : [rows]) as Record<string, unknown>[];
      };
      end = () => pool.end();
      await query(
        `CREATE TABLE ${table} (k varbinary(32) PRIMARY KEY, fingerprint varbinary(32) NOT NULL, token varbinary(16) NOT NULL,
          expires_at bigint NOT NULL, status smallint, headers text, body mediumblob, KEY (expires_at))`,
        [],
      );
    }
    const pgSql = {
      claim: `INSERT INTO ${table} (key, fingerprint, token, expires_at) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING RETURNING 1 AS n`,
      read: `SELECT fingerprint, status, headers, body FROM ${table} WHERE key = $1 AND expires_at > $2`,
      complete: `UPDATE ${table} SET status = $3, headers = $4, body = $5, expires_at = $6 WHERE key = $1 AND token = $2`,
    };
    const handler: RequestHandler = (req, res, next) => {
      const key = createHash('sha256').update(String(req.headers['idempotency-key'])).digest();
      const fingerprint = createHash('sha256').update(JSON.stringify(req.body)).digest();
      const token = randomUUID();
      const now = Date.now();
      const run = async () => {
        let claimed: boolean;
        if (kind === 'postgres') {
          claimed = (await query(pgSql.claim, [key.toString('base64url'), fingerprint.toString('base64url'), token, now + 30_000])).length === 1;
        } else {
          const r = (await query(`INSERT IGNORE INTO ${table} (k, fingerprint, token, expires_at) VALUES (?, ?, ?, ?)`, [
            key,
            fingerprint,
            Buffer.from(token.replaceAll('-', ''), 'hex'),
            now + 30_000,
          ])) as unknown as { affectedRows: number }[];
          claimed = (r[0] as { affectedRows: number }).affectedRows === 1;
        }
        if (!claimed) {
          const [row] =
            kind === 'postgres'
              ? await query(pgSql.read, [key.toString('base64url'), now])
              : await query(`SELECT fingerprint, status, headers, body FROM ${table} WHERE k = ? AND expires_at > ?`, [key, now]);
          if (!row || row.status === null) {
            res.status(409).end();
            return;
          }
          res.status(Number(row.status)).set(JSON.parse(String(row.headers)) as Record<string, string>).send(row.body as Buffer);
          return;
        }
        const send = res.send.bind(res);
        res.send = ((body: string) => {
          res.send = send;
          const headers = JSON.stringify({ 'content-type': 'application/json; charset=utf-8' });
          const bytes = Buffer.from(body);
          const done =
            kind === 'postgres'
              ? query(pgSql.complete, [key.toString('base64url'), token, res.statusCode, headers, bytes, Date.now() + 86_400_000])
              : query(`UPDATE ${table} SET status = ?, headers = ?, body = ?, expires_at = ? WHERE k = ? AND token = ?`, [
                  res.statusCode,
                  headers,
                  bytes,
                  Date.now() + 86_400_000,
                  key,
                  Buffer.from(token.replaceAll('-', ''), 'hex'),
                ]);
          done.then(
            () => send(body),
            (error: unknown) => next(error),
          );
          return res;
        }) as typeof res.send;
        next();
      };
      run().catch(next);
    };
    return { handlers: [handler, respond], close: end };
  };
}

async function sqlRun(
  kind: 'postgres' | 'mariadb',
  url: string,
  impl: SqlCostRow['impl'],
  first: number,
  probe: SqlProbe,
): Promise<SqlCostRow> {
  const table = `cost_${impl}_${Date.now().toString(36)}`;
  let layer: Layer;
  if (impl === 'floor') layer = floorLayer(kind, url, table);
  else {
    layer = async (respond) => {
      const { idempotency } = await import('../adapters/express.js');
      const store =
        kind === 'postgres'
          ? (await import('../drivers/postgres.js')).postgresStore({ url, table, sweepIntervalMs: 0 })
          : (await import('../drivers/mysql.js')).mysqlStore({ url, table, sweepIntervalMs: 0 });
      return { handlers: [idempotency({ store, scope: 'shared' }), respond], close: () => store.close() };
    };
  }
  const app = await startExpress(layer);
  try {
    // Warm-up: the table made, statements prepared, then counted from zero.
    await drive(app.url, Array.from({ length: 50 }, () => randomUUID()), 1);
    const keys = Array.from({ length: first }, () => randomUUID());
    const phase = async () => {
      await probe.reset();
      const codes = await drive(app.url, keys, 1);
      const bad = Object.keys(codes).filter((c) => c !== '201');
      if (bad.length > 0) throw new Error(`${kind} ${impl}: answers ${JSON.stringify(codes)}`);
      const read = await probe.read();
      if (read.breakdown) log(`    ${kind} ${impl}: ${read.breakdown}`);
      return { execUs: read.execUs / keys.length, statements: read.calls / keys.length };
    };
    const firstPhase = await phase();
    const size = await probe.bytes(table);
    const replayPhase = await phase();
    return {
      database: kind,
      impl,
      firstExecUs: firstPhase.execUs,
      firstStatements: firstPhase.statements,
      replayExecUs: replayPhase.execUs,
      replayStatements: replayPhase.statements,
      bytesPerRecord: size.bytes / size.rows,
    };
  } finally {
    await app.close();
  }
}

// ---------------------------------------------------------------- MariaDB

/** A private MariaDB with performance_schema on, in a temporary folder, or why not. */
export async function startPrivateMariadb(): Promise<{ url: string; stop(): Promise<void> } | string> {
  const server = ['/usr/sbin/mariadbd', '/usr/sbin/mysqld'].find((p) => existsSync(p));
  const install = ['/usr/bin/mariadb-install-db', '/usr/bin/mysql_install_db'].find((p) => existsSync(p));
  if (!server || !install) return 'no mariadbd or mariadb-install-db';
  const dir = mkdtempSync(path.join(os.tmpdir(), 'idempotency-cost-my-'));
  const root = process.getuid?.() === 0;
  const user = root ? ['--user=mysql'] : [];
  try {
    if (root) {
      const uid = Number(execFileSync('id', ['-u', 'mysql'], { encoding: 'utf8' }).trim());
      const gid = Number(execFileSync('id', ['-g', 'mysql'], { encoding: 'utf8' }).trim());
      chownSync(dir, uid, gid);
    }
    execFileSync(install, [...user, `--datadir=${path.join(dir, 'data')}`, '--auth-root-authentication-method=normal', '--skip-test-db'], { stdio: 'ignore' });
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    return `mariadb-install-db failed (${(error as Error).message.split('\n')[0]})`;
  }
  const port = await freePort();
  const child = spawn(
    server,
    [
      '--no-defaults',
      ...user,
      `--datadir=${path.join(dir, 'data')}`,
      `--socket=${path.join(dir, 'sock')}`,
      `--pid-file=${path.join(dir, 'pid')}`,
      `--port=${port}`,
      '--bind-address=127.0.0.1',
      '--skip-log-bin',
      '--performance_schema=ON',
      '--performance-schema-consumer-events-statements-history=OFF',
      '--innodb-flush-log-at-trx-commit=2',
    ],
    { stdio: 'ignore' },
  );
  const stop = async () => {
    child.kill('SIGTERM');
    await Promise.race([new Promise((r) => child.once('exit', r)), sleep(10_000)]);
    rmSync(dir, { recursive: true, force: true });
  };
  for (let i = 0; i < 150; i++) {
    if (await reachable('127.0.0.1', port, 200)) {
      const mysql = await import('mysql2/promise');
      for (let j = 0; j < 30; j++) {
        try {
          const c = await mysql.createConnection({ host: '127.0.0.1', port, user: 'root' });
          await c.query('CREATE DATABASE IF NOT EXISTS cost');
          await c.end();
          return { url: `mysql://root@127.0.0.1:${port}/cost`, stop };
        } catch {
          await sleep(200);
        }
      }
      break;
    }
    await sleep(100);
  }
  await stop();
  return 'mariadbd did not start';
}

async function mariadbProbe(url: string): Promise<SqlProbe> {
  const mysql = await import('mysql2/promise');
  const c = await mysql.createConnection({ uri: url });
  return {
    async reset() {
      await c.query('TRUNCATE performance_schema.events_statements_summary_by_digest');
    },
    async read() {
      // Timer columns are picoseconds; only the application's statements on its schema.
      const [rows] = await c.query(
        `SELECT coalesce(sum(COUNT_STAR), 0) AS calls, coalesce(sum(SUM_TIMER_WAIT), 0) / 1e6 AS us FROM performance_schema.events_statements_summary_by_digest
         WHERE SCHEMA_NAME = 'cost' AND DIGEST_TEXT NOT LIKE '%performance_schema%' AND DIGEST_TEXT NOT LIKE 'SELECT @@%'
           AND DIGEST_TEXT NOT LIKE 'CREATE%' AND DIGEST_TEXT NOT LIKE 'SHOW%'`,
      );
      const row = (rows as Record<string, unknown>[])[0]!;
      const [each] = await c.query(
        `SELECT left(DIGEST_TEXT, 40) AS q, COUNT_STAR AS calls, AVG_TIMER_WAIT / 1e6 AS us FROM performance_schema.events_statements_summary_by_digest
         WHERE SCHEMA_NAME = 'cost' AND DIGEST_TEXT NOT LIKE '%performance_schema%' AND DIGEST_TEXT NOT LIKE 'SELECT @@%'
           AND DIGEST_TEXT NOT LIKE 'CREATE%' AND DIGEST_TEXT NOT LIKE 'SHOW%' ORDER BY SUM_TIMER_WAIT DESC LIMIT 4`,
      );
      const breakdown = (each as Record<string, unknown>[]).map((r) => `${String(r.q)}… ×${Number(r.calls)} ${Number(r.us).toFixed(1)} µs`).join('; ');
      return { calls: Number(row.calls), execUs: Number(row.us), breakdown };
    },
    async bytes(table) {
      await c.query(`ANALYZE TABLE ${table}`);
      const [rows] = await c.query(
        `SELECT (data_length + index_length) AS bytes, (SELECT count(*) FROM ${table}) AS n FROM information_schema.tables WHERE table_schema = 'cost' AND table_name = ?`,
        [table],
      );
      const row = (rows as Record<string, unknown>[])[0]!;
      return { bytes: Number(row.bytes), rows: Number(row.n) };
    },
    close: () => c.end(),
  };
}

// ---------------------------------------------------------------- the run

export interface StoreCostResults {
  date: string;
  requests: number;
  redisVersion?: string;
  redis: RedisCostRow[];
  sql: SqlCostRow[];
  skipped: string[];
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor((values.length - 1) / 2)]!;

/**
 * `cases` taking turns, `n` rounds, each reported as one row whose timings are the
 * medians of its own samples: run case after case, the host's drift (a shared machine
 * swings by tens of percent within minutes) would land on some cases and not others.
 */
async function inTurns<T extends RedisCostRow | SqlCostRow>(n: number, cases: (() => Promise<T>)[]): Promise<T[]> {
  const runs: T[][] = cases.map(() => []);
  for (let i = 0; i < n; i++) for (const [c, run] of cases.entries()) runs[c]!.push(await run());
  return runs.map((samples) => {
    const row = { ...samples[samples.length - 1]! };
    for (const field of ['firstCpuUs', 'replayCpuUs', 'firstExecUs', 'replayExecUs'] as const) {
      if (field in row) (row as unknown as Record<string, unknown>)[field] = median(samples.map((r) => (r as unknown as Record<string, number>)[field]!));
    }
    return row;
  });
}

export async function runStoreCost(argv: string[]): Promise<StoreCostResults> {
  const opt = (name: string) => argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
  const quick = argv.includes('--quick');
  const first = Number(opt('first') ?? (quick ? 200 : 2000));
  const repeats = Number(opt('repeats') ?? (quick ? 1 : 3));
  const subscriberCounts = (opt('subscribers') ?? (quick ? '2' : '2,8,32')).split(',').map(Number);
  const results: StoreCostResults = { date: new Date().toISOString(), requests: first, redis: [], sql: [], skipped: [] };

  const redis = argv.includes('--no-redis') ? undefined : await startPrivateRedis();
  if (argv.includes('--no-redis')) results.skipped.push('redis: --no-redis');
  else if (!redis) results.skipped.push('redis: redis-server could not be started');
  else {
    try {
      results.redisVersion = (await redisInfo(redis.url, 'server')).redis_version;
      log(`redis ${results.redisVersion} at ${redis.url}: ${first} first executions then ${first} replays, 32 in flight`);
      const rows = await inTurns(repeats, [
        () => redisRun(redis.url, 'node-idempotency', 0, first, false),
        ...subscriberCounts.map((n) => () => redisRun(redis.url, 'ours', n, first, n === 8 || subscriberCounts.length === 1)),
        () => redisRun(redis.url, 'ours', subscriberCounts[0]!, first, false, true),
      ]);
      results.redis.push(...rows);
      for (const r of rows) {
        const who = r.impl === 'ours' ? `ours${r.compress ? ' with compress: true' : ''}, ${r.subscribers} subscribed` : 'peer';
        log(`  ${who}: first ${fmt(r.firstCpuUs, 1)} µs, replay ${fmt(r.replayCpuUs, 1)} µs, ${fmt(r.bytesPerRecord)} B/record`);
      }
    } finally {
      await redis.stop();
    }
  }

  const pg = argv.includes('--no-postgres') ? '--no-postgres' : await startPrivatePostgres();
  if (typeof pg === 'string') results.skipped.push(`postgres: ${pg}`);
  else {
    try {
      log(`postgres at ${pg.url}: one request at a time`);
      const probe = await pgProbe(pg.url);
      try {
        const rows = await inTurns(
          repeats,
          (['floor', 'ours'] as const).map((impl) => () => sqlRun('postgres', pg.url, impl, first, probe)),
        );
        results.sql.push(...rows);
        for (const r of rows) log(`  ${r.impl}: first ${fmt(r.firstExecUs, 1)} µs, replay ${fmt(r.replayExecUs, 1)} µs, ${fmt(r.bytesPerRecord)} B/record`);
      } finally {
        await probe.close();
      }
    } finally {
      await pg.stop();
    }
  }

  if (!argv.includes('--no-mariadb')) {
    const my = await startPrivateMariadb();
    if (typeof my === 'string') results.skipped.push(`mariadb: ${my}`);
    else {
      try {
        log(`mariadb at ${my.url}: one request at a time`);
        const probe = await mariadbProbe(my.url);
        try {
          const rows = await inTurns(
            repeats,
            (['floor', 'ours'] as const).map((impl) => () => sqlRun('mariadb', my.url, impl, first, probe)),
          );
          results.sql.push(...rows);
          for (const r of rows) log(`  ${r.impl}: first ${fmt(r.firstExecUs, 1)} µs, replay ${fmt(r.replayExecUs, 1)} µs, ${fmt(r.bytesPerRecord)} B/record`);
        } finally {
          await probe.close();
        }
      } finally {
        await my.stop();
      }
    }
  }
  return results;
}

/** The tables, as Markdown. */
export function renderStoreCost(r: StoreCostResults): string {
  const lines: string[] = [];
  const peer = r.redis.find((x) => x.impl === 'node-idempotency');
  if (r.redis.length > 0) {
    lines.push(
      `Redis ${r.redisVersion ?? '?'}, ${fmt(r.requests)} first executions then as many replays, 32 in flight, one store connection; Redis CPU is its process's user + system time (INFO cpu).`,
      '',
      '| per request | subscribed instances | Redis CPU, first execution | Redis CPU, replay | commands, first execution | commands, replay | bytes per record | wake-up bytes per completion, no waiter | with a waiter |',
      '|---|---:|---:|---:|---|---|---:|---:|---:|',
    );
    for (const x of r.redis) {
      const name = x.impl === 'ours' ? `idempotency-kit${x.compress ? ', `compress: true`' : ''}` : '@node-idempotency/core + Redis adapter';
      const vs = (mine: number, theirs: number | undefined) => (x.impl === 'ours' && theirs ? ` (${fmt(mine / theirs, 2)}×)` : '');
      lines.push(
        `| ${name} | ${x.impl === 'ours' ? x.subscribers : '-'} | ${fmt(x.firstCpuUs, 1)} µs${vs(x.firstCpuUs, peer?.firstCpuUs)} | ${fmt(x.replayCpuUs, 1)} µs${vs(x.replayCpuUs, peer?.replayCpuUs)} | ${x.firstCommands} | ${x.replayCommands} | ${fmt(x.bytesPerRecord)} B${vs(x.bytesPerRecord, peer?.bytesPerRecord)} | ${x.impl === 'ours' ? fmt(x.wakeBytesNoWaiter) : '-'} | ${x.wakeBytesWithWaiter === undefined ? '-' : fmt(x.wakeBytesWithWaiter)} |`,
      );
    }
  }
  for (const database of ['postgres', 'mariadb'] as const) {
    const rows = r.sql.filter((x) => x.database === database);
    if (rows.length === 0) continue;
    const floor = rows.find((x) => x.impl === 'floor');
    lines.push(
      '',
      `${database === 'postgres' ? 'PostgreSQL (pg_stat_statements)' : 'MariaDB (performance_schema)'}, one request at a time, ${fmt(r.requests)} first executions then as many replays.`,
      '',
      '| per request | execution time, first | statements, first | execution time, replay | statements, replay | bytes per record |',
      '|---|---:|---:|---:|---:|---:|',
    );
    for (const x of rows) {
      const vs = (mine: number, theirs: number | undefined) => (x.impl === 'ours' && theirs ? ` (${fmt(mine / theirs, 2)}×)` : '');
      lines.push(
        `| ${x.impl === 'ours' ? 'idempotency-kit' : 'floor'} | ${fmt(x.firstExecUs, 1)} µs${vs(x.firstExecUs, floor?.firstExecUs)} | ${fmt(x.firstStatements, 2)} | ${fmt(x.replayExecUs, 1)} µs${vs(x.replayExecUs, floor?.replayExecUs)} | ${fmt(x.replayStatements, 2)} | ${fmt(x.bytesPerRecord)} B${vs(x.bytesPerRecord, floor?.bytesPerRecord)} |`,
      );
    }
  }
  for (const s of r.skipped) lines.push('', `Skipped: ${s}`);
  return lines.join('\n');
}
