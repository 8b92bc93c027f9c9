/**
 * `idempotency-kit reseal`: after a key rotation ([A] -> [B, A]), every live completed
 * record is sealed under B, so that A can be dropped. On the built dist/cli.js against
 * SQLite, Redis, PostgreSQL and MySQL, and in-process (resealStore) on the memory store.
 */
import { execFile } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import mysql from 'mysql2/promise';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resealStore, type ResealProgress } from '../../cli/reseal.js';
import { createStore } from '../../drivers/create-store.js';
import { memoryStore } from '../../drivers/memory.js';
import { isSealed, openRecord, resealRecord, resolveEncryption, sealedKeyId, type EncryptionKey } from '../../src/encryption.js';
import { idempotent } from '../../src/idempotent.js';
import { storageKey } from '../../src/key.js';
import type { CompletedRecord, IdempotencyStore } from '../../src/store.js';
import { redisServerAvailable, startRedisCluster } from '../helpers/redis-cluster.js';
import { MYSQL_URL, POSTGRES_URL, REDIS_URL, serviceAvailable } from '../helpers/services.js';

const CLI = path.resolve('dist/cli.js');
if (!existsSync(CLI)) throw new Error('dist/cli.js is missing: build first (npx tsup; npm test does it)');

const A: EncryptionKey = { id: 'key-A', key: randomBytes(32).toString('base64') };
const B: EncryptionKey = { id: 'key-B', key: randomBytes(32).toString('hex') };
/** A key the reseal is never given. */
const C: EncryptionKey = { id: 'key-C', key: randomBytes(32).toString('base64') };
const SCOPE = 'tenant-reseal';
const SECRET = 'card=4242-4242-4242-4242';

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function cli(args: string[], env: Record<string, string | undefined> = {}): Promise<Run> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { env: { ...process.env, IDEMPOTENCY_STORE: undefined, IDEMPOTENCY_KEYS: undefined, ...env }, timeout: 60_000 }, (error, stdout, stderr) =>
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : -1) : 0, stdout, stderr }),
    );
  });
}

/** What one reseal run reports, the same whether it ran in-process or as the command. */
type Report = Omit<ResealProgress, 'cursor'> & { cursor: string | undefined; code: number; stderr: string };
interface Options {
  batch?: number;
  limit?: number;
  from?: string;
  dryRun?: boolean;
  encryptPlaintext?: boolean;
}
type Reseal = (keys: EncryptionKey[], options?: Options) => Promise<Report>;

let calls = 0;
/** The app: an idempotent function whose result holds a secret, sealed with `keys`. */
const app = (store: IdempotencyStore, keys: EncryptionKey[] | undefined) =>
  idempotent(
    async (id: string) => {
      calls++;
      return { id, secret: SECRET, bytes: [...randomBytes(8)] };
    },
    { store, key: (id: string) => id, scope: () => SCOPE, ...(keys ? { encryption: { keys } } : {}) },
  );

const sk = (id: string) => storageKey(SCOPE, id, 'function');

async function raw(store: IdempotencyStore, id: string): Promise<CompletedRecord> {
  const record = await store.get(sk(id));
  if (record?.state !== 'completed') throw new Error(`no completed record for ${id}`);
  return record;
}

/** The response's plaintext bytes (status, headers, body), opened with `keys`. */
async function plainBytes(store: IdempotencyStore, id: string, keys: EncryptionKey[]): Promise<Buffer> {
  const opened = openRecord(await raw(store, id), sk(id), resolveEncryption({ keys })!);
  return Buffer.concat([Buffer.from(JSON.stringify([opened.response.status, opened.response.headers])), Buffer.from(opened.response.body!)]);
}

