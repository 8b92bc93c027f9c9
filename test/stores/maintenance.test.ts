/**
 * The maintenance methods (delete, stats, sweep) on every driver, each on a store of its
 * own (fresh file, namespace or table), plus Redis's SCAN in several batches.
 */
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { createStore } from '../../drivers/create-store.js';
import { memoryStore } from '../../drivers/memory.js';
import { postgresStore } from '../../drivers/postgres.js';
import { redisStore } from '../../drivers/redis.js';
import { sqliteStore } from '../../drivers/sqlite.js';
import { MYSQL_URL, POSTGRES_URL, REDIS_URL, serviceAvailable } from '../helpers/services.js';
import { mysqlStore } from '../../drivers/mysql.js';
import { storeMaintenanceSuite } from '../suites/store-maintenance.suite.js';

const redisUp = await serviceAvailable('Redis', REDIS_URL);
const postgresUp = await serviceAvailable('PostgreSQL', POSTGRES_URL);

const dir = await mkdtemp(path.join(tmpdir(), 'idempotency-kit-maintenance-'));
const tables: string[] = [];
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
  if (postgresUp && tables.length > 0) {
    const admin = new pg.Pool({ connectionString: POSTGRES_URL, max: 1 });
    for (const table of tables) await admin.query(`DROP TABLE IF EXISTS "${table}"`);
    await admin.end();
  }
});
const freshTable = () => {
  const table = `ik_maint_${randomUUID().replaceAll('-', '').slice(0, 16)}`;
  tables.push(table);
  return table;
};

storeMaintenanceSuite('memory', { create: async () => memoryStore({ sweepIntervalMs: 0 }) });
storeMaintenanceSuite('memory via createStore', { create: async () => createStore('memory://') });
storeMaintenanceSuite('sqlite', {
  create: async () => sqliteStore({ url: `sqlite://${path.join(dir, `${randomUUID()}.db`)}`, sweepIntervalMs: 0, sweepBatchSize: 10 }),
  batched: true,
});
storeMaintenanceSuite(
  'redis',
  redisUp ? { create: async () => redisStore({ url: REDIS_URL, namespace: `ik-maint-${randomUUID()}` }), nativeExpiry: true } : undefined,
);
storeMaintenanceSuite(
  'postgres',
  postgresUp
    ? { create: async () => postgresStore({ url: POSTGRES_URL, table: freshTable(), sweepIntervalMs: 0, sweepBatchSize: 10 }), batched: true }
    : undefined,
);

const mysqlUp = await serviceAvailable('MySQL', MYSQL_URL);
const mysqlTables: string[] = [];
afterAll(async () => {
  if (!mysqlUp || mysqlTables.length === 0) return;
  const { createPool } = await import('mysql2/promise');
  const pool = createPool(MYSQL_URL);
  for (const table of mysqlTables) await pool.query(`DROP TABLE IF EXISTS \`${table}\``);
  await pool.end();
});
storeMaintenanceSuite(
  'mysql',
  mysqlUp
    ? {
        create: async () => {
          const table = `ik_maint_${randomUUID().replaceAll('-', '').slice(0, 16)}`;
          mysqlTables.push(table);
          return mysqlStore({ url: MYSQL_URL, table, sweepIntervalMs: 0, sweepBatchSize: 10 });
        },
        batched: true,
      }
    : undefined,
);

describe.skipIf(!redisUp)('redis maintenance specifics', () => {
  it('stats visits every record of its namespace in several SCAN batches, and only those', async () => {
    const namespace = `ik-maint-[x]*-${randomUUID()}`;
    const store = redisStore({ url: REDIS_URL, namespace });
    // A sibling namespace that a glob-unsafe pattern would also match.
    const sibling = redisStore({ url: REDIS_URL, namespace: namespace.replace('[x]*', 'x-other') });
    try {
      const n = 1200;
      for (let i = 0; i < n; i += 200) {
        await Promise.all(
          Array.from({ length: 200 }, (_, j) => store.claim(`k${i + j}`, { token: 't', fingerprint: 'f', createdAt: Date.now() }, 60_000)),
        );
      }
      await sibling.claim('other', { token: 't', fingerprint: 'f', createdAt: Date.now() }, 60_000);
      const progress: number[] = [];
      const stats = await store.stats!({ onProgress: (visited) => progress.push(visited) });
      expect(stats).toMatchObject({ processing: n, completed: 0, expired: 0 });
      expect(progress.length).toBeGreaterThan(1);
      expect(progress.at(-1)).toBe(n);
    } finally {
      await store.close();
      await sibling.close();
    }
  });

  it('a dead server fails stats, delete and sweep within the timeout (S6)', async () => {
    const store = redisStore({ url: 'redis://127.0.0.1:1', timeoutMs: 500 });
    try {
      const started = Date.now();
      await expect(store.stats!()).rejects.toThrow(/Redis/);
      await expect(store.delete!('k')).rejects.toThrow(/Redis/);
      await expect(store.sweep!()).rejects.toThrow(/Redis/);
      expect(Date.now() - started).toBeLessThan(5000);
    } finally {
      await store.close();
    }
  });
});
