/**
 * One process of the multi-process claim race (test/stores/multiprocess-race.test.ts).
 * argv: store URL, run id, keys, claims per key. Connects, prints "ready", waits for "go"
 * on stdin, fires every claim at once, and prints one JSON line with what it saw.
 */
import { randomUUID } from 'node:crypto';
import { createStore } from '../../drivers/create-store.js';

const [url, runId, keyCount, claimsPerKey] = process.argv.slice(2);
if (!url || !runId) throw new Error('usage: race-worker <store url> <run id> [keys] [claims per key]');
const keys = Number(keyCount ?? 100);
const perKey = Number(claimsPerKey ?? 10);

// A generous time bound: this proves atomicity, not latency, on a busy 2-core machine.
const store = createStore(url, { timeoutMs: 20_000 });
await store.get(`${runId}:warm-up`); // connect and create the schema before the race

process.stdout.write('ready\n');
await new Promise<void>((resolve) => {
  process.stdin.on('data', (chunk) => {
    if (String(chunk).includes('go')) resolve();
  });
});

const claims = [];
for (let k = 0; k < keys; k++) {
  for (let i = 0; i < perKey; i++) {
    const token = randomUUID();
    claims.push(
      store
        .claim(`${runId}:key-${k}`, { token, fingerprint: 'race', createdAt: Date.now() }, 60_000)
        .then((result) => ({ key: k, token, claimed: result.claimed, seen: result.record.token })),
    );
  }
}
const results = await Promise.all(claims);
await store.close();
process.stdout.write(`${JSON.stringify({ pid: process.pid, results })}\n`);
process.stdin.destroy();