/** The rotation on one store: records under A, reseal with [B, A], then B alone replays them. */
function resealSuite(name: string, setup: () => Promise<{ store: IdempotencyStore; reseal: Reseal }>) {
  describe(`reseal on ${name}`, () => {
    let store: IdempotencyStore;
    let reseal: Reseal;
    const sealedIds = Array.from({ length: 7 }, (_, i) => `order-${i}`);
    const before = new Map<string, { value: unknown; bytes: Buffer }>();
    beforeAll(async () => {
      ({ store, reseal } = await setup());
      const underA = app(store, [A]);
      for (const id of sealedIds) before.set(id, { value: await underA(id), bytes: Buffer.alloc(0) });
      for (const id of sealedIds) before.get(id)!.bytes = await plainBytes(store, id, [A]);
      await app(store, undefined)('plain-1'); // written before encryption was turned on
      await app(store, [C])('lost-1'); // sealed under a key nobody kept
      await store.claim(sk('running-1'), { token: 'run', fingerprint: 'fn:x', createdAt: Date.now() }, 120_000);
    }, 60_000);
    afterAll(async () => {
      await store?.close();
    });

    it('--dry-run counts what would change and writes nothing; a record no key opens is counted, exit 5', async () => {
      const run = await reseal([B, A], { dryRun: true });
      expect(run).toMatchObject({ visited: 10, resealed: 7, current: 0, plaintext: 1, processing: 1, unreadable: 1, changed: 0, cursor: undefined, code: 5 });
      expect(run.unreadableRecords).toEqual([{ key: sk('lost-1'), keyId: 'key-C', reason: 'key-missing' }]);
      for (const id of sealedIds) expect(sealedKeyId((await raw(store, id)).response)).toBe('key-A');
    });

    it('bounded and resumable: --limit stops with a cursor, --from it finishes; then B alone replays every record byte for byte', async () => {
      const first = await reseal([B, A], { batch: 2, limit: 4 });
      expect(first.visited).toBeGreaterThanOrEqual(4);
      expect(first.visited).toBeLessThan(10);
      expect(first.cursor).toEqual(expect.any(String));
      const rest = await reseal([B, A], { batch: 2, from: first.cursor! });
      expect(rest.cursor).toBeUndefined();
      expect(first.visited + rest.visited).toBe(10);
      expect(first.resealed + rest.resealed).toBe(7);
      expect(first.unreadable + rest.unreadable).toBe(1);
      expect(rest.code).toBe(first.unreadable === 1 ? 0 : 5);

      for (const id of sealedIds) {
        const stored = await raw(store, id);
        expect(sealedKeyId(stored.response), id).toBe('key-B');
        // Nothing of the response in clear in the store.
        expect(Buffer.from(stored.response.body!).includes(SECRET), id).toBe(false);
        expect(Buffer.from(JSON.stringify(stored)).includes(SECRET), id).toBe(false);
        expect((await plainBytes(store, id, [B])).equals(before.get(id)!.bytes), id).toBe(true);
      }
      // The app with B alone: every record replays (the function does not run again).
      const onlyB = app(store, [B]);
      const ran = calls;
      for (const id of sealedIds) expect(await onlyB(id)).toEqual(before.get(id)!.value);
      expect(calls).toBe(ran);
      // The record sealed under C is still there, untouched; the plaintext one is still in clear.
      expect(sealedKeyId((await raw(store, 'lost-1')).response)).toBe('key-C');
      expect(isSealed((await raw(store, 'plain-1')).response)).toBe(false);
    });

    it('running it again from the start is safe: records under B are skipped; --encrypt-plaintext seals the plaintext one', async () => {
      const again = await reseal([B, A]);
      expect(again).toMatchObject({ visited: 10, resealed: 0, current: 7, plaintext: 1, unreadable: 1, code: 5 });
      const sealing = await reseal([B], { encryptPlaintext: true });
      expect(sealing).toMatchObject({ resealed: 1, current: 7, plaintext: 0, unreadable: 1, code: 5 });
      const plain = await raw(store, 'plain-1');
      expect(sealedKeyId(plain.response)).toBe('key-B');
      expect(Buffer.from(plain.response.body!).includes(SECRET)).toBe(false);
      const ran = calls;
      await app(store, [B])('plain-1');
      expect(calls).toBe(ran);
      // With C added, the last record opens and is re-sealed: nothing is left behind, exit 0.
      const found = await reseal([B, C]);
      expect(found).toMatchObject({ resealed: 1, current: 8, unreadable: 0, code: 0 });
      expect(sealedKeyId((await raw(store, 'lost-1')).response)).toBe('key-B');
    });

    it('while the app serves requests (replays of old records, new records) in parallel, every record ends up under B and replays with B alone', async () => {
      const old = Array.from({ length: 60 }, (_, i) => `busy-old-${i}`);
      const fresh = Array.from({ length: 60 }, (_, i) => `busy-new-${i}`);
      const underA = app(store, [A]);
      const values = new Map<string, unknown>();
      await Promise.all(old.map(async (id) => values.set(id, await underA(id))));
      const rotated = app(store, [B, A]);
      const [run] = await Promise.all([
        reseal([B, A], { batch: 7 }),
        Promise.all(fresh.map(async (id) => values.set(id, await rotated(id)))),
        Promise.all(old.map(async (id) => expect(await rotated(id)).toEqual(values.get(id)))),
      ]);
      expect(run.unreadable).toBe(0);
      // Anything the run did not re-seal itself was sealed under B by the app (or is current).
      const ran = calls;
      const onlyB = app(store, [B]);
      for (const id of [...old, ...fresh]) {
        expect(sealedKeyId((await raw(store, id)).response), id).toBe('key-B');
        expect(await onlyB(id), id).toEqual(values.get(id));
      }
      expect(calls).toBe(ran);
    });
  });
}

