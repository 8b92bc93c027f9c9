/**
 * createIdempotentFetch against this package's own server (Node adapter, memory store) behind
 * a proxy that drops responses and resets connections: one key per call, exactly one
 * execution, the first execution's answer, and the right retries for each kind of answer.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { createIdempotentFetch, isIdempotentRequestError, type AttemptEvent, type IdempotentFetchOptions } from '../../client/index.js';
import { scripted, seeded } from '../helpers/faulty-proxy.js';
import { expectOncePerCall, useOrderServer } from './server.js';

const json = { 'content-type': 'application/json' };
const fast = { minDelayMs: 5, maxDelayMs: 50 } satisfies IdempotentFetchOptions;

/** A client that records every attempt. */
function client(options: IdempotentFetchOptions = {}) {
  const events: AttemptEvent[] = [];
  const fetch = createIdempotentFetch({ ...fast, ...options, onAttempt: (e) => (events.push(e), options.onAttempt?.(e)) });
  return { fetch, events };
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected the call to reject');
}

const bed = useOrderServer({ waitMs: 0 });

describe('createIdempotentFetch: exactly once through a faulty network', () => {
  it('H6 H7: dropped and reset attempts carry one key; the handler runs once and the call gets its answer', async () => {
    const p = await bed.proxy(scripted(['drop', 'reset', 'drop', 'pass']));
    const { fetch, events } = client();
    const res = await fetch(`${p.url}/orders`, { method: 'POST', headers: json, body: JSON.stringify({ sku: 'A1' }) });
    expect(res.status).toBe(201);
    expect(p.log).toEqual(['drop', 'reset', 'drop', 'pass']);
    expect(events.map((e) => e.reason)).toEqual(['network-error', 'network-error', 'network-error', 'response']);
    const key = events[0]!.key;
    expect(new Set(events.map((e) => e.key))).toEqual(new Set([key]));
    expect(key).toMatch(/^[0-9a-f-]{36}$/);
    expect(bed.server.executions(key)).toBe(1);
    // The dropped first answer and the replay are the same bytes.
    expect(res.headers.get('idempotent-replayed')).toBe('true');
    expect(await res.text()).toBe(bed.server.firstAnswer(key));
    // The reset request never reached the server; the three others did, all with the key.
    expect(bed.server.seen.filter((k) => k === key)).toHaveLength(3);
  });

  it('an answer cut off halfway through its body is retried, and the call gets the whole replay', async () => {
    const p = await bed.proxy(scripted(['cut']));
    const { fetch, events } = client();
    const res = await fetch(`${p.url}/orders`, { method: 'POST', headers: json, body: JSON.stringify({ sku: 'C'.repeat(2000) }) });
    expect(p.log).toEqual(['cut', 'pass']);
    expect(events.map((e) => e.reason)).toEqual(['network-error', 'response']);
    expect(await res.text()).toBe(bed.server.firstAnswer(events[0]!.key));
    expect(bed.server.executions(events[0]!.key)).toBe(1);
  });

  for (const seed of [7, 1234]) {
    it(`H9: 40 calls, 8 at a time, through a seeded random plan (seed ${seed}): each runs once and gets its first answer`, async () => {
      const p = await bed.proxy(seeded(seed, { drop: 0.3, reset: 0.2 }));
      const { fetch, events } = client({ maxAttempts: 40 });
      await expectOncePerCall([bed.server], {
        calls: 40,
        concurrency: 8,
        send: async (key) => {
          const res = await fetch(`${p.url}/orders`, { method: 'POST', headers: { ...json, 'idempotency-key': key }, body: '{"sku":"B"}' });
          expect(res.status, key).toBe(201);
          return res.text();
        },
      });
      // The plan did hurt: answers were lost after the server ran, and connections were reset.
      expect(p.log.filter((a) => a === 'drop').length).toBeGreaterThan(5);
      expect(p.log.filter((a) => a === 'reset').length).toBeGreaterThan(3);
      // Every lost answer and reset connection was one failed attempt, retried.
      expect(events.filter((e) => e.reason === 'network-error').length).toBeGreaterThanOrEqual(p.log.filter((a) => a !== 'pass').length);
    });
  }
});

