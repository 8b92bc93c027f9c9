import { describe, expect, it } from 'vitest';
import { memoryStore } from '../../drivers/memory.js';
import { RequestInProgressError, IdempotencyKeyError, StoreUnavailableError, BodyTooLargeError } from '../../src/errors.js';
import type { IdempotencyEvent } from '../../src/events.js';
import { createIdempotency, defaultStoreResponse, type HttpRequestInfo } from '../../src/http.js';
import { problemResponse } from '../../src/problem.js';

const request = (over: Partial<HttpRequestInfo<null>> = {}): HttpRequestInfo<null> => ({
  method: 'POST',
  url: '/payments',
  headers: { 'content-type': 'application/json' },
  keyHeaderLines: 'key-1',
  body: () => ({ amount: 1 }),
  raw: null,
  ...over,
});

describe('HTTP policy (src/http.ts)', () => {
  it('H10: what is stored by default', () => {
    for (const status of [200, 201, 202, 204, 301, 302, 400, 404, 409, 422]) expect(defaultStoreResponse(status)).toBe(true);
    for (const status of [401, 403, 408, 425, 429, 500, 502, 503]) expect(defaultStoreResponse(status)).toBe(false);
  });

  it('H10/H11: a stored response keeps only allow-listed headers; 5xx is released', async () => {
    const layer = createIdempotency({ store: memoryStore(), scope: 'shared', replayHeaders: ['X-Payment-Id'] });
    const first = await layer.begin(request());
    if (first.type !== 'execute') throw new Error(first.type);
    await first.claim.finish({
      status: 201,
      headers: {
        'content-type': 'application/json',
        Location: '/payments/1',
        'set-cookie': ['a=1'],
        date: 'Sun, 29 Nov 2026 10:00:00 GMT',
        'x-request-id': 'r1',
        'x-payment-id': 'p1',
        'content-length': 3,
        connection: 'keep-alive',
      },
      body: new Uint8Array(Buffer.from('{}\n')),
    });
    const replay = await layer.begin(request());
    expect(replay.type).toBe('respond');
    if (replay.type !== 'respond') return;
    expect(replay.response.status).toBe(201);
    expect(replay.response.headers).toEqual({
      'content-type': 'application/json',
      location: '/payments/1',
      'x-payment-id': 'p1',
      'idempotent-replayed': 'true',
    });
    expect(Buffer.from(replay.response.body).toString()).toBe('{}\n');

    const failing = await layer.begin(request({ keyHeaderLines: 'key-2' }));
    if (failing.type !== 'execute') throw new Error(failing.type);
    await failing.claim.finish({ status: 503, headers: {}, body: new Uint8Array() });
    expect((await layer.begin(request({ keyHeaderLines: 'key-2' }))).type).toBe('execute');
  });

  it('H10: storeResponse(status) changes the policy (store 5xx like Stripe)', async () => {
    const layer = createIdempotency({ store: memoryStore(), scope: 'shared', storeResponse: () => true });
    const first = await layer.begin(request());
    if (first.type !== 'execute') throw new Error(first.type);
    await first.claim.finish({ status: 500, headers: {}, body: new Uint8Array(Buffer.from('boom')) });
    const again = await layer.begin(request());
    expect(again.type === 'respond' && again.response.status).toBe(500);
  });

  it('H12: a body over maxResponseBytes completes without a body: the retry gets 409 response-not-replayable', async () => {
    const events: IdempotencyEvent[] = [];
    const layer = createIdempotency({ store: memoryStore(), scope: 'shared', maxResponseBytes: 4, onEvent: (e) => events.push(e) });
    const first = await layer.begin(request());
    if (first.type !== 'execute') throw new Error(first.type);
    await first.claim.finish({ status: 200, headers: {}, body: new Uint8Array(5) });
    // The same event as a result that is not stored at the other entry points.
    expect(events.map((e) => e.type)).toEqual(['claimed', 'result-not-stored', 'completed']);
    expect(events[1]).toMatchObject({ key: 'key-1', reason: 'too-large', status: 200 });
    expect((events[1]!.error as Error).message).toMatch(/5 bytes, more than the 4 bytes allowed/);
    const again = await layer.begin(request());
    expect(again.type === 'respond' && again.response.status).toBe(409);
    expect(again.type === 'respond' && JSON.parse(Buffer.from(again.response.body).toString()).code).toBe('response-not-replayable');
  });

  it('H1/H2: uncovered methods and keyless requests with required:false pass; required keys are enforced', async () => {
    const layer = createIdempotency({ store: memoryStore(), scope: 'shared' });
    expect(await layer.begin(request({ method: 'GET' }))).toEqual({ type: 'pass' });
    expect(await layer.begin(request({ method: 'PUT' }))).toEqual({ type: 'pass' });
    const missing = await layer.begin(request({ keyHeaderLines: undefined }));
    expect(missing.type === 'respond' && missing.response.status).toBe(400);
    const optional = createIdempotency({ store: memoryStore(), scope: 'shared', required: false, methods: ['put'] });
    expect(await optional.begin(request({ method: 'PUT', keyHeaderLines: undefined }))).toEqual({ type: 'pass' });
  });

  it('H19/§5: problems are RFC 9457 with Cache-Control no-store, and Retry-After where retrying helps', () => {
    const conflict = problemResponse(new RequestInProgressError(1));
    expect(conflict.status).toBe(409);
    expect(conflict.headers).toEqual({ 'content-type': 'application/problem+json', 'cache-control': 'no-store', 'retry-after': '1' });
    const body = JSON.parse(Buffer.from(conflict.body).toString());
    expect(body).toMatchObject({ type: 'urn:idempotency-kit:problem:request-in-progress', status: 409, code: 'request-in-progress' });
    expect(typeof body.title).toBe('string');
    expect(typeof body.detail).toBe('string');
    const unavailable = problemResponse(new StoreUnavailableError(new Error('connect ECONNREFUSED 10.0.0.5:6379')));
    expect(unavailable.status).toBe(503);
    expect(unavailable.headers['retry-after']).toBe('1');
    // the store's internals never reach the client
    expect(Buffer.from(unavailable.body).toString()).not.toMatch(/ECONNREFUSED|10\.0\.0\.5/);
    const invalid = JSON.parse(Buffer.from(problemResponse(new IdempotencyKeyError('too-long', 'x')).body).toString());
    expect(invalid).toMatchObject({ code: 'key-invalid', reason: 'too-long', status: 400 });
    expect(problemResponse(new BodyTooLargeError(10)).status).toBe(413);
  });

  it('options: bad values throw precise TypeErrors at creation', () => {
    const store = memoryStore();
    expect(() => createIdempotency({ store, scope: 'shared', replayHeaders: ['Set-Cookie'] })).toThrow(/cannot include "Set-Cookie"/);
    expect(() => createIdempotency({ store, scope: 'shared', methods: 'POST' as never })).toThrow('Expected `methods` to be an array of non-empty strings');
    expect(() => createIdempotency({ store, scope: 'shared', maxKeyLength: 0 })).toThrow('Expected `maxKeyLength` to be a positive integer, got 0');
    expect(() => createIdempotency({ store, scope: 'shared', header: 'Bad Header' })).toThrow(/HTTP header name/);
    expect(() => createIdempotency({ store, scope: 'shared', required: 'yes' as never })).toThrow('Expected `required` to be a boolean');
    expect(() => createIdempotency({ store, scope: 'tenant' as never })).toThrow('Expected `scope` to be a function');
    expect(() => createIdempotency({ store, scope: 'shared', maxBodyBytes: -5 })).toThrow('Expected `maxBodyBytes` to be a non-negative integer, got -5');
  });
});
