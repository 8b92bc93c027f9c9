/**
 * Effect and record in one transaction, per call: `tsx bench/transactions.ts [postgres url]`,
 * or `--json` from bench/run.ts. One process, 16 callers, each placing an order on a fresh
 * key: the order's INSERT in a transaction, with and without the layer, on a raw `pg` pool
 * (`transaction: true`) and through Drizzle (`drizzleTransactions(db)`). Reports calls/s
 * and process CPU per call; the layer's share is the difference with the same transaction
 * run without it (BEGIN, INSERT, COMMIT), which adds the claim and the record's completion.
 * @module
 */
import { randomUUID } from 'node:crypto';

export interface TransactionRow {
  name: string;
  calls: number;
  callsPerSec: number;
  /** Process CPU (all threads) per call, microseconds. */
  cpuUsPerCall: number;
}

type Case = { name: string; call(key: string): Promise<unknown>; close(): Promise<void> };

async function measure(c: Case, o: { calls: number; concurrency: number }): Promise<TransactionRow> {
  const prefix = `tx-${randomUUID().slice(0, 8)}`;
  const drive = async (total: number, tag: string) => {
    let i = 0;
    const worker = async () => {
      while (i < total) await c.call(`${prefix}-${tag}-${i++}`);
    };
    await Promise.all(Array.from({ length: o.concurrency }, worker));
  };
  await drive(Math.min(300, o.calls), 'w');
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  await drive(o.calls, 'm');
  const wallS = Number(process.hrtime.bigint() - t0) / 1e9;
  const cpu = process.cpuUsage(cpu0);
  return { name: c.name, calls: o.calls, callsPerSec: o.calls / wallS, cpuUsPerCall: (cpu.user + cpu.system) / o.calls };
}

export async function transactionCases(url: string): Promise<{ cases: Case[]; tables: string[]; drop(): Promise<void> }> {
  const { default: pg } = await import('pg');
  const { drizzle } = await import('drizzle-orm/node-postgres');
  const { integer, pgTable, serial, text } = await import('drizzle-orm/pg-core');
  const { idempotent } = await import('../src/index.js');
  const { postgresStore } = await import('../drivers/postgres.js');
  const { drizzleTransactions } = await import('../drivers/transactions/drizzle.js');
  const suffix = randomUUID().replaceAll('-', '').slice(0, 10);
  const orders = `ik_bench_tx_orders_${suffix}`;
  const records = `ik_bench_tx_records_${suffix}`;
  const pool = new pg.Pool({ connectionString: url, max: 10 });
  pool.on('connect', (client) => client.on('error', () => undefined));
  await pool.query(`CREATE TABLE ${orders} (id serial PRIMARY KEY, key text NOT NULL, amount int NOT NULL)`);
  const table = pgTable(orders, { id: serial('id').primaryKey(), key: text('key').notNull(), amount: integer('amount').notNull() });
  const db = drizzle(pool);
  const pgStore = postgresStore({ pool, table: records, sweepIntervalMs: 0 });
  const drizzleStore = postgresStore({ pool, table: records, sweepIntervalMs: 0, transactions: drizzleTransactions(db) });
  const insert = `INSERT INTO ${orders} (key, amount) VALUES ($1, $2) RETURNING id`;
  const pgPlaced = idempotent(
    async (key: string, client) => ({ id: (await client.query(insert, [key, 1])).rows[0].id as number }),
    { store: pgStore, key: (key) => key, transaction: true },
  );
  const drizzlePlaced = idempotent(
    async (key: string, tx) => ({ id: (await tx.insert(table).values({ key, amount: 1 }).returning({ id: table.id }))[0]!.id }),
    { store: drizzleStore, key: (key) => key, transaction: true },
  );
  const cases: Case[] = [
    {
      name: 'pg transaction alone',
      async call(key) {
        const client = await pool.connect();
        try {
          await client.query('BEGIN');
          await client.query(insert, [key, 1]);
          await client.query('COMMIT');
        } finally {
          client.release();
        }
      },
      close: async () => undefined,
    },
    { name: 'pg + layer', call: pgPlaced, close: () => pgStore.close() },
    { name: 'drizzle transaction alone', call: (key) => db.transaction((tx) => tx.insert(table).values({ key, amount: 1 }).returning({ id: table.id })), close: async () => undefined },
    { name: 'drizzle + layer', call: drizzlePlaced, close: () => drizzleStore.close() },
  ];
  return {
    cases,
    tables: [orders, records],
    async drop() {
      await pool.query(`DROP TABLE IF EXISTS ${orders}; DROP TABLE IF EXISTS ${records}`);
      await pool.end();
    },
  };
}

/** Each case `repeats` times, taking turns; the median by CPU per call. */
export async function measureTransactions(url: string, o: { calls: number; repeats: number }): Promise<Array<TransactionRow & { samples: number[] }>> {
  const { cases, drop } = await transactionCases(url);
  const samples = new Map<string, TransactionRow[]>();
  try {
    for (let i = 0; i < o.repeats; i++) {
      for (const c of cases) samples.set(c.name, [...(samples.get(c.name) ?? []), await measure(c, { calls: o.calls, concurrency: 16 })]);
    }
  } finally {
    for (const c of cases) await c.close();
    await drop();
  }
  return [...samples].map(([, runs]) => {
    const sorted = [...runs].sort((a, b) => a.cpuUsPerCall - b.cpuUsPerCall);
    return { ...sorted[Math.floor((sorted.length - 1) / 2)]!, samples: runs.map((r) => Math.round(r.cpuUsPerCall)) };
  });
}

if (process.argv.includes('--json') || process.argv[1]?.endsWith('bench/transactions.ts')) {
  const json = process.argv.includes('--json');
  const quick = process.argv.includes('--quick');
  const url = process.argv.slice(2).find((a) => !a.startsWith('--')) ?? process.env.POSTGRES_URL ?? 'postgresql://postgres@127.0.0.1:5432/test';
  const rows = await measureTransactions(url, { calls: quick ? 1000 : 3000, repeats: quick ? 1 : 3 });
  if (json) process.stdout.write(`${JSON.stringify({ rows })}\n`);
  else for (const r of rows) process.stdout.write(`${r.name.padEnd(26)} ${r.callsPerSec.toFixed(0).padStart(6)} calls/s  ${r.cpuUsPerCall.toFixed(1).padStart(7)} µs CPU/call\n`);
}