/** The command line's reseal on a store URL (with its flags), in --json. */
function cliReseal(flags: string[], dir: string): Reseal {
  return async (keys, options = {}) => {
    const file = path.join(dir, `keys-${randomUUID()}.json`);
    await writeFile(file, JSON.stringify(keys));
    const args = ['reseal', ...flags, '--keys-file', file, '--json'];
    if (options.batch !== undefined) args.push('--batch', String(options.batch));
    if (options.limit !== undefined) args.push('--limit', String(options.limit));
    if (options.from !== undefined) args.push('--from', options.from);
    if (options.dryRun) args.push('--dry-run');
    if (options.encryptPlaintext) args.push('--encrypt-plaintext');
    const run = await cli(args);
    expect([0, 5], run.stdout + run.stderr).toContain(run.code);
    const report = JSON.parse(run.stdout) as ResealProgress & { cursor: string | null; done: boolean; error?: { code: string } };
    expect(report.done).toBe(report.cursor === null);
    expect(report.error?.code).toBe(run.code === 5 ? 'unreadable' : undefined);
    return { ...report, cursor: report.cursor ?? undefined, code: run.code, stderr: run.stderr };
  };
}

/** resealStore in this process (the memory store cannot be reached from another one). */
function inProcess(store: () => IdempotencyStore): Reseal {
  return async (keys, options = {}) => {
    const result = await resealStore(store(), resolveEncryption({ keys }, 'keys')!, { batch: 100, ...options });
    return { ...result, code: result.unreadable > 0 ? 5 : 0, stderr: '' };
  };
}

const dir = await mkdtemp(path.join(tmpdir(), 'idempotency-kit-reseal-'));
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

resealSuite('memory (in-process)', async () => {
  const store = memoryStore({ sweepIntervalMs: 0 });
  return { store, reseal: inProcess(() => store) };
});

resealSuite('sqlite', async () => {
  const url = `sqlite://${path.join(dir, 'records.sqlite')}`;
  return { store: createStore(url, { sweepIntervalMs: 0 }), reseal: cliReseal([url], dir) };
});

const redisUp = await serviceAvailable('Redis', REDIS_URL);
describe.skipIf(!redisUp)('redis', () => {
  const namespace = `ik-reseal-${randomUUID()}`;
  resealSuite('redis', async () => ({ store: createStore(REDIS_URL, { namespace }), reseal: cliReseal(['--store', REDIS_URL, '--namespace', namespace], dir) }));
});

