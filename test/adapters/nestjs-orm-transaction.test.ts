/**
 * NestJS with an ORM, wired as Nest users wire them, on a real PostgreSQL: TypeORM through
 * `@nestjs/typeorm` (`TypeOrmModule` and its `DataSource`), Prisma through a `PrismaService`
 * (the client as a provider), Drizzle through a provider of its own. The idempotency module
 * gets its store from `forRootAsync` with the ORM injected; `@IdempotentTransaction()` gives
 * the controller `tx(work)`, `work` gets the ORM's own transaction object and hands it to a
 * service. The row and the stored response commit together; a throw leaves neither; the
 * session killed at COMMIT answers 503 and the retry commits once.
 */
import 'reflect-metadata';
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import { Body, Controller, Inject, Injectable, Module, Post, type INestApplication, type OnModuleDestroy } from '@nestjs/common';
import { ExpressAdapter } from '@nestjs/platform-express';
import { Test } from '@nestjs/testing';
import { TypeOrmModule } from '@nestjs/typeorm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { integer, pgTable, serial, varchar } from 'drizzle-orm/pg-core';
import pg from 'pg';
import { DataSource, EntitySchema, type EntityManager } from 'typeorm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Idempotent, IdempotencyModule, IdempotentTransaction, type NestTransaction } from '../../adapters/nestjs/index.js';
import { postgresStore } from '../../drivers/postgres.js';
import { drizzleTransactions, type DrizzleTransaction } from '../../drivers/transactions/drizzle.js';
import { prismaTransactions } from '../../drivers/transactions/prisma.js';
import { typeormTransactions } from '../../drivers/transactions/typeorm.js';
import { loadPrismaClient, removePrismaClient } from '../helpers/prisma-case.js';
import { POSTGRES_URL, serviceAvailable } from '../helpers/services.js';
import { send } from './client.js';

const available = await serviceAvailable('PostgreSQL', POSTGRES_URL);
const suffix = randomUUID().replaceAll('-', '').slice(0, 10);
const ORDERS = `ik_nest_orm_orders_${suffix}`;
const RECORDS = `ik_nest_orm_records_${suffix}`;

interface Order {
  key: string;
  amount: number;
  fail?: boolean;
}

/** The one thing each app's service does with the ORM's transaction object. */
interface OrdersService<Tx> {
  place(tx: Tx, order: Order): Promise<{ id: number }>;
}
const SERVICE = Symbol('orders service');

@Controller()
@Idempotent()
class OrdersController {
  constructor(@Inject(SERVICE) private readonly orders: OrdersService<unknown>) {}

  @Post('orders')
  create(@Body() body: Order, @IdempotentTransaction() tx: NestTransaction<unknown>) {
    return tx(async (orm) => {
      const order = await this.orders.place(orm, body); // the ORM's transaction object, handed to a service
      if (body.fail) throw new Error('payment declined');
      return { body: order };
    });
  }
}

// TypeORM through @nestjs/typeorm.
const OrderEntity = new EntitySchema<{ id: number; key: string; amount: number }>({
  name: 'NestOrder',
  tableName: ORDERS,
  columns: { id: { type: Number, primary: true, generated: true }, key: { type: String }, amount: { type: Number } },
});

@Injectable()
class TypeormOrders implements OrdersService<EntityManager> {
  async place(manager: EntityManager, order: Order) {
    const saved = await manager.save(OrderEntity, { key: order.key, amount: order.amount });
    return { id: saved.id };
  }
}

function typeormApp() {
  @Module({
    imports: [
      TypeOrmModule.forRoot({ type: 'postgres', url: POSTGRES_URL, entities: [OrderEntity], poolSize: 4 }),
      IdempotencyModule.forRootAsync({
        inject: [DataSource],
        useFactory: (dataSource: DataSource) => ({
          store: postgresStore({ url: POSTGRES_URL, table: RECORDS, transactions: typeormTransactions(dataSource) }),
          scope: 'shared',
        }),
      }),
    ],
    controllers: [OrdersController],
    providers: [{ provide: SERVICE, useClass: TypeormOrders }],
  })
  class AppModule {}
  return AppModule;
}

