/**
 * The `idempotency-kit` command, run as users run it: the built dist/cli.js in a child
 * process (npm test builds it first), against SQLite, Redis and PostgreSQL.
 */
import { execFile } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync, statSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createStore } from '../../drivers/create-store.js';
import { idempotent } from '../../src/idempotent.js';
import { storageKey } from '../../src/key.js';
import type { IdempotencyStore } from '../../src/store.js';
import { POSTGRES_URL, REDIS_URL, serviceAvailable } from '../helpers/services.js';

const CLI = path.resolve('dist/cli.js');
if (!existsSync(CLI)) throw new Error('dist/cli.js is missing: build first (npx tsup; npm test does it)');

interface Run {
  code: number;
  stdout: string;
  stderr: string;
  ms: number;
}

function cli(args: string[], env: Record<string, string | undefined> = {}): Promise<Run> {
  const started = Date.now();
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI, ...args],
      { env: { ...process.env, IDEMPOTENCY_STORE: undefined, ...env }, timeout: 30_000 },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : -1) : 0;
        resolve({ code, stdout, stderr, ms: Date.now() - started });
      },
    );
  });
}

const json = (run: Run) => JSON.parse(run.stdout) as Record<string, unknown>;
const body = (text: string) => new Uint8Array(Buffer.from(text));

/** Seed one completed, one processing and some short-lived records through the store API, as the engine writes them. */
async function seed(store: IdempotencyStore, { expiring = 0 } = {}) {
  const done = storageKey('tenant-7', 'order-42');
  await store.claim(done, { token: 'tok', fingerprint: 'fp-order', createdAt: Date.now() }, 30_000);
  await store.complete(done, 'tok', { status: 422, headers: { 'content-type': 'application/json' }, body: body('{"error":"card declined"}') }, 3_600_000);
  await store.claim(storageKey(undefined, 'running'), { token: 'run', fingerprint: 'fp-run', createdAt: Date.now() }, 60_000);
  for (let i = 0; i < expiring; i++) {
    await store.claim(storageKey(undefined, `short-${i}`), { token: 's', fingerprint: 'f', createdAt: Date.now() }, 300);
  }
}