// A Cluster: the scan visits each primary in turn, the cursor says which.
const haveRedisServer = redisServerAvailable();
if (!haveRedisServer) {
  const message = 'redis-server / redis-cli are not installed: cannot start a Redis Cluster';
  if (process.env.CI) throw new Error(`${message} (CI is set: store tests must run)`);
  console.warn(`\n!!!!!!!! SKIPPING REDIS CLUSTER RESEAL TESTS: ${message} !!!!!!!!\n`);
}
describe.skipIf(!haveRedisServer)('redis cluster', () => {
  let cluster: Awaited<ReturnType<typeof startRedisCluster>> | undefined;
  beforeAll(async () => {
    cluster = await startRedisCluster();
  }, 60_000);
  afterAll(async () => {
    await cluster?.stop();
  });
  resealSuite('redis cluster', async () => ({ store: createStore(cluster!.url), reseal: cliReseal([cluster!.url], dir) }));
});

const postgresUp = await serviceAvailable('PostgreSQL', POSTGRES_URL);
describe.skipIf(!postgresUp)('postgres', () => {
  const table = `ik_reseal_${randomUUID().replaceAll('-', '').slice(0, 16)}`;
  afterAll(async () => {
    const admin = new pg.Pool({ connectionString: POSTGRES_URL, max: 1 });
    await admin.query(`DROP TABLE IF EXISTS "${table}"`);
    await admin.end();
  });
  resealSuite('postgres', async () => ({
    store: createStore(POSTGRES_URL, { namespace: table, sweepIntervalMs: 0 }),
    reseal: cliReseal(['--store', POSTGRES_URL, '--namespace', table], dir),
  }));
});

const mysqlUp = await serviceAvailable('MySQL', MYSQL_URL);
describe.skipIf(!mysqlUp)('mysql', () => {
  const table = `ik_reseal_${randomUUID().replaceAll('-', '').slice(0, 16)}`;
  afterAll(async () => {
    const admin = await mysql.createConnection(MYSQL_URL);
    await admin.query(`DROP TABLE IF EXISTS \`${table}\``);
    await admin.end();
  });
  resealSuite('mysql', async () => ({
    store: createStore(MYSQL_URL, { namespace: table, sweepIntervalMs: 0 }),
    reseal: cliReseal(['--store', MYSQL_URL, '--namespace', table], dir),
  }));
});

