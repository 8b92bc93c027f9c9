/**
 * `inTransaction(req, work)` on every adapter, on a real PostgreSQL: the handler's write and
 * the stored response commit in one transaction; the response the client sees is the one
 * committed and replayed; a throw or an unstored status rolls the write back and frees the key.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import { bodyParser } from '@koa/bodyparser';
import Router from '@koa/router';
import express from 'express';
import Fastify from 'fastify';
import { createAdaptorServer } from '@hono/node-server';
import { Hono } from 'hono';
import Koa from 'koa';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { idempotency as expressIdempotency } from '../../adapters/express.js';
import { idempotency as fastifyIdempotency } from '../../adapters/fastify.js';
import { withIdempotency as withFetchIdempotency } from '../../adapters/fetch.js';
import { idempotency as honoIdempotency } from '../../adapters/hono/index.js';
import { idempotency as koaIdempotency } from '../../adapters/koa/index.js';
import { withIdempotency, type IdempotentRequest } from '../../adapters/node.js';
import { postgresStore, type PostgresStore } from '../../drivers/postgres.js';
import { inTransaction, type TransactionResponse } from '../../src/index.js';
import { POSTGRES_URL, serviceAvailable } from '../helpers/services.js';
import { send } from './client.js';
import { fetchServer } from './fetch-server.js';

const available = await serviceAvailable('PostgreSQL', POSTGRES_URL);
const ADAPTERS = ['node', 'express', 'fastify', 'koa', 'fetch', 'hono'] as const;

/** The stored response as a fetch `Response` (a header given twice joined, as HTTP allows). */
const toResponse = (r: { status: number; headers: Record<string, string | string[]>; body: Uint8Array }) =>
  new Response(r.body.byteLength === 0 ? null : r.body, {
    status: r.status,
    headers: Object.fromEntries(Object.entries(r.headers).map(([k, v]) => [k, Array.isArray(v) ? v.join(', ') : v])),
  });

interface Order {
  sku?: string;
  fail?: 'throw' | '429';
}

