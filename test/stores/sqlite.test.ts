import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import KeyvSqlite from '@keyv/sqlite';
import Keyv from 'keyv';
import { afterAll, describe, expect, it } from 'vitest';
import { sqlitePathFromUrl, sqliteStore } from '../../drivers/sqlite.js';
import { storeMaintenanceSuite } from '../suites/store-maintenance.suite.js';
import { storeSuite } from '../suites/store.suite.js';

const dir = await mkdtemp(path.join(tmpdir(), 'idempotency-kit-sqlite-'));
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const claimOf = (token: string) => ({ token, fingerprint: 'fp', createdAt: Date.now() });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// A file that is not a database: every statement fails, and must say so (S4).
const broken = async () => {
  const file = path.join(dir, `not-a-database-${randomUUID()}.db`);
  await writeFile(file, 'this is not an SQLite database, just text '.repeat(100));
  return { store: sqliteStore({ url: `sqlite://${file}` }), failingKey: 'k', allOperations: true };
};

storeSuite('sqlite', { create: async () => sqliteStore({ url: `sqlite://${path.join(dir, 'contract.db')}` }), broken });
storeSuite('sqlite :memory:', { create: async () => sqliteStore({ url: 'sqlite://:memory:' }), broken });

describe('sqlite store specifics', () => {
  it('S1/S5: many connections opening one new file at once all set it up (WAL switch retried on SQLITE_BUSY)', async () => {
    for (let round = 0; round < 30; round++) {
      const file = path.join(dir, `concurrent-open-${round}.sqlite`);
      const stores = Array.from({ length: 16 }, () => sqliteStore({ url: `sqlite://${file}`, sweepIntervalMs: 0 }));
      try {
        const results = await Promise.all(stores.map((store, i) => store.claim('same', claimOf(`t${i}`), 5000)));
        expect(results.filter((r) => r.claimed)).toHaveLength(1);
      } finally {
        await Promise.all(stores.map((store) => store.close()));
      }
    }
  });

  it('S4: a call with an argument it cannot store rejects (the SQL stores never throw synchronously)', async () => {
    const store = sqliteStore({ url: 'sqlite://:memory:' });
    const bad = undefined as unknown as string;
    const calls = [
      () => store.claim(bad, { token: 't', fingerprint: 'f', createdAt: 1 }, 5000),
      () => store.get(bad),
      () => store.complete(bad, 't', { status: 201, headers: {}, body: null }, 5000),
      () => store.complete('k', 't', { status: 201, headers: {}, body: 42 as unknown as Uint8Array }, 5000),
      () => store.release(bad, 't'),
      () => store.extend(bad, 't', 5000),
    ];
    for (const call of calls) {
      let result: Promise<unknown> | undefined;
      expect(() => {
        result = call();
      }).not.toThrow();
      await expect(result).rejects.toThrow(TypeError);
    }
    await store.close();
  });

  it('parses sqlite:// URLs: relative, absolute and :memory:', () => {
    expect(sqlitePathFromUrl('sqlite://./.data/idempotency.sqlite')).toBe('./.data/idempotency.sqlite');
    expect(sqlitePathFromUrl('sqlite://relative/path.db')).toBe('relative/path.db');
    expect(sqlitePathFromUrl('sqlite:///absolute/path.db')).toBe('/absolute/path.db');
    expect(sqlitePathFromUrl('sqlite://:memory:')).toBe(':memory:');
    expect(() => sqlitePathFromUrl('sqlite://')).toThrow(/Expected a file after sqlite:\/\//);
    expect(() => sqlitePathFromUrl('sqlite:relative.db')).toThrow(/sqlite:\/\/relative\/path\.db/);
  });

  it('creates missing parent directories for a relative path (the demo URL form)', async () => {
    const nested = path.relative(process.cwd(), path.join(dir, 'nested', 'deeper', 'idempotency.sqlite'));
    const store = sqliteStore({ url: `sqlite://./${nested}` });
    expect((await store.claim('k', claimOf('t'), 5000)).claimed).toBe(true);
    await store.close();
    expect(existsSync(path.join(dir, 'nested', 'deeper', 'idempotency.sqlite'))).toBe(true);
  });

  it('S5: switches the file to WAL and keeps a documented schema', async () => {
    const file = path.join(dir, 'schema.db');
    const store = sqliteStore({ url: `sqlite://${file}`, table: 'idem_records' });
    await store.claim('k', claimOf('t'), 5000);
    await store.close();
    const probe = new KeyvSqlite({ uri: `sqlite://${file}` });
    const [mode] = await probe.query('PRAGMA journal_mode');
    expect(mode.journal_mode).toBe('wal');
    const columns = (await probe.query('PRAGMA table_info(idem_records)')) as Array<{ name: string }>;
    expect(columns.map((c) => c.name)).toEqual([
      'key',
      'state',
      'fingerprint',
      'token',
      'created_at',
      'expires_at',
      'status',
      'headers',
      'body',
    ]);
    // S7: the engine's key (already a hash, base64url) is stored as it is; other text as ~<sha256>
    const rows = (await probe.query('SELECT key FROM idem_records')) as Array<{ key: string }>;
    expect(rows).toEqual([{ key: 'k' }]);
    const other = sqliteStore({ url: `sqlite://${file}`, table: 'idem_records' });
    await other.claim("'; DROP TABLE x; --", claimOf('t'), 5000);
    await other.close();
    const keys = (await probe.query('SELECT key FROM idem_records ORDER BY key')) as Array<{ key: string }>;
    expect(keys.map((r) => r.key)).toEqual(['k', expect.stringMatching(/^~[A-Za-z0-9_-]{43}$/)]);
    await probe.disconnect();
  });

  it('S2/H12: an empty body stays an empty body; a null body stays null', async () => {
    const store = sqliteStore({ url: 'sqlite://:memory:' });
    await store.claim('empty', claimOf('t'), 5000);
    await store.complete('empty', 't', { status: 204, headers: {}, body: new Uint8Array() }, 60_000);
    const record = await store.get('empty');
    expect(record?.state === 'completed' && record.response.body).toEqual(new Uint8Array());
    await store.close();
  });

  it('S1/S2: concurrent claims and completions (run together as multi-row statements) each keep their own outcome', async () => {
    const store = sqliteStore({ url: `sqlite://${path.join(dir, 'batched.db')}`, sweepIntervalMs: 0 });
    const keys = Array.from({ length: 40 }, (_, k) => `key-${k}`);
    // Five claims per key at once, keys interleaved: the same key often lands in one batch.
    const claims = await Promise.all(
      Array.from({ length: 5 }, (_, i) => keys.map(async (key) => ({ key, token: `${key}-t${i}`, result: await store.claim(key, claimOf(`${key}-t${i}`), 5000) }))).flat(),
    );
    const owners = new Map<string, string>();
    for (const { key, token, result } of claims) {
      if (result.claimed) {
        expect(owners.has(key)).toBe(false);
        owners.set(key, token);
        expect(result.record).toMatchObject({ state: 'processing', token, fingerprint: 'fp' });
      }
    }
    expect(owners.size).toBe(keys.length);
    for (const { key, result } of claims) if (!result.claimed) expect(result.record.token).toBe(owners.get(key));
    // Owners and fenced-out callers complete at once: only owners' tokens take effect.
    const response = (key: string) => ({ status: 201, headers: { 'x-key': key }, body: new TextEncoder().encode(key) });
    const done = await Promise.all(
      keys.flatMap((key) => [
        store.complete(key, 'not-the-owner', response('intruder'), 60_000),
        store.complete(key, owners.get(key)!, response(key), 60_000),
      ]),
    );
    expect(done).toEqual(keys.flatMap(() => [false, true]));
    for (const key of keys) {
      const record = await store.get(key);
      expect(record?.state === 'completed' && { token: record.token, headers: record.response.headers, body: new TextDecoder().decode(record.response.body!) }).toEqual({
        token: owners.get(key),
        headers: { 'x-key': key },
        body: key,
      });
    }
    await store.close();
  });

  it('S1/S4: a claim that fails fails alone, not the concurrent claims that ran in its statement', async () => {
    const store = sqliteStore({ url: 'sqlite://:memory:', sweepIntervalMs: 0 });
    await store.claim('warm-up', claimOf('t'), 5000);
    const results = await Promise.allSettled([
      store.claim('a', claimOf('ta'), 5000),
      store.claim('bad', { token: 'tb', fingerprint: null as never, createdAt: Date.now() }, 5000),
      store.claim('c', claimOf('tc'), 5000),
    ]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect((results[1] as PromiseRejectedResult).reason).toMatchObject({ code: 'SQLITE_CONSTRAINT' });
    expect(await store.get('a')).toMatchObject({ token: 'ta' });
    expect(await store.get('bad')).toBeUndefined();
    await store.close();
  });

  it('S3: the sweep deletes expired rows in batches and never a live one', async () => {
    const file = path.join(dir, 'sweep.db');
    const store = sqliteStore({ url: `sqlite://${file}`, sweepIntervalMs: 100, sweepBatchSize: 2 });
    for (let i = 0; i < 5; i++) await store.claim(`old-${i}`, claimOf('t'), 50);
    await store.claim('live', claimOf('t'), 60_000);
    await sleep(450);
    const probe = new KeyvSqlite({ uri: `sqlite://${file}` });
    const rows = (await probe.query('SELECT token, expires_at FROM idempotency_kit_records')) as unknown[];
    expect(rows).toHaveLength(1);
    await probe.disconnect();
    expect(await store.get('live')).toMatchObject({ token: 't' });
    await store.close();
  });

  it('S3: get on an expired record does not delete it (a fresh takeover is never lost)', async () => {
    const store = sqliteStore({ url: 'sqlite://:memory:', sweepIntervalMs: 0 });
    await store.claim('k', claimOf('old'), 100);
    await sleep(150);
    expect(await store.get('k')).toBeUndefined();
    expect((await store.claim('k', claimOf('new'), 5000)).claimed).toBe(true);
    expect(await store.get('k')).toMatchObject({ token: 'new' });
    await store.close();
  });

  it('runs on a @keyv/sqlite adapter or a Keyv instance it is given, and leaves them open', async () => {
    const file = path.join(dir, 'adapter.db');
    const adapter = new KeyvSqlite({ uri: `sqlite://${file}` });
    const store = sqliteStore({ adapter });
    const key = randomUUID();
    expect((await store.claim(key, claimOf('a'), 5000)).claimed).toBe(true);
    await store.close();
    // the adapter still works for its owner
    await adapter.set('x', 'y');
    expect(await adapter.get('x')).toBe('y');

    const keyv = new Keyv(adapter);
    const viaKeyv = sqliteStore({ keyv });
    expect((await viaKeyv.claim(key, claimOf('b'), 5000)).claimed).toBe(false);
    await viaKeyv.close();
    await adapter.disconnect();
  });

  it('rejects bad options with precise TypeErrors', () => {
    expect(() => sqliteStore({ url: 'sqlite://x.db', timeoutMs: 0 })).toThrow('Expected `timeoutMs` to be a positive integer, got 0');
    expect(() => sqliteStore({ url: 'sqlite://x.db', table: 'a; DROP TABLE b' })).toThrow(/Expected `table` to be an SQL identifier/);
    expect(() => sqliteStore({ url: 'sqlite://x.db', sweepIntervalMs: -1 })).toThrow('Expected `sweepIntervalMs` to be a non-negative integer, got -1');
    expect(() => sqliteStore({})).toThrow('Expected exactly one of `url`, `adapter` or `keyv`');
    expect(() => sqliteStore({ adapter: {} as never })).toThrow(/@keyv\/sqlite adapter/);
    expect(() => sqliteStore({ keyv: new Keyv() })).toThrow(/Keyv instance over a @keyv\/sqlite adapter/);
  });

  it('a closed store rejects calls', async () => {
    const store = sqliteStore({ url: 'sqlite://:memory:' });
    await store.close();
    await expect(store.get('k')).rejects.toThrow(/closed/);
  });

  it('synchronous: sets the pragma on the connection (normal by default, full on request) and rejects other values', async () => {
    const adapter = new KeyvSqlite({ uri: `sqlite://${path.join(dir, 'synchronous.db')}` });
    const level = async () => ((await adapter.query('PRAGMA synchronous')) as Array<{ synchronous: number }>)[0]!.synchronous;
    for (const [synchronous, expected] of [[undefined, 1], ['full', 2], ['normal', 1]] as const) {
      const store = sqliteStore({ adapter, synchronous, sweepIntervalMs: 0 });
      expect((await store.claim(`k-${synchronous}`, claimOf('t'), 5000)).claimed).toBe(true);
      expect(await level()).toBe(expected);
      await store.close();
    }
    await adapter.disconnect();
    expect(() => sqliteStore({ url: 'sqlite://:memory:', synchronous: 'off' as never })).toThrow("Expected `synchronous` to be 'normal' or 'full', got \"off\"");
  });

  it('with its own connection, a completed record survives close and reopen in both modes', async () => {
    for (const synchronous of ['normal', 'full'] as const) {
      const url = `sqlite://${path.join(dir, `reopen-${synchronous}.db`)}`;
      const first = sqliteStore({ url, synchronous, sweepIntervalMs: 0 });
      const response = { status: 201, headers: { 'content-type': 'text/plain' }, body: new TextEncoder().encode('done') };
      expect((await first.claim('k', claimOf('t'), 5000)).claimed).toBe(true);
      expect(await first.complete('k', 't', response, 60_000)).toBe(true);
      await first.close();
      const second = sqliteStore({ url, synchronous, sweepIntervalMs: 0 });
      const record = await second.get('k');
      expect(record?.state).toBe('completed');
      await second.close();
    }
  });
});

// The maintenance methods (delete, stats, sweep), each on a store of its own.
storeMaintenanceSuite('sqlite', {
  create: async () => sqliteStore({ url: `sqlite://${path.join(dir, `${randomUUID()}.db`)}`, sweepIntervalMs: 0, sweepBatchSize: 10 }),
  batched: true,
});
