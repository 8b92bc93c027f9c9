/**
 * Durations are named with their unit (`waitMs`, `ttlMs`, as `leaseMs` and `storeTimeoutMs`
 * always were). The old names `wait` and `ttl` keep working for one minor release, with one
 * deprecation warning each; given together with the new name they are a TypeError.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { memoryStore } from '../../drivers/memory.js';
import { storageKey } from '../../src/key.js';
import { createIdempotency, type HttpRequestInfo } from '../../src/http.js';
import { idempotent } from '../../src/idempotent.js';
import { Engine } from '../../src/engine.js';
import * as nats from '../../consumers/nats.js';
import * as mqtt from '../../consumers/mqtt.js';
import * as webhooks from '../../consumers/webhooks.js';

const request = (key: string): HttpRequestInfo<object> => ({
  method: 'POST',
  url: '/orders',
  headers: { 'content-type': 'application/json' },
  keyHeaderLines: key,
  body: () => ({ q: 1 }),
  raw: {},
});

function clock() {
  let t = 1_000_000;
  return { now: () => t, advance: (ms: number) => (t += ms) };
}

const deprecations = (spy: { mock: { calls: unknown[][] } }): string[] =>
  spy.mock.calls.filter(([, options]) => (options as { type?: string } | undefined)?.type === 'DeprecationWarning').map(([message]) => String(message));

afterEach(() => vi.restoreAllMocks());

describe('durations named with their unit', () => {
  it('waitMs and ttlMs set the wait and the replay window', async () => {
    const time = clock();
    const store = memoryStore({ now: time.now, sweepIntervalMs: 0 });
    const engine = new Engine({ store, waitMs: 0, ttlMs: 5000 });
    expect(engine.options.waitMs).toBe(0);
    expect(engine.options.ttlMs).toBe(5000);
    const layer = createIdempotency({ scope: 'shared', store, now: time.now, ttlMs: 7000 });
    const decision = await layer.begin(request('k1'));
    if (decision.type !== 'execute') throw new Error(`expected execute, got ${decision.type}`);
    await decision.claim.finish({ status: 201, headers: {}, body: new Uint8Array() });
    const record = await store.get(storageKey(undefined, 'k1'));
    expect(record?.state === 'completed' && record.expiresAt).toBe(time.now() + 7000);
  });

  it('ttlMs may be a function of the operation, on the HTTP layer and on idempotent()', async () => {
    const time = clock();
    const store = memoryStore({ now: time.now, sweepIntervalMs: 0 });
    const charge = idempotent(async (id: string) => ({ id }), { store, now: time.now, key: (id) => id, ttlMs: ([id]) => (id === 'long' ? 9000 : 3000) });
    await charge('long');
    await charge('short');
    const expiry = async (key: string) => {
      const record = await store.get(storageKey(undefined, key, 'function'));
      return record?.state === 'completed' ? record.expiresAt - time.now() : undefined;
    };
    expect(await expiry('long')).toBe(9000);
    expect(await expiry('short')).toBe(3000);
  });

  it('bad values name the new option', () => {
    const store = memoryStore();
    expect(() => new Engine({ store, waitMs: 1.5 })).toThrow('Expected `waitMs` to be a non-negative integer, got 1.5');
    expect(() => new Engine({ store, ttlMs: 0 })).toThrow('Expected `ttlMs` to be a positive integer, got 0');
    expect(() => createIdempotency({ scope: 'shared', store, ttlMs: '1h' as never })).toThrow(
      'Expected `ttlMs` to be a positive integer (ms) or a function returning one, got "1h"',
    );
  });

  it('the old names wait and ttl still work, each warning once with its new name', async () => {
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    const time = clock();
    const store = memoryStore({ now: time.now, sweepIntervalMs: 0 });
    const engine = new Engine({ store, wait: 250, ttl: 4000 });
    expect(engine.options.waitMs).toBe(250);
    expect(engine.options.ttlMs).toBe(4000);
    new Engine({ store, wait: 1, ttl: 1 });
    const layer = createIdempotency({ scope: 'shared', store, now: time.now, ttl: () => 6000 });
    const decision = await layer.begin(request('k2'));
    if (decision.type !== 'execute') throw new Error(`expected execute, got ${decision.type}`);
    await decision.claim.finish({ status: 201, headers: {}, body: new Uint8Array() });
    const record = await store.get(storageKey(undefined, 'k2'));
    expect(record?.state === 'completed' && record.expiresAt).toBe(time.now() + 6000);
    const messages = deprecations(warn);
    expect(messages.filter((m) => m.includes('`wait`') && m.includes('`waitMs`'))).toHaveLength(1);
    expect(messages.filter((m) => m.includes('`ttl`') && m.includes('`ttlMs`'))).toHaveLength(1);
  });

  it('an old name beside its new one is a TypeError, since one would be ignored', () => {
    const store = memoryStore();
    expect(() => new Engine({ store, wait: 1, waitMs: 2 })).toThrow('Expected one of `waitMs` and `wait` (its deprecated name), got both');
    expect(() => createIdempotency({ scope: 'shared', store, ttl: 1, ttlMs: 2 })).toThrow('Expected one of `ttlMs` and `ttl` (its deprecated name), got both');
  });
});

describe('the message helpers read idempotent<Thing>, like idempotent(), idempotentBatch() and idempotentProcessor()', () => {
  it('the old names still work, each warning once with its new name', async () => {
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    const store = memoryStore({ sweepIntervalMs: 0 });
    // The JetStream handler, under its old name, still settles a message and replays it.
    const acks: string[] = [];
    const message = (seq: number) => ({ seq, subject: 'orders', headers: { get: (name: string) => (name === 'Nats-Msg-Id' ? 'm-1' : '') }, info: { stream: 'ORDERS', deliveryCount: 1 }, data: new Uint8Array(), ack: () => void acks.push(`ack ${seq}`), nak: () => void acks.push(`nak ${seq}`), term: () => void acks.push(`term ${seq}`), working: () => {} });
    let runs = 0;
    const handle = nats.jetStreamHandler(async () => ++runs, { store, key: () => 'm-1' } as never);
    const handleAgain = nats.jetStreamHandler(async () => ++runs, { store, key: () => 'm-1' } as never);
    const first = await (handle as (m: unknown) => Promise<{ outcome: string; error?: unknown }>)(message(1));
    expect(first.outcome, String(first.error)).toBe('done');
    await (handleAgain as (m: unknown) => Promise<unknown>)(message(2));
    expect(runs).toBe(1);
    expect(acks).toEqual(['ack 1', 'ack 2']);
    expect(mqtt.handleMqttMessages).toBeTypeOf('function');
    expect(webhooks.webhookHandler).toBeTypeOf('function');
    const messages = deprecations(warn);
    expect(messages.filter((m) => m.includes('jetStreamHandler() is deprecated') && m.includes('idempotentJetStreamHandler()'))).toHaveLength(1);
  });
});