/** The commands every store must answer the same way; `store` is the URL plus any flags. */
function commandSuite(name: string, setup: () => Promise<{ flags: string[]; store: IdempotencyStore; nativeExpiry: boolean }>) {
  describe(`cli on ${name}`, () => {
    let flags: string[];
    let store: IdempotencyStore;
    let nativeExpiry: boolean;
    beforeAll(async () => {
      ({ flags, store, nativeExpiry } = await setup());
      await seed(store, { expiring: 3 });
    });
    afterAll(async () => {
      await store?.close();
    });

    it('inspect shows an encrypted record as such, and opens it with the keys from $IDEMPOTENCY_KEYS or --keys-file', async () => {
      try {
        const key = randomBytes(32).toString('base64');
        const sealed = idempotent(async (_id: string) => ({ secret: 'card=4242' }), {
          store,
          key: (id: string) => id,
          scope: () => 'tenant-enc',
          encryption: { keys: [{ id: 'cli-2026', key }] },
        });
        await sealed('sealed-1');
        const shut = await cli(['inspect', ...flags, '--key', 'sealed-1', '--scope', 'tenant-enc', '--entry', 'function', '--json']);
        expect(shut.code).toBe(0);
        expect(shut.stdout).not.toContain('card=4242');
        expect(json(shut)).toMatchObject({ state: 'completed', encryption: { keyId: 'cli-2026', opened: false } });
        expect(json(shut)).not.toHaveProperty('status');
        const human = await cli(['inspect', ...flags, '--key', 'sealed-1', '--scope', 'tenant-enc', '--entry', 'function']);
        expect(human.stdout).toMatch(/encrypted +under key cli-2026, \d+ bytes sealed; not opened: no keys given/);
        const keys = JSON.stringify([{ id: 'cli-2026', key }]);
        const opened = await cli(['inspect', ...flags, '--key', 'sealed-1', '--scope', 'tenant-enc', '--entry', 'function', '--json'], { IDEMPOTENCY_KEYS: keys });
        expect(json(opened)).toMatchObject({ encryption: { keyId: 'cli-2026', opened: true }, status: 200, kind: 'function', entry: 'function' });
        const elsewhere = await cli(['inspect', ...flags, '--key', 'sealed-1', '--scope', 'tenant-enc', '--json']);
        expect(json(elsewhere)).toMatchObject({ error: { code: 'not-found' } }); // HTTP keys are another key space
        expect((json(opened).body as { text: string }).text).toContain('card=4242');
        const file = path.join(await mkdtemp(path.join(tmpdir(), 'ik-keys-')), 'keys.json');
        await writeFile(file, JSON.stringify([{ id: 'other', key: randomBytes(32).toString('hex') }]));
        const wrong = await cli(['inspect', ...flags, '--key', 'sealed-1', '--scope', 'tenant-enc', '--entry', 'function', '--json', '--keys-file', file]);
        expect(json(wrong)).toMatchObject({ encryption: { keyId: 'cli-2026', opened: false, reason: 'key-missing' } });
        await writeFile(file, '[{"id":"x","key":"short"}]');
        const bad = await cli(['inspect', ...flags, '--key', 'sealed-1', '--keys-file', file]);
        expect(bad.code).toBe(2);
        expect(bad.stderr).toMatch(/keys\[0\]\.key` \(key id "x"\) to be 32 bytes/);
      } finally {
        await store.delete!(storageKey('tenant-enc', 'sealed-1', 'function')); // the other tests count the seeded records
      }
    });

    it('inspect shows state, fingerprint, times, status, headers and a body preview; --json for scripts', async () => {
      const human = await cli(['inspect', ...flags, '--key', 'order-42', '--scope', 'tenant-7']);
      expect(human.code).toBe(0);
      expect(human.stdout).toMatch(/state\s+completed/);
      expect(human.stdout).toMatch(/fingerprint\s+fp-order/);
      expect(human.stdout).toMatch(/status\s+422/);
      expect(human.stdout).toMatch(/content-type: application\/json/);
      expect(human.stdout).toContain('{"error":"card declined"}');
      const run = await cli(['inspect', ...flags, '--key', 'order-42', '--scope', 'tenant-7', '--json']);
      expect(run.code).toBe(0);
      const view = json(run);
      expect(view).toMatchObject({
        key: 'order-42',
        scope: 'tenant-7',
        entry: 'http',
        storageKey: storageKey('tenant-7', 'order-42'),
        state: 'completed',
        fingerprint: 'fp-order',
        status: 422,
        headers: { 'content-type': 'application/json' },
        bodyBytes: 25,
        body: { encoding: 'utf8', text: '{"error":"card declined"}', truncated: false },
      });
      expect(Date.parse(view.expiresAt as string)).toBeGreaterThan(Date.now() + 3_000_000);
    });

    it('H15: the scope is part of the key: the same key without its scope is not found (exit 1)', async () => {
      const run = await cli(['inspect', ...flags, '--key', 'order-42', '--json']);
      expect(run.code).toBe(1);
      expect(json(run)).toMatchObject({ error: { code: 'not-found' } });
    });

    it('stats counts records by state with the earliest expiry', async () => {
      const run = await cli(['stats', ...flags, '--json']);
      expect(run.code).toBe(0);
      const stats = json(run);
      expect(stats.completed).toBe(1);
      expect((stats.processing as number) + (stats.expired as number)).toBeGreaterThanOrEqual(1);
      expect(typeof stats.oldestExpiresAt).toBe('string');
    });

    it('purge refuses a processing record without --force (exit 4), removes it with --force', async () => {
      const refused = await cli(['purge', ...flags, '--key', 'running']);
      expect(refused.code).toBe(4);
      expect(refused.stderr).toMatch(/still processing.*--force/);
      expect(await store.get(storageKey(undefined, 'running'))).toBeDefined();
      const forced = await cli(['purge', ...flags, '--key', 'running', '--force', '--json']);
      expect(forced.code).toBe(0);
      expect(json(forced)).toMatchObject({ purged: true, record: { state: 'processing' } });
      expect(await store.get(storageKey(undefined, 'running'))).toBeUndefined();
    });

    it('purge deletes a stored 4xx so the next claim runs again; purging again is not found (exit 1)', async () => {
      const run = await cli(['purge', ...flags, '--key', 'order-42', '--scope', 'tenant-7']);
      expect(run.code).toBe(0);
      expect(run.stdout).toMatch(/purged the completed 422 record/);
      const skey = storageKey('tenant-7', 'order-42');
      expect((await store.claim(skey, { token: 'again', fingerprint: 'fp-order', createdAt: Date.now() }, 5000)).claimed).toBe(true);
      await store.release(skey, 'again');
      const again = await cli(['purge', ...flags, '--key', 'order-42', '--scope', 'tenant-7']);
      expect(again.code).toBe(1);
      expect(again.stderr).toMatch(/no record for key "order-42" in scope "tenant-7"/);
    });

    it('sweep deletes expired rows now (Redis expires them itself: 0)', async () => {
      // The three 300 ms leases have ended.
      await new Promise((r) => setTimeout(r, 400));
      const run = await cli(['sweep', ...flags, '--json']);
      expect(run.code).toBe(0);
      expect(json(run)).toEqual({ deleted: nativeExpiry ? 0 : 3 });
      const stats = json(await cli(['stats', ...flags, '--json']));
      expect(stats.expired).toBe(0);
    });
  });
}

const dir = await mkdtemp(path.join(tmpdir(), 'idempotency-kit-cli-'));
const dbFile = path.join(dir, 'records.sqlite');
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

commandSuite('sqlite', async () => ({
  flags: ['--store', `sqlite://${dbFile}`],
  store: createStore(`sqlite://${dbFile}`, { sweepIntervalMs: 0 }),
  nativeExpiry: false,
}));

const redisUp = await serviceAvailable('Redis', REDIS_URL);
describe.skipIf(!redisUp)('redis', () => {
  const namespace = `ik-cli-${randomUUID()}`;
  commandSuite('redis', async () => ({
    flags: ['--store', REDIS_URL, '--namespace', namespace],
    store: createStore(REDIS_URL, { namespace }),
    nativeExpiry: true,
  }));
});

const postgresUp = await serviceAvailable('PostgreSQL', POSTGRES_URL);
describe.skipIf(!postgresUp)('postgres', () => {
  const table = `ik_cli_${randomUUID().replaceAll('-', '').slice(0, 16)}`;
  afterAll(async () => {
    const admin = new pg.Pool({ connectionString: POSTGRES_URL, max: 1 });
    await admin.query(`DROP TABLE IF EXISTS "${table}"`);
    await admin.end();
  });
  commandSuite('postgres', async () => ({
    flags: ['--store', POSTGRES_URL, '--namespace', table],
    store: createStore(POSTGRES_URL, { namespace: table, sweepIntervalMs: 0 }),
    nativeExpiry: false,
  }));
});

describe('cli usage and failures', () => {
  it('is an executable with a #! line (package.json bin)', async () => {
    expect(statSync(CLI).mode & 0o111).not.toBe(0);
    const run = await new Promise<Run>((resolve) =>
      execFile(CLI, ['--help'], (error, stdout, stderr) => resolve({ code: error ? Number(error.code) : 0, stdout, stderr, ms: 0 })),
    );
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/^Usage: idempotency-kit <command>/);
    expect(run.stdout).toMatch(/Exit codes: 0 ok, 1 not found, 2 usage or bad URL, 3 store unavailable, 4 purge refused/);
  });

  it('exit 2 for usage errors: no command, unknown command or option, missing --key, no store, bad timeout', async () => {
    const cases: [string[], RegExp][] = [
      [[], /Usage:/],
      [['explode', '--store', `sqlite://${dbFile}`], /unknown command "explode"/],
      [['stats', '--store', `sqlite://${dbFile}`, '--wat'], /Unknown option '--wat'/],
      [['inspect', '--store', `sqlite://${dbFile}`], /inspect needs --key/],
      [['stats', '--store', `sqlite://${dbFile}`, '--key', 'k'], /takes no --key/],
      [['inspect', '--store', `sqlite://${dbFile}`, '--key', 'k', '--entry', 'nats'], /--entry must be http, function, webhook:<provider> or message:<source>, got "nats"/],
      [['stats'], /no store: pass --store URL or set IDEMPOTENCY_STORE/],
      [['stats', '--store', `sqlite://${dbFile}`, '--timeout=soon'], /--timeout must be a positive integer/],
    ];
    for (const [args, message] of cases) {
      const run = await cli(args);
      expect(run.code, args.join(' ')).toBe(2);
      expect(run.stdout + run.stderr, args.join(' ')).toMatch(message);
    }
    // With --json, even a missing command is one JSON document on stdout.
    const bare = await cli(['--json']);
    expect(bare.code).toBe(2);
    expect(json(bare)).toMatchObject({ error: { code: 'usage', message: 'no command: inspect, purge, stats, sweep or reseal' } });
    const unknown = await cli(['stats', '--json', '--wat']);
    expect(unknown.code).toBe(2);
    expect(json(unknown)).toMatchObject({ error: { code: 'usage', message: expect.stringMatching(/Unknown option '--wat'/) } });
  });

  it('exit 2 with a clear message for bad URLs, in-process stores and a missing SQLite file (never created)', async () => {
    const missing = path.join(dir, 'typo.sqlite');
    const cases: [string, RegExp][] = [
      ['foo://bar', /unknown scheme "foo:"/],
      ['redis://h:6379/not-a-db', /database number/],
      ['postgres://user:secret@', /PostgreSQL URL|not a valid/],
      ['memory://', /lives inside the process/],
      [`sqlite://${missing}`, /no SQLite database at/],
    ];
    for (const [url, message] of cases) {
      const run = await cli(['stats', '--store', url, '--json']);
      expect(run.code, url).toBe(2);
      const error = json(run).error as { code: string; message: string };
      expect(error.code).toBe('usage');
      expect(error.message, url).toMatch(message);
      expect(error.message).not.toContain('secret');
    }
    expect(existsSync(missing)).toBe(false);
  });

  it('IDEMPOTENCY_STORE names the store when --store is not given', async () => {
    const run = await cli(['stats', '--json'], { IDEMPOTENCY_STORE: `sqlite://${dbFile}` });
    expect(run.code).toBe(0);
    expect(json(run)).toHaveProperty('completed');
  });

  describe('dead stores: exit 3 within the timeout, never a hang', () => {
    // A server that accepts connections and never answers: the hardest case (no RST).
    let silent: net.Server;
    let silentPort: number;
    const sockets = new Set<net.Socket>();
    beforeAll(async () => {
      silent = net.createServer((socket) => {
        sockets.add(socket);
        socket.on('error', () => undefined);
      });
      await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
      silentPort = (silent.address() as net.AddressInfo).port;
    });
    afterAll(async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
    });

    const every = [['stats'], ['inspect', '--key', 'k'], ['purge', '--key', 'k'], ['sweep']];
    it.each([
      ['redis refused', () => 'redis://127.0.0.1:1', every],
      ['postgres refused', () => 'postgres://postgres@127.0.0.1:1/test', every],
      // Each of these waits out the timeout: two commands are enough.
      ['redis silent', () => `redis://127.0.0.1:${silentPort}`, every.slice(0, 2)],
      ['postgres silent', () => `postgres://postgres@127.0.0.1:${silentPort}/test`, every.slice(0, 2)],
    ])('%s', async (_name, url, commands) => {
      for (const command of commands) {
        const run = await cli([...command, '--store', url(), '--timeout', '1000', '--json']);
        expect(run.code, command[0]).toBe(3);
        expect(json(run)).toMatchObject({ error: { code: 'store-unavailable' } });
        // 1 s per store call, plus process start (seconds on a loaded machine); far below a hang.
        expect(run.ms, command[0]).toBeLessThan(15_000);
      }
    });
  });
});

describe.skipIf(!redisUp)('cli progress', () => {
  it('stats reports progress on stderr with --progress (and not without, off a terminal)', async () => {
    const namespace = `ik-cli-progress-${randomUUID()}`;
    const store = createStore(REDIS_URL, { namespace });
    try {
      for (let i = 0; i < 2000; i += 250) {
        await Promise.all(
          Array.from({ length: 250 }, (_, j) =>
            store.claim(storageKey(undefined, `p${i + j}`), { token: 't', fingerprint: 'f', createdAt: Date.now() }, 60_000),
          ),
        );
      }
      const quiet = await cli(['stats', '--store', REDIS_URL, '--namespace', namespace, '--json']);
      expect(quiet.code).toBe(0);
      expect(quiet.stderr).toBe('');
      expect(json(quiet)).toMatchObject({ processing: 2000 });
      const loud = await cli(['stats', '--store', REDIS_URL, '--namespace', namespace, '--json', '--progress']);
      expect(loud.code).toBe(0);
      expect(loud.stderr).toMatch(/^records visited: \d+$/m);
      // stdout stays pure JSON for scripts.
      expect(json(loud)).toMatchObject({ processing: 2000 });
    } finally {
      await store.close();
    }
  });
});
