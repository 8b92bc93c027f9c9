import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import KeyvMysql from '@keyv/mysql';
import KeyvPostgres from '@keyv/postgres';
import KeyvRedis from '@keyv/redis';
import KeyvSqlite from '@keyv/sqlite';
import Keyv from 'keyv';
import { afterAll, describe, expect, it } from 'vitest';
import { SUPPORTED_SCHEMES, createStore } from '../../drivers/create-store.js';
import { idempotent } from '../../src/idempotent.js';
import type { IdempotencyStore } from '../../src/store.js';
import { MYSQL_URL, POSTGRES_URL, REDIS_URL, serviceAvailable } from '../helpers/services.js';

const redisUp = await serviceAvailable('Redis', REDIS_URL);
const postgresUp = await serviceAvailable('PostgreSQL', POSTGRES_URL);
const mysqlUp = await serviceAvailable('MySQL', MYSQL_URL);
const mysqlTable = `ik_create_store_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
const dir = await mkdtemp(path.join(tmpdir(), 'idempotency-kit-create-store-'));
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
  if (mysqlUp) {
    const { default: mysql } = await import('mysql2/promise');
    const admin = await mysql.createConnection(MYSQL_URL);
    await admin.query(`DROP TABLE IF EXISTS \`${mysqlTable}\``);
    await admin.end();
  }
});

const claimOf = (token: string) => ({ token, fingerprint: 'fp', createdAt: Date.now() });

/** The same little workload on any store: a redelivered message runs its function once. */
async function runsOnce(store: IdempotencyStore): Promise<void> {
  let calls = 0;
  const handle = idempotent(async (msg: { id: string; amount: number }) => ++calls * msg.amount, {
    store,
    key: (msg) => msg.id,
  });
  const msg = { id: randomUUID(), amount: 7 };
  const results = await Promise.all([handle(msg), handle(msg), handle(msg)]);
  expect(results).toEqual([7, 7, 7]);
  expect(await handle(msg)).toBe(7);
  expect(calls).toBe(1);
  await store.close();
}

describe('createStore: URL forms', () => {
  it('memory:// gives the memory store', async () => {
    const store = createStore('memory://');
    expect(store.name).toBe('memory');
    await runsOnce(store);
  });

  it('sqlite://relative/path.db, sqlite:///absolute/path.db and sqlite://:memory:', async () => {
    const relative = path.relative(process.cwd(), path.join(dir, 'rel', 'a.db'));
    for (const url of [`sqlite://${relative}`, `sqlite://${path.join(dir, 'abs.db')}`, 'sqlite://:memory:']) {
      const store = createStore(url);
      expect(store.name).toBe('sqlite');
      await runsOnce(store);
    }
    expect(path.isAbsolute(path.join(dir, 'abs.db'))).toBe(true);
  });

  it('the demo URL form sqlite://./dir/file creates the missing directory', async () => {
    const relative = path.relative(process.cwd(), path.join(dir, '.data', 'idempotency.sqlite'));
    const store = createStore(`sqlite://./${relative}`);
    await runsOnce(store);
  });

  it.skipIf(!redisUp)('redis:// with a database number; rediss:// is accepted (TLS)', async () => {
    const url = new URL(REDIS_URL);
    url.pathname = '/15';
    const store = createStore(url.toString(), { namespace: `ik-test-${randomUUID()}` });
    expect(store.name).toBe('redis');
    await runsOnce(store);
    const tls = createStore('rediss://user:secret@cache.example.com:6380/2');
    expect(tls.name).toBe('redis');
    await tls.close(); // never used: nothing was loaded or opened
  });

  it.skipIf(!postgresUp)('postgres:// and postgresql://', async () => {
    for (const scheme of ['postgres:', 'postgresql:']) {
      const url = new URL(POSTGRES_URL);
      url.protocol = scheme;
      const store = createStore(url.toString());
      expect(store.name).toBe('postgres');
      await runsOnce(store);
    }
  });

  it.skipIf(!mysqlUp)('mysql:// (MySQL or MariaDB)', async () => {
    const store = createStore(MYSQL_URL, { namespace: mysqlTable });
    expect(store.name).toBe('mysql');
    await runsOnce(store);
  });

  it('lists every supported scheme', () => {
    expect([...SUPPORTED_SCHEMES]).toEqual(['memory://', 'sqlite://', 'redis://', 'rediss://', 'redis+cluster://', 'rediss+cluster://', 'redis+sentinel://', 'rediss+sentinel://', 'postgres://', 'postgresql://', 'mysql://', 'dynamodb://']);
  });
});

