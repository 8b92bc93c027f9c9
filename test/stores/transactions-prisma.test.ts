/**
 * Effect and record in one Prisma 7 interactive transaction, on PostgreSQL
 * (@prisma/adapter-pg) and on MySQL / MariaDB (@prisma/adapter-mariadb)
 * (test/suites/orm-transactions.suite.ts). The client is generated here, for tables of
 * this run, into node_modules/.cache, with no download.
 */
import { randomUUID } from 'node:crypto';
import { afterAll } from 'vitest';
import { generatePrismaClient, removePrismaClient } from '../helpers/prisma-case.js';
import { databaseAvailable, ormTransactionsSuite } from '../suites/orm-transactions.suite.js';

const tables = { postgres: `ik_prisma_pg_${randomUUID().slice(0, 8)}`, mysql: `ik_prisma_my_${randomUUID().slice(0, 8)}` };
generatePrismaClient('postgres', tables.postgres);
generatePrismaClient('mysql', tables.mysql);
afterAll(() => {
  removePrismaClient(tables.postgres);
  removePrismaClient(tables.mysql);
});

ormTransactionsSuite('prisma', 'postgres', await databaseAvailable('postgres'), tables.postgres);
ormTransactionsSuite('prisma', 'mysql', await databaseAvailable('mysql'), tables.mysql);
