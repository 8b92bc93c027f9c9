/**
 * Encryption at rest on every SQL and key-value store: the bytes each store keeps are read
 * back with the database's own client, and changed there, to prove what the engine seals
 * (status, headers, body) never reaches the store in clear and that anything the store
 * gives back that no configured key opens fails closed (500 record-unreadable, the handler
 * not run). The HTTP layer is the fetch adapter, called with real `Request`s.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createClient } from '@keyv/redis';
import mysql from 'mysql2/promise';
import pg from 'pg';
import sqlite3 from 'sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { withIdempotency } from '../../adapters/fetch.js';
import { mysqlStore } from '../../drivers/mysql.js';
import { postgresStore } from '../../drivers/postgres.js';
import { redisStore } from '../../drivers/redis.js';
import { decodeValue, encodeCompleted } from '../../drivers/redis-record.js';
import { sqliteStore } from '../../drivers/sqlite.js';
import { idempotent, RecordUnreadableError, type IdempotencyEvent, type IdempotencyStore } from '../../src/index.js';
import { MYSQL_URL, POSTGRES_URL, REDIS_URL, serviceAvailable } from '../helpers/services.js';

const k1 = { id: 'k1', key: randomBytes(32) };
const k2 = { id: 'k2', key: randomBytes(32).toString('base64') };
const k3 = { id: 'k3', key: randomBytes(32).toString('hex') };

/** The raw side of one store: every stored byte of its records, and a way to change them. */
interface Raw {
  store: IdempotencyStore;
  /** Every record's stored bytes, as the database's own client returns them (the body also decoded). */
  dump(): Promise<Buffer[]>;
  /** Flip one byte of every stored completed body. */
  flip(): Promise<void>;
  /** Copy the completed body of the record at storage key `from` (any) onto every other completed record. */
  swapBodies(): Promise<void>;
  close(): Promise<void>;
}

const dir = await mkdtemp(path.join(tmpdir(), 'idempotency-kit-encryption-'));
afterAll(() => rm(dir, { recursive: true, force: true }));
const table = () => `ik_enc_${randomUUID().replaceAll('-', '').slice(0, 16)}`;

function flipLast(body: Buffer): Buffer {
  const copy = Buffer.from(body);
  copy[copy.length - 1]! ^= 0x01;
  return copy;
}

