/**
 * A process for test/consumers/batch.test.ts that handles one batch with
 * `idempotentBatch(..., { transaction: true })` and is SIGKILLed in the middle of it: the
 * first HANG_AFTER messages commit, then every further handler hangs inside its open
 * transaction (its claim held and renewed) and the process prints `hanging`.
 *
 * Env: POSTGRES_URL, TABLE (the effects), RECORDS (the store's table), IDS (a JSON array), HANG_AFTER.
 */
import pg from 'pg';
import { postgresStore } from '../../drivers/postgres.js';
import { idempotentBatch } from '../../src/index.js';

const { POSTGRES_URL, TABLE, RECORDS, IDS, HANG_AFTER } = process.env;
if (!POSTGRES_URL || !TABLE || !RECORDS || !IDS || !HANG_AFTER) throw new Error('batch-worker: POSTGRES_URL, TABLE, RECORDS, IDS and HANG_AFTER are required');

const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 8 });
const store = postgresStore({ pool, table: RECORDS });
const ids = JSON.parse(IDS) as string[];
let committed = 0;
let hanging = 0;

await idempotentBatch(
  ids.map((id, n) => ({ id, n })),
  async (msg, client: pg.PoolClient) => {
    if (committed >= Number(HANG_AFTER)) {
      await client.query(`INSERT INTO ${TABLE} (message_id, pid) VALUES ($1, $2)`, [msg.id, process.pid]);
      // Both lanes hang now, each inside an open transaction.
      if (++hanging === 2) process.stdout.write('hanging\n');
      await new Promise(() => {});
    }
    await client.query(`INSERT INTO ${TABLE} (message_id, pid) VALUES ($1, $2)`, [msg.id, process.pid]);
    committed++;
    return msg.n;
  },
  { store, key: (msg) => msg.id, transaction: true, concurrency: 2, leaseMs: 1000 },
);
