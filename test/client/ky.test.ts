/**
 * idempotentKy: ky sending through the idempotent fetch, against this package's server
 * behind the faulty proxy.
 */
import { randomUUID } from 'node:crypto';
import ky, { HTTPError } from 'ky';
import { describe, expect, it } from 'vitest';
import { isIdempotentRequestError, type AttemptEvent, type IdempotentFetchOptions } from '../../client/index.js';
import { idempotentKy } from '../../client/ky.js';
import { scripted, seeded } from '../helpers/faulty-proxy.js';
import { expectOncePerCall, useOrderServer } from './server.js';

function client(options: IdempotentFetchOptions = {}) {
  const events: AttemptEvent[] = [];
  const api = idempotentKy(ky, { minDelayMs: 5, maxDelayMs: 50, ...options, onAttempt: (e) => (events.push(e), options.onAttempt?.(e)) });
  return { api, events };
}

const bed = useOrderServer();

describe('idempotentKy', () => {
  it('H6 H7: one key kept across dropped and reset attempts; the handler runs once', async () => {
    const p = await bed.proxy(scripted(['reset', 'drop', 'drop', 'pass']));
    const { api, events } = client();
    const body = await api.post(`${p.url}/orders`, { json: { sku: 'K1' } }).json<{ key: string; sku: string }>();
    expect(body.sku).toBe('K1');
    expect(p.log).toEqual(['reset', 'drop', 'drop', 'pass']);
    expect(events.map((e) => e.reason)).toEqual(['network-error', 'network-error', 'network-error', 'response']);
    expect(new Set(events.map((e) => e.key))).toEqual(new Set([body.key]));
    expect(bed.server.seen.filter((k) => k === body.key)).toHaveLength(3);
    expect(bed.server.executions(body.key)).toBe(1);
  });

  it('H9: 30 calls, 6 at a time, through a seeded random plan: each runs once and gets its first answer', async () => {
    const p = await bed.proxy(seeded(2024, { drop: 0.3, reset: 0.2 }));
    const { api } = client({ maxAttempts: 40 });
    const prefixed = api.extend({ prefixUrl: p.url });
    await expectOncePerCall([bed.server], {
      calls: 30,
      concurrency: 6,
      send: (key) => prefixed.post('orders', { json: { sku: 'K' }, headers: { 'idempotency-key': key } }).text(),
    });
    expect(p.log.filter((a) => a !== 'pass').length).toBeGreaterThan(8);
  });

  it('H10 H14: a 5xx then 2xx succeeds with retryServerErrors; a 422 is ky\'s HTTPError after one attempt', async () => {
    const { api, events } = client({ retryServerErrors: true });
    const res = await api.post(`${bed.server.url}/flaky`, { json: {} });
    expect(res.status).toBe(201);
    expect(events.map((e) => e.status)).toEqual([500, 201]);
    expect(bed.server.executions(events[0]!.key)).toBe(2);

    events.length = 0;
    const key = randomUUID();
    await api.post(`${bed.server.url}/orders`, { json: { sku: 'A' }, headers: { 'idempotency-key': key } });
    const error = await api.post(`${bed.server.url}/orders`, { json: { sku: 'B' }, headers: { 'idempotency-key': key } }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(HTTPError);
    expect((error as HTTPError).response.status).toBe(422);
    expect(events.map((e) => e.attempt)).toEqual([1, 1]);
  });

  it('gives up with IdempotentRequestError; a signal stops it', async () => {
    const { api } = client({ maxAttempts: 2 });
    const error = await api.post(`${bed.server.url}/busy?status=503&ra=0`, { json: {} }).catch((e: unknown) => e);
    expect(isIdempotentRequestError(error)).toBe(true);
    expect(error).toMatchObject({ code: 'attempts-exhausted', attempts: 2, reason: 'unavailable', status: 503 });

    const controller = new AbortController();
    const stopping = client({ onAttempt: () => controller.abort() });
    const aborted = await stopping.api.post(`${bed.server.url}/busy?status=503&ra=5`, { json: {}, signal: controller.signal }).catch((e: unknown) => e);
    expect(aborted).toMatchObject({ code: 'aborted', attempts: 1 });
  });

  it('a bad ky or bad options are precise TypeErrors', () => {
    expect(() => idempotentKy(undefined as never)).toThrow(
      new TypeError('Expected `ky` to be a ky instance (the default export or one made with .extend()), got undefined'),
    );
    expect(() => idempotentKy(ky, { timeoutMs: 0 })).toThrow(new TypeError('Expected `timeoutMs` to be a positive integer, got 0'));
  });

  it('other methods get no key', async () => {
    const { api, events } = client();
    expect(await api.get(`${bed.server.url}/echo`).json()).toEqual({ key: null });
    expect(events).toHaveLength(0);
  });
});
