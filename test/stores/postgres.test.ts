import { createHash, randomUUID } from 'node:crypto';
import net from 'node:net';
import KeyvPostgres from '@keyv/postgres';
import Keyv from 'keyv';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { postgresStore } from '../../drivers/postgres.js';
import { POSTGRES_URL, serviceAvailable } from '../helpers/services.js';
import { settleContract, storeContract } from '../helpers/store-contract.js';

const available = await serviceAvailable('PostgreSQL', POSTGRES_URL);

const claimOf = (token: string, fingerprint = 'fp') => ({ token, fingerprint, createdAt: Date.now() });
const response = { status: 201, headers: { 'content-type': 'text/plain' }, body: new Uint8Array(Buffer.from('ok')) };
const hashed = (key: string) => `~${createHash('sha256').update(key).digest('base64url')}`;
const freshTable = () => `ik_test_${randomUUID().replaceAll('-', '').slice(0, 16)}`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

storeContract(
  'postgres',
  available
    ? {
        create: async () => postgresStore({ url: POSTGRES_URL }),
        // Nothing listens on port 1: connection refused, every call must reject (S4, S6).
        broken: async () => ({
          store: postgresStore({ url: 'postgres://postgres@127.0.0.1:1/test', timeoutMs: 1000 }),
          failingKey: 'k',
          allOperations: true,
        }),
      }
    : undefined,
);

const settleTable = freshTable();
settleContract('postgres', available ? async () => postgresStore({ url: POSTGRES_URL, table: settleTable }) : undefined);
settleContract(
  'postgres on a @keyv/postgres adapter',
  available ? async () => postgresStore({ adapter: new KeyvPostgres({ uri: POSTGRES_URL }), table: settleTable }) : undefined,
);
afterAll(async () => {
  if (!available) return;
  const client = new pg.Client({ connectionString: POSTGRES_URL });
  await client.connect();
  await client.query(`DROP TABLE IF EXISTS "${settleTable}"`);
  await client.end();
});

