/**
 * docs/transactions.md, "With an ORM or a query builder": every example (one per ORM and
 * database) runs as written, in its own process, against a real PostgreSQL or MySQL, and
 * does what the page says: the second call replays the first one's result, one order.
 * Only the names are made unique to this run (the `orders` table, the message id), so that
 * runs sharing the servers never meet; Prisma's client is generated from the page's schema.
 */
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { importsFromSources } from '../helpers/package-imports.js';
import { quote, sqlOutside, urlOf, type Database } from '../helpers/orm-cases.js';
import { MYSQL_URL, POSTGRES_URL, serviceAvailable } from '../helpers/services.js';
import { runTs } from '../helpers/ts-process.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const dir = join(root, 'node_modules', '.cache', `idempotency-orm-docs-${randomUUID().slice(0, 8)}`);
const page = readFileSync(join(root, 'docs', 'transactions.md'), 'utf8');
const section = page.slice(page.indexOf('\n## With an ORM or a query builder'), page.indexOf('\n## What happens when'));
const available = {
  postgres: await serviceAvailable('PostgreSQL', POSTGRES_URL),
  mysql: await serviceAvailable('MySQL', MYSQL_URL),
};

/** The examples: each ```ts block under a `#### PostgreSQL` or `#### MySQL` heading, with its ORM. */
function examples(): Array<{ orm: string; db: Database; code: string }> {
  const found: Array<{ orm: string; db: Database; code: string }> = [];
  let orm = '';
  let db: Database | undefined;
  const lines = section.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    if (line.startsWith('### ')) [orm, db] = [line.slice(4), undefined];
    else if (line.startsWith('#### ')) db = line.includes('PostgreSQL') ? 'postgres' : 'mysql';
    else if (line === '```ts' && db) {
      const body: string[] = [];
      for (i++; lines[i] !== '```'; i++) body.push(lines[i]!);
      found.push({ orm, db, code: body.join('\n') });
      db = undefined;
    }
  }
  return found;
}

const prismaSchema = /```prisma\n([\s\S]*?)```/.exec(section)?.[1];

/** Prisma's client from `cwd/schema.prisma`, as the page's `output` says (./generated/prisma). */
function generate(cwd: string): void {
  execFileSync(process.execPath, [join(root, 'node_modules', 'prisma', 'build', 'index.js'), 'generate', '--schema', join(cwd, 'schema.prisma')], {
    cwd,
    // Generating needs no schema engine; without this, Prisma tries to download one.
    env: { ...process.env, PRISMA_SCHEMA_ENGINE_BINARY: '/bin/true', PRISMA_HIDE_UPDATE_MESSAGE: '1', CHECKPOINT_DISABLE: '1' },
    stdio: 'pipe',
  });
}
const tables: Array<[Database, string]> = [];
afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  for (const [db, table] of tables) await sqlOutside(db, `DROP TABLE IF EXISTS ${quote(db, table)}`).catch(() => undefined);
});

describe('docs/transactions.md: the ORM examples run as written', () => {
  it('has an example for each ORM on PostgreSQL, and for each but MikroORM on MySQL too', () => {
    const names = examples().map((e) => `${e.orm} ${e.db}`);
    expect(names).toEqual([
      'Drizzle postgres', 'Drizzle mysql', 'Kysely postgres', 'Kysely mysql', 'Knex postgres', 'Knex mysql',
      'TypeORM postgres', 'TypeORM mysql', 'Prisma postgres', 'Prisma mysql', 'MikroORM postgres', 'mysql2 without an ORM mysql',
    ]);
    expect(prismaSchema).toBeDefined();
  });

  it('the examples type-check as written: each handler gets its ORM\'s own transaction type, with no annotation', () => {
    const cwd = join(dir, 'types');
    mkdirSync(cwd, { recursive: true });
    writeFileSync(join(cwd, 'schema.prisma'), prismaSchema!);
    generate(cwd);
    // The package's names resolve through the repository's tsconfig `paths`, as an install would.
    for (const [n, { code }] of examples().entries()) writeFileSync(join(cwd, `example-${n}.ts`), `${code}\nexport {};\n`);
    writeFileSync(
      join(cwd, 'tsconfig.json'),
      JSON.stringify({ extends: join(root, 'tsconfig.json'), compilerOptions: { noEmit: true, rootDir: root }, include: ['example-*.ts'] }),
    );
    let output = '';
    try {
      execFileSync(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(cwd, 'tsconfig.json')], { cwd, stdio: 'pipe' });
    } catch (error) {
      output = String((error as { stdout?: Buffer }).stdout ?? error);
    }
    expect(output).toBe('');
  }, 120_000);

  for (const [n, { orm, db, code }] of examples().entries()) {
    it.skipIf(!available[db])(`${orm} on ${db === 'postgres' ? 'PostgreSQL' : 'MySQL'}: the repeat replays, one order`, async () => {
      const table = `ik_docs_orders_${randomUUID().replaceAll('-', '').slice(0, 10)}`;
      tables.push([db, table]);
      const cwd = join(dir, String(n));
      mkdirSync(cwd, { recursive: true });
      writeFileSync(join(cwd, 'package.json'), '{ "type": "module" }\n'); // top-level await, as in an ES module app
      const unique = (text: string) => text.replace(/\borders\b(?!:)/g, table).replaceAll('msg-1', `msg-${randomUUID()}`);
      if (orm === 'Prisma') {
        writeFileSync(join(cwd, 'schema.prisma'), unique(prismaSchema!).replace('provider = "postgresql"', `provider = "${db === 'postgres' ? 'postgresql' : 'mysql'}"`));
        generate(cwd);
      }
      const file = join(cwd, 'example.ts');
      writeFileSync(file, importsFromSources(unique(code)));
      const run = runTs(file, { cwd, env: { ...process.env, DATABASE_URL: urlOf(db) } });
      const exit = await run.exited;
      expect(exit, run.output()).toBe(0);
      const result = JSON.parse(run.output().trim().split('\n').at(-1)!) as { first: unknown; again: unknown; orders: unknown };
      expect(result.again, run.output()).toEqual(result.first);
      expect(result.first).toMatchObject({ orderId: expect.any(Number) });
      expect(result.orders).toBe(1);
    }, 60_000);
  }
});