describe('createIdempotentFetch: which answers are retried', () => {
  it('H10: a 5xx then 2xx runs the handler twice and succeeds (retryServerErrors)', async () => {
    const { fetch, events } = client({ retryServerErrors: true });
    const res = await fetch(`${bed.server.url}/flaky`, { method: 'POST', headers: json, body: '{}' });
    expect(res.status).toBe(201);
    expect(events.map((e) => [e.reason, e.status])).toEqual([
      ['server-error', 500],
      ['response', 201],
    ]);
    expect(bed.server.executions(events[0]!.key)).toBe(2);
  });

  it('a 500 is returned as it is without retryServerErrors', async () => {
    const { fetch, events } = client();
    const res = await fetch(`${bed.server.url}/flaky`, { method: 'POST', headers: json, body: '{}' });
    expect(res.status).toBe(500);
    expect(events).toHaveLength(1);
  });

  it('H14: a 422 (same key, other body) is returned after one attempt', async () => {
    const { fetch, events } = client();
    const key = randomUUID();
    const first = await fetch(`${bed.server.url}/orders`, { method: 'POST', headers: { ...json, 'idempotency-key': key }, body: '{"sku":"A"}' });
    expect(first.status).toBe(201);
    const reused = await fetch(`${bed.server.url}/orders`, { method: 'POST', headers: { ...json, 'idempotency-key': key }, body: '{"sku":"B"}' });
    expect(reused.status).toBe(422);
    expect(((await reused.json()) as { code: string }).code).toBe('key-reused');
    expect(events.map((e) => e.attempt)).toEqual([1, 1]);
    expect(bed.server.executions(key)).toBe(1);
  });

  it('a 400 (invalid key) is not retried', async () => {
    const { fetch, events } = client();
    const res = await fetch(`${bed.server.url}/orders`, { method: 'POST', headers: { ...json, 'idempotency-key': 'a, b' }, body: '{}' });
    expect(res.status).toBe(400);
    expect(events).toHaveLength(1);
  });

  it('H8: a 409 in progress waits as Retry-After says, then gets the replay', async () => {
    const key = randomUUID();
    const owner = fetch(`${bed.server.url}/hold`, { method: 'POST', headers: { ...json, 'idempotency-key': key }, body: '{}' });
    await bed.server.holding;
    const { fetch: idem, events } = client({
      // Let the owner finish once the duplicate has been told to wait.
      onAttempt: (e) => void (e.status === 409 && bed.server.release()),
    });
    const started = performance.now();
    const res = await idem(`${bed.server.url}/hold`, { method: 'POST', headers: { ...json, 'idempotency-key': key }, body: '{}' });
    const took = performance.now() - started;
    expect(res.status).toBe(201);
    expect(res.headers.get('idempotent-replayed')).toBe('true');
    expect(events[0]).toMatchObject({ reason: 'in-progress', status: 409, decision: { retry: true, delayMs: 1000 } });
    expect(took).toBeGreaterThanOrEqual(990);
    expect((await owner).status).toBe(201);
    expect(bed.server.executions(key)).toBe(1);
  });

  it('429 with delay-seconds and 503 with an HTTP-date Retry-After are waited for, then retried', async () => {
    const { fetch, events } = client();
    const rateLimited = await fetch(`${bed.server.url}/busy-once?status=429&ra=1`, { method: 'POST', headers: json, body: '{}' });
    expect(rateLimited.status).toBe(201);
    expect(events[0]).toMatchObject({ reason: 'rate-limited', decision: { retry: true, delayMs: 1000 } });
    expect(events[1]!.elapsedMs - events[0]!.elapsedMs).toBeGreaterThanOrEqual(990);

    events.length = 0;
    const date = new Date(Date.now() + 2500).toUTCString();
    const unavailable = await fetch(`${bed.server.url}/busy-once?status=503&ra=${encodeURIComponent(date)}`, { method: 'POST', headers: json, body: '{}' });
    expect(unavailable.status).toBe(201);
    expect(events[0]!.reason).toBe('unavailable');
    const wait = (events[0]!.decision as { delayMs: number }).delayMs;
    // The date has whole seconds: 1.5 to 2.5 s ahead when sent, far above the backoff (<= 50 ms).
    expect(wait).toBeGreaterThan(1000);
    expect(wait).toBeLessThanOrEqual(2500);
    expect(events[1]!.elapsedMs - events[0]!.elapsedMs).toBeGreaterThanOrEqual(wait - 10);
  });

  it('a timed-out attempt is retried with the same key and gets the first execution\'s answer', async () => {
    const { fetch, events } = client({ timeoutMs: 150 });
    const res = await fetch(`${bed.server.url}/slow?ms=600`, { method: 'POST', headers: json, body: '{}' });
    expect(res.status).toBe(201);
    expect(events[0]!.reason).toBe('timeout');
    expect(events.at(-1)!.reason).toBe('response');
    expect(bed.server.executions(events[0]!.key)).toBe(1);
  });

  it('other methods go out once, without a key', async () => {
    const { fetch, events } = client();
    const res = await fetch(`${bed.server.url}/echo`);
    expect(await res.json()).toEqual({ key: null });
    expect(events).toHaveLength(0);
  });

  it('the caller\'s own key and a key function are used and kept', async () => {
    const mine = client();
    await mine.fetch(`${bed.server.url}/orders`, { method: 'POST', headers: { ...json, 'Idempotency-Key': 'my-own-key-1' }, body: '{}' });
    expect(mine.events[0]!.key).toBe('my-own-key-1');
    let made = 0;
    const p = await bed.proxy(scripted(['drop']));
    const fn = client({ key: ({ method, url }) => `${method}-${new URL(url).pathname}-${++made}-${randomUUID()}` });
    const res = await fn.fetch(`${p.url}/orders`, { method: 'PATCH', headers: json, body: '{}' });
    expect(res.status).toBe(201);
    expect(made).toBe(1);
    expect(fn.events.map((e) => e.key)).toEqual([fn.events[0]!.key, fn.events[0]!.key]);
    expect(fn.events[0]!.key).toMatch(/^PATCH-\/orders-1-/);
  });
});

