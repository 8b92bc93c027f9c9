import { createHash, randomUUID } from 'node:crypto';
import net from 'node:net';
import KeyvPostgres from '@keyv/postgres';
import Keyv from 'keyv';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { postgresStore } from '../../drivers/postgres.js';
import { POSTGRES_URL, serviceAvailable } from '../helpers/services.js';
import { storeMaintenanceSuite } from '../suites/store-maintenance.suite.js';
import { storeSuite } from '../suites/store.suite.js';
import { storeWakeUpSuite } from '../suites/store-wake-up.suite.js';

const available = await serviceAvailable('PostgreSQL', POSTGRES_URL);

const claimOf = (token: string, fingerprint = 'fp') => ({ token, fingerprint, createdAt: Date.now() });
const response = { status: 201, headers: { 'content-type': 'text/plain' }, body: new Uint8Array(Buffer.from('ok')) };
const hashed = (key: string) => `~${createHash('sha256').update(key).digest('base64url')}`;
const freshTable = () => `ik_test_${randomUUID().replaceAll('-', '').slice(0, 16)}`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

storeSuite(
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
storeWakeUpSuite('postgres', available ? async () => postgresStore({ url: POSTGRES_URL, table: settleTable }) : undefined);
storeWakeUpSuite(
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
    expect((await reader.claim(key, claimOf('dup'), 5000)).claimed).toBe(false); // a duplicate waits
    expect(await writer.complete(key, 't', response, 60_000)).toBe(true);
    await vi.waitFor(() => expect(seen).toContain(key), { timeout: 5000, interval: 20 });
    await Promise.all([reader.close(), writer.close()]);
    const { rows: left } = await admin.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE query = $1`, [`LISTEN "${channel}"`]);
    expect(left).toEqual([{ n: 0 }]); // close() closed the LISTEN connection
  });

  /** A raw LISTEN on the store's channel: every notification the table's writes send. */
  const listenTo = async (name: string) => {
    const channel = `idempotency_kit_${createHash('sha1').update(name).digest('hex').slice(0, 16)}`;
    const client = new pg.Client({ connectionString: POSTGRES_URL });
    await client.connect();
    const heard: string[] = [];
    client.on('notification', (message) => heard.push(message.payload ?? ''));
    await client.query(`LISTEN "${channel}"`);
    return { heard, close: () => client.end() };
  };

  it('H8: a completion or release that no claim found processing sends no notification; one a duplicate waited for sends exactly one', async () => {
    const name = table();
    const owner = postgresStore({ url: POSTGRES_URL, table: name });
    const other = postgresStore({ url: POSTGRES_URL, table: name });
    const feed = await listenTo(name);
    try {
      const alone = [randomUUID(), randomUUID()];
      for (const k of alone) await owner.claim(k, claimOf(`t-${k}`), 5000);
      expect(await owner.complete(alone[0]!, `t-${alone[0]}`, response, 60_000)).toBe(true);
      expect(await owner.release(alone[1]!, `t-${alone[1]}`)).toBe(true);
      // A replay of the completed key is no waiter: it writes nothing and marks nothing.
      expect(await other.claim(alone[0]!, claimOf('replay'), 5000)).toMatchObject({ claimed: false, record: { state: 'completed' } });

      const waited = [randomUUID(), randomUUID()];
      for (const k of waited) {
        await owner.claim(k, claimOf(`t-${k}`), 5000);
        // Three duplicates find it processing: the first marks the row, the others find it marked.
        for (const d of [1, 2, 3]) {
          expect(await other.claim(k, claimOf(`dup${d}`), 5000)).toMatchObject({ claimed: false, record: { state: 'processing', token: `t-${k}` } });
        }
      }
      expect(await owner.complete(waited[0]!, `t-${waited[0]}`, response, 60_000)).toBe(true);
      expect(await owner.release(waited[1]!, `t-${waited[1]}`)).toBe(true);
      await vi.waitFor(() => expect(feed.heard).toHaveLength(2), { timeout: 5000, interval: 20 });
      await sleep(200); // nothing else arrives late
      expect(feed.heard.map((payload) => JSON.parse(payload).k)).toEqual(waited);
      expect(JSON.parse(feed.heard[0]!).r).toMatchObject({ s: 'c', t: `t-${waited[0]}` });
      expect(JSON.parse(feed.heard[1]!).r).toBeNull();
    } finally {
      await feed.close();
      await Promise.all([owner.close(), other.close()]);
    }
  });

  it('H8: a claim that takes over a processing row whose lease ended keeps its waiters: the new owner\'s completion wakes them', async () => {
    const name = table();
    const store = postgresStore({ url: POSTGRES_URL, table: name, sweepIntervalMs: 0 });
    const feed = await listenTo(name);
    try {
      const k = randomUUID();
      await store.claim(k, claimOf('crashed'), 100);
      expect((await store.claim(k, claimOf('dup'), 5000)).claimed).toBe(false);
      await sleep(150);
      expect(await store.claim(k, claimOf('next'), 5000)).toMatchObject({ claimed: true, record: { token: 'next' } });
      expect(await store.complete(k, 'next', response, 60_000)).toBe(true);
      await vi.waitFor(() => expect(feed.heard).toHaveLength(1), { timeout: 5000, interval: 20 });
      // A completed row whose replay window ended is taken over unmarked: nobody waits for it.
      await store.claim(`${k}-2`, claimOf('a'), 5000);
      await store.complete(`${k}-2`, 'a', response, 100);
      await sleep(150);
      expect((await store.claim(`${k}-2`, claimOf('b'), 5000)).claimed).toBe(true);
      expect(await store.complete(`${k}-2`, 'b', response, 60_000)).toBe(true);
      await sleep(200);
      expect(feed.heard).toHaveLength(1);
    } finally {
      await feed.close();
      await store.close();
    }
  });

  it('H8 race: a duplicate whose claim races the owner\'s completion either sees the completed record or is woken (rounds of 200 keys, 4 stores)', async () => {
    const name = table();
    const owner = postgresStore({ url: POSTGRES_URL, table: name });
    const duplicates = Array.from({ length: 4 }, () => postgresStore({ url: POSTGRES_URL, table: name, poolSize: 4 }));
    const woken = new Set<string>();
    const ready = duplicates.map(
      (store) =>
        new Promise<void>((resolve) => {
          store.subscribe!({ settled: (k) => woken.add(k), ready: resolve, down: () => {} });
        }),
    );
    await Promise.all(ready);
    try {
      const mustWake = new Set<string>();
      let completedSeen = 0;
      // Rounds until both outcomes occurred (the race was real), at most 5.
      for (let round = 0; round < 5 && (mustWake.size === 0 || completedSeen === 0); round++) {
        const keys = Array.from({ length: 200 }, () => randomUUID());
        for (const k of keys) expect((await owner.claim(k, claimOf(`t-${k}`), 10_000)).claimed).toBe(true);
        await Promise.all(
          keys.map(async (k, i) => {
            const dup = duplicates[i % duplicates.length]!;
            // The owner's completion and the duplicate's claim, a random 0-4 ms apart.
            const [, found] = await Promise.all([
              owner.complete(k, `t-${k}`, response, 60_000),
              sleep(Math.random() * 4).then(() => dup.claim(k, claimOf('dup'), 10_000)),
            ]);
            expect(found.claimed).toBe(false);
            if (found.record?.state === 'processing') mustWake.add(k);
            else {
              expect(found.record).toMatchObject({ state: 'completed', token: `t-${k}` });
              completedSeen++;
            }
          }),
        );
      }
      expect(mustWake.size).toBeGreaterThan(0);
      expect(completedSeen).toBeGreaterThan(0);
      await vi.waitFor(() => expect([...mustWake].filter((k) => !woken.has(k))).toEqual([]), { timeout: 5000, interval: 50 });
    } finally {
      await Promise.all([owner.close(), ...duplicates.map((store) => store.close())]);
    }
  });

  it('H8: a duplicate whose claim waits on the owner\'s uncommitted completion sees it completed (it was never marked, so nobody would wake it)', async () => {
    const name = table();
    const owner = postgresStore({ url: POSTGRES_URL, table: name });
    const dup = postgresStore({ url: POSTGRES_URL, table: name });
    const k = randomUUID();
    await owner.claim(k, claimOf('owner'), 10_000);
    const tx = await admin.connect();
    try {
      // The owner's completion, held open: the row is locked and completed, not yet committed.
      await tx.query('BEGIN');
      await tx.query(`UPDATE "${name}" SET state = 'completed', status = 201, headers = '{}', body = 'ok'::bytea WHERE key = $1`, [k]);
      const claim = dup.claim(k, claimOf('dup'), 10_000); // its snapshot predates the commit
      await sleep(150);
      await tx.query('COMMIT');
      expect(await claim).toMatchObject({ claimed: false, record: { state: 'completed', token: 'owner' } });
    } finally {
      tx.release();
      await Promise.all([owner.close(), dup.close()]);
    }
  });

  it('a table made by an earlier version (no waiters column) gets the column once, and its rows stay readable', async () => {
    const name = table();
    await admin.query(`CREATE TABLE "${name}" (key text PRIMARY KEY, state text NOT NULL CHECK (state IN ('processing', 'completed')),
      fingerprint text NOT NULL, token text NOT NULL, created_at bigint NOT NULL, expires_at bigint NOT NULL,
      status integer, headers jsonb, body bytea)`);
    const far = Date.now() + 60_000;
    await admin.query(
      `INSERT INTO "${name}" VALUES ($1, 'completed', 'fp', 'old', 1, $2, 201, '{"content-type":"text/plain"}', 'ok'::bytea), ($3, 'processing', 'fp', 'busy', 1, $2, NULL, NULL, NULL)`,
      ['done', far, 'busy'],
    );
    const stores = Array.from({ length: 4 }, () => postgresStore({ url: POSTGRES_URL, table: name, poolSize: 2 }));
    const answers = await Promise.all(stores.map((store) => store.claim('done', claimOf('new'), 5000)));
    for (const answer of answers) expect(answer).toMatchObject({ claimed: false, record: { state: 'completed', token: 'old' } });
    expect(await stores[0]!.claim('busy', claimOf('dup'), 5000)).toMatchObject({ claimed: false, record: { state: 'processing', token: 'busy' } });
    const { rows } = await admin.query(`SELECT key, waiters FROM "${name}" ORDER BY key`);
    expect(rows).toEqual([
      { key: 'busy', waiters: true },
      { key: 'done', waiters: false },
    ]);
    await Promise.all(stores.map((store) => store.close()));
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
      'waiters boolean',
      'sweep_at bigint',
    ]);
    const { rows: indexes } = await admin.query('SELECT indexname FROM pg_indexes WHERE tablename = $1 ORDER BY indexname', [name]);
    expect(indexes.map((i) => i.indexname)).toEqual([`${name}_pkey`, `${name}_sweep_at_idx`]);
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

  it('a completion updates its row in place (a heap-only update: no new index entries) once the store knows its ttl', async () => {
    const name = table();
    const store = postgresStore({ url: POSTGRES_URL, table: name, sweepIntervalMs: 0 });
    const body = new Uint8Array(Buffer.from('x'.repeat(1152)));
    for (let i = 0; i < 21; i++) {
      expect((await store.claim(`k${i}`, claimOf(`t${i}`), 30_000)).claimed).toBe(true);
      expect(await store.complete(`k${i}`, `t${i}`, { ...response, body }, 60_000)).toBe(true);
    }
    const { rows: bounds } = await admin.query(`SELECT count(*)::int AS n FROM "${name}" WHERE sweep_at < expires_at`);
    expect(bounds).toEqual([{ n: 0 }]);
    await store.close(); // its connections report their statistics as they end
    // The first completion teaches the store its ttl; the claims after it leave room for it.
    await vi.waitFor(
      async () => {
        const { rows } = await admin.query('SELECT n_tup_upd::int AS upd, n_tup_hot_upd::int AS hot FROM pg_stat_user_tables WHERE relname = $1', [name]);
        expect(rows[0]).toMatchObject({ upd: 21 });
        // Most: a page whose free space went to a new claim moves that completion to another
        // page (fillfactor 90 leaves room for most), all on a server that prunes old versions.
        expect(rows[0].hot).toBeGreaterThanOrEqual(14);
      },
      { timeout: 5000, interval: 200 },
    );
  });

  it('S3: the background sweep deletes each row after it expired (within the longest ttl the store knows), never a live one; store.sweep() deletes every expired row at once', async () => {
    const name = table();
    const store = postgresStore({ url: POSTGRES_URL, table: name, sweepIntervalMs: 100 });
    await store.claim('short', claimOf('s'), 300);
    await store.complete('short', 's', response, 600); // the store now knows a ttl of 600 ms
    await store.claim('abandoned', claimOf('a'), 200); // its lease ends; nobody completes it
    await store.claim('long', claimOf('l'), 300);
    await store.complete('long', 'l', response, 4000); // longer than any ttl the claim knew: sweep_at moves
    // A row as an earlier release writes it into this table (sweep_at left at its default):
    // past its sweep bound from the start, but live.
    const now = Date.now();
    await admin.query(`INSERT INTO "${name}" (key, state, fingerprint, token, created_at, expires_at) VALUES ('legacy', 'processing', 'fp', 'old', $1, $2)`, [now, now + 15_000]);
    await vi.waitFor(
      async () => {
        const { rows } = await admin.query(`SELECT key FROM "${name}" ORDER BY key`);
        expect(rows.map((r) => r.key)).toEqual(['legacy', 'long']);
      },
      { timeout: 3500, interval: 50 },
    );
    expect(await store.get('long')).toMatchObject({ state: 'completed', token: 'l' });
    await vi.waitFor(
      async () => {
        const { rows } = await admin.query(`SELECT key FROM "${name}" ORDER BY key`);
        expect(rows.map((r) => r.key)).toEqual(['legacy']);
      },
      { timeout: 9000, interval: 100 },
    );
    expect(await store.get('legacy')).toMatchObject({ state: 'processing', token: 'old' });
    await admin.query(`DELETE FROM "${name}"`);
    // The maintenance sweep: a row whose lease ended is deleted at once, though its sweep
    // bound (lease end + the ttl this store knows, 60 s) is still ahead.
    const quiet = postgresStore({ url: POSTGRES_URL, table: name, sweepIntervalMs: 0 });
    await quiet.claim('warm', claimOf('w'), 30_000);
    await quiet.complete('warm', 'w', response, 60_000);
    await quiet.claim('gone', claimOf('g'), 100);
    await quiet.claim('kept', claimOf('k'), 60_000);
    await sleep(200);
    expect(await quiet.sweep!()).toBe(1);
    const { rows } = await admin.query(`SELECT key FROM "${name}" ORDER BY key`);
    expect(rows.map((r) => r.key)).toEqual(['kept', 'warm']);
    await Promise.all([store.close(), quiet.close()]);
  });

  it('a table made by the previous release (index on expires_at, no sweep_at) gets the column once, keeps its index, and is swept by it', async () => {
    const name = table();
    await admin.query(`CREATE TABLE "${name}" (key text PRIMARY KEY, state text NOT NULL CHECK (state IN ('processing', 'completed')),
      fingerprint text NOT NULL, token text NOT NULL, created_at bigint NOT NULL, expires_at bigint NOT NULL,
      status integer, headers jsonb, body bytea, waiters boolean NOT NULL DEFAULT false)`);
    await admin.query(`CREATE INDEX "${name}_expires_at_idx" ON "${name}" (expires_at)`);
    const now = Date.now();
    await admin.query(
      `INSERT INTO "${name}" (key, state, fingerprint, token, created_at, expires_at, status, headers, body) VALUES
       ('done', 'completed', 'fp', 'old', 1, $1, 201, '{"content-type":"text/plain"}', 'ok'::bytea), ('expired', 'completed', 'fp', 'old', 1, $2, 201, '{}', 'ok'::bytea)`,
      [now + 60_000, now - 1000],
    );
    const stores = Array.from({ length: 3 }, () => postgresStore({ url: POSTGRES_URL, table: name, poolSize: 2, sweepIntervalMs: 100 }));
    const answers = await Promise.all(stores.map((store) => store.claim('done', claimOf('new'), 5000)));
    for (const answer of answers) expect(answer).toMatchObject({ claimed: false, record: { state: 'completed', token: 'old' } });
    expect((await stores[0]!.claim('fresh', claimOf('t'), 5000)).claimed).toBe(true);
    expect(await stores[1]!.complete('fresh', 't', response, 60_000)).toBe(true);
    await vi.waitFor(
      async () => {
        const { rows } = await admin.query(`SELECT key FROM "${name}" ORDER BY key`);
        expect(rows.map((r) => r.key)).toEqual(['done', 'fresh']);
      },
      { timeout: 3000, interval: 100 },
    );
    const { rows: columns } = await admin.query('SELECT column_name FROM information_schema.columns WHERE table_name = $1 AND column_name = $2', [name, 'sweep_at']);
    expect(columns).toHaveLength(1);
    const { rows: indexes } = await admin.query('SELECT indexname FROM pg_indexes WHERE tablename = $1 ORDER BY indexname', [name]);
    expect(indexes.map((i) => i.indexname)).toEqual([`${name}_expires_at_idx`, `${name}_pkey`]);
    await Promise.all(stores.map((store) => store.close()));
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

// The maintenance methods (delete, stats, sweep), each on a store of its own.
const maintenanceTables: string[] = [];
afterAll(async () => {
  if (!available || maintenanceTables.length === 0) return;
  const admin = new pg.Pool({ connectionString: POSTGRES_URL, max: 1 });
  for (const table of maintenanceTables) await admin.query(`DROP TABLE IF EXISTS "${table}"`);
  await admin.end();
});
storeMaintenanceSuite(
  'postgres',
  available
    ? {
        create: async () => {
          const table = `ik_maint_${randomUUID().replaceAll('-', '').slice(0, 16)}`;
          maintenanceTables.push(table);
          return postgresStore({ url: POSTGRES_URL, table, sweepIntervalMs: 0, sweepBatchSize: 10 });
        },
        batched: true,
      }
    : undefined,
);
