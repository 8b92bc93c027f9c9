/**
 * idempotentGot: got's own retry loop steered by the client policy, against this package's
 * server behind the faulty proxy.
 */
import { randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import got, { HTTPError } from 'got';
import { describe, expect, it } from 'vitest';
import { idempotentGot } from '../../client/got.js';
import { isIdempotentRequestError, type AttemptEvent, type RetryPolicyOptions } from '../../client/index.js';
import { scripted, seeded } from '../helpers/faulty-proxy.js';
import { expectOncePerCall, useOrderServer } from './server.js';

function client(options: RetryPolicyOptions = {}) {
  const events: AttemptEvent[] = [];
  const http = idempotentGot(got, { minDelayMs: 5, maxDelayMs: 50, ...options, onAttempt: (e) => (events.push(e), options.onAttempt?.(e)) });
  return { http, events };
}

const bed = useOrderServer();

describe('idempotentGot', () => {
  it('H6 H7: one key kept across dropped and reset attempts; the handler runs once', async () => {
    const p = await bed.proxy(scripted(['drop', 'reset', 'drop', 'pass']));
    const { http, events } = client();
    const body = await http.post(`${p.url}/orders`, { json: { sku: 'G1' } }).json<{ key: string; sku: string }>();
    expect(body.sku).toBe('G1');
    expect(p.log).toEqual(['drop', 'reset', 'drop', 'pass']);
    expect(events.map((e) => [e.attempt, e.reason])).toEqual([
      [1, 'network-error'],
      [2, 'network-error'],
      [3, 'network-error'],
      [4, 'response'],
    ]);
    expect(new Set(events.map((e) => e.key))).toEqual(new Set([body.key]));
    expect(bed.server.seen.filter((k) => k === body.key)).toHaveLength(3);
    expect(bed.server.executions(body.key)).toBe(1);
  });

  it('H9: 30 calls, 6 at a time, through a seeded random plan: each runs once and gets its first answer', async () => {
    const p = await bed.proxy(seeded(99, { drop: 0.3, reset: 0.2 }));
    const { http } = client({ maxAttempts: 40 });
    await expectOncePerCall([bed.server], {
      calls: 30,
      concurrency: 6,
      send: async (key) => {
        const res = await http.post(`${p.url}/orders`, { json: { sku: 'G' }, headers: { 'idempotency-key': key } });
        expect(res.statusCode, key).toBe(201);
        return res.body;
      },
    });
    expect(p.log.filter((a) => a !== 'pass').length).toBeGreaterThan(8);
  });

  it('H10: a 5xx then 2xx runs twice and succeeds with retryServerErrors', async () => {
    const { http, events } = client({ retryServerErrors: true });
    const res = await http.post(`${bed.server.url}/flaky`, { json: {} });
    expect(res.statusCode).toBe(201);
    expect(events.map((e) => e.status)).toEqual([500, 201]);
    expect(bed.server.executions(events[0]!.key)).toBe(2);
  });

  it('H14: a 422 is not retried: got\'s HTTPError after one attempt', async () => {
    const { http, events } = client();
    const key = randomUUID();
    await http.post(`${bed.server.url}/orders`, { json: { sku: 'A' }, headers: { 'idempotency-key': key } });
    const error = await http.post(`${bed.server.url}/orders`, { json: { sku: 'B' }, headers: { 'idempotency-key': key } }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(HTTPError);
    expect((error as HTTPError).response.statusCode).toBe(422);
    expect(events.map((e) => [e.attempt, e.status])).toEqual([
      [1, 201],
      [1, 422],
    ]);
  });

  it('gives up with IdempotentRequestError (cause: got\'s error), and refuses to resend a stream body', async () => {
    const { http } = client({ maxAttempts: 2 });
    const error = await http.post(`${bed.server.url}/busy?status=503&ra=0`, { json: {} }).catch((e: unknown) => e);
    expect(isIdempotentRequestError(error)).toBe(true);
    expect(error).toMatchObject({ code: 'attempts-exhausted', attempts: 2, reason: 'unavailable', status: 503 });
    expect((error as Error).cause).toBeInstanceOf(HTTPError);

    const streamed = await http
      .post(`${bed.server.url}/busy-once?status=503&ra=0`, { body: Readable.from(['{}']), headers: { 'content-type': 'application/json' } })
      .catch((e: unknown) => e);
    expect(streamed).toMatchObject({ code: 'body-not-replayable', attempts: 1, reason: 'unavailable' });
  });

  it('a timed-out attempt is retried with the same key and gets the first execution\'s answer', async () => {
    // Attempts to spare on a loaded machine: the handler takes 600 ms whatever the load.
    const { http, events } = client({ timeoutMs: 150, maxAttempts: 20 });
    const res = await http.post(`${bed.server.url}/slow?ms=600`, { json: {} });
    expect(res.statusCode).toBe(201);
    expect(events[0]!.reason).toBe('timeout');
    expect(events.at(-1)!.reason).toBe('response');
    expect(bed.server.executions(events[0]!.key)).toBe(1);
  });

  it('an AbortSignal stops the wait between attempts', async () => {
    const controller = new AbortController();
    const { http, events } = client({ onAttempt: () => controller.abort() });
    const started = performance.now();
    const error = await http.post(`${bed.server.url}/busy?status=503&ra=5`, { json: {}, signal: controller.signal }).catch((e: unknown) => e);
    expect(performance.now() - started).toBeLessThan(2000);
    expect((error as Error).name).toBe('AbortError');
    expect(events).toHaveLength(1);
  });

  it('a bad got or bad options are precise TypeErrors', () => {
    expect(() => idempotentGot({} as never)).toThrow(
      new TypeError('Expected `got` to be a got instance (the default export or one made with .extend()), got object'),
    );
    expect(() => idempotentGot(got, { maxAttempts: -1 })).toThrow(new TypeError('Expected `maxAttempts` to be a positive integer, got -1'));
  });

  it('other methods get no key and keep the instance\'s own retry settings', async () => {
    const { http, events } = client();
    expect(await http.get(`${bed.server.url}/echo`).json()).toEqual({ key: null });
    expect(events).toHaveLength(0);

    const p = await bed.proxy(scripted(['reset', 'reset']));
    const noRetry = idempotentGot(got.extend({ retry: { limit: 0 } }), { maxAttempts: 5 });
    const error = await noRetry.get(`${p.url}/echo`).catch((e: unknown) => e);
    expect((error as { code?: string }).code).toBe('ECONNRESET');
    expect(p.log).toEqual(['reset']);
  });
});
