/**
 * Rolling upgrades on Redis (SPEC S10): during a deploy, instances of the previous release share
 * the store with this one. The previous release stored each record as compact JSON
 * (drivers/record-json.ts: `{"s":"p"|"c","f","t","c","l"|"e","r":{"s","h","b":base64}}`)
 * and published completions as `{"k": key, "r": record}` on `<namespace>:settled`. The
 * fixtures below are values exactly as it wrote them; this release must read and replay
 * them, honour their leases, leave the keys they own to their owner, and wake its waiters
 * when the previous release completes them.
 */
import { randomUUID } from 'node:crypto';
import { createClient } from '@keyv/redis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { redisStore } from '../../drivers/redis.js';
import { decodeValue } from '../../drivers/redis-record.js';
import { idempotent } from '../../src/idempotent.js';
import { storageKey } from '../../src/key.js';
import type { IdempotencyRecord } from '../../src/store.js';
import { REDIS_URL, serviceAvailable } from '../helpers/services.js';

const available = await serviceAvailable('Redis', REDIS_URL);

/** A processing record as the previous release wrote it (its claim script's ARGV[1]). */
const previousProcessing = (token: string, fingerprint: string, createdAt: number, leaseUntil: number) =>
  `{"s":"p","f":${JSON.stringify(fingerprint)},"t":${JSON.stringify(token)},"c":${createdAt},"l":${leaseUntil}}`;
/** A completed record as the previous release's complete script built it. */
const previousCompleted = (token: string, fingerprint: string, createdAt: number, expiresAt: number, status: number, headers: object, body: Buffer | null) =>
  `{"s":"c","f":${JSON.stringify(fingerprint)},"t":${JSON.stringify(token)},"c":${createdAt},"e":${expiresAt},"r":${JSON.stringify({
    s: status,
    h: headers,
    b: body === null ? null : body.toString('base64'),
  })}}`;