describe('reseal: races, stores without the methods, usage', () => {
  it('a record completed again between the scan and the write (under its new token) is not overwritten', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    try {
      await app(store, [A])('raced');
      const seen = await raw(store, 'raced');
      // The store as the reseal sees it: right after the scan, the record is purged and
      // written again by the app (a new token) before the reseal writes back.
      const racing: IdempotencyStore = {
        ...store,
        name: store.name,
        scan: async (options) => {
          const page = await store.scan!(options);
          await store.delete!(sk('raced'));
          await app(store, [A])('raced');
          return page;
        },
      };
      const result = await resealStore(racing, resolveEncryption({ keys: [B, A] })!, { batch: 10 });
      expect(result).toMatchObject({ visited: 1, resealed: 0, changed: 1 });
      const now = await raw(store, 'raced');
      expect(now.token).not.toBe(seen.token);
      expect(sealedKeyId(now.response)).toBe('key-A'); // the newer record, as its writer sealed it
    } finally {
      await store.close();
    }
  });

  it('resealRecord: skips a record under the first key without opening it; leaves plaintext unless asked; names an unknown key', () => {
    const keyring = resolveEncryption({ keys: [B, A] })!;
    const record: CompletedRecord = { state: 'completed', fingerprint: 'fp', token: 't', createdAt: 1, expiresAt: 2, response: { status: 200, headers: { a: 'b' }, body: new Uint8Array([1, 2]) } };
    const underA = { ...record, response: resolveEncryption({ keys: [A] })!.seal(record.response, 'k', 'fp') };
    const moved = resealRecord(underA, 'k', keyring);
    expect(moved).toMatchObject({ action: 'reseal', from: 'key-A' });
    if (moved.action !== 'reseal') return;
    expect(sealedKeyId(moved.response)).toBe('key-B');
    expect(resealRecord({ ...record, response: moved.response }, 'k', keyring)).toEqual({ action: 'current' });
    // Sealed for another storage key: it does not open here, and is reported, not re-sealed.
    expect(resealRecord(underA, 'other-key', keyring)).toEqual({ action: 'unreadable', keyId: 'key-A', reason: 'authentication-failed' });
    expect(resealRecord(record, 'k', keyring)).toEqual({ action: 'plaintext' });
    const sealed = resealRecord(record, 'k', keyring, { encryptPlaintext: true });
    expect(sealed).toMatchObject({ action: 'reseal', from: null });
    if (sealed.action === 'reseal') expect(openRecord({ ...record, response: sealed.response }, 'k', resolveEncryption({ keys: [B] })).response).toEqual(record.response);
    expect(resealRecord(underA, 'k', resolveEncryption({ keys: [B] })!)).toEqual({ action: 'unreadable', keyId: 'key-A', reason: 'key-missing' });
  });

  it('a store without scan or replaceResponse is refused with a clear message', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const { scan: _scan, ...withoutScan } = store;
    await expect(resealStore({ ...withoutScan, name: 'third-party' }, resolveEncryption({ keys: [B] })!, { batch: 10 })).rejects.toThrow(
      /the third-party store cannot reseal: it lacks scan/,
    );
    await store.close();
  });

  it('exit 2 for usage errors: no keys, bad --batch or --limit, reseal-only options elsewhere, the store twice, an unknown Redis cursor', async () => {
    const url = `sqlite://${path.join(dir, 'usage.sqlite')}`;
    const store = createStore(url, { sweepIntervalMs: 0 });
    await store.claim('k', { token: 't', fingerprint: 'f', createdAt: Date.now() }, 1000); // makes the file
    await store.close();
    const keys = JSON.stringify([B]);
    const cases: [string[], Record<string, string>, RegExp][] = [
      [['reseal', url], {}, /reseal needs the encryption keys/],
      [['reseal', url, '--batch', '0'], { IDEMPOTENCY_KEYS: keys }, /--batch must be an integer from 1 to 10000/],
      [['reseal', url, '--limit', 'lots'], { IDEMPOTENCY_KEYS: keys }, /--limit must be an integer/],
      [['stats', '--store', url, '--dry-run'], {}, /--dry-run is for reseal only/],
      [['reseal', url, '--store', url], { IDEMPOTENCY_KEYS: keys }, /give the store once/],
      [['reseal', url, 'extra'], { IDEMPOTENCY_KEYS: keys }, /unexpected argument "extra"/],
      ...(redisUp ? [[['reseal', REDIS_URL, '--from', 'not-a-cursor'], { IDEMPOTENCY_KEYS: keys }, /--from: Expected `cursor`/] as [string[], Record<string, string>, RegExp]] : []),
    ];
    for (const [args, env, message] of cases) {
      const run = await cli(args, env);
      expect(run.code, args.join(' ')).toBe(2);
      expect(run.stderr, args.join(' ')).toMatch(message);
    }
  });

  it('prints a summary for people, progress with the cursor on stderr, and a store failure says where to resume (exit 3)', async () => {
    const url = `sqlite://${path.join(dir, 'human.sqlite')}`;
    const store = createStore(url, { sweepIntervalMs: 0 });
    for (let i = 0; i < 5; i++) await app(store, [A])(`h-${i}`);
    await store.close();
    const keys = JSON.stringify([B, A]);
    const run = await cli(['reseal', url, '--batch', '2', '--progress'], { IDEMPOTENCY_KEYS: keys });
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/^resealed +5 under key key-B$/m);
    expect(run.stdout).toMatch(/^unreadable +0$/m);
    expect(run.stdout).toMatch(/^done: every live record visited$/m);
    expect(run.stderr).toMatch(/^resealed \d, current 0, unreadable 0 of \d visited; cursor \S+$/m);
    const limited = await cli(['reseal', url, '--batch', '2', '--limit', '2'], { IDEMPOTENCY_KEYS: keys });
    expect(limited.stdout).toMatch(/^stopped at --limit: resume with --from \S+$/m);
    // A dead store: exit 3, and the resume point a --from run gave is repeated.
    const dead = await cli(['reseal', 'redis://127.0.0.1:1', '--from', '0:0', '--timeout', '1000'], { IDEMPOTENCY_KEYS: keys });
    expect(dead.code).toBe(3);
    expect(dead.stderr).toMatch(/resume with --from 0:0/);
  });
});
