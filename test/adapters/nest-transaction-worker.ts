/**
 * A Nest process to be SIGKILLed inside `@IdempotentTransaction()` (./nestjs-transaction.test.ts):
 * `<platform> <orders table> <records table> <before-commit|after-commit>`. Its handler inserts
 * an order in the transaction; at its COMMIT the process prints `at-commit` and hangs before
 * sending COMMIT (`before-commit`), or sends it, prints `committed` once PostgreSQL confirmed
 * it, and hangs before answering (`after-commit`). Prints `port=<n>` and "ready" when listening.
 */
import 'reflect-metadata';
import { Body, Controller, Module, Post } from '@nestjs/common';
import pg from 'pg';
import { Idempotent, IdempotencyModule, IdempotentTransaction, type NestTransaction } from '../../adapters/nestjs/index.js';
import { listenNest } from './nest-apps.js';
import { postgresStore } from '../../drivers/postgres.js';
import { POSTGRES_URL } from '../helpers/services.js';

const [platform, orders, records, mode] = process.argv.slice(2);
if (!records || (platform !== 'express' && platform !== 'fastify') || (mode !== 'before-commit' && mode !== 'after-commit')) {
  throw new Error('usage: nest-transaction-worker <express|fastify> <orders> <records> <before-commit|after-commit>');
}

const hang = () => new Promise<never>(() => undefined);
const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 4 });
pool.on('connect', (client) => {
  const query = client.query.bind(client) as (...args: unknown[]) => Promise<unknown>;
  (client as unknown as { query: unknown }).query = async (...args: unknown[]) => {
    if (args[0] !== 'COMMIT') return query(...args);
    if (mode === 'before-commit') {
      process.stdout.write('at-commit\n');
      return hang();
    }
    await query(...args);
    process.stdout.write('committed\n');
    return hang();
  };
});

@Controller()
@Idempotent()
class OrdersController {
  @Post('orders')
  create(@Body() body: { sku: string }, @IdempotentTransaction() tx: NestTransaction<pg.PoolClient>) {
    return tx(async (client) => {
      const { rows } = await client.query(`INSERT INTO "${orders}" (sku) VALUES ($1) RETURNING id`, [body.sku]);
      return { status: 201, body: { id: rows[0].id, sku: body.sku } };
    });
  }
}

@Module({
  // A short lease: the retry after the kill takes the key over once it ends.
  imports: [IdempotencyModule.forRoot({ store: postgresStore({ pool, table: records }), scope: 'shared', leaseMs: 1000 })],
  controllers: [OrdersController],
})
class AppModule {}

const { nest: app, port } = await listenNest(AppModule, platform);
process.stdout.write(`port=${port}\nready\n`);