describe.skipIf(!available)('rolling upgrade on redis: records of the previous release (JSON layout)', () => {
  const raw = createClient({ url: REDIS_URL });
  beforeAll(async () => {
    await raw.connect();
  });
  afterAll(async () => {
    await raw.close();
  });
  const setUp = () => {
    const namespace = `ik-upgrade-${randomUUID()}`;
    return { namespace, store: redisStore({ url: REDIS_URL, namespace }), id: (key: string) => `${namespace}:${key}` };
  };

  it('rolling upgrade: a completed record is read and replayed byte-exact, by claim, get, scan and stats', async () => {
    const { store, id } = setUp();
    const now = Date.now();
    const body = Buffer.from([0, 1, 2, 255, 254, 10, 13, 123, 34]);
    await raw.set(id('done'), previousCompleted('old-token', 'fp-1', now - 1000, now + 60_000, 201, { 'content-type': 'application/octet-stream', 'set-cookie': ['a=1', 'b=2'] }, body), { PX: 60_000 });
    await raw.set(id('nobody'), previousCompleted('old-2', 'fp-2', now - 1000, now + 60_000, 202, {}, null), { PX: 60_000 });
    const expected: IdempotencyRecord = {
      state: 'completed',
      fingerprint: 'fp-1',
      token: 'old-token',
      createdAt: now - 1000,
      expiresAt: now + 60_000,
      response: { status: 201, headers: { 'content-type': 'application/octet-stream', 'set-cookie': ['a=1', 'b=2'] }, body: new Uint8Array(body) },
    };
    expect(await store.claim('done', { token: 'new', fingerprint: 'fp-1', createdAt: now }, 5000)).toEqual({ claimed: false, record: expected });
    expect(await store.get('done')).toEqual(expected);
    expect(await store.get('nobody')).toMatchObject({ state: 'completed', response: { status: 202, body: null } });
    const listed: string[] = [];
    let cursor: string | undefined;
    do {
      const page = await store.scan!({ limit: 100, cursor });
      listed.push(...page.records.map((r) => r.key));
      cursor = page.cursor;
    } while (cursor !== undefined);
    expect(listed.sort()).toEqual(['done', 'nobody']);
    expect(await store.stats!()).toMatchObject({ completed: 2, processing: 0 });
    // The value is left as it was (instances of the previous release still read it).
    expect((await raw.get(id('done')))!.startsWith('{"s":"c"')).toBe(true);
    await store.close();
  });

  it('rolling upgrade: idempotent() replays a result the previous release stored, without running again', async () => {
    const { store, id } = setUp();
    let runs = 0;
    const fn = idempotent(async (order: { id: string; amount: number }) => ({ charged: order.amount, run: ++runs }), { store, key: (o) => o.id });
    // The record this release writes, rewritten in the previous layout (same fingerprint and result).
    const order = { id: randomUUID(), amount: 42 };
    expect(await fn(order)).toEqual({ charged: 42, run: 1 });
    const skey = storageKey(undefined, order.id, 'function');
    const mine = decodeValue((await raw.sendCommand<Buffer>(['GET', id(skey)], { typeMapping: { 36: Buffer } }))!);
    if (mine.state !== 'completed' || mine.response.body === null) throw new Error('expected a completed record');
    const ttl = await raw.pTTL(id(skey));
    await raw.set(
      id(skey),
      previousCompleted(mine.token, mine.fingerprint, mine.createdAt, mine.expiresAt, mine.response.status, mine.response.headers, Buffer.from(mine.response.body)),
      { PX: ttl },
    );
    expect((await raw.get(id(skey)))!.startsWith('{')).toBe(true);
    expect(await fn(order)).toEqual({ charged: 42, run: 1 });
    expect(runs).toBe(1);
    await store.close();
  });

  it('rolling upgrade: a processing record holds its key for its lease; this release neither completes, extends nor releases it', async () => {
    const { store, id } = setUp();
    const now = Date.now();
    await raw.set(id('busy'), previousProcessing('old-owner', 'fp-1', now, now + 30_000), { PX: 30_000 });
    const result = await store.claim('busy', { token: 'new', fingerprint: 'fp-1', createdAt: now }, 5000);
    expect(result).toEqual({ claimed: false, record: { state: 'processing', fingerprint: 'fp-1', token: 'old-owner', createdAt: now, leaseUntil: now + 30_000 } });
    expect(await store.complete('busy', 'new', { status: 200, headers: {}, body: null }, 60_000)).toBe(false);
    expect(await store.extend('busy', 'new', 60_000)).toBe(false);
    expect(await store.release('busy', 'new')).toBe(false);
    // A token of this release never matches a record it did not write, even the same text.
    expect(await store.complete('busy', 'old-owner', { status: 200, headers: {}, body: null }, 60_000)).toBe(false);
    expect(await raw.get(id('busy'))).toBe(previousProcessing('old-owner', 'fp-1', now, now + 30_000));
    expect(await raw.pTTL(id('busy'))).toBeGreaterThan(25_000);
    await store.close();
  });

  it('rolling upgrade: once the lease of a previous-release claim ends (its key expires), this release takes the key over', async () => {
    const { store, id } = setUp();
    const now = Date.now();
    await raw.set(id('crashed'), previousProcessing('old-owner', 'fp-1', now, now + 150), { PX: 150 });
    expect(await store.claim('crashed', { token: 'early', fingerprint: 'fp-1', createdAt: now }, 5000)).toMatchObject({ claimed: false });
    await vi.waitFor(async () => expect(await store.claim('crashed', { token: 'new', fingerprint: 'fp-1', createdAt: Date.now() }, 5000)).toMatchObject({ claimed: true }), {
      timeout: 3000,
      interval: 50,
    });
    expect(await store.complete('crashed', 'new', { status: 200, headers: {}, body: new Uint8Array([1]) }, 60_000)).toBe(true);
    expect(await store.get('crashed')).toMatchObject({ state: 'completed', token: 'new' });
    await store.close();
  });

  it('rolling upgrade: a waiter of this release is woken by the previous release completing its claim (its message carries the record)', async () => {
    const { store, namespace, id } = setUp();
    const now = Date.now();
    const events: string[] = [];
    const settled: Array<[string, IdempotencyRecord | null | undefined]> = [];
    store.subscribe!({ settled: (key, record) => settled.push([key, record]), ready: () => events.push('ready'), down: () => events.push('down') });
    await vi.waitFor(() => expect(events).toEqual(['ready']), { timeout: 5000, interval: 20 });
    await raw.set(id('k'), previousProcessing('old-owner', 'fp-1', now, now + 30_000), { PX: 30_000 });
    expect(await store.claim('k', { token: 'w', fingerprint: 'fp-1', createdAt: now }, 5000)).toMatchObject({ claimed: false, record: { state: 'processing' } });
    // What the previous release's complete script did: SET the completed JSON, PUBLISH it with the key.
    const completed = previousCompleted('old-owner', 'fp-1', now, now + 60_000, 200, { 'content-type': 'text/plain' }, Buffer.from('done'));
    await raw.set(id('k'), completed, { PX: 60_000 });
    await raw.publish(`${namespace}:settled`, `{"k":"k","r":${completed}}`);
    // And its release: `{"k": key, "r": null}`.
    await raw.publish(`${namespace}:settled`, '{"k":"gone","r":null}');
    await vi.waitFor(() => expect(settled).toHaveLength(2), { timeout: 5000, interval: 20 });
    expect(settled[0]![0]).toBe('k');
    expect(settled[0]![1]).toMatchObject({ state: 'completed', token: 'old-owner', response: { status: 200, body: new Uint8Array(Buffer.from('done')) } });
    expect(settled[1]).toEqual(['gone', null]);
    await store.close();
  });

  it('rolling upgrade: the wake-ups of this release are messages the previous release reads (`{"k": key}`, `"r": null` for a release)', async () => {
    const { store, namespace } = setUp();
    const sub = raw.duplicate();
    await sub.connect();
    const messages: string[] = [];
    await sub.subscribe(`${namespace}:settled`, (message) => messages.push(message));
    const now = Date.now();
    for (const key of ['a', 'b']) {
      await store.claim(key, { token: `t-${key}`, fingerprint: 'fp', createdAt: now }, 5000);
      // A duplicate's claim: the record is now waited for.
      await store.claim(key, { token: 'dup', fingerprint: 'fp', createdAt: now }, 5000);
    }
    await store.complete('a', 't-a', { status: 200, headers: {}, body: new Uint8Array(Buffer.from('x'.repeat(5000))) }, 60_000);
    await store.release('b', 't-b');
    await vi.waitFor(() => expect(messages).toHaveLength(2), { timeout: 5000, interval: 20 });
    expect(messages.map((m) => JSON.parse(m) as unknown)).toEqual([{ k: 'a' }, { k: 'b', r: null }]);
    for (const m of messages) expect(Buffer.byteLength(m)).toBeLessThanOrEqual(100);
    await sub.close();
    await store.close();
  });

  it('rolling upgrade: reseal (replaceResponse) keeps a previous-release record in its own layout', async () => {
    const { store, id } = setUp();
    const now = Date.now();
    await raw.set(id('r'), previousCompleted('old', 'fp', now, now + 60_000, 200, {}, Buffer.from('one')), { PX: 60_000 });
    expect(await store.replaceResponse!('r', 'other', { status: 200, headers: {}, body: new Uint8Array([1]) })).toBe(false);
    expect(await store.replaceResponse!('r', 'old', { status: 201, headers: { a: 'b' }, body: new Uint8Array(Buffer.from('two')) })).toBe(true);
    const value = (await raw.get(id('r')))!;
    expect(value.startsWith('{"s":"c"')).toBe(true);
    expect(await store.get('r')).toMatchObject({ token: 'old', expiresAt: now + 60_000, response: { status: 201, headers: { a: 'b' }, body: new Uint8Array(Buffer.from('two')) } });
    expect(await raw.pTTL(id('r'))).toBeGreaterThan(50_000);
    await store.close();
  });
});
