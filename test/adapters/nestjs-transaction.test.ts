/**
 * `@IdempotentTransaction()` on the NestJS adapter, on a real PostgreSQL, through Nest's
 * testing module on both platforms: the handler's write and the stored response commit in
 * one transaction; a throw rolls both back and frees the key; a replay writes nothing; the
 * connection dying at COMMIT commits nothing; a process killed inside the transaction
 * leaves no row and no completed record, and the retry runs once.
 */
import 'reflect-metadata';
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { BadRequestException, Body, Controller, HttpCode, Inject, Module, Post, type INestApplication } from '@nestjs/common';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  Idempotent,
  IdempotencyModule,
  IdempotentTransaction,
  type IdempotencyModuleOptions,
  type NestTransaction,
} from '../../adapters/nestjs/index.js';
import { postgresStore } from '../../drivers/postgres.js';
import { memoryStore } from '../../drivers/memory.js';
import { poolWithCommit } from '../helpers/pg-faults.js';
import { POSTGRES_URL, serviceAvailable } from '../helpers/services.js';
import { importsFromSources } from '../helpers/package-imports.js';
import { freePort, untilListening } from '../helpers/ports.js';
import { startWorker } from '../helpers/worker-process.js';
import { send } from './client.js';

const available = await serviceAvailable('PostgreSQL', POSTGRES_URL);
const PLATFORMS = ['express', 'fastify'] as const;
type Platform = (typeof PLATFORMS)[number];

const WORKER = fileURLToPath(new URL('./nest-transaction-worker.ts', import.meta.url));
const TABLE = Symbol('orders table');
const RUNS = Symbol('runs');

interface Order {
  sku: string;
  fail?: 'throw' | 'http' | '429';
}

@Controller()
@Idempotent()
class OrdersController {
  constructor(
    @Inject(TABLE) private readonly orders: string,
    @Inject(RUNS) private readonly runs: { n: number },
  ) {}

  @Post('orders')
  create(@Body() body: Order, @IdempotentTransaction() tx: NestTransaction<pg.PoolClient>) {
    return tx(async (client) => {
      this.runs.n++;
      const { rows } = await client.query(`INSERT INTO "${this.orders}" (sku) VALUES ($1) RETURNING id`, [body.sku]);
      if (body.fail === 'throw') throw new Error('out of stock');
      if (body.fail === 'http') throw new BadRequestException('sku refused');
      if (body.fail === '429') return { status: 429, body: { error: 'slow down' } };
      // No status: the handler's own (201 for a POST).
      return { headers: { location: `/orders/${rows[0].id}` }, body: { id: rows[0].id, sku: body.sku } };
    });
  }

  @Post('accepted')
  @HttpCode(202)
  accepted(@Body() body: Order, @IdempotentTransaction() tx: NestTransaction<pg.PoolClient>) {
    return tx(async (client) => {
      await client.query(`INSERT INTO "${this.orders}" (sku) VALUES ($1)`, [body.sku]);
      return { body: 'queued' };
    });
  }

  @Post('twice')
  async twice(@Body() body: Order, @IdempotentTransaction() tx: NestTransaction<pg.PoolClient>) {
    await tx(async (client) => {
      await client.query(`INSERT INTO "${this.orders}" (sku) VALUES ($1)`, [body.sku]);
      return { status: 201, body: { ok: true } };
    });
    // A second call is a programming error; the first response is already sent.
    await tx(async () => ({ status: 201 })).catch((error: Error) => {
      if (/can run once per request/.test(error.message)) this.runs.n = -1;
    });
  }

  @Post('off')
  @Idempotent(false)
  async off(@IdempotentTransaction() tx: NestTransaction<pg.PoolClient>) {
    const error = await tx(async () => ({ status: 201 })).catch((e: Error) => e);
    return { message: (error as Error).message };
  }
}

async function startNest(
  platform: Platform,
  options: IdempotencyModuleOptions,
  orders: string,
  runs: { n: number },
): Promise<{ url: string; nest: INestApplication; close: () => Promise<void> }> {
  @Module({
    imports: [IdempotencyModule.forRoot(options)],
    controllers: [OrdersController],
    providers: [
      { provide: TABLE, useValue: orders },
      { provide: RUNS, useValue: runs },
    ],
  })
  class AppModule {}
  const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
  const nest = moduleRef.createNestApplication(platform === 'express' ? new ExpressAdapter() : new FastifyAdapter(), { logger: false });
  await nest.listen(0, '127.0.0.1');
  const server = nest.getHttpServer() as http.Server;
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    nest,
    close: async () => {
      server.closeAllConnections();
      await nest.close();
    },
  };
}

