/**
 * The Durable Objects and D1 stores on the real workerd runtime: the exported store
 * contract (`idempotency-kit/testing`, through test/suites/store.suite.ts) runs here, each store call going to the driver
 * inside workerd through the harness Worker (./harness.ts); then what only these stores
 * have (sharding, the alarm, an expired D1 row taken over, KV refused, size limits).
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { storeMaintenanceSuite } from '../suites/store-maintenance.suite.js';
import { storeSuite } from '../suites/store.suite.js';
import { buildHarness, callHarness, startHarness, storeInWorkerd } from './harness-runtime.js';
import { scratchDir, workerdAvailable, type Workerd } from './workerd.js';

const run = workerdAvailable();
const scratch = scratchDir('cf-stores');
let workerd: Workerd;
const runtime = () => workerd;

beforeAll(async () => {
  if (!run) return;
  await buildHarness(scratch.dir);
  workerd = await startHarness(scratch.dir);
}, 60_000);
afterAll(async () => {
  await workerd?.stop();
  scratch.remove();
});

const target = (kind: string, name: string) =>
  run
    ? {
        create: async () => storeInWorkerd(runtime, kind, name),
        broken: async () => ({ store: storeInWorkerd(runtime, `${kind}-broken`, `${name} (broken)`), failingKey: 'k', allOperations: true }),
      }
    : undefined;

storeSuite('Durable Objects on workerd', target('do', 'durable-objects'));
storeSuite('D1 on workerd', target('d1', 'd1'));

storeMaintenanceSuite(
  'Durable Objects on workerd',
  run ? { create: async () => storeInWorkerd(runtime, `manual:maint-${randomUUID()}`, 'durable-objects') } : undefined,
);
storeMaintenanceSuite(
  'D1 on workerd',
  run ? { create: async () => storeInWorkerd(runtime, `d1:m_${randomUUID().replaceAll('-', '').slice(0, 16)}:0`, 'd1'), batched: true } : undefined,
);

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const claimOf = (token: string) => ({ token, fingerprint: 'fp', createdAt: Date.now() });
const ok = { status: 201, headers: { 'content-type': 'application/json' }, body: new Uint8Array(Buffer.from('{"id":1}')) };
const control = async <T>(path: string): Promise<T> => (await fetch(`${workerd.url('control')}${path}`)).json() as Promise<T>;

describe.skipIf(!run)('Durable Objects store on workerd', () => {
  it('spreads keys over `objects` objects named <prefix>:<n>, each record in one of them', async () => {
    const prefix = `spread-${randomUUID()}`;
    const store = storeInWorkerd(runtime, `do:${prefix}:4`, 'durable-objects');
    await Promise.all(Array.from({ length: 200 }, (_, i) => store.claim(`k-${i}`, claimOf(`t${i}`), 60_000)));
    const perObject = await control<Array<Array<{ state: string; n: number }>>>(`/do/objects?prefix=${prefix}&objects=4`);
    const counts = perObject.map((groups) => groups.reduce((sum, group) => sum + Number(group.n), 0));
    expect(counts.reduce((a, b) => a + b)).toBe(200);
    for (const n of counts) expect(n).toBeGreaterThan(20); // a hash, not one object
    expect(await store.stats!()).toMatchObject({ processing: 200, completed: 0, expired: 0 });
  });

  it("the object's alarm deletes expired records without any read or sweep, and leaves live ones", async () => {
    // The shipped alarm, allowed to run every 200 ms instead of every minute (a subclass).
    const prefix = `alarm-${randomUUID()}`;
    const store = storeInWorkerd(runtime, `quick:${prefix}`, 'durable-objects');
    const counts = async () => {
      const [groups] = await control<Array<Array<{ state: string; n: number }>>>(`/do/objects?namespace=quick&prefix=${prefix}&objects=1`);
      return Object.fromEntries(groups!.map((group) => [group.state, Number(group.n)]));
    };
    await store.claim('live', claimOf('keep'), 60_000);
    for (const [i, k] of ['a', 'b', 'c'].entries()) {
      await store.claim(k, claimOf(`t${i}`), 300 + 150 * i); // ending at three different times
    }
    expect(await counts()).toEqual({ processing: 4 });
    const deadline = Date.now() + 10_000;
    const total = async () => Object.values(await counts()).reduce((a, b) => a + b, 0);
    while ((await total()) > 1 && Date.now() < deadline) await sleep(100);
    expect(await counts()).toEqual({ processing: 1 });
    expect(await store.get('live')).toMatchObject({ token: 'keep' });
  });

  it('a claim sent again with its own token (its first answer lost) wins again; another token does not', async () => {
    const store = storeInWorkerd(runtime, 'do', 'durable-objects');
    const key = `again-${randomUUID()}`;
    const first = await store.claim(key, claimOf('mine'), 60_000);
    expect(first.claimed).toBe(true);
    expect(await store.claim(key, { ...claimOf('mine'), createdAt: first.record.createdAt }, 60_000)).toMatchObject({ claimed: true, record: { token: 'mine' } });
    expect(await store.claim(key, claimOf('theirs'), 60_000)).toMatchObject({ claimed: false, record: { token: 'mine' } });
  });

  it('a class declared without SQLite storage fails every call, saying how to declare it', async () => {
    const broken = storeInWorkerd(runtime, 'do-broken', 'durable-objects');
    await expect(broken.claim(`k-${randomUUID()}`, claimOf('t'), 5000)).rejects.toThrow(/new_sqlite_classes/);
  });

  it('createStore(env.IDEMPOTENCY) makes the Durable Objects store', async () => {
    const store = storeInWorkerd(runtime, 'do-created', 'durable-objects');
    const key = `created-${randomUUID()}`;
    expect((await store.claim(key, claimOf('t'), 5000)).claimed).toBe(true);
    expect(await store.complete(key, 't', ok, 60_000)).toBe(true);
    expect(await store.get(key)).toMatchObject({ state: 'completed', response: { status: 201, body: ok.body } });
  });
});

describe.skipIf(!run)('D1 store on workerd', () => {
  it("takes over an expired row that is still in the table (the peer's INSERT OR IGNORE would stay refused)", async () => {
    const table = `takeover_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
    const store = storeInWorkerd(runtime, `d1:${table}:0`, 'd1'); // no sweep: the expired row stays
    const key = `takeover-${randomUUID()}`;
    expect((await store.claim(key, claimOf('crashed'), 250)).claimed).toBe(true);
    await sleep(400);
    const left = await control<Array<{ key: string; token: string; expires_at: number }>>(`/d1/rows?table=${table}`);
    expect(left).toHaveLength(1);
    expect(left[0]!.token).toBe('crashed');
    expect(left[0]!.expires_at).toBeLessThan(Date.now());
    const results = await Promise.all(Array.from({ length: 10 }, (_, i) => store.claim(key, claimOf(`retry-${i}`), 5000)));
    expect(results.filter((r) => r.claimed)).toHaveLength(1);
    const [row] = await control<Array<{ token: string; state: string }>>(`/d1/rows?table=${table}`);
    expect(row).toMatchObject({ state: 'processing', token: results.find((r) => r.claimed)!.record.token });
  });

  it('a claim once an interval also deletes a batch of expired rows, in the same round trip', async () => {
    const table = `sweep_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
    const store = storeInWorkerd(runtime, `d1:${table}:1`, 'd1'); // every claim sweeps
    await Promise.all(['a', 'b', 'c'].map((k, i) => store.claim(k, claimOf(`t${i}`), 200)));
    await sleep(350);
    expect(await control<unknown[]>(`/d1/rows?table=${table}`)).toHaveLength(3);
    expect((await store.claim('d', claimOf('t3'), 60_000)).claimed).toBe(true);
    expect((await control<Array<{ key: string }>>(`/d1/rows?table=${table}`)).map((r) => r.key)).toEqual(['d']);
  });

  it('createStore(env.DB) makes the D1 store', async () => {
    const store = storeInWorkerd(runtime, 'd1-created', 'd1');
    const key = `created-${randomUUID()}`;
    expect((await store.claim(key, claimOf('t'), 5000)).claimed).toBe(true);
    expect(await store.complete(key, 't', ok, 60_000)).toBe(true);
    expect(await store.get(key)).toMatchObject({ state: 'completed', response: { status: 201, body: ok.body } });
  });
});

describe.skipIf(!run)('Workers stores on workerd: limits and refusals', () => {
  for (const kind of ['do', 'd1']) {
    it(`${kind}: a response too large for one row (2 MB) is kept without its body, never failing the completion`, async () => {
      const store = storeInWorkerd(runtime, kind, kind);
      const key = `big-${randomUUID()}`;
      await store.claim(key, claimOf('t'), 5000);
      const body = new Uint8Array(2_100_000).fill(120);
      expect(await store.complete(key, 't', { status: 200, headers: { 'content-type': 'text/plain' }, body }, 60_000)).toBe(true);
      expect(await store.get(key)).toMatchObject({ state: 'completed', response: { status: 200, body: null } });
      // Just under the limit, the body is kept.
      const fits = `fits-${randomUUID()}`;
      await store.claim(fits, claimOf('t'), 5000);
      const kept = new Uint8Array(1_900_000).fill(121);
      expect(await store.complete(fits, 't', { status: 200, headers: {}, body: kept }, 60_000)).toBe(true);
      const record = await store.get(fits);
      expect(record?.state === 'completed' && record.response.body?.length).toBe(1_900_000);
    });
  }

  it('a Workers KV namespace is refused by createStore, durableObjectStore and d1Store, saying why and what to use', async () => {
    for (const [kind, where] of [
      ['kv', 'createStore()'],
      ['kv-do', 'durableObjectStore({ namespace })'],
      ['kv-d1', 'd1Store({ database })'],
    ] as const) {
      const error = await callHarness(workerd, `/store/${kind}/get`, ['k']).then(
        () => undefined,
        (e: Error) => e,
      );
      expect(error?.name, kind).toBe('TypeError');
      expect(error?.message, kind).toContain(`${where} got a Workers KV namespace`);
      expect(error?.message, kind).toMatch(/no atomic set-if-absent/);
      expect(error?.message, kind).toMatch(/createStore\(env\.IDEMPOTENCY\).*createStore\(env\.DB\)/);
    }
  });
});