describe.skipIf(!available)('postgres store specifics', () => {
  const admin = new pg.Pool({ connectionString: POSTGRES_URL, max: 2 });
  const tables: string[] = [];
  const table = () => {
    const name = freshTable();
    tables.push(name);
    return name;
  };
  beforeAll(async () => {
    await admin.query('SELECT 1');
  });
  afterAll(async () => {
    for (const name of tables) await admin.query(`DROP TABLE IF EXISTS "${name}"`);
    await admin.end();
  });

  it('H8: a dropped LISTEN connection reports down, reconnects by itself, reports ready and delivers again', async () => {
    const name = table();
    const reader = postgresStore({ url: POSTGRES_URL, table: name });
    const writer = postgresStore({ url: POSTGRES_URL, table: name });
    const events: string[] = [];
    const seen: string[] = [];
    reader.subscribe!({ settled: (k) => seen.push(k), ready: () => events.push('ready'), down: () => events.push('down') });
    await vi.waitFor(() => expect(events).toEqual(['ready']), { timeout: 5000, interval: 20 });
    const channel = `idempotency_kit_${createHash('sha1').update(name).digest('hex').slice(0, 16)}`;
    const { rows } = await admin.query(
      `SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE application_name = 'idempotency-kit-listen' AND query = $1`,
      [`LISTEN "${channel}"`],
    );
    expect(rows).toEqual([{ ok: true }]);
    await vi.waitFor(() => expect(events).toEqual(['ready', 'down', 'ready']), { timeout: 10_000, interval: 20 });
    const key = randomUUID();
    await writer.claim(key, claimOf('t'), 5000);
    expect(await writer.complete(key, 't', response, 60_000)).toBe(true);
    await vi.waitFor(() => expect(seen).toContain(key), { timeout: 5000, interval: 20 });
    await Promise.all([reader.close(), writer.close()]);
    const { rows: left } = await admin.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE query = $1`, [`LISTEN "${channel}"`]);
    expect(left).toEqual([{ n: 0 }]); // close() closed the LISTEN connection
  });

  it('creates its table and index on first use; the schema is the documented one; keys other than the engine\'s hash form are stored as ~<sha256> (S7)', async () => {
    const name = table();
    const store = postgresStore({ url: POSTGRES_URL, table: name });
    await store.claim("'; DROP TABLE x; --", claimOf('t'), 5000);
    const { rows: columns } = await admin.query(
      'SELECT column_name, data_type FROM information_schema.columns WHERE table_name = $1 ORDER BY ordinal_position',
      [name],
    );
    expect(columns.map((c) => `${c.column_name} ${c.data_type}`)).toEqual([
      'key text',
      'state text',
      'fingerprint text',
      'token text',
      'created_at bigint',
      'expires_at bigint',
      'status integer',
      'headers jsonb',
      'body bytea',
    ]);
    const { rows: indexes } = await admin.query('SELECT indexname FROM pg_indexes WHERE tablename = $1 ORDER BY indexname', [name]);
    expect(indexes.map((i) => i.indexname)).toEqual([`${name}_expires_at_idx`, `${name}_pkey`]);
    const { rows } = await admin.query(`SELECT key, state FROM "${name}"`);
    expect(rows).toEqual([{ key: hashed("'; DROP TABLE x; --"), state: 'processing' }]);
    await store.close();
  });

  it('concurrent first use by many stores (as by many processes) creates the table once, without errors', async () => {
    const name = table();
    const stores = Array.from({ length: 6 }, () => postgresStore({ url: POSTGRES_URL, table: name, poolSize: 2 }));
    const key = randomUUID();
    const results = await Promise.all(stores.map((s, i) => s.claim(key, claimOf(`t${i}`), 5000)));
    expect(results.filter((r) => r.claimed)).toHaveLength(1);
    await Promise.all(stores.map((s) => s.close()));
  });

  it('accepts a schema-qualified table', async () => {
    const schema = freshTable();
    await admin.query(`CREATE SCHEMA "${schema}"`);
    const store = postgresStore({ url: POSTGRES_URL, table: `${schema}.records` });
    expect((await store.claim('k', claimOf('t'), 5000)).claimed).toBe(true);
    expect((await admin.query(`SELECT token FROM "${schema}".records`)).rows).toEqual([{ token: 't' }]);
    await store.close();
    await admin.query(`DROP SCHEMA "${schema}" CASCADE`);
  });

  it('stores headers as jsonb and the body as bytea; a null body stays null (H12)', async () => {
    const name = table();
    const store = postgresStore({ url: POSTGRES_URL, table: name });
    await store.claim('k', claimOf('t'), 5000);
    await store.complete('k', 't', { status: 200, headers: { link: ['<a>', '<b>'] }, body: new Uint8Array([0, 255, 1]) }, 60_000);
    const { rows } = await admin.query(`SELECT headers, body, status FROM "${name}"`);
    expect(rows[0]).toEqual({ headers: { link: ['<a>', '<b>'] }, body: Buffer.from([0, 255, 1]), status: 200 });
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

  it('S3: the sweep deletes expired rows in batches and never a live one', async () => {
    const name = table();
    const store = postgresStore({ url: POSTGRES_URL, table: name, sweepIntervalMs: 100, sweepBatchSize: 2 });
    for (let i = 0; i < 5; i++) await store.claim(`old-${i}`, claimOf('t'), 50);
    await store.claim('live', claimOf('t'), 60_000);
    await vi.waitFor(
      async () => {
        const { rows } = await admin.query(`SELECT count(*)::int AS n FROM "${name}"`);
        expect(rows[0].n).toBe(1);
      },
      { timeout: 3000, interval: 100 },
    );
    expect(await store.get('live')).toMatchObject({ token: 't' });
    await store.close();
  });

  it('S3: get on an expired record does not delete it (a fresh takeover is never lost)', async () => {
    const name = table();
    const store = postgresStore({ url: POSTGRES_URL, table: name, sweepIntervalMs: 0 });
    await store.claim('k', claimOf('old'), 100);
    await sleep(150);
    expect(await store.get('k')).toBeUndefined();
    const { rows } = await admin.query(`SELECT token FROM "${name}"`);
    expect(rows).toEqual([{ token: 'old' }]);
    expect((await store.claim('k', claimOf('new'), 5000)).claimed).toBe(true);
    expect(await store.get('k')).toMatchObject({ token: 'new' });
    await store.close();
  });

  it('one statement per claim, complete and replay (bench target: 2 round trips for a new key, 1 for a replay)', async () => {
    const adapter = new KeyvPostgres({ uri: POSTGRES_URL });
    const store = postgresStore({ adapter, table: table() });
    await store.get('warm-up'); // creates the table
    const query = vi.spyOn(adapter, 'query');
    const key = randomUUID();
    await store.claim(key, claimOf('first'), 5000);
    await store.complete(key, 'first', response, 60_000);
    expect(query).toHaveBeenCalledTimes(2);
    const replay = await store.claim(key, claimOf('retry'), 5000);
    expect(replay).toMatchObject({ claimed: false, record: { state: 'completed', token: 'first' } });
    expect(query).toHaveBeenCalledTimes(3);
    query.mockRestore();
    await store.close();

    // the adapter is left open for its owner, and a Keyv over it works the same
    const viaKeyv = postgresStore({ keyv: new Keyv(adapter), table: tables.at(-1)! });
    expect(await viaKeyv.claim(key, claimOf('again'), 5000)).toMatchObject({ claimed: false, record: { token: 'first' } });
    await viaKeyv.close();
    await adapter.disconnect();
  });

  it('S6: a server that accepts but never answers fails each call within timeoutMs', async () => {
    const silent = net.createServer((socket) => socket.resume());
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', () => r()));
    const { port } = silent.address() as net.AddressInfo;
    const store = postgresStore({ url: `postgres://postgres@127.0.0.1:${port}/test`, timeoutMs: 300 });
    for (const call of [() => store.claim('k', claimOf('t'), 5000), () => store.get('k')]) {
      const started = Date.now();
      await expect(call()).rejects.toThrow();
      expect(Date.now() - started).toBeLessThan(1500);
    }
    await store.close();
    silent.close();
  });

  it('rejects bad options with precise TypeErrors', () => {
    expect(() => postgresStore({ url: 'mysql://x' })).toThrow('Expected `url` to start with postgres:// or postgresql://, got "mysql://x"');
    expect(() => postgresStore({ url: 'postgres://' })).toThrow(/Expected a host in the PostgreSQL URL/);
    expect(() => postgresStore({ url: POSTGRES_URL, table: 'x"; DROP TABLE y; --' })).toThrow(/Expected `table` to be an SQL identifier/);
    expect(() => postgresStore({ url: POSTGRES_URL, poolSize: 0 })).toThrow('Expected `poolSize` to be a positive integer, got 0');
    expect(() => postgresStore({ url: POSTGRES_URL, sweepBatchSize: 1.5 })).toThrow('Expected `sweepBatchSize` to be a positive integer, got 1.5');
    expect(() => postgresStore({})).toThrow('Expected exactly one of `url`, `adapter` or `keyv`');
    expect(() => postgresStore({ adapter: {} as never })).toThrow(/@keyv\/postgres adapter/);
    expect(() => postgresStore({ keyv: new Keyv() })).toThrow(/Keyv instance over a @keyv\/postgres adapter/);
  });

  it('a closed store rejects calls', async () => {
    const store = postgresStore({ url: POSTGRES_URL });
    await store.close();
    await expect(store.get('k')).rejects.toThrow(/closed/);
  });
});