// Prisma through a PrismaService (the generated client, provided).
interface PrismaTx {
  order: { create(args: { data: { key: string; amount: number } }): Promise<{ id: number }> };
}
async function prismaApp() {
  const { PrismaClient } = await loadPrismaClient<{
    PrismaClient: new (options: { adapter: unknown }) => { $disconnect(): Promise<void>; $transaction(fn: (tx: PrismaTx) => Promise<unknown>): Promise<unknown> };
  }>('postgres', ORDERS);
  const { PrismaPg } = await import('@prisma/adapter-pg');

  @Injectable()
  class PrismaService extends PrismaClient implements OnModuleDestroy {
    constructor() {
      super({ adapter: new PrismaPg({ connectionString: POSTGRES_URL, max: 4 }) });
    }
    async onModuleDestroy() {
      await this.$disconnect();
    }
  }

  @Injectable()
  class PrismaOrders implements OrdersService<PrismaTx> {
    place(tx: PrismaTx, order: Order) {
      return tx.order.create({ data: { key: order.key, amount: order.amount } }).then(({ id }) => ({ id }));
    }
  }

  @Module({ providers: [PrismaService], exports: [PrismaService] })
  class PrismaModule {}

  @Module({
    imports: [
      PrismaModule,
      IdempotencyModule.forRootAsync({
        imports: [PrismaModule],
        inject: [PrismaService],
        useFactory: (prisma: PrismaService) => ({
          store: postgresStore({ url: POSTGRES_URL, table: RECORDS, transactions: prismaTransactions(prisma) }),
          scope: 'shared',
        }),
      }),
    ],
    controllers: [OrdersController],
    providers: [{ provide: SERVICE, useClass: PrismaOrders }],
  })
  class AppModule {}
  return AppModule;
}

// Drizzle through a provider of its own.
const DRIZZLE = Symbol('drizzle');
const ordersTable = pgTable(ORDERS, { id: serial('id').primaryKey(), key: varchar('key', { length: 200 }).notNull(), amount: integer('amount').notNull() });
function drizzleDatabase() {
  const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 4 });
  pool.on('error', () => undefined);
  pool.on('connect', (client) => client.on('error', () => undefined));
  return Object.assign(drizzle(pool), { pool });
}
type Db = ReturnType<typeof drizzleDatabase>;

@Injectable()
class DrizzleOrders implements OrdersService<DrizzleTransaction<Db>> {
  async place(tx: DrizzleTransaction<Db>, order: Order) {
    const [row] = await tx.insert(ordersTable).values({ key: order.key, amount: order.amount }).returning({ id: ordersTable.id });
    return { id: row!.id };
  }
}

function drizzleApp() {
  @Module({
    providers: [
      { provide: DRIZZLE, useFactory: drizzleDatabase },
      { provide: 'DRIZZLE_CLOSE', useFactory: (db: Db) => ({ onModuleDestroy: () => db.pool.end() }), inject: [DRIZZLE] },
    ],
    exports: [DRIZZLE],
  })
  class DrizzleModule {}

  @Module({
    imports: [
      DrizzleModule,
      IdempotencyModule.forRootAsync({
        imports: [DrizzleModule],
        inject: [DRIZZLE],
        useFactory: (db: Db) => ({
          store: postgresStore({ url: POSTGRES_URL, table: RECORDS, transactions: drizzleTransactions(db) }),
          scope: 'shared',
        }),
      }),
    ],
    controllers: [OrdersController],
    providers: [{ provide: SERVICE, useClass: DrizzleOrders }],
  })
  class AppModule {}
  return AppModule;
}

