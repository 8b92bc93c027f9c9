/**
 * The client's retry policy as pure decisions (no network, no sleeps): the one module the
 * fetch client, the got hooks and the ky instance share.
 */
import { describe, expect, it } from 'vitest';
import { backoffMs, decide, isCovered, parseRetryAfter, reasonForStatus, resolvePolicy, type Outcome } from '../../client/policy.js';

const policy = resolvePolicy({ maxAttempts: 4, maxTimeMs: 10_000, minDelayMs: 100, maxDelayMs: 1000 }, { random: () => 1 });
const state = (attempt: number, elapsedMs = 0, replayable = true) => ({ attempt, elapsedMs, replayable });

describe('client policy', () => {
  it('covers POST and PATCH by default, in any case', () => {
    const p = resolvePolicy();
    expect(['POST', 'patch', 'Post'].map((m) => isCovered(p, m))).toEqual([true, true, true]);
    expect(['GET', 'PUT', 'DELETE'].map((m) => isCovered(p, m))).toEqual([false, false, false]);
  });

  it('classifies statuses: 409 with Retry-After, 429, 503 always, other 5xx only when asked, no other 4xx', () => {
    const on = resolvePolicy({ retryServerErrors: true });
    expect(reasonForStatus(policy, 409, '1')).toBe('in-progress');
    expect(reasonForStatus(policy, 409, null)).toBe('response');
    expect(reasonForStatus(policy, 429, null)).toBe('rate-limited');
    expect(reasonForStatus(policy, 503, null)).toBe('unavailable');
    expect(reasonForStatus(policy, 500, null)).toBe('response');
    expect(reasonForStatus(on, 500, null)).toBe('server-error');
    expect(reasonForStatus(on, 504, null)).toBe('server-error');
    for (const status of [200, 201, 301, 400, 401, 404, 408, 413, 422]) expect(reasonForStatus(on, status, '1'), String(status)).toBe('response');
  });

  it('parses Retry-After as delay-seconds or an HTTP-date, and ignores anything else', () => {
    const now = Date.parse('Tue, 01 Dec 2026 10:00:00 GMT');
    expect(parseRetryAfter('0', now)).toBe(0);
    expect(parseRetryAfter('120', now)).toBe(120_000);
    expect(parseRetryAfter(' 3 ', now)).toBe(3000);
    expect(parseRetryAfter('Tue, 01 Dec 2026 10:00:05 GMT', now)).toBe(5000);
    expect(parseRetryAfter('Tue, 01 Dec 2026 09:59:00 GMT', now)).toBe(0);
    for (const bad of ['', '-1', '1.5', 'soon', '2026-12-01T10:00:05Z', null, undefined]) expect(parseRetryAfter(bad, now), String(bad)).toBeUndefined();
  });

  it('backs off by doubling up to maxDelayMs, half of each wait random', () => {
    expect([1, 2, 3, 4, 5, 10].map((a) => backoffMs(policy, a))).toEqual([100, 200, 400, 800, 1000, 1000]);
    const low = resolvePolicy({ minDelayMs: 100, maxDelayMs: 1000 }, { random: () => 0 });
    expect([1, 2, 5].map((a) => backoffMs(low, a))).toEqual([50, 100, 500]);
  });

  it('decides: answers are returned, retryable outcomes wait (Retry-After first), limits stop with a code', () => {
    const net: Outcome = { reason: 'network-error' };
    expect(decide(policy, { reason: 'response', status: 422 }, state(1))).toEqual({ retry: false });
    expect(decide(policy, net, state(1))).toEqual({ retry: true, delayMs: 100 });
    expect(decide(policy, net, state(3))).toEqual({ retry: true, delayMs: 400 });
    expect(decide(policy, { reason: 'unavailable', status: 503, retryAfter: '2' }, state(1))).toEqual({ retry: true, delayMs: 2000 });
    expect(decide(policy, net, state(4))).toEqual({ retry: false, stop: 'attempts-exhausted' });
    expect(decide(policy, { reason: 'in-progress', status: 409, retryAfter: '1' }, state(1, 9000))).toEqual({ retry: false, stop: 'time-exhausted' });
    expect(decide(policy, net, state(1, 0, false))).toEqual({ retry: false, stop: 'body-not-replayable' });
    expect(decide(policy, { reason: 'aborted' }, state(1))).toEqual({ retry: false, stop: 'aborted' });
    // A final answer is returned even for a body that could not be sent again.
    expect(decide(policy, { reason: 'response', status: 201 }, state(1, 0, false))).toEqual({ retry: false });
  });
});
