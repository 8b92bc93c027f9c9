/**
 * A retry that spans the upgrade to the versioned fingerprint replays (H14): on every
 * adapter, a record holding the fingerprint that the release before it stored for a
 * request (test/fixtures/fingerprint-v1.json, recorded from that release's own adapters
 * and apps) is replayed when the same request is retried now, and a different request
 * with that key is still 422. `idempotent()` fingerprints are unchanged.
 */
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { memoryStore } from '../../drivers/memory.js';
import { storageKey } from '../../src/key.js';
import { newToken } from '../../src/lease.js';
import { idempotent } from '../../src/idempotent.js';
import type { IdempotencyStore } from '../../src/store.js';
import { HTTP_CORPUS, HTTP_OPTION_SETS, optionsFor, type CorpusRequest, type HttpOptionSet } from '../fixtures/fingerprint-corpus.js';
import { ADAPTERS, startApp, type RunningApp } from './apps.js';
import { expectProblem, send } from './client.js';

interface Fixture {
  release: string;
  http: Record<string, Record<HttpOptionSet, Record<string, string | null>>>;
  fn: { args: number | string; fingerprint: string }[];
}
const fixture = JSON.parse(readFileSync(new URL('../fixtures/fingerprint-v1.json', import.meta.url), 'utf8')) as Fixture;

const stored = { status: 201, headers: { 'content-type': 'application/json' }, body: new TextEncoder().encode('{"stored":"by the earlier release"}') };

/** Write the completed record that the earlier release left for `key`. */
async function legacyRecord(store: IdempotencyStore, key: string, fingerprint: string): Promise<void> {
  const skey = storageKey(undefined, key);
  const token = newToken();
  const claimed = await store.claim(skey, { fingerprint, token, createdAt: Date.now() }, 30_000);
  expect(claimed.claimed).toBe(true);
  expect(await store.complete(skey, token, stored, 60_000)).toBe(true);
}

const sendCorpus = (app: RunningApp, request: CorpusRequest, key: string, change?: 'body' | 'tenant') =>
  send(app.url, {
    method: request.method,
    path: request.path,
    key,
    body: change === 'body' ? Buffer.from('{"amount":999}') : request.body === undefined ? undefined : Buffer.from(request.body, 'base64'),
    contentType: change === 'body' ? 'application/json' : request.contentType,
    headers: change === 'tenant' ? { ...request.headers, 'x-tenant': 'another' } : request.headers,
  });

for (const adapter of ADAPTERS) {
  for (const set of HTTP_OPTION_SETS) {
    describe(`${adapter}: records of the release before the versioned fingerprint (${set} options)`, () => {
      const store = memoryStore();
      let app: RunningApp;
      beforeAll(async () => {
        app = await startApp(adapter, { store, ...optionsFor(set) });
      });
      afterAll(async () => {
        await app?.close();
        await store.close();
      });
      const recorded = fixture.http[adapter]![set];
      for (const request of HTTP_CORPUS) {
        const fingerprint = recorded[request.name];
        if (fingerprint === null || fingerprint === undefined) continue; // the framework answered before the layer then
        it(`H14: ${request.name}: the retry after the upgrade replays; another request with the key is 422`, async () => {
          const key = `upgrade-${newToken()}`;
          await legacyRecord(store, key, fingerprint);
          const before = { payments: app.calls.count('payments'), echo: app.calls.count('echo-body') };
          const reply = await sendCorpus(app, request, key);
          expect(reply.status, reply.text).toBe(201);
          expect(reply.headers['idempotent-replayed']).toBe('true');
          expect(reply.text).toBe('{"stored":"by the earlier release"}');
          expectProblem(await sendCorpus(app, request, key, set === 'custom' ? 'tenant' : 'body'), 422, 'key-reused');
          expect({ payments: app.calls.count('payments'), echo: app.calls.count('echo-body') }).toEqual(before);
        });
      }
    });
  }
}

describe('idempotent(): function fingerprints are what the earlier release stored', () => {
  it('C2: the same arguments give the same fn: fingerprints, so a redelivered message replays', async () => {
    const store = memoryStore();
    const claims: string[] = [];
    const claim = store.claim.bind(store);
    store.claim = (key, request, leaseMs) => {
      claims.push(request.fingerprint);
      return claim(key, request, leaseMs);
    };
    const wrapped = idempotent(async (job: { id: string; payload: unknown }) => job.id, {
      store,
      key: (job) => job.id,
      fingerprint: (job) => job.payload,
    });
    const byKey = idempotent(async (job: { id: string }) => job.id, { store, key: (job) => `k-${job.id}` });
    const payloads: unknown[] = [{ b: 1, a: [1, { y: 2, x: 1 }] }, 'text', 7, null, Buffer.from('bytes'), { when: new Date(3) }];
    for (const [i, payload] of payloads.entries()) await wrapped({ id: `fn-${i}`, payload });
    await byKey({ id: 'only-key' });
    expect(claims).toEqual(fixture.fn.map((f) => f.fingerprint));
    await store.close();
  });
});
