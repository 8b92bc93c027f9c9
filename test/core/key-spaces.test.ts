/**
 * Entry points keep apart: HTTP keys hash `[scope, key]`, every other entry point
 * `[space, scope, key]`, so no client-sent key or principal spells an `idempotent()`
 * caller's, a webhook delivery's or a message handler's record. On every store.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { createStore } from '../../drivers/create-store.js';
import { memoryStore } from '../../drivers/memory.js';
import { idempotent, idempotentIn } from '../../src/idempotent.js';
import { storageKey } from '../../src/key.js';
import type { IdempotencyStore } from '../../src/store.js';
import { MYSQL_URL, POSTGRES_URL, REDIS_URL, serviceAvailable } from '../helpers/services.js';

const run = randomUUID().slice(0, 8);
const opened: IdempotencyStore[] = [];
const open = (store: IdempotencyStore) => (opened.push(store), store);
afterAll(async () => {
  for (const store of opened) await store.close();
});

const stores: Array<[string, boolean, () => IdempotencyStore]> = [
  ['memory', true, () => open(memoryStore())],
  ['redis', await serviceAvailable('Redis', REDIS_URL), () => open(createStore(REDIS_URL, { namespace: `ks_${run}` }))],
  ['postgres', await serviceAvailable('PostgreSQL', POSTGRES_URL), () => open(createStore(POSTGRES_URL, { namespace: `ks_${run}` }))],
  ['mysql', await serviceAvailable('MySQL', MYSQL_URL), () => open(createStore(MYSQL_URL, { namespace: `ks_${run}` }))],
];

describe('storage keys of the entry points', () => {
  it('C6: a pair never hashes like a triple, whatever the strings', () => {
    const tries: Array<[string | undefined, string]> = [
      ['function', 'k'],
      [JSON.stringify(['function', null]), 'k'],
      ['webhook:stripe', 'evt_1'],
      [undefined, '["function",null,"k"]'],
    ];
    const http = new Set(tries.map(([scope, key]) => storageKey(scope, key)));
    for (const space of ['function', 'webhook:stripe', 'message:nats'] as const) {
      for (const [scope, key] of [...tries, [undefined, 'k'] as [undefined, string], ['stripe', 'evt_1'] as [string, string]]) {
        expect(http.has(storageKey(scope, key, space))).toBe(false);
      }
    }
    expect(storageKey('a', 'k', 'message:nats')).not.toBe(storageKey('a', 'k', 'message:mqtt'));
  });
});

for (const [name, available, makeStore] of stores) {
  describe.skipIf(!available)(`key spaces on ${name}`, () => {
    it('C6: an HTTP key and a function with the same scope and key are two records; each replays its own', async () => {
      const store = makeStore();
      const key = `k-${randomUUID()}`;
      const token = randomUUID();
      await store.claim(storageKey('alice', key), { fingerprint: 'v2:http', token, createdAt: Date.now() }, 60_000);
      let runs = 0;
      const fn = idempotent(async () => ++runs, { store, key: () => key, scope: () => 'alice' });
      expect(await fn()).toBe(1); // neither 409 nor 422: the HTTP claim is another key space
      expect(await fn()).toBe(1);
      expect(runs).toBe(1);
      const message = idempotentIn('message:nats', async () => 'message', { store, key: () => key, scope: () => 'alice' });
      expect(await message()).toBe('message');
    });
  });
}