describe('createStore: Keyv instances and adapters', () => {
  it('an empty Map is the in-process memory store, keeping its records in that Map', async () => {
    const map = new Map();
    const store = createStore(map);
    expect(store.name).toBe('memory');
    await store.claim('k', claimOf('t'), 5000);
    expect(map.size).toBe(1);
    await runsOnce(store);
  });

  it('@keyv/sqlite adapter and a Keyv over it', async () => {
    const adapter = new KeyvSqlite({ uri: `sqlite://${path.join(dir, 'adapter.db')}` });
    await runsOnce(createStore(adapter));
    await runsOnce(createStore(new Keyv(adapter)));
    await adapter.disconnect();
  });

  it.skipIf(!redisUp)('@keyv/redis adapter and a Keyv over it', async () => {
    const adapter = new KeyvRedis(REDIS_URL);
    const store = createStore(adapter);
    expect(store.name).toBe('redis');
    await runsOnce(store);
    await runsOnce(createStore(new Keyv(adapter)));
    await adapter.disconnect();
  });

  it.skipIf(!postgresUp)('@keyv/postgres adapter and a Keyv over it', async () => {
    const adapter = new KeyvPostgres({ uri: POSTGRES_URL });
    const store = createStore(adapter);
    expect(store.name).toBe('postgres');
    await runsOnce(store);
    await runsOnce(createStore(new Keyv(adapter)));
    await adapter.disconnect();
  });

  it.skipIf(!mysqlUp)('@keyv/mysql adapter and a Keyv over it', async () => {
    const adapter = new KeyvMysql({ uri: MYSQL_URL, table: mysqlTable });
    const store = createStore(adapter, { namespace: mysqlTable });
    expect(store.name).toBe('mysql');
    await runsOnce(store);
    await runsOnce(createStore(new Keyv(adapter), { namespace: mysqlTable }));
    await adapter.disconnect();
  });
});

