/**
 * Per-operation ttl end to end: Express over HTTP on a SQLite file, real clock. The ttl
 * function picks each route's lifetime from the request and the response.
 */
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import express from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { idempotency } from '../../adapters/express.js';
import { sqliteStore } from '../../drivers/sqlite.js';
import type { IdempotencyEvent } from '../../src/events.js';
import { storageKey } from '../../src/key.js';
import type { IdempotencyStore } from '../../src/store.js';

const DAY = 86_400_000;
// Long enough that the replay right after the first request lands within it on a loaded machine.
const SHORT_MS = 2000;

describe('per-operation ttl over Express and SQLite', () => {
  let dir: string;
  let store: IdempotencyStore;
  let server: http.Server;
  let base: string;
  const runs: Record<string, number> = {};
  const events: IdempotencyEvent[] = [];

  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'idempotency-kit-ttl-'));
    store = sqliteStore({ url: `sqlite://${path.join(dir, 'ttl.sqlite')}`, sweepIntervalMs: 0 });
    const app = express();
    app.use(
      idempotency({
        store,
        // One key space: the test has no authenticated users.
        scope: 'shared',
        onEvent: (event) => events.push(event),
        // Payments 7 days; searches very short here so that expiry can be watched; a
        // route that answers with a bad value falls back to 24 h.
        ttlMs: (req, response) =>
          req.path === '/payments' ? 7 * DAY : req.path === '/search' ? SHORT_MS : Number(response.headers['x-ttl']),
      }),
    );
    app.use(express.json());
    for (const route of ['/payments', '/search', '/broken']) {
      app.post(route, (req, res) => {
        runs[route] = (runs[route] ?? 0) + 1;
        res.setHeader('x-ttl', 'soon');
        res.status(201).json({ route, run: runs[route] });
      });
    }
    server = app.listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await new Promise((resolve) => server?.close(resolve));
    await store?.close();
    await rm(dir, { recursive: true, force: true });
  });

  const post = async (route: string, key: string) => {
    const response = await fetch(base + route, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify({ q: 1 }),
    });
    return { status: response.status, replayed: response.headers.get('idempotent-replayed'), body: (await response.json()) as { run: number } };
  };
  const expiresAt = async (key: string) => {
    const record = await store.get(storageKey(undefined, key));
    return record?.state === 'completed' ? record.expiresAt : undefined;
  };

  it('H20: each route keeps its response as long as its ttl says; a short one runs again after it', async () => {
    const before = Date.now();
    expect(await post('/payments', 'pay-1')).toMatchObject({ status: 201, body: { run: 1 } });
    expect(await post('/search', 'search-1')).toMatchObject({ status: 201, body: { run: 1 } });
    const after = Date.now();
    expect(await expiresAt('pay-1')).toBeGreaterThanOrEqual(before + 7 * DAY);
    expect(await expiresAt('pay-1')).toBeLessThanOrEqual(after + 7 * DAY);
    expect(await expiresAt('search-1')).toBeLessThanOrEqual(after + SHORT_MS);

    const searchExpiry = (await expiresAt('search-1'))!;
    expect(await post('/search', 'search-1')).toMatchObject({ replayed: 'true', body: { run: 1 } });
    // Let the search record expire: wait until past the expiry the store holds.
    await new Promise((r) => setTimeout(r, Math.max(0, searchExpiry + 50 - Date.now())));
    expect(await post('/search', 'search-1')).toMatchObject({ status: 201, replayed: null, body: { run: 2 } });
    expect(await post('/payments', 'pay-1')).toMatchObject({ replayed: 'true', body: { run: 1 } });
  });

  it('a bad ttl value keeps the response 24 h and reports ttl-invalid; the client sees nothing different', async () => {
    const before = Date.now();
    expect(await post('/broken', 'b-1')).toMatchObject({ status: 201, body: { run: 1 } });
    expect(await post('/broken', 'b-1')).toMatchObject({ replayed: 'true', body: { run: 1 } });
    expect(await expiresAt('b-1')).toBeGreaterThanOrEqual(before + DAY);
    const invalid = events.find((e) => e.type === 'ttl-invalid');
    expect((invalid?.error as Error).message).toMatch(/got NaN; the record is kept for 86400000 ms instead/);
  });
});
