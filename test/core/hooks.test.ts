/**
 * The core pieces the Lambda work added for every adapter: `onReplay` (HTTP replays and
 * `idempotent()` results), `renewLease: false`, and the `IDEMPOTENCY_KIT_DISABLED` kill switch.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { memoryStore } from '../../drivers/memory.js';
import { withIdempotency } from '../../adapters/fetch.js';
import { Engine } from '../../src/engine.js';
import { createIdempotency, type HttpRequestInfo } from '../../src/http.js';
import { idempotent } from '../../src/idempotent.js';
import type { IdempotencyStore } from '../../src/store.js';

const request = (key = 'key-1'): HttpRequestInfo<null> => ({
  method: 'POST',
  url: '/payments',
  headers: { 'content-type': 'application/json' },
  keyHeaderLines: key,
  body: () => ({ amount: 1 }),
  raw: null,
});

afterEach(() => {
  delete process.env.IDEMPOTENCY_KIT_DISABLED;
  vi.useRealTimers();
});

describe('onReplay', () => {
  it('H7: changes the replay only: the first response, the layer\'s refusals and the stored record stay as they are', async () => {
    const seen: unknown[] = [];
    const layer = createIdempotency<null>({
      store: memoryStore(),
      scope: 'shared',
      onReplay: (response, req) => {
        seen.push(req);
        return { ...response, headers: { ...response.headers, 'x-replay': '1' } };
      },
    });
    const first = await layer.begin(request());
    if (first.type !== 'execute') throw new Error(first.type);
    await first.claim.finish({ status: 201, headers: { 'content-type': 'text/plain' }, body: new Uint8Array(Buffer.from('ok')) });
    for (let i = 0; i < 2; i++) {
      const replay = await layer.begin(request());
      if (replay.type !== 'respond') throw new Error(replay.type);
      expect(replay.response.headers).toEqual({ 'content-type': 'text/plain', 'idempotent-replayed': 'true', 'x-replay': '1' });
    }
    expect(seen).toEqual([null, null]);
    const refused = await layer.begin(request('')); // an invalid key: a problem, not a replay
    if (refused.type !== 'respond') throw new Error(refused.type);
    expect(refused.response.status).toBe(400);
    expect(refused.response.headers).not.toHaveProperty('x-replay');
    expect(() => createIdempotency({ store: memoryStore(), scope: 'shared', onReplay: 'x' as never })).toThrow('Expected `onReplay` to be a function');
  });

  it('H7: a hook that returns nothing sends the replay as it is; on the fetch adapter too', async () => {
    const handler = withIdempotency(async () => new Response('done', { status: 201 }), { store: memoryStore(), scope: 'shared', onReplay: () => undefined });
    const make = () => new Request('http://x/p', { method: 'POST', headers: { 'idempotency-key': 'k' } });
    await handler(make());
    const replay = await handler(make());
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(await replay.text()).toBe('done');
  });

  it('C2: idempotent() hands the stored result and the arguments to onReplay; the first call is not changed', async () => {
    let n = 0;
    const fn = idempotent(async (id: string) => ({ id, n: ++n }), {
      store: memoryStore(),
      key: (id) => id,
      onReplay: (result, args) => ({ ...result, replayedFor: args[0] }),
    });
    expect(await fn('a')).toEqual({ id: 'a', n: 1 });
    expect(await fn('a')).toEqual({ id: 'a', n: 1, replayedFor: 'a' });
    expect(() => idempotent(async () => 1, { store: memoryStore(), key: () => 'k', onReplay: 1 as never })).toThrow('Expected `onReplay` to be a function');
  });
});

describe('renewLease', () => {
  it('H17: false: the claim holds for leaseMs, with no extend while the handler runs; true (the default) renews', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval', 'setTimeout', 'clearTimeout', 'Date'] });
    const inner = memoryStore({ sweepIntervalMs: 0 });
    let extended = 0;
    const store: IdempotencyStore = { ...inner, name: 'counting', claim: inner.claim, get: inner.get, complete: inner.complete, release: inner.release, close: inner.close, extend: (...args) => (extended++, inner.extend(...args)) };
    for (const [renewLease, expected] of [[false, 0], [true, 3]] as const) {
      extended = 0;
      const engine = new Engine({ store, leaseMs: 300, renewLease });
      const acquired = await engine.acquire(`k-${renewLease}`, undefined, 'fp');
      if (acquired.type !== 'execute') throw new Error(acquired.type);
      await vi.advanceTimersByTimeAsync(350);
      expect(extended, `renewLease ${renewLease}`).toBe(expected);
      await acquired.lease.release();
    }
    expect(() => new Engine({ store, renewLease: 'no' as never })).toThrow('Expected `renewLease` to be a boolean, got no');
  });
});

describe('the kill switch', () => {
  it('IDEMPOTENCY_KIT_DISABLED=true: nothing is covered, every request runs; said once on stderr', async () => {
    const errors = vi.spyOn(console, 'error').mockImplementation(() => undefined);
    process.env.IDEMPOTENCY_KIT_DISABLED = 'true';
    let n = 0;
    const handler = withIdempotency(async () => new Response(String(++n), { status: 201 }), { store: memoryStore(), scope: 'shared' });
    const make = () => new Request('http://x/p', { method: 'POST', headers: { 'idempotency-key': 'k' } });
    expect(await (await handler(make())).text()).toBe('1');
    expect(await (await handler(make())).text()).toBe('2');
    const layer = createIdempotency({ store: memoryStore(), scope: 'shared' });
    expect(layer.covers('POST')).toBe(false);
    // Said at most once per process (an earlier test file may have said it already).
    expect(errors.mock.calls.filter(([m]) => String(m).includes('IDEMPOTENCY_KIT_DISABLED is set')).length).toBeLessThanOrEqual(1);
    process.env.IDEMPOTENCY_KIT_DISABLED = '0';
    expect(createIdempotency({ store: memoryStore(), scope: 'shared' }).covers('POST')).toBe(true);
    errors.mockRestore();
  });
});
