import { createHash, randomUUID } from 'node:crypto';
import net from 'node:net';
import KeyvMysql from '@keyv/mysql';
import Keyv from 'keyv';
import mysql from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { mysqlStore } from '../../drivers/mysql.js';
import { MYSQL_URL, serviceAvailable } from '../helpers/services.js';
import { storeMaintenanceSuite } from '../suites/store-maintenance.suite.js';
import { storeSuite } from '../suites/store.suite.js';

const available = await serviceAvailable('MySQL', MYSQL_URL);

const claimOf = (token: string, fingerprint = 'fp') => ({ token, fingerprint, createdAt: Date.now() });
const response = { status: 201, headers: { 'content-type': 'text/plain' }, body: new Uint8Array(Buffer.from('ok')) };
/** Every table this file creates, dropped at the end. */
const tables: string[] = [];
const freshTable = () => {
  const name = `ik_test_${randomUUID().replaceAll('-', '').slice(0, 16)}`;
  tables.push(name);
  return name;
};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const engineKey = (text: string) => createHash('sha256').update(text).digest('base64url');

storeSuite(
  'mysql',
  available
    ? {
        create: async () => mysqlStore({ url: MYSQL_URL, table: freshTable() }),
        // Nothing listens on port 1: connection refused, every call must reject (S4, S6).
        broken: async () => ({
          store: mysqlStore({ url: 'mysql://idem:idem@127.0.0.1:1/test', timeoutMs: 1000 }),
          failingKey: 'k',
          allOperations: true,
        }),
      }
    : undefined,
);

