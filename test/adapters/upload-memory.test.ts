/**
 * A 20 MiB upload with `maxBodyBytes` raised, on every adapter, in a server process of its
 * own (upload-memory-server.ts): it runs once, its retry (a new FormData, a new boundary)
 * replays, and the server's memory grows by at most about twice the body for each of the
 * two requests (measured by `process.memoryUsage()` sampled in that process, after a
 * collection, not by a timer: rss and external memory, where Buffers live).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';

const MiB = 1024 * 1024;
const SIZE = 20 * MiB;
// About twice the body: the layer's copy of it and one more (a parser's, or Hono's one
// buffer for its body cache), plus the chunks read off the socket that the collector has
// not taken yet when the peak is sampled: on Hono over @hono/node-server the first request
// peaks either near 1.5 times the body or, when the collection comes late, at 2.2 to 2.6
// times (44 to 51 MiB of external memory in 3 of 9 runs; at a bound of 2.5 times one
// clean-clone CI run failed at 51.0 MiB). A third copy of the body kept alive would add a whole
// body (3 times and more) and still fails. The process's rss also holds the allocator's
// slack and transient native buffers, and gets a looser bound.
const BOUND = 2.75 * SIZE;
const RSS_BOUND = 3 * SIZE;
const server = fileURLToPath(new URL('./upload-memory-server.ts', import.meta.url));
const body = new Uint8Array(SIZE).map((_, i) => (i * 7) % 251);
const form = () => {
  const data = new FormData();
  data.append('title', 'big');
  data.append('file', new Blob([body], { type: 'application/octet-stream' }), 'big.bin');
  return data;
};

let child: ChildProcess | undefined;
afterEach(() => {
  child?.kill();
  child = undefined;
});

async function start(adapter: string): Promise<string> {
  child = spawn(process.execPath, ['--expose-gc', '--import', 'tsx', server, adapter], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stderr!.on('data', (d) => (output += d));
  const port = await new Promise<number>((resolve, reject) => {
    child!.stdout!.on('data', (d) => {
      const match = /listening (\d+)/.exec(String(d));
      if (match) resolve(Number(match[1]));
    });
    child!.once('exit', (code) => reject(new Error(`server exited with ${code}: ${output}`)));
  });
  return `http://127.0.0.1:${port}`;
}

interface Peak {
  rss: number;
  heap: number;
  external: number;
}

describe('a 20 MiB upload and its retry: memory', () => {
  for (const adapter of ['node', 'express', 'koa', 'fastify', 'hono', 'fetch']) {
    it(`${adapter}: H14 H7: runs once, the retry replays, and memory grows by at most about twice the body per request`, async () => {
      const url = await start(adapter);
      const small = new FormData();
      small.append('file', new Blob([new Uint8Array(1000)]), 'warm.bin');
      expect((await fetch(`${url}/upload`, { method: 'POST', headers: { 'idempotency-key': 'warm-up' }, body: small })).status).toBe(201);
      const peaks: Peak[] = [];
      const answers: Response[] = [];
      const texts: string[] = [];
      for (let i = 0; i < 2; i++) {
        await fetch(`${url}/baseline`, { method: 'POST' });
        const res = await fetch(`${url}/upload`, { method: 'POST', headers: { 'idempotency-key': 'big' }, body: form() });
        answers.push(res);
        texts.push(await res.text());
        peaks.push((await (await fetch(`${url}/memory`)).json()) as Peak);
      }
      const [first, again] = answers;
      expect(first!.status, texts[0]).toBe(201);
      expect(JSON.parse(texts[0]!)).toMatchObject({ run: 2 });
      expect(again!.status).toBe(201);
      expect(again!.headers.get('idempotent-replayed')).toBe('true');
      expect(texts[1]).toBe(texts[0]);
      const shown = peaks.map((p) => `rss +${(p.rss / MiB).toFixed(1)} MiB, external +${(p.external / MiB).toFixed(1)} MiB`).join('; then ');
      console.log(`${adapter}: 20 MiB upload: ${shown}`);
      for (const peak of peaks) {
        expect(peak.rss, shown).toBeLessThanOrEqual(RSS_BOUND);
        expect(peak.external, shown).toBeLessThanOrEqual(BOUND);
      }
    }, 60_000);
  }
});