const stores: Record<string, { available: () => Promise<boolean>; open: () => Promise<Raw> }> = {
  redis: {
    available: () => serviceAvailable('Redis', REDIS_URL),
    open: async () => {
      const namespace = `ik-enc-${randomUUID()}`;
      const store = redisStore({ url: REDIS_URL, namespace });
      const client = createClient({ url: REDIS_URL });
      await client.connect();
      // Values in the layout of drivers/redis-record.ts, read and written as bytes.
      const records = async () => {
        const keys = (await client.keys(`${namespace}:*`)).filter((k) => !k.endsWith(':settled'));
        const values = await Promise.all(keys.map(async (k) => [k, await client.sendCommand<Buffer | null>(['GET', k], { typeMapping: { 36: Buffer } })] as const));
        return values.filter((entry): entry is readonly [string, Buffer] => entry[1] !== null);
      };
      const rewrite = async (change: (body: Buffer, all: Buffer[]) => Buffer) => {
        const found = (await records()).map(([k, v]) => [k, decodeValue(v)] as const);
        const bodies = found.flatMap(([, r]) => (r.state === 'completed' && r.response.body ? [Buffer.from(r.response.body)] : []));
        for (const [k, record] of found) {
          if (record.state !== 'completed' || !record.response.body) continue;
          const body = change(Buffer.from(record.response.body), bodies);
          const ttl = await client.pTTL(k);
          await client.set(k, encodeCompleted({ ...record, response: { ...record.response, body } }), { PX: ttl > 0 ? ttl : 60_000 });
        }
      };
      return {
        store,
        dump: async () => (await records()).map(([, v]) => v),
        flip: () => rewrite((body) => flipLast(body)),
        swapBodies: () => rewrite((body, all) => all.find((b) => !b.equals(body))!),
        close: async () => {
          await store.close();
          await client.close();
        },
      };
    },
  },
  postgres: {
    available: () => serviceAvailable('PostgreSQL', POSTGRES_URL),
    open: async () => {
      const name = table();
      const store = postgresStore({ url: POSTGRES_URL, table: name });
      const client = new pg.Client({ connectionString: POSTGRES_URL });
      await client.connect();
      return {
        store,
        dump: async () => {
          const { rows } = await client.query<{ t: string; body: Buffer | null }>(`SELECT row_to_json(r)::text AS t, body FROM ${name} r`);
          return rows.flatMap((r) => [Buffer.from(r.t), ...(r.body ? [r.body] : [])]);
        },
        flip: async () => {
          await client.query(`UPDATE ${name} SET body = set_byte(body, 29, get_byte(body, 29) # 1) WHERE body IS NOT NULL`);
        },
        swapBodies: async () => {
          await client.query(`UPDATE ${name} r SET body = (SELECT o.body FROM ${name} o WHERE o.key <> r.key AND o.body IS NOT NULL LIMIT 1) WHERE r.body IS NOT NULL`);
        },
        close: async () => {
          await store.close();
          await client.query(`DROP TABLE IF EXISTS ${name}`);
          await client.end();
        },
      };
    },
  },
  mysql: {
    available: () => serviceAvailable('MySQL', MYSQL_URL),
    open: async () => {
      const name = table();
      const store = mysqlStore({ url: MYSQL_URL, table: name });
      const client = await mysql.createConnection({ uri: MYSQL_URL });
      return {
        store,
        dump: async () => {
          const [rows] = await client.query(`SELECT * FROM \`${name}\``);
          return (rows as Record<string, unknown>[]).flatMap((row) =>
            Object.values(row).flatMap((v) => (Buffer.isBuffer(v) ? [v] : v === null ? [] : [Buffer.from(typeof v === 'object' ? JSON.stringify(v) : String(v))])),
          );
        },
        flip: async () => {
          await client.query(`UPDATE \`${name}\` SET body = CONCAT(LEFT(body, 29), CHAR(ASCII(SUBSTRING(body, 30, 1)) ^ 1), SUBSTRING(body, 31)) WHERE body IS NOT NULL`);
        },
        swapBodies: async () => {
          const [rows] = await client.query(`SELECT \`key\` AS k, body FROM \`${name}\` WHERE body IS NOT NULL`);
          const list = rows as { k: Buffer | string; body: Buffer }[];
          for (const [i, row] of list.entries()) {
            await client.query(`UPDATE \`${name}\` SET body = ? WHERE \`key\` = ?`, [list[(i + 1) % list.length]!.body, row.k]);
          }
        },
        close: async () => {
          await store.close();
          await client.query(`DROP TABLE IF EXISTS \`${name}\``);
          await client.end();
        },
      };
    },
  },
  sqlite: {
    available: async () => true,
    open: async () => {
      const file = path.join(dir, `${randomUUID()}.db`);
      const name = table();
      const store = sqliteStore({ url: `sqlite://${file}`, table: name });
      const db = new sqlite3.Database(file);
      const all = (sql: string, params: unknown[] = []) =>
        new Promise<Record<string, unknown>[]>((resolve, reject) => db.all(sql, params, (error, rows) => (error ? reject(error) : resolve(rows as Record<string, unknown>[]))));
      return {
        store,
        dump: async () =>
          (await all(`SELECT * FROM ${name}`)).flatMap((row) =>
            Object.values(row).flatMap((v) => (Buffer.isBuffer(v) ? [v] : v === null ? [] : [Buffer.from(String(v))])),
          ),
        flip: async () => {
          for (const row of await all(`SELECT key, body FROM ${name} WHERE body IS NOT NULL`)) {
            await all(`UPDATE ${name} SET body = ? WHERE key = ?`, [flipLast(row.body as Buffer), row.key]);
          }
        },
        swapBodies: async () => {
          const rows = await all(`SELECT key, body FROM ${name} WHERE body IS NOT NULL`);
          for (const [i, row] of rows.entries()) await all(`UPDATE ${name} SET body = ? WHERE key = ?`, [rows[(i + 1) % rows.length]!.body, row.key]);
        },
        close: async () => {
          await store.close();
          await new Promise((resolve) => db.close(resolve));
        },
      };
    },
  },
};

