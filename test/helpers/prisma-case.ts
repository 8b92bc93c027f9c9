/**
 * Prisma 7 for the transaction tests: a schema for the orders table, its `prisma-client`
 * generated into node_modules/.cache (no download: `prisma generate` is only pointed at an
 * executable for the schema engine it does not need to generate), and the client on the
 * driver adapter for the database (@prisma/adapter-pg, @prisma/adapter-mariadb). The table is
 * made by SQL (migrations need the real schema engine).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { Database, OrmCase } from './orm-cases.js';
import { MYSQL_URL, POSTGRES_URL } from './services.js';
import { mariadbLogger } from './statement-sink.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const clientDir = (table: string) => join(root, 'node_modules', '.cache', 'ik-prisma', table);

/** Generate the client for the orders table `table` (once per table name). */
export function generatePrismaClient(db: Database, table: string): void {
  const dir = clientDir(table);
  if (existsSync(join(dir, 'generated', 'client.ts'))) return;
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, 'schema.prisma'),
    `generator client {
  provider = "prisma-client"
  output   = "./generated"
}

datasource db {
  provider = "${db === 'postgres' ? 'postgresql' : 'mysql'}"
}

model Order {
  id     Int    @id @default(autoincrement())
  key    String @db.VarChar(200)
  amount Int

  @@map("${table}")
}
`,
  );
  execFileSync(process.execPath, [join(root, 'node_modules', 'prisma', 'build', 'index.js'), 'generate', '--schema', join(dir, 'schema.prisma')], {
    cwd: dir,
    // The schema engine is not needed to generate a client; without this Prisma tries to download it.
    env: { ...process.env, PRISMA_SCHEMA_ENGINE_BINARY: '/bin/true', PRISMA_HIDE_UPDATE_MESSAGE: '1', CHECKPOINT_DISABLE: '1' },
    stdio: 'pipe',
  });
}

export function removePrismaClient(table: string): void {
  rmSync(clientDir(table), { recursive: true, force: true });
}

/** The generated client's module for the orders table `table` (generated first if needed). */
export async function loadPrismaClient<M>(db: Database, table: string): Promise<M> {
  generatePrismaClient(db, table);
  return (await import(pathToFileURL(join(clientDir(table), 'generated', 'client.ts')).href)) as M;
}

interface OrderDelegate {
  create(args: { data: { key: string; amount: number } }): Promise<unknown>;
  count(args: { where: { key: string } }): Promise<number>;
  update(args: { where: { id: number }; data: { amount: { increment: number } } }): Promise<unknown>;
}

export async function openPrisma(db: Database, table: string): Promise<OrmCase> {
  const { PrismaClient } = await loadPrismaClient<{
    PrismaClient: new (options: { adapter: unknown }) => {
      $transaction(fn: (tx: { order: OrderDelegate }) => Promise<unknown>, options?: object): Promise<unknown>;
      $disconnect(): Promise<void>;
    };
  }>(db, table);
  const { prismaTransactions } = await import('../../drivers/transactions/prisma.js');
  let adapter;
  if (db === 'postgres') {
    const { PrismaPg } = await import('@prisma/adapter-pg');
    adapter = new PrismaPg({ connectionString: POSTGRES_URL, max: 5 });
  } else {
    const { PrismaMariaDb } = await import('@prisma/adapter-mariadb');
    const url = new URL(MYSQL_URL);
    adapter = new PrismaMariaDb({
      host: url.hostname,
      port: Number(url.port),
      user: decodeURIComponent(url.username),
      password: decodeURIComponent(url.password),
      database: url.pathname.slice(1),
      connectionLimit: 5,
      // The connector's documented statement log, which the ORM suite counts.
      logger: mariadbLogger,
    });
  }
  const prisma = new PrismaClient({ adapter });
  type Tx = { order: OrderDelegate };
  return {
    // Prisma's defaults (2 s to get a connection, 5 s for the whole transaction) are short
    // for 400 calls at once on a shared 2-core machine.
    runner: prismaTransactions(prisma, { maxWait: 20_000, timeout: 20_000 }),
    insert: async (tx, key, amount) => void (await (tx as Tx).order.create({ data: { key, amount } })),
    count: (tx, key) => (tx as Tx).order.count({ where: { key } }),
    bump: async (tx, id) => void (await (tx as Tx).order.update({ where: { id }, data: { amount: { increment: 1 } } })),
    close: () => prisma.$disconnect(),
  };
}