describe('createStore: every bad target gets an error a user understands', () => {
  const supported = /Supported: a URL \(memory:\/\/, sqlite:\/\/relative\/path\.db, .*redis:\/\/.*rediss:\/\/.*postgres:\/\/.*postgresql:\/\//;
  const cases: Array<[string, unknown, RegExp]> = [
    ['an unknown scheme', 'mongodb://db.example.com/app', /unknown scheme "mongodb:"/],
    ['a MySQL URL without a host', 'mysql://', /the MySQL URL has no host/],
    ['text that is not a URL', 'localhost:6379', /unknown scheme "localhost:"/],
    ['a bare word', 'redis', /it is not a URL/],
    ['an empty string', '', /it is not a URL/],
    ['a Redis URL without a host', 'redis://', /the Redis URL has no host/],
    ['a Redis URL with a bad port', 'redis://127.0.0.1:port', /not a valid Redis URL/],
    ['a Redis URL with a path that is not a db number', 'redis://127.0.0.1:6379/cache', /database number such as \/0, got "\/cache"/],
    ['a PostgreSQL URL without a host', 'postgres://', /the PostgreSQL URL has no host/],
    ['a SQLite URL without a file', 'sqlite://', /names no file/],
    ['a SQLite URL without //', 'sqlite:idem.db', /starts with sqlite:\/\/ followed by the file path/],
    ['memory:// with a path', 'memory://somewhere', /memory:\/\/ takes no host or path/],
    ['a number', 6379, /from 6379: expected a URL string/],
    ['null', null, /from null: expected a URL string/],
    ['a plain object', { url: 'redis://x' }, /from an object: it is not a Keyv instance/],
    ['a non-empty Map', new Map([['a', 1]]), /the Map is not empty/],
    ['new Keyv() (in-process Map)', new Keyv(), /keeps data in an in-process Map/],
    ['new Keyv("redis://…") (silently a Map)', new Keyv('redis://127.0.0.1:6379' as never), /new Keyv\("redis:\/\/…"\) does not connect to Redis/],
    [
      'a Keyv over a store without an atomic path',
      new Keyv({ get: async () => undefined, set: async () => true, delete: async () => true, clear: async () => undefined } as never),
      /no atomic claim path/,
    ],
  ];
  for (const [what, target, reason] of cases) {
    it(`${what}: ${reason.source}`, () => {
      let error: unknown;
      try {
        createStore(target as string);
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(TypeError);
      expect((error as Error).message).toMatch(reason);
      expect((error as Error).message).toMatch(supported);
    });
  }

  it('a password in the URL never appears in the error', () => {
    for (const url of ['redis://user:s3cret@127.0.0.1:6379/cache', 'postgres://app:s3cret@db:port/app', 'rediss://:s3cret@/0', 'mysql://app:s3cret@db:port/app']) {
      expect(() => createStore(url)).toThrow(/\*\*\*@/);
      expect(() => createStore(url)).not.toThrow(/s3cret/);
    }
  });

  it('bad options are precise TypeErrors', () => {
    expect(() => createStore('sqlite://x.db', { namespace: 'my table' })).toThrow(
      'Expected `namespace` (the sqlite table name) to be an SQL identifier (letters, digits and _), got "my table"',
    );
    expect(() => createStore('redis://h', { timeoutMs: 0 })).toThrow('Expected `timeoutMs` to be a positive integer, got 0');
    expect(() => createStore('memory://', { sweepIntervalMs: -5 })).toThrow('Expected `sweepIntervalMs` to be a non-negative integer, got -5');
    expect(() => createStore('redis://h', { namespace: '' })).toThrow('Expected `namespace` to be a non-empty string, got ""');
  });
});

describe('createStore: lazy loading', () => {
  /** Which database clients a fresh Node process has loaded after running `code`. */
  async function loadedClients(code: string): Promise<string[]> {
    const file = path.join(dir, `probe-${randomUUID()}.mts`);
    const root = process.cwd();
    await writeFile(
      file,
      `import { createRequire } from 'node:module';
${code.replaceAll('@/', `${root}/`)}
const cache = Object.keys(createRequire(import.meta.url).cache);
const clients = { pg: '/node_modules/pg/', sqlite3: '/node_modules/sqlite3/', redis: '/node_modules/@redis/client/', mysql2: '/node_modules/mysql2/' };
console.log(JSON.stringify(Object.entries(clients).filter(([, p]) => cache.some((f) => f.includes(p))).map(([n]) => n)));
`,
    );
    const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', file], { cwd: root });
    return JSON.parse(stdout.trim().split('\n').at(-1)!) as string[];
  }

  it('createStore(url) loads no client until the store is used; importing one driver never loads another client', async () => {
    const [unused, redis, postgres, sqlite, mysql] = await Promise.all([
      loadedClients(`const { createStore } = await import('@/drivers/create-store.ts');
createStore('redis://127.0.0.1:1'); createStore('postgres://x@127.0.0.1:1/db'); createStore('sqlite://:memory:'); createStore('mysql://x@127.0.0.1:1/db');`),
      loadedClients(`await import('@/drivers/redis.ts');`),
      loadedClients(`const { postgresStore } = await import('@/drivers/postgres.ts');
const store = postgresStore({ url: 'postgres://x@127.0.0.1:1/db', timeoutMs: 200 });
await store.get('k').catch(() => undefined); await store.close();`),
      loadedClients(`await import('@/drivers/sqlite.ts');`),
      loadedClients(`const { mysqlStore } = await import('@/drivers/mysql.ts');
const store = mysqlStore({ url: 'mysql://x@127.0.0.1:1/db', timeoutMs: 200 });
await store.get('k').catch(() => undefined); await store.close();`),
    ]);
    expect(unused).toEqual([]);
    expect(redis).toEqual(['redis']);
    expect(postgres).toEqual(['pg']);
    expect(sqlite).toEqual(['sqlite3']);
    expect(mysql).toEqual(['mysql2']);
  });

  it('a missing optional package: the first use says which packages to install, for every driver', async () => {
    // A process where the adapter packages cannot be found, as in a project that never
    // installed them: both `import` (ESM hook) and `require` (CommonJS resolver) fail.
    const file = path.join(dir, `missing-${randomUUID()}.mts`);
    const hidden = ['@keyv/redis', '@keyv/postgres', '@keyv/sqlite', '@keyv/mysql'];
    await writeFile(
      file,
      `import Module, { register } from 'node:module';
const hidden = ${JSON.stringify(hidden)};
const notFound = (name, code) => Object.assign(new Error('Cannot find module ' + name), { code });
const resolve = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
  if (hidden.includes(request)) throw notFound(request, 'MODULE_NOT_FOUND');
  return resolve.call(this, request, ...rest);
};
register('data:text/javascript,' + encodeURIComponent(\`
  const hidden = \${JSON.stringify(hidden)};
  export async function resolve(specifier, context, next) {
    if (hidden.includes(specifier)) throw Object.assign(new Error('Cannot find package ' + specifier), { code: 'ERR_MODULE_NOT_FOUND' });
    return next(specifier, context);
  }\`));
const { createStore } = await import(${JSON.stringify(path.join(process.cwd(), 'drivers', 'create-store.ts'))});
const messages = [];
for (const url of ['redis://127.0.0.1:1', 'postgres://x@127.0.0.1:1/db', 'sqlite://:memory:', 'mysql://x@127.0.0.1:1/db']) {
  const store = createStore(url, { timeoutMs: 200 });
  messages.push(await store.get('k').then(() => 'no error', (error) => error.message));
  await store.close();
}
console.log(JSON.stringify(messages));
`,
    );
    const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', file], { cwd: process.cwd() });
    expect(JSON.parse(stdout.trim().split('\n').at(-1)!)).toEqual([
      'idempotency-kit: the redis store needs optional packages: npm install keyv @keyv/redis',
      'idempotency-kit: the postgres store needs optional packages: npm install keyv @keyv/postgres',
      'idempotency-kit: the sqlite store needs optional packages: npm install keyv @keyv/sqlite',
      'idempotency-kit: the mysql store needs optional packages: npm install keyv @keyv/mysql',
    ]);
  });
});