describe('createIdempotentFetch: when it gives up', () => {
  it('stops after maxAttempts with the attempts, the reason and the network error', async () => {
    const p = await bed.proxy(() => 'reset');
    const { fetch } = client({ maxAttempts: 3 });
    const error = await rejection(fetch(`${p.url}/orders`, { method: 'POST', headers: json, body: '{}' }));
    expect(isIdempotentRequestError(error)).toBe(true);
    expect(error).toMatchObject({ name: 'IdempotentRequestError', code: 'attempts-exhausted', attempts: 3, reason: 'network-error' });
    expect((error as Error).cause).toBeInstanceOf(TypeError);
    expect((error as Error).message).toMatch(/3 attempts, last: network-error/);
    expect(p.log).toEqual(['reset', 'reset', 'reset']);
  });

  it('stops at once when Retry-After is beyond maxTimeMs, with the last response', async () => {
    const { fetch } = client({ maxTimeMs: 2000 });
    const error = await rejection(fetch(`${bed.server.url}/busy?status=503&ra=5`, { method: 'POST', headers: json, body: '{}' }));
    expect(error).toMatchObject({ code: 'time-exhausted', attempts: 1, reason: 'unavailable', status: 503 });
    expect(await (error as { response: Response }).response.json()).toEqual({ error: 'busy' });
  });

  it('an AbortSignal stops the wait between attempts', async () => {
    const controller = new AbortController();
    const { fetch, events } = client({ onAttempt: () => controller.abort(new Error('user left')) });
    const started = performance.now();
    const error = await rejection(fetch(`${bed.server.url}/busy?status=503&ra=5`, { method: 'POST', headers: json, body: '{}', signal: controller.signal }));
    expect(performance.now() - started).toBeLessThan(2000);
    expect(error).toMatchObject({ code: 'aborted', attempts: 1, reason: 'unavailable' });
    expect(((error as Error).cause as Error).message).toBe('user left');
    expect(events).toHaveLength(1);
  });

  it('an AbortSignal stops an attempt in flight, and an aborted signal sends nothing', async () => {
    const controller = new AbortController();
    const { fetch } = client();
    const call = fetch(`${bed.server.url}/slow?ms=3000`, { method: 'POST', headers: json, body: '{}', signal: controller.signal });
    setTimeout(() => controller.abort(), 100);
    const started = performance.now();
    expect(await rejection(call)).toMatchObject({ code: 'aborted', attempts: 1, reason: 'aborted' });
    expect(performance.now() - started).toBeLessThan(2000);

    const seen = bed.server.seen.length;
    const error = await rejection(fetch(`${bed.server.url}/orders`, { method: 'POST', body: '{}', signal: AbortSignal.abort() }));
    expect(error).toMatchObject({ code: 'aborted', attempts: 0, reason: 'aborted' });
    expect(bed.server.seen.length).toBe(seen);
  });

  it('a one-shot stream body is sent once and never retried: body-not-replayable', async () => {
    const stream = (text: string) =>
      new ReadableStream({
        start(controller) {
          controller.enqueue(new TextEncoder().encode(text));
          controller.close();
        },
      });
    const { fetch, events } = client();
    const init = (body: ReadableStream) => ({ method: 'POST', headers: json, body, duplex: 'half' }) as RequestInit;
    const ok = await fetch(`${bed.server.url}/orders`, init(stream('{"sku":"S"}')));
    expect(ok.status).toBe(201);
    expect(((await ok.json()) as { sku: string }).sku).toBe('S');

    events.length = 0;
    const error = await rejection(fetch(`${bed.server.url}/busy-once?status=503&ra=0`, init(stream('{}'))));
    expect(error).toMatchObject({ code: 'body-not-replayable', attempts: 1, reason: 'unavailable', status: 503 });
    expect((error as Error).message).toMatch(/one-shot stream/);
    expect(events).toHaveLength(1);
  });

  it('replayable bodies (string, URLSearchParams, FormData, Blob, a Request) are sent again whole', async () => {
    const bodies: [string, NonNullable<RequestInit['body']>][] = [
      ['string', '{"sku":"T"}'],
      ['URLSearchParams', new URLSearchParams({ sku: 'T' })],
      ['FormData', (() => { const f = new FormData(); f.set('sku', 'T'); return f; })()],
      ['Blob', new Blob(['{"sku":"T"}'], { type: 'application/json' })],
    ];
    for (const [name, body] of bodies) {
      const p = await bed.proxy(scripted(['drop']));
      const { fetch, events } = client();
      const res = await fetch(`${p.url}/orders`, { method: 'POST', body, headers: typeof body === 'string' ? json : {} });
      expect(res.status, name).toBe(201);
      expect(events).toHaveLength(2);
      expect(bed.server.executions(events[0]!.key), name).toBe(1);
    }
    const p = await bed.proxy(scripted(['drop']));
    const { fetch, events } = client();
    const res = await fetch(new Request(`${p.url}/orders`, { method: 'POST', headers: json, body: '{"sku":"R"}' }));
    expect(res.status).toBe(201);
    expect(((await res.json()) as { sku: string }).sku).toBe('R');
    expect(events).toHaveLength(2);
  });
});