describe.skipIf(!available)('mysql store specifics', () => {
  const admin = mysql.createPool({ uri: MYSQL_URL, connectionLimit: 2 });
  const table = freshTable;
  beforeAll(async () => {
    await admin.query('SELECT 1');
  });
  afterAll(async () => {
    for (const name of tables) await admin.query(`DROP TABLE IF EXISTS \`${name}\``);
    await admin.end();
  });

  it('creates its InnoDB table on first use; the schema is the documented one; keys are stored as the engine gave them (S7)', async () => {
    const name = table();
    const store = mysqlStore({ url: MYSQL_URL, table: name });
    const key = engineKey('k');
    await store.claim(key, claimOf('t'), 5000);
    await store.claim("'; DROP TABLE x; --", claimOf('t'), 5000);
    const [columns] = await admin.query(
      'SELECT column_name AS c, column_type AS t FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ? ORDER BY ordinal_position',
      [name],
    );
    expect((columns as Array<{ c: string; t: string }>).map((c) => `${c.c} ${c.t}`)).toEqual([
      'key varbinary(128)',
      'state varchar(10)',
      'fingerprint text',
      'token varbinary(255)',
      'created_at bigint(20)',
      'expires_at bigint(20)',
      'status int(11)',
      'headers longtext',
      'body longblob',
    ]);
    const [engine] = await admin.query('SELECT engine FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?', [name]);
    expect(engine).toEqual([{ engine: 'InnoDB' }]);
    const [rows] = await admin.query(`SELECT CAST(\`key\` AS CHAR) AS k FROM \`${name}\``);
    expect((rows as Array<{ k: string }>).map((r) => r.k).sort()).toEqual([key, `~${engineKey("'; DROP TABLE x; --")}`].sort());
    await store.close();
  });

  it('concurrent first use by many stores (as by many processes) creates the table once, without errors', async () => {
    const name = table();
    const stores = Array.from({ length: 6 }, () => mysqlStore({ url: MYSQL_URL, table: name, poolSize: 2 }));
    const key = randomUUID();
    const results = await Promise.all(stores.map((s, i) => s.claim(key, claimOf(`t${i}`), 5000)));
    expect(results.filter((r) => r.claimed)).toHaveLength(1);
    await Promise.all(stores.map((s) => s.close()));
  });

  it('tokens compare byte for byte: no collation folds case or ignores trailing spaces', async () => {
    const store = mysqlStore({ url: MYSQL_URL, table: table() });
    await store.claim('k', claimOf('Owner'), 5000);
    expect(await store.extend('k', 'owner', 5000)).toBe(false);
    expect(await store.extend('k', 'Owner ', 5000)).toBe(false);
    expect(await store.release('k', 'OWNER')).toBe(false);
    expect(await store.release('k', 'Owner')).toBe(true);
    await store.close();
  });

  it('stores headers as text and the body as a blob; a null body stays null, an empty body stays empty (H12)', async () => {
    const name = table();
    const store = mysqlStore({ url: MYSQL_URL, table: name });
    await store.claim('k', claimOf('t'), 5000);
    await store.complete('k', 't', { status: 200, headers: { link: ['<a>', '<b>'] }, body: new Uint8Array([0, 255, 1]) }, 60_000);
    const [rows] = await admin.query(`SELECT headers, body, status FROM \`${name}\``);
    expect((rows as unknown[])[0]).toEqual({ headers: '{"link":["<a>","<b>"]}', body: Buffer.from([0, 255, 1]), status: 200 });
    await store.claim('none', claimOf('t'), 5000);
    await store.complete('none', 't', { status: 200, headers: {}, body: null }, 60_000);
    const record = await store.get('none');
    expect(record?.state === 'completed' && record.response.body).toBeNull();
    await store.claim('empty', claimOf('t'), 5000);
    await store.complete('empty', 't', { status: 204, headers: {}, body: new Uint8Array() }, 60_000);
    const empty = await store.get('empty');
    expect(empty?.state === 'completed' && empty.response.body).toEqual(new Uint8Array());
    await store.close();
  });

  it('leases run on the database clock, in UTC whatever the session time zone', async () => {
    const store = mysqlStore({ url: MYSQL_URL, table: table() });
    const before = Date.now();
    const { record } = await store.claim('k', claimOf('t'), 60_000);
    const leaseUntil = record.state === 'processing' ? record.leaseUntil : 0;
    // Same host: the database clock agrees with ours within a few seconds.
    expect(Math.abs(leaseUntil - (before + 60_000))).toBeLessThan(5000);
    await store.close();
  });

  it('S3: the sweep deletes expired rows in batches and never a live one', async () => {
    const name = table();
    const store = mysqlStore({ url: MYSQL_URL, table: name, sweepIntervalMs: 100, sweepBatchSize: 2 });
    for (let i = 0; i < 5; i++) await store.claim(`old-${i}`, claimOf('t'), 50);
    await store.claim('live', claimOf('t'), 60_000);
    await vi.waitFor(
      async () => {
        const [rows] = await admin.query(`SELECT count(*) AS n FROM \`${name}\``);
        expect((rows as Array<{ n: number }>)[0]!.n).toBe(1);
      },
      { timeout: 5000, interval: 100 },
    );
    expect(await store.get('live')).toMatchObject({ token: 't' });
    await store.close();
  });

  it('S3: get on an expired record does not delete it (a fresh takeover is never lost)', async () => {
    const name = table();
    const store = mysqlStore({ url: MYSQL_URL, table: name, sweepIntervalMs: 0 });
    await store.claim('k', claimOf('old'), 100);
    await sleep(150);
    expect(await store.get('k')).toBeUndefined();
    const [rows] = await admin.query(`SELECT CAST(token AS CHAR) AS token FROM \`${name}\``);
    expect(rows).toEqual([{ token: 'old' }]);
    expect((await store.claim('k', claimOf('new'), 5000)).claimed).toBe(true);
    expect(await store.get('k')).toMatchObject({ token: 'new' });
    await store.close();
  });

  it('runs on a @keyv/mysql adapter (its own pool, left open) and on a Keyv over it', async () => {
    const adapter = new KeyvMysql({ uri: MYSQL_URL, table: table() });
    const name = table();
    const store = mysqlStore({ adapter, table: name });
    const query = vi.spyOn(adapter, 'query');
    const key = randomUUID();
    expect((await store.claim(key, claimOf('first'), 5000)).claimed).toBe(true);
    expect(await store.complete(key, 'first', response, 60_000)).toBe(true);
    expect(query).toHaveBeenCalled();
    query.mockRestore();
    await store.close();

    const viaKeyv = mysqlStore({ keyv: new Keyv(adapter), table: name });
    expect(await viaKeyv.claim(key, claimOf('again'), 5000)).toMatchObject({ claimed: false, record: { state: 'completed', token: 'first' } });
    await viaKeyv.close();
    await adapter.disconnect();
  });

  it('S6: a server that accepts but never answers fails each call within timeoutMs', async () => {
    const silent = net.createServer((socket) => socket.resume());
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', () => r()));
    const { port } = silent.address() as net.AddressInfo;
    const store = mysqlStore({ url: `mysql://idem:idem@127.0.0.1:${port}/test`, timeoutMs: 300 });
    for (const call of [() => store.claim('k', claimOf('t'), 5000), () => store.get('k')]) {
      const started = Date.now();
      await expect(call()).rejects.toThrow();
      expect(Date.now() - started).toBeLessThan(1500);
    }
    await store.close();
    silent.close();
  });

  it('S6: a claim stuck behind a row lock fails within timeoutMs, and the server drops it too (it never lands later)', async () => {
    const name = table();
    const store = mysqlStore({ url: MYSQL_URL, table: name, timeoutMs: 1000 });
    await store.claim('k', claimOf('first'), 100);
    await sleep(150); // the lease ended: the next claim would take the row over
    const locker = await mysql.createConnection(MYSQL_URL);
    try {
      await locker.query('BEGIN');
      await locker.query(`SELECT * FROM \`${name}\` WHERE \`key\` = 'k' FOR UPDATE`);
      const started = Date.now();
      await expect(store.claim('k', claimOf('stuck'), 60_000)).rejects.toThrow();
      expect(Date.now() - started).toBeLessThan(2500);
      await sleep(1500); // past the server's own lock wait bound (1 s)
    } finally {
      await locker.query('COMMIT').catch(() => undefined);
      await locker.end();
    }
    await sleep(200);
    const [rows] = await admin.query(`SELECT CAST(token AS CHAR) AS token FROM \`${name}\``);
    expect(rows).toEqual([{ token: 'first' }]);
    await store.close();
  });

  it('rejects bad options with precise TypeErrors', () => {
    expect(() => mysqlStore({ url: 'postgres://x' })).toThrow('Expected `url` to start with mysql://, got "postgres://x"');
    expect(() => mysqlStore({ url: 'mysql://' })).toThrow(/Expected a host in the MySQL URL/);
    expect(() => mysqlStore({ url: 'mysql://app:s3cret@' })).not.toThrow(/s3cret/);
    expect(() => mysqlStore({ url: MYSQL_URL, table: 'x`; DROP TABLE y; --' })).toThrow(/Expected `table` to be an SQL identifier/);
    expect(() => mysqlStore({ url: MYSQL_URL, table: 'a.b' })).toThrow(/Expected `table` to be an SQL identifier/);
    expect(() => mysqlStore({ url: MYSQL_URL, poolSize: 0 })).toThrow('Expected `poolSize` to be a positive integer, got 0');
    expect(() => mysqlStore({ url: MYSQL_URL, sweepBatchSize: 1.5 })).toThrow('Expected `sweepBatchSize` to be a positive integer, got 1.5');
    expect(() => mysqlStore({})).toThrow('Expected exactly one of `url`, `adapter` or `keyv`');
    expect(() => mysqlStore({ adapter: {} as never })).toThrow(/@keyv\/mysql adapter/);
    expect(() => mysqlStore({ keyv: new Keyv() })).toThrow(/Keyv instance over a @keyv\/mysql adapter/);
  });

  it('a closed store rejects calls', async () => {
    const store = mysqlStore({ url: MYSQL_URL });
    await store.close();
    await expect(store.get('k')).rejects.toThrow(/closed/);
  });
});

// The maintenance methods (delete, stats, sweep), each on a store of its own.
const maintenanceTables: string[] = [];
afterAll(async () => {
  if (!available || maintenanceTables.length === 0) return;
  const pool = mysql.createPool(MYSQL_URL);
  for (const table of maintenanceTables) await pool.query(`DROP TABLE IF EXISTS \`${table}\``);
  await pool.end();
});
storeMaintenanceSuite(
  'mysql',
  available
    ? {
        create: async () => {
          const table = `ik_maint_${randomUUID().replaceAll('-', '').slice(0, 16)}`;
          maintenanceTables.push(table);
          return mysqlStore({ url: MYSQL_URL, table, sweepIntervalMs: 0, sweepBatchSize: 10 });
        },
        batched: true,
      }
    : undefined,
);