const SECRET_BODY = 'card=4242424242424242;address=1 Secret Lane';
const SECRET_HEADER = 'secret-header-value-7f3a';

/** A fetch-adapter app on `store` with these keys, counting its handler's runs. */
function app(store: IdempotencyStore, keys: (typeof k1 | typeof k2 | typeof k3)[] | undefined, events: IdempotencyEvent[] = []) {
  const runs = { count: 0 };
  const handle = withIdempotency(
    async (request: Request) => {
      runs.count++;
      return new Response(`${SECRET_BODY};n=${runs.count};${await request.text()}`, {
        status: 201,
        headers: { 'content-type': 'text/plain', location: `/orders/${SECRET_HEADER}` },
      });
    },
    { store, scope: 'shared', ...(keys ? { encryption: { keys } } : {}), onEvent: (e) => events.push(e) },
  );
  const post = (key: string, body = 'x') =>
    handle(new Request('http://test/orders', { method: 'POST', headers: { 'idempotency-key': key }, body }));
  return { post, runs, events };
}

const has = (chunks: Buffer[], text: string) => chunks.some((c) => c.includes(text) || c.includes(Buffer.from(text).toString('base64')));

for (const [name, { available, open }] of Object.entries(stores)) {
  const up = await available();
  describe.skipIf(!up)(`encryption at rest on ${name}`, () => {
    it(`${name}: the stored bytes hold neither the body nor the headers in clear; the replay is byte-exact`, async () => {
      const raw = await open();
      try {
        const { post, runs } = app(raw.store, [k1]);
        const first = await post('a');
        const firstText = await first.text();
        expect(first.status).toBe(201);
        const dumped = await raw.dump();
        expect(dumped.length).toBeGreaterThan(0);
        expect(has(dumped, 'card=4242')).toBe(false);
        expect(has(dumped, SECRET_HEADER)).toBe(false);
        expect(has(dumped, 'text/plain')).toBe(false);
        // The same app without encryption would store them in clear: the check can fail.
        const plain = app(raw.store, undefined);
        await (await plain.post('plain')).text();
        const clear = await raw.dump();
        expect(has(clear, 'card=4242') && has(clear, SECRET_HEADER)).toBe(true);

        const replay = await post('a');
        expect(replay.status).toBe(201);
        expect(replay.headers.get('idempotent-replayed')).toBe('true');
        expect(replay.headers.get('location')).toBe(`/orders/${SECRET_HEADER}`);
        expect(await replay.text()).toBe(firstText);
        expect(runs.count).toBe(1);
      } finally {
        await raw.close();
      }
    });

    it(`${name}: a replay works across a rotation; a record under a removed key fails closed, its handler not run`, async () => {
      const raw = await open();
      try {
        const old = app(raw.store, [k1]);
        await (await old.post('r')).text();
        // Rotation step 1: the new key first, the old one still listed.
        const rotated = app(raw.store, [k2, k1]);
        const replay = await rotated.post('r');
        expect(replay.status).toBe(201);
        expect(await replay.text()).toContain('n=1');
        await (await rotated.post('new')).text(); // sealed under k2
        // An engine that still has only the old key (not yet deployed) cannot open k2's records.
        const lagging = app(raw.store, [k1]);
        const refused = await lagging.post('new');
        expect(refused.status).toBe(500);
        expect(refused.headers.get('content-type')).toBe('application/problem+json');
        const problem = (await refused.json()) as { code: string; detail: string };
        expect(problem.code).toBe('record-unreadable');
        expect(problem.detail).not.toContain('k2'); // the key id is for the server's logs, not the client
        expect(lagging.runs.count).toBe(0);
        expect(lagging.events.find((e) => e.type === 'record-unreadable')?.keyId).toBe('k2');
        // Step 2: the old key dropped. Its records fail closed, again and again, never run.
        const dropped = app(raw.store, [k2]);
        for (let i = 0; i < 2; i++) {
          const answer = await dropped.post('r');
          expect(answer.status).toBe(500);
          expect(((await answer.json()) as { code: string }).code).toBe('record-unreadable');
        }
        expect(dropped.runs.count).toBe(0);
        expect(dropped.events.filter((e) => e.type === 'record-unreadable').map((e) => e.keyId)).toEqual(['k1', 'k1']);
        // An engine without encryption does not replay the envelope either.
        const none = app(raw.store, undefined);
        expect((await none.post('new')).status).toBe(500);
        expect(none.runs.count).toBe(0);
      } finally {
        await raw.close();
      }
    });

    it(`${name}: a flipped byte, or a body copied from another record, fails closed`, async () => {
      const raw = await open();
      try {
        const first = app(raw.store, [k3]);
        await (await first.post('f1', 'one')).text();
        await (await first.post('f2', 'two')).text();
        await raw.swapBodies();
        const swapped = app(raw.store, [k3]);
        for (const key of ['f1', 'f2']) {
          const answer = await swapped.post(key, key === 'f1' ? 'one' : 'two');
          expect(answer.status).toBe(500);
          expect(((await answer.json()) as { code: string }).code).toBe('record-unreadable');
        }
        await (await first.post('f3', 'three')).text();
        await raw.flip();
        const flipped = app(raw.store, [k3]);
        const answer = await flipped.post('f3', 'three');
        expect(answer.status).toBe(500);
        expect(((await answer.json()) as { code: string }).code).toBe('record-unreadable');
        expect(swapped.runs.count + flipped.runs.count).toBe(0);
        expect(flipped.events.find((e) => e.type === 'record-unreadable')?.keyId).toBe('k3');
      } finally {
        await raw.close();
      }
    });

    it(`${name}: idempotent() seals its results and throws RecordUnreadableError for a record it cannot open`, async () => {
      const raw = await open();
      try {
        let runs = 0;
        const fn = async (msg: { id: string }) => ({ id: msg.id, card: `card=4242-${++runs}` });
        const sealed = idempotent(fn, { store: raw.store, key: (m) => m.id, encryption: { keys: [k1] } });
        expect(await sealed({ id: 'm' })).toEqual({ id: 'm', card: 'card=4242-1' });
        expect(await sealed({ id: 'm' })).toEqual({ id: 'm', card: 'card=4242-1' });
        expect(has(await raw.dump(), 'card=4242')).toBe(false);
        const other = idempotent(fn, { store: raw.store, key: (m) => m.id, encryption: { keys: [k2] } });
        const error = await other({ id: 'm' }).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(RecordUnreadableError);
        expect(error).toMatchObject({ code: 'record-unreadable', status: 500, keyId: 'k1', reason: 'key-missing', retryable: false });
        expect(runs).toBe(1);
      } finally {
        await raw.close();
      }
    });
  });
}

describe.skipIf(!(await serviceAvailable('PostgreSQL', POSTGRES_URL)))('encryption at rest in a transaction (postgres)', () => {
  it('idempotent(fn, { transaction: true }) seals the result it commits with the effect', async () => {
    const raw = await stores.postgres!.open();
    try {
      let runs = 0;
      const charge = idempotent(
        async (msg: { id: string }, client: pg.PoolClient) => {
          runs++;
          await client.query('SELECT 1');
          return { card: `card=4242-${msg.id}` };
        },
        { store: raw.store as never, key: (m) => m.id, transaction: true, encryption: { keys: [k2, k1] } },
      );
      expect(await charge({ id: 't' })).toEqual({ card: 'card=4242-t' });
      expect(await charge({ id: 't' })).toEqual({ card: 'card=4242-t' });
      expect(runs).toBe(1);
      expect(has(await raw.dump(), 'card=4242')).toBe(false);
    } finally {
      await raw.close();
    }
  });
});