describe.skipIf(!available)('inTransaction(req): the response is stored in the handler\'s transaction', () => {
  const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 6 });
  const suffix = randomUUID().replaceAll('-', '').slice(0, 12);
  const orders = `ik_http_orders_${suffix}`;
  const records = `ik_http_records_${suffix}`;
  let store: PostgresStore<pg.PoolClient>;

  /** The handler's work, the same on every adapter: one order row, then the response. */
  const work = (key: string, body: Order) => async (client: pg.PoolClient): Promise<TransactionResponse> => {
    const { rows } = await client.query(`INSERT INTO "${orders}" (key, sku) VALUES ($1, $2) RETURNING id`, [key, body.sku ?? null]);
    if (body.fail === 'throw') throw new Error('out of stock');
    if (body.fail === '429') return { status: 429, body: { error: 'slow down' } };
    return { status: 201, headers: { Location: `/orders/${rows[0].id}` }, body: { id: rows[0].id, sku: body.sku } };
  };
  const keyOf = (headers: http.IncomingHttpHeaders) => String(headers['idempotency-key']);

  async function start(adapter: (typeof ADAPTERS)[number]): Promise<{ url: string; close: () => Promise<void> }> {
    const listen = async (server: http.Server) => {
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      return {
        url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
        close: () => new Promise<void>((resolve) => server.close(() => resolve())),
      };
    };
    switch (adapter) {
      case 'node':
        return listen(
          http.createServer(
            withIdempotency(
              async (req: IdempotentRequest, res) => {
                const response = await inTransaction(req, work(keyOf(req.headers), req.body as Order)).catch(() => undefined);
                if (!response) return void res.writeHead(500).end();
                res.writeHead(response.status, response.headers).end(response.body);
              },
              { store, scope: 'shared' },
            ),
          ),
        );
      case 'express': {
        const app = express();
        app.use(express.json());
        app.use(expressIdempotency({ store, scope: 'shared' }));
        app.post('/orders', async (req, res) => {
          const response = await inTransaction<pg.PoolClient>(req, work(keyOf(req.headers), req.body as Order));
          res.status(response.status).set(response.headers).send(Buffer.from(response.body));
        });
        return listen(http.createServer(app));
      }
      case 'fastify': {
        const app = Fastify();
        await app.register(fastifyIdempotency, { store, scope: 'shared' });
        app.post<{ Body: Order }>('/orders', async (request, reply) => {
          const response = await inTransaction<pg.PoolClient>(request, work(keyOf(request.headers), request.body));
          return reply.code(response.status).headers(response.headers).send(Buffer.from(response.body));
        });
        await app.listen({ port: 0, host: '127.0.0.1' });
        return { url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`, close: () => app.close() };
      }
      case 'koa': {
        const app = new Koa();
        const router = new Router();
        router.post('/orders', async (ctx) => {
          const response = await inTransaction<pg.PoolClient>(ctx, work(keyOf(ctx.headers), ctx.request.body as Order));
          ctx.status = response.status;
          ctx.set(response.headers);
          ctx.body = Buffer.from(response.body);
        });
        app.use(bodyParser());
        app.use(koaIdempotency({ store, scope: 'shared' }));
        app.use(router.routes());
        app.silent = true;
        return listen(http.createServer(app.callback()));
      }
      case 'fetch': {
        // The handler's own Request is what `inTransaction` takes.
        const handler = withFetchIdempotency(
          async (request: Request) => {
            const body = (await request.json()) as Order;
            return toResponse(await inTransaction<pg.PoolClient>(request, work(request.headers.get('idempotency-key')!, body)));
          },
          { store, scope: 'shared' },
        );
        return listen(fetchServer(handler));
      }
      case 'hono': {
        const app = new Hono();
        app.use(honoIdempotency({ store, scope: 'shared' }));
        app.post('/orders', async (c) =>
          toResponse(await inTransaction<pg.PoolClient>(c, work(c.req.header('idempotency-key')!, await c.req.json<Order>()))),
        );
        app.onError((_error, c) => c.text('Internal Server Error', 500));
        return listen(createAdaptorServer({ fetch: app.fetch }) as http.Server);
      }
    }
  }

  const count = async (key: string) => Number((await pool.query(`SELECT count(*) AS n FROM "${orders}" WHERE key = $1`, [key])).rows[0].n);

  beforeAll(async () => {
    await pool.query(`CREATE TABLE "${orders}" (id serial PRIMARY KEY, key text NOT NULL, sku text)`);
    store = postgresStore({ pool, table: records });
  });
  afterAll(async () => {
    await store?.close();
    await pool.query(`DROP TABLE IF EXISTS "${orders}"; DROP TABLE IF EXISTS "${records}"`);
    await pool.end();
  });

  for (const adapter of ADAPTERS) {
    it(`${adapter}: H6/H7 one order per key, the committed response replayed; a throw or a 429 rolls back and frees the key (H10)`, async () => {
      const app = await start(adapter);
      try {
        const key = `${adapter}-${randomUUID()}`;
        const first = await send(app.url, { path: '/orders', key, body: { sku: 'tea' } });
        expect(first.status, first.text).toBe(201);
        expect(first.headers['idempotent-replayed']).toBeUndefined();
        const order = first.json<{ id: number; sku: string }>();
        expect(order.sku).toBe('tea');
        expect(first.headers.location).toBe(`/orders/${order.id}`);
        const again = await send(app.url, { path: '/orders', key, body: { sku: 'tea' } });
        expect(again.status).toBe(201);
        expect(again.headers['idempotent-replayed']).toBe('true');
        expect(again.text).toBe(first.text);
        expect(again.headers.location).toBe(first.headers.location);
        expect(await count(key)).toBe(1);

        const failing = `${adapter}-${randomUUID()}`;
        for (let i = 0; i < 2; i++) {
          // Each time the handler ran (the key was released) and its write was rolled back.
          const reply = await send(app.url, { path: '/orders', key: failing, body: { sku: 'tea', fail: 'throw' } });
          expect(reply.status).toBe(500);
        }
        expect(await count(failing)).toBe(0);

        const limited = `${adapter}-${randomUUID()}`;
        for (let i = 0; i < 2; i++) {
          const reply = await send(app.url, { path: '/orders', key: limited, body: { sku: 'tea', fail: '429' } });
          expect(reply.status).toBe(429);
          expect(reply.headers['idempotent-replayed']).toBeUndefined();
          expect(reply.json()).toEqual({ error: 'slow down' });
        }
        expect(await count(limited)).toBe(0);
        // After the failures the same keys still work (nothing left processing).
        const recovered = await send(app.url, { path: '/orders', key: failing, body: { sku: 'tea' } });
        expect(recovered.status).toBe(201);
        expect(await count(failing)).toBe(1);
      } finally {
        await app.close();
      }
    });
  }

  it('without a key where keys are optional, work runs in a plain transaction; a store without transactions is a TypeError in the handler', async () => {
    const run = async (options: Parameters<typeof expressIdempotency>[0]) => {
      const app = express();
      app.use(express.json());
      app.use(expressIdempotency(options));
      app.post('/orders', async (req, res) => {
        const response = await inTransaction<pg.PoolClient>(req, work('no-key', req.body as Order)).catch((error: Error) => ({
          status: 500,
          headers: {},
          body: new Uint8Array(Buffer.from(error.message)),
        }));
        res.status(response.status).set(response.headers).send(Buffer.from(response.body));
      });
      const server = http.createServer(app);
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => new Promise((r) => server.close(r)) };
    };
    const optional = await run({ store, required: false, scope: 'shared' });
    try {
      const sku = randomUUID();
      const reply = await send(optional.url, { path: '/orders', body: { sku } });
      expect(reply.status, reply.text).toBe(201);
      expect(Number((await pool.query(`SELECT count(*) AS n FROM "${orders}" WHERE sku = $1`, [sku])).rows[0].n)).toBe(1);
    } finally {
      await optional.close();
    }
    const { memoryStore } = await import('../../drivers/memory.js');
    const memory = memoryStore();
    const wrong = await run({ store: memory, scope: 'shared' });
    try {
      const reply = await send(wrong.url, { path: '/orders', key: randomUUID(), body: { sku: 'tea' } });
      expect(reply.status).toBe(500);
      expect(reply.text).toMatch(/needs a store that runs transactions \(postgresStore/);
    } finally {
      await wrong.close();
      await memory.close();
    }
  });

  it('inTransaction outside the middleware is a TypeError that says what to pass', async () => {
    await expect(inTransaction({}, async () => ({ status: 200 }))).rejects.toThrow(/found no idempotency middleware/);
  });
});