describe.skipIf(!available)('NestJS: @IdempotentTransaction() commits the handler\'s writes and the stored response together', () => {
  const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 6 });
  const suffix = randomUUID().replaceAll('-', '').slice(0, 12);
  const orders = `ik_nest_orders_${suffix}`;
  const records = `ik_nest_records_${suffix}`;

  const rows = async (sku: string) => Number((await pool.query(`SELECT count(*) AS n FROM "${orders}" WHERE sku = $1`, [sku])).rows[0].n);
  /** The records' states, by state (one table per file, so the counts are this file's only). */
  const records_ = async () => (await pool.query(`SELECT state FROM "${records}"`)).rows.map((r: { state: string }) => r.state);

  beforeAll(async () => {
    await pool.query(`CREATE TABLE "${orders}" (id serial PRIMARY KEY, sku text NOT NULL)`);
  });
  afterAll(async () => {
    await pool.query(`DROP TABLE IF EXISTS "${orders}"; DROP TABLE IF EXISTS "${records}"`);
    await pool.end();
  });

  for (const platform of PLATFORMS) {
    describe(platform, () => {
      const runs = { n: 0 };
      let app: Awaited<ReturnType<typeof startNest>>;
      const store = postgresStore({ pool, table: records });
      beforeAll(async () => {
        app = await startNest(platform, { store, scope: 'shared', waitMs: 20_000 }, orders, runs);
      });
      afterAll(async () => {
        await app?.close();
        await store.close();
      });

      it(`H6/H7 the row and the completed record commit together; the replay is the committed response and writes nothing`, async () => {
        const key = randomUUID();
        const sku = `tea-${key}`;
        const before = runs.n;
        const first = await send(app.url, { path: '/orders', key, body: { sku } });
        expect(first.status, first.text).toBe(201);
        expect(first.headers['idempotent-replayed']).toBeUndefined();
        const order = first.json<{ id: number; sku: string }>();
        expect(order.sku).toBe(sku);
        expect(first.headers.location).toBe(`/orders/${order.id}`);
        expect(first.headers['content-type']).toMatch(/^application\/json/);
        expect(await rows(sku)).toBe(1);
        const completed = (await records_()).filter((s) => s === 'completed').length;
        expect(completed).toBeGreaterThan(0);

        const again = await send(app.url, { path: '/orders', key, body: { sku } });
        expect(again.status).toBe(201);
        expect(again.headers['idempotent-replayed']).toBe('true');
        expect(again.text).toBe(first.text);
        expect(again.headers.location).toBe(first.headers.location);
        expect(await rows(sku)).toBe(1);
        expect(runs.n - before).toBe(1);
        expect((await records_()).filter((s) => s === 'completed').length).toBe(completed);
      });

      it('H8 twelve parallel requests with one key: one transaction runs, one row, every answer the same', async () => {
        const key = randomUUID();
        const sku = `race-${key}`;
        const before = runs.n;
        const replies = await Promise.all(Array.from({ length: 12 }, () => send(app.url, { path: '/orders', key, body: { sku } })));
        for (const reply of replies) expect(reply.status, reply.text).toBe(201);
        expect(new Set(replies.map((r) => r.text)).size).toBe(1);
        expect(replies.filter((r) => r.headers['idempotent-replayed'] === undefined)).toHaveLength(1);
        expect(await rows(sku)).toBe(1);
        expect(runs.n - before).toBe(1);
      });

      it('H10 a handler that throws after its write leaves neither the row nor a record; the key is free again', async () => {
        for (const fail of ['throw', 'http'] as const) {
          const key = randomUUID();
          const sku = `fail-${key}`;
          const states = (await records_()).length;
          for (let i = 0; i < 2; i++) {
            const reply = await send(app.url, { path: '/orders', key, body: { sku, fail } });
            // An Error is Nest's 500; a thrown HttpException its own answer, not stored either.
            expect(reply.status, reply.text).toBe(fail === 'throw' ? 500 : 400);
            expect(reply.headers['idempotent-replayed']).toBeUndefined();
          }
          expect(await rows(sku)).toBe(0);
          expect((await records_()).length).toBe(states);
          const recovered = await send(app.url, { path: '/orders', key, body: { sku } });
          expect(recovered.status, recovered.text).toBe(201);
          expect(await rows(sku)).toBe(1);
        }
      });

      it('H10 a status that is not stored (429) rolls the write back and is sent; the retry runs again', async () => {
        const key = randomUUID();
        const sku = `limited-${key}`;
        const before = runs.n;
        for (let i = 0; i < 2; i++) {
          const reply = await send(app.url, { path: '/orders', key, body: { sku, fail: '429' } });
          expect(reply.status).toBe(429);
          expect(reply.json()).toEqual({ error: 'slow down' });
          expect(reply.headers['idempotent-replayed']).toBeUndefined();
        }
        expect(runs.n - before).toBe(2);
        expect(await rows(sku)).toBe(0);
      });

      it("without a status, the handler's own (@HttpCode); a string body is sent as text; a second tx() in one request is a TypeError", async () => {
        const key = randomUUID();
        const sku = `accepted-${key}`;
        const first = await send(app.url, { path: '/accepted', key, body: { sku } });
        expect(first.status).toBe(202);
        expect(first.text).toBe('queued');
        expect(first.headers['content-type']).toMatch(/^text\/plain/);
        const again = await send(app.url, { path: '/accepted', key, body: { sku } });
        expect([again.status, again.text, again.headers['idempotent-replayed']]).toEqual([202, 'queued', 'true']);
        expect(await rows(sku)).toBe(1);

        const twice = await send(app.url, { path: '/twice', key: randomUUID(), body: { sku: `twice-${key}` } });
        expect(twice.status).toBe(201);
        expect(twice.json()).toEqual({ ok: true });
        expect(runs.n).toBe(-1);
        runs.n = 0;
        expect(await rows(`twice-${key}`)).toBe(1);
      });

      it('on a handler without @Idempotent(), tx() is a TypeError that says what to add', async () => {
        const reply = await send(app.url, { path: '/off', key: randomUUID() });
        expect(reply.json<{ message: string }>().message).toMatch(/found no idempotency layer on this request: mark the handler or its controller @Idempotent\(\)/);
      });

      // On Fastify with the module's formatError, which reshapes this answer too.
      const formatted = platform === 'fastify';
      it(`the connection dies at COMMIT: nothing is committed, 503 store-unavailable (${formatted ? 'through formatError' : 'problem details'}), the retry commits once`, async () => {
        let armed = true;
        const faulty = poolWithCommit(async (commit, pid) => {
          if (armed) {
            armed = false;
            await pool.query('SELECT pg_terminate_backend($1)', [pid]);
          }
          return commit();
        });
        const faultyStore = postgresStore({ pool: faulty, table: records });
        const formatError = (problem: { code: string }) => ({ error: { code: problem.code } });
        const local = await startNest(platform, { store: faultyStore, scope: 'shared', ...(formatted ? { formatError } : {}) }, orders, { n: 0 });
        try {
          const key = randomUUID();
          const sku = `commit-${key}`;
          const lost = await send(local.url, { path: '/orders', key, body: { sku } });
          expect(lost.status, lost.text).toBe(503);
          if (formatted) {
            expect(lost.headers['content-type']).toMatch(/^application\/json/);
            expect(lost.json()).toEqual({ error: { code: 'store-unavailable' } });
          } else {
            expect(lost.headers['content-type']).toMatch(/^application\/problem\+json/);
            expect(lost.json()).toMatchObject({ code: 'store-unavailable', status: 503 });
          }
          expect(await rows(sku)).toBe(0);
          const retry = await send(local.url, { path: '/orders', key, body: { sku } });
          expect(retry.status, retry.text).toBe(201);
          expect(retry.headers['idempotent-replayed']).toBeUndefined();
          expect(await rows(sku)).toBe(1);
        } finally {
          await local.close();
          await faultyStore.close();
          await faulty.end();
        }
      });

      for (const mode of ['before-commit', 'after-commit'] as const) {
        it(`a Nest process SIGKILLed ${mode === 'before-commit' ? 'after its write, before COMMIT: nothing was committed, the retry runs once' : 'after COMMIT, before answering: the row and the record were committed together, the retry is their replay'}`, async () => {
          const worker = startWorker<never>(WORKER, [platform, orders, records, mode]);
          let out = '';
          worker.child.stdout.on('data', (chunk) => (out += chunk));
          const reached = new Promise<void>((resolve) => worker.child.stdout.on('data', () => out.includes(mode === 'before-commit' ? 'at-commit\n' : 'committed\n') && resolve()));
          const exited = new Promise((resolve) => worker.child.on('exit', resolve));
          try {
            await worker.ready;
            const key = randomUUID();
            const sku = `killed-${mode}-${key}`;
            const port = Number(/port=(\d+)/.exec(out)?.[1]);
            const cut = send(`http://127.0.0.1:${port}`, { path: '/orders', key, body: { sku } }).then(
              () => 'answered',
              () => 'cut',
            );
            await reached;
            worker.child.kill('SIGKILL');
            await exited;
            expect(await cut).toBe('cut');
            const committed = await rows(sku);
            expect(committed).toBe(mode === 'before-commit' ? 0 : 1);
            const before = runs.n;
            // The dead process's lease ends (1 s): the retry waits for it, then runs or replays.
            const retry = await send(app.url, { path: '/orders', key, body: { sku } });
            expect(retry.status, retry.text).toBe(201);
            expect(retry.headers['idempotent-replayed']).toBe(mode === 'before-commit' ? undefined : 'true');
            expect(runs.n - before).toBe(mode === 'before-commit' ? 1 : 0);
            expect(await rows(sku)).toBe(1);
            const { id } = retry.json<{ id: number }>();
            expect((await pool.query(`SELECT sku FROM "${orders}" WHERE id = $1`, [id])).rows).toEqual([{ sku }]);
          } finally {
            worker.child.kill('SIGKILL');
          }
        }, 60_000);
      }

      it('COMMIT lands but its answer is lost: the committed response is sent, and replayed; one row', async () => {
        let armed = true;
        const faulty = poolWithCommit(async (commit) => {
          const result = await commit();
          if (!armed) return result;
          armed = false;
          throw Object.assign(new Error('Connection terminated unexpectedly'), { code: undefined });
        });
        const faultyStore = postgresStore({ pool: faulty, table: records });
        const local = await startNest(platform, { store: faultyStore, scope: 'shared' }, orders, { n: 0 });
        try {
          const key = randomUUID();
          const sku = `landed-${key}`;
          const first = await send(local.url, { path: '/orders', key, body: { sku } });
          expect(first.status, first.text).toBe(201);
          const again = await send(local.url, { path: '/orders', key, body: { sku } });
          expect([again.status, again.text, again.headers['idempotent-replayed']]).toEqual([201, first.text, 'true']);
          expect(await rows(sku)).toBe(1);
        } finally {
          await local.close();
          await faultyStore.close();
          await faulty.end();
        }
      });
    });
  }

  it('a store that runs no transactions: tx() is a TypeError naming the stores that do', async () => {
    const memory = memoryStore();
    @Controller()
    class MemoryController {
      @Post('orders')
      @Idempotent()
      async create(@IdempotentTransaction() tx: NestTransaction) {
        const error = await tx(async () => ({ status: 201 })).catch((e: Error) => e);
        return { message: (error as Error).message };
      }
    }
    @Module({ imports: [IdempotencyModule.forRoot({ store: memory, scope: 'shared' })], controllers: [MemoryController] })
    class MemoryModule {}
    const nest = (await Test.createTestingModule({ imports: [MemoryModule] }).compile()).createNestApplication(new ExpressAdapter(), { logger: false });
    await nest.listen(0, '127.0.0.1');
    try {
      const url = `http://127.0.0.1:${((nest.getHttpServer() as http.Server).address() as AddressInfo).port}`;
      const reply = await send(url, { path: '/orders', key: randomUUID() });
      expect(reply.json<{ message: string }>().message).toMatch(/needs a store that runs transactions \(postgresStore/);
    } finally {
      (nest.getHttpServer() as http.Server).closeAllConnections();
      await nest.close();
      await memory.close();
    }
  });

  it('docs/adapters/nestjs.md: the Transactions example runs as written (one order per key, the committed response replayed)', async () => {
    const root = fileURLToPath(new URL('../../', import.meta.url));
    const page = readFileSync(join(root, 'docs/adapters/nestjs.md'), 'utf8');
    const code = /```ts\n([\s\S]*?)```/.exec(page.slice(page.indexOf('## Transactions (PostgreSQL)\n')))?.[1];
    expect(code).toBeDefined();
    // Where the project's tsconfig (experimentalDecorators) applies to it, as in test/adapters/docs.test.ts.
    const home = join(root, 'test', `docs-copy-${randomUUID().slice(0, 8)}`);
    mkdirSync(home, { recursive: true });
    const file = join(home, 'nest-transaction.mts');
    writeFileSync(file, importsFromSources(code!));
    const table = `ik_nest_docs_orders_${suffix}`;
    const port = await freePort();
    const { IDEMPOTENCY_STORE: _ignored, ...env } = process.env;
    const child = spawn(process.execPath, ['--import', 'tsx', file], {
      cwd: root,
      env: { ...env, PORT: String(port), DATABASE_URL: POSTGRES_URL, ORDERS_TABLE: table },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    try {
      await untilListening(port, () => (child.exitCode === null ? undefined : output));
      const url = `http://127.0.0.1:${port}`;
      const order = { path: '/orders', key: randomUUID(), body: { sku: 'A1' }, headers: { 'x-account-id': 'acct_1' } };
      const first = await send(url, order);
      expect(first.status, output + first.text).toBe(201);
      const { id } = first.json<{ id: number }>();
      expect(first.json()).toEqual({ id, sku: 'A1' });
      expect(first.headers.location).toBe(`/orders/${id}`);
      const again = await send(url, order);
      expect([again.status, again.headers['idempotent-replayed'], again.text]).toEqual([201, 'true', first.text]);
      expect(Number((await pool.query(`SELECT count(*) AS n FROM "${table}"`)).rows[0].n)).toBe(1);
    } finally {
      child.kill('SIGTERM');
      rmSync(home, { recursive: true, force: true });
      await pool.query(`DROP TABLE IF EXISTS "${table}"`);
    }
  });
});
