/**
 * H9 across processes: three Nest apps (two on the Express platform, one on Fastify), each
 * its own process, on one Redis. Every key is sent many times at once, spread over the
 * three: its handler runs exactly once in all, and every answer is that execution's.
 */
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { REDIS_URL, serviceAvailable } from '../helpers/services.js';
import { startWorker } from '../helpers/worker-process.js';
import { send } from './client.js';

const WORKER = fileURLToPath(new URL('./nest-race-worker.ts', import.meta.url));
const KEYS = 20;
const COPIES = 9;
const redis = await serviceAvailable('Redis', REDIS_URL);

describe.skipIf(!redis)('nest: a 3-process race on Redis', () => {
  it('H9: one execution per key across three Nest processes; every duplicate gets its replay', async () => {
    const workers = (['express', 'express', 'fastify'] as const).map((platform) => {
      const worker = startWorker<{ pid: number; executed: string[] }>(WORKER, [platform, REDIS_URL]);
      let out = '';
      worker.child.stdout.on('data', (chunk) => (out += chunk));
      return { ...worker, port: () => Number(/port=(\d+)/.exec(out)?.[1]) };
    });
    try {
      await Promise.all(workers.map((w) => w.ready));
      const ports = workers.map((w) => w.port());
      expect(ports.every((p) => p > 0)).toBe(true);
      const runId = randomUUID();
      const replies = await Promise.all(
        Array.from({ length: KEYS }, (_, k) =>
          Promise.all(
            Array.from({ length: COPIES }, (_, i) =>
              send(`http://127.0.0.1:${ports[i % ports.length]}`, { path: '/charge', key: `${runId}-${k}`, body: { amount: k } }),
            ),
          ),
        ),
      );
      for (const sent of replies) {
        for (const reply of sent) expect(reply.status, reply.text).toBe(201);
        const bodies = new Set(sent.map((r) => r.text));
        expect(bodies.size, 'every answer is the one execution').toBe(1);
        expect(sent.filter((r) => r.headers['idempotent-replayed'] === undefined)).toHaveLength(1);
      }
      for (const w of workers) w.send('stop');
      const executed = (await Promise.all(workers.map((w) => w.exited))).flatMap((r) => r.executed);
      expect(executed).toHaveLength(KEYS);
      expect(new Set(executed).size).toBe(KEYS);
    } finally {
      for (const w of workers) w.child.kill();
    }
  }, 120_000);
});
