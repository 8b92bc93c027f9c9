/**
 * S1/S5/H9 across processes: 4 worker processes race 10 concurrent claims on each of 100
 * keys against one real store. Exactly one claim per key wins, and every loser (in any
 * process) is handed the winner's record.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { dynalite } from '../helpers/dynalite.js';
import { MYSQL_URL, POSTGRES_URL, REDIS_URL, serviceAvailable } from '../helpers/services.js';

const WORKER = fileURLToPath(new URL('./race-worker.ts', import.meta.url));
const PROCESSES = 4;
const KEYS = 100;
const CLAIMS_PER_KEY = 10;

const redisUp = await serviceAvailable('Redis', REDIS_URL);
const postgresUp = await serviceAvailable('PostgreSQL', POSTGRES_URL);
const mysqlUp = await serviceAvailable('MySQL', MYSQL_URL);
const dir = await mkdtemp(path.join(tmpdir(), 'idempotency-kit-race-'));
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

interface Outcome {
  key: number;
  token: string;
  claimed: boolean;
  seen: string;
}

function startWorker(url: string, runId: string) {
  const child = spawn(process.execPath, ['--import', 'tsx', WORKER, url, runId, String(KEYS), String(CLAIMS_PER_KEY)], {
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk) => (stdout += chunk));
  child.stderr.on('data', (chunk) => (stderr += chunk));
  const exited = new Promise<Outcome[]>((resolve, reject) => {
    child.on('exit', (code) => {
      const last = stdout.trim().split('\n').at(-1) ?? '';
      if (code !== 0 || !last.startsWith('{')) reject(new Error(`worker exited with ${code}: ${stderr || stdout}`));
      else resolve((JSON.parse(last) as { results: Outcome[] }).results);
    });
  });
  const ready = new Promise<void>((resolve, reject) => {
    child.stdout.on('data', () => {
      if (stdout.includes('ready\n')) resolve();
    });
    exited.catch(reject);
  });
  return { child, ready, exited };
}

async function race(url: string): Promise<void> {
  const runId = `race-${randomUUID()}`;
  const workers = Array.from({ length: PROCESSES }, () => startWorker(url, runId));
  try {
    // Everyone connected (and the schema exists): start all claims at the same moment.
    await Promise.all(workers.map((w) => w.ready));
    for (const w of workers) w.child.stdin.write('go\n');
    const outcomes = (await Promise.all(workers.map((w) => w.exited))).flat();

    expect(outcomes).toHaveLength(PROCESSES * KEYS * CLAIMS_PER_KEY);
    const winners = outcomes.filter((o) => o.claimed);
    expect(winners).toHaveLength(KEYS);
    const winnerOf = new Map(winners.map((w) => [w.key, w.token]));
    expect(winnerOf.size).toBe(KEYS); // no key with two winners
    for (const o of outcomes) expect(o.seen, `key ${o.key}: every claimer sees the winner`).toBe(winnerOf.get(o.key));
  } finally {
    for (const w of workers) w.child.kill();
  }
}

describe('multi-process claim race: 4 processes x 100 keys x 10 concurrent claims -> exactly 100 winners', () => {
  it('S1/S5: SQLite, 4 processes on one fresh file', async () => {
    await race(`sqlite://${path.join(dir, 'race.db')}`);
  });

  it.skipIf(!redisUp)('S1/S5: Redis', async () => {
    await race(REDIS_URL);
  });

  it.skipIf(!postgresUp)('S1/S5: PostgreSQL', async () => {
    await race(POSTGRES_URL);
  });

  it.skipIf(!mysqlUp)('S1/S5: MySQL / MariaDB', async () => {
    await race(MYSQL_URL);
  });

  it('S1/S5: DynamoDB (dynalite, started by the test)', async () => {
    const server = await dynalite();
    await race(server.url(await server.table('idk-race')));
  }, 60_000);
});
