/**
 * Rolling upgrades on PostgreSQL and MySQL / MariaDB (SPEC S10): the tables keep their
 * columns; only the statements changed. Rows written the way the previous release wrote
 * them (fixtures below, inserted with plain SQL) are replayed, their leases honoured, their
 * owners' completions (the same conditional UPDATE) land, and keys whose lease ended are
 * taken over. A previous-release claim that marked a row waited for (PostgreSQL) still
 * makes this release's completion notify.
 */
import { randomUUID } from 'node:crypto';
import mysql from 'mysql2/promise';
import pg from 'pg';
import { describe, expect, it, vi } from 'vitest';
import { mysqlStore } from '../../drivers/mysql.js';
import { postgresStore } from '../../drivers/postgres.js';
import { sqlKey } from '../../drivers/utils.js';
import type { IdempotencyStore } from '../../src/store.js';
import { MYSQL_URL, POSTGRES_URL, serviceAvailable } from '../helpers/services.js';

const table = () => `ik_upgrade_${randomUUID().replaceAll('-', '').slice(0, 16)}`;
const body = Buffer.from([0, 1, 2, 255, 10, 13, 34, 123]);
const response = { status: 200, headers: { 'content-type': 'text/plain' }, body: new Uint8Array(Buffer.from('done')) };

interface Target {
  name: string;
  available: boolean;
  /** A store on a fresh table, and how to insert a row as the previous release wrote it. */
  open(): Promise<{ store: IdempotencyStore; insert(row: Row): Promise<void>; markWaited(key: string): Promise<void>; close(): Promise<void> }>;
}
interface Row {
  key: string;
  state: 'processing' | 'completed';
  token: string;
  fingerprint: string;
  createdAt: number;
  expiresAt: number;
  status?: number;
  headers?: Record<string, string | string[]>;
  body?: Buffer | null;
  waiters?: boolean;
}

const targets: Target[] = [
  {
    name: 'postgres',
    available: await serviceAvailable('PostgreSQL', POSTGRES_URL),
    async open() {
      const name = table();
      const store = postgresStore({ url: POSTGRES_URL, table: name, sweepIntervalMs: 0 });
      await store.get('warm-up'); // creates the table, with the previous release's DDL
      const client = new pg.Client({ connectionString: POSTGRES_URL });
      await client.connect();
      return {
        store,
        insert: async (r) => {
          await client.query(
            `INSERT INTO "${name}" (key, state, fingerprint, token, created_at, expires_at, status, headers, body, waiters) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
            [sqlKey(r.key), r.state, r.fingerprint, r.token, r.createdAt, r.expiresAt, r.status ?? null, r.headers ? JSON.stringify(r.headers) : null, r.body ?? null, r.waiters ?? false],
          );
        },
        // What a duplicate's claim of the previous release did to a processing row (its ON CONFLICT UPDATE).
        markWaited: async (key) => {
          await client.query(`UPDATE "${name}" SET waiters = true WHERE key = $1 AND state = 'processing'`, [sqlKey(key)]);
        },
        close: async () => {
          await store.close();
          await client.query(`DROP TABLE IF EXISTS "${name}"`);
          await client.end();
        },
      };
    },
  },
  {
    name: 'mysql',
    available: await serviceAvailable('MySQL', MYSQL_URL),
    async open() {
      const name = table();
      const store = mysqlStore({ url: MYSQL_URL, table: name, sweepIntervalMs: 0 });
      await store.get('warm-up');
      const client = await mysql.createConnection({ uri: MYSQL_URL });
      return {
        store,
        insert: async (r) => {
          await client.query(
            `INSERT INTO \`${name}\` (\`key\`, state, fingerprint, token, created_at, expires_at, status, headers, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
            [sqlKey(r.key), r.state, r.fingerprint, r.token, r.createdAt, r.expiresAt, r.status ?? null, r.headers ? JSON.stringify(r.headers) : null, r.body ?? null],
          );
        },
        markWaited: async () => undefined, // no wake-ups on MySQL
        close: async () => {
          await store.close();
          await client.query(`DROP TABLE IF EXISTS \`${name}\``);
          await client.end();
        },
      };
    },
  },
];