async function start(AppModule: new () => unknown): Promise<{ url: string; nest: INestApplication; close: () => Promise<void> }> {
  const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
  const nest = moduleRef.createNestApplication(new ExpressAdapter(), { logger: false });
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

describe.skipIf(!available)('NestJS with an ORM: @IdempotentTransaction() hands the handler the ORM\'s transaction', () => {
  const admin = new pg.Pool({ connectionString: POSTGRES_URL, max: 2 });
  const rowsOf = async (key: string) => Number((await admin.query(`SELECT count(*) AS n FROM "${ORDERS}" WHERE key = $1`, [key])).rows[0].n);

  beforeAll(async () => {
    await admin.query(`CREATE TABLE "${ORDERS}" (id serial PRIMARY KEY, key varchar(200) NOT NULL, amount int NOT NULL)`);
  });
  afterAll(async () => {
    await admin.query(`DROP TABLE IF EXISTS "${ORDERS}"; DROP TABLE IF EXISTS "${RECORDS}"`);
    await admin.end();
    removePrismaClient(ORDERS);
  });

  const apps: Array<[string, () => Promise<new () => unknown> | (new () => unknown)]> = [
    ['@nestjs/typeorm', typeormApp],
    ['a PrismaService', prismaApp],
    ['a Drizzle provider', drizzleApp],
  ];
  for (const [name, makeApp] of apps) {
    describe(name, () => {
      let app: Awaited<ReturnType<typeof start>>;
      beforeAll(async () => {
        app = await start(await makeApp());
      });
      afterAll(async () => {
        await app?.close();
      });

      it('H6/H7: the row and the stored response commit together; the replay writes nothing', async () => {
        const key = `ok-${randomUUID()}`;
        const first = await send(app.url, { path: '/orders', key, body: { key, amount: 3 } });
        expect(first.status, first.text).toBe(201);
        expect(first.json<{ id: number }>().id).toEqual(expect.any(Number));
        const again = await send(app.url, { path: '/orders', key, body: { key, amount: 3 } });
        expect(again.status).toBe(201);
        expect(again.headers['idempotent-replayed']).toBe('true');
        expect(again.text).toBe(first.text);
        expect(await rowsOf(key)).toBe(1);
      });

      it('H10: a throw after the write leaves neither the row nor a record; the retry runs', async () => {
        const key = `fail-${randomUUID()}`;
        const failed = await send(app.url, { path: '/orders', key, body: { key, amount: 1, fail: true } });
        expect(failed.status).toBe(500);
        expect(await rowsOf(key)).toBe(0);
        const retry = await send(app.url, { path: '/orders', key, body: { key, amount: 1, fail: true } });
        expect(retry.status).toBe(500); // ran again (not a replay, not a 409)
        expect(await rowsOf(key)).toBe(0);
      });

      it('H16: the session killed inside COMMIT answers 503 store-unavailable, nothing is kept, and the retry commits once', async () => {
        const key = `killed-${randomUUID()}`;
        const seq = `ik_nk_${randomUUID().replaceAll('-', '').slice(0, 10)}`;
        await admin.query(`CREATE SEQUENCE ${seq}`);
        await admin.query(`CREATE FUNCTION ${seq}_f() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN IF nextval('${seq}') = 1 THEN PERFORM pg_terminate_backend(pg_backend_pid()); END IF; RETURN NULL; END $$`);
        await admin.query(
          `CREATE CONSTRAINT TRIGGER ${seq}_t AFTER INSERT ON "${ORDERS}" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.key = '${key}') EXECUTE FUNCTION ${seq}_f()`,
        );
        try {
          const lost = await send(app.url, { path: '/orders', key, body: { key, amount: 2 } });
          expect(lost.status, lost.text).toBe(503);
          expect(lost.json()).toMatchObject({ code: 'store-unavailable', status: 503 });
          expect(await rowsOf(key)).toBe(0);
          const retry = await send(app.url, { path: '/orders', key, body: { key, amount: 2 } });
          expect(retry.status, retry.text).toBe(201);
          const replay = await send(app.url, { path: '/orders', key, body: { key, amount: 2 } });
          expect(replay.headers['idempotent-replayed']).toBe('true');
          expect(replay.text).toBe(retry.text);
          expect(await rowsOf(key)).toBe(1);
        } finally {
          await admin.query(`DROP TRIGGER ${seq}_t ON "${ORDERS}"; DROP FUNCTION ${seq}_f(); DROP SEQUENCE ${seq}`);
        }
      });
    });
  }
});