describe('createIdempotentFetch: options', () => {
  it('bad options are precise TypeErrors', () => {
    const cases: [IdempotentFetchOptions, string][] = [
      [{ maxAttempts: 0 }, 'Expected `maxAttempts` to be a positive integer, got 0'],
      [{ maxTimeMs: -1 }, 'Expected `maxTimeMs` to be a positive integer, got -1'],
      [{ timeoutMs: 1.5 }, 'Expected `timeoutMs` to be a positive integer, got 1.5'],
      [{ minDelayMs: -5 }, 'Expected `minDelayMs` to be a non-negative integer, got -5'],
      [{ minDelayMs: 100, maxDelayMs: 10 }, 'Expected `maxDelayMs` to be at least `minDelayMs` (100), got 10'],
      [{ methods: 'POST' as never }, 'Expected `methods` to be an array of non-empty strings, got "POST"'],
      [{ header: 'Idempotency Key' }, 'Expected `header` to be an HTTP header name, got "Idempotency Key"'],
      [{ key: 'abc' as never }, 'Expected `key` to be a function, got "abc"'],
      [{ retryServerErrors: 'yes' as never }, 'Expected `retryServerErrors` to be a boolean, got string'],
      [{ onAttempt: 1 as never }, 'Expected `onAttempt` to be a function, got 1'],
      [{ fetch: {} as never }, 'Expected `fetch` to be a function, got an object'],
    ];
    for (const [options, message] of cases) {
      expect(() => createIdempotentFetch(options), message).toThrow(new TypeError(message));
    }
    expect(() => createIdempotentFetch(null as never)).toThrow(new TypeError('Expected options to be an object, got null'));
    expect(() => createIdempotentFetch(5 as never)).toThrow(new TypeError('Expected options to be an object, got number'));
  });

  it('a key function that returns no string is a TypeError at call time', async () => {
    const { fetch } = client({ key: () => '' });
    await expect(fetch(`${bed.server.url}/orders`, { method: 'POST', body: '{}' })).rejects.toThrow('Expected `key()` to return a non-empty string, got ""');
  });
});