describe.each(targets)('rolling upgrade on $name: rows of the previous release', ({ available, open }) => {
  it.skipIf(!available)('a completed row is replayed byte for byte', async () => {
    const { store, insert, close } = await open();
    const now = Date.now();
    await insert({ key: 'done', state: 'completed', token: 'old', fingerprint: 'fp', createdAt: now - 1000, expiresAt: now + 60_000, status: 201, headers: { 'set-cookie': ['a=1', 'b=2'] }, body });
    await insert({ key: 'nobody', state: 'completed', token: 'old2', fingerprint: 'fp', createdAt: now - 1000, expiresAt: now + 60_000, status: 202, headers: {}, body: null });
    expect(await store.claim('done', { token: 'new', fingerprint: 'fp', createdAt: now }, 5000)).toEqual({
      claimed: false,
      record: { state: 'completed', token: 'old', fingerprint: 'fp', createdAt: now - 1000, expiresAt: now + 60_000, response: { status: 201, headers: { 'set-cookie': ['a=1', 'b=2'] }, body: new Uint8Array(body) } },
    });
    expect(await store.claim('nobody', { token: 'new', fingerprint: 'fp', createdAt: now }, 5000)).toMatchObject({ claimed: false, record: { response: { status: 202, body: null } } });
    await close();
  });

  it.skipIf(!available)('a processing row holds its key for its lease, and its owner completes it', async () => {
    const { store, insert, close } = await open();
    const now = Date.now();
    await insert({ key: 'busy', state: 'processing', token: 'old-owner', fingerprint: 'fp', createdAt: now, expiresAt: now + 30_000 });
    expect(await store.claim('busy', { token: 'new', fingerprint: 'fp', createdAt: now }, 5000)).toMatchObject({
      claimed: false,
      record: { state: 'processing', token: 'old-owner' },
    });
    expect(await store.complete('busy', 'new', response, 60_000)).toBe(false);
    expect(await store.extend('busy', 'new', 60_000)).toBe(false);
    // The previous release completes with the same conditional UPDATE this one sends.
    expect(await store.complete('busy', 'old-owner', response, 60_000)).toBe(true);
    expect(await store.claim('busy', { token: 'new', fingerprint: 'fp', createdAt: now }, 5000)).toMatchObject({
      claimed: false,
      record: { state: 'completed', token: 'old-owner', response: { status: 200 } },
    });
    await close();
  });

  it.skipIf(!available)('a row whose lease ended is taken over, once, by one of many concurrent claims', async () => {
    const { store, insert, close } = await open();
    const now = Date.now();
    await insert({ key: 'crashed', state: 'processing', token: 'old-owner', fingerprint: 'fp', createdAt: now - 60_000, expiresAt: now - 1000 });
    const results = await Promise.all(Array.from({ length: 8 }, (_, i) => store.claim('crashed', { token: `t${i}`, fingerprint: 'fp', createdAt: now }, 5000)));
    const winners = results.filter((r) => r.claimed);
    expect(winners).toHaveLength(1);
    const token = winners[0]!.record.token;
    for (const r of results) expect(r.record).toMatchObject({ state: 'processing', token });
    expect(await store.complete('crashed', token, response, 60_000)).toBe(true);
    await close();
  });
});

describe.skipIf(!targets[0]!.available)('rolling upgrade on postgres: wake-ups', () => {
  it('a row a previous-release claim marked waited for makes this release\'s completion notify its waiters', async () => {
    const { store, markWaited, close } = await targets[0]!.open();
    const now = Date.now();
    const heard: string[] = [];
    const events: string[] = [];
    store.subscribe!({ settled: (key) => heard.push(key), ready: () => events.push('ready'), down: () => undefined });
    await vi.waitFor(() => expect(events).toContain('ready'), { timeout: 5000, interval: 20 });
    const key = randomUUID();
    expect(await store.claim(key, { token: 'mine', fingerprint: 'fp', createdAt: now }, 30_000)).toMatchObject({ claimed: true });
    await markWaited(key);
    expect(await store.complete(key, 'mine', response, 60_000)).toBe(true);
    await vi.waitFor(() => expect(heard).toContain(key), { timeout: 5000, interval: 20 });
    await close();
  });
});
