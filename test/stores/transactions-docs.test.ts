/**
 * docs/transactions.md: both examples run as written, in their own process, against a real
 * PostgreSQL (in a schema of their own, through `search_path`), and do what the page says.
 */
import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { send } from '../adapters/client.js';
import { POSTGRES_URL, serviceAvailable } from '../helpers/services.js';
import { importsFromSources } from '../helpers/package-imports.js';
import { runTs, startTsServer } from '../helpers/ts-process.js';

const available = await serviceAvailable('PostgreSQL', POSTGRES_URL);
const root = fileURLToPath(new URL('../../', import.meta.url));
const dir = join(root, 'node_modules', '.cache', `idempotency-tx-docs-${randomUUID().slice(0, 8)}`);
const schema = `ik_docs_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
// The examples create `orders` and `idempotency_kit_records` unqualified: here they land in
// a fresh schema of their own.
const databaseUrl = `${POSTGRES_URL}${POSTGRES_URL.includes('?') ? '&' : '?'}options=${encodeURIComponent(`-c search_path=${schema}`)}`;

/** The page's first ts block under `heading`, with the package imports pointed at the sources. */
function example(heading: string): string {
  const page = readFileSync(join(root, 'docs', 'transactions.md'), 'utf8');
  const code = /```ts\n([\s\S]*?)```/.exec(page.slice(page.indexOf(heading)))?.[1];
  if (!code) throw new Error(`docs/transactions.md has no ts block under "${heading}"`);
  return importsFromSources(code);
}

describe.skipIf(!available)('docs/transactions.md: the examples run as written', () => {
  const db = new pg.Pool({ connectionString: databaseUrl, max: 2 });
  beforeAll(async () => {
    await db.query(`CREATE SCHEMA ${schema}`);
    mkdirSync(dir, { recursive: true });
  });
  afterAll(async () => {
    await db.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await db.end();
    rmSync(dir, { recursive: true, force: true });
  });

  it('## Example: the order is placed once, the redelivery gets the stored result, the record sits next to the orders', async () => {
    const file = join(dir, 'place-order.mts');
    writeFileSync(file, example('## Example'));
    const proc = runTs(file, { cwd: root, env: { ...process.env, DATABASE_URL: databaseUrl } });
    expect(await proc.exited, proc.output()).toBe(0);
    const printed = JSON.parse(proc.output().trim().split('\n').at(-1)!) as { first: unknown; again: unknown; orders: number };
    expect(printed.first).toEqual({ orderId: expect.any(Number) });
    expect(printed.again).toEqual(printed.first);
    expect(printed.orders).toBe(1);
    const { rows } = await db.query(`SELECT state FROM ${schema}.idempotency_kit_records`);
    expect(rows).toEqual([{ state: 'completed' }]);
  }, 60_000);

  it('## HTTP handlers: the Express server stores the committed response and replays it; one order per key', async () => {
    const file = join(dir, 'server.mts');
    writeFileSync(file, example('## HTTP handlers'));
    const server = await startTsServer(file, { cwd: root, env: { ...process.env, DATABASE_URL: databaseUrl } });
    try {
      const url = server.url;
      const first = await send(url, { path: '/orders', key: 'docs-1', body: { sku: 'tea' }, headers: { 'x-account-id': 'acct-1' } });
      expect(first.status, first.text).toBe(201);
      const again = await send(url, { path: '/orders', key: 'docs-1', body: { sku: 'tea' }, headers: { 'x-account-id': 'acct-1' } });
      expect(again.status).toBe(201);
      expect(again.headers['idempotent-replayed']).toBe('true');
      expect(again.json()).toMatchObject({ sku: 'tea', id: expect.any(Number) });
      expect(again.headers.location).toBe(`/orders/${again.json().id}`);
      const { rows } = await db.query(`SELECT count(*)::int AS n FROM ${schema}.web_orders`);
      expect(rows[0].n).toBe(1);
    } finally {
      server.stop();
      await server.exited;
    }
  }, 60_000);
});
