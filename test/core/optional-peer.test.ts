/** Optional peers (src/optional-peer.ts): the application's copy when installed, null when not, resolved once. */
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { optionalPeer } from '../../src/optional-peer.js';

describe('optional peers', () => {
  it('an installed package is the one the application would require; resolved once', () => {
    const load = optionalPeer<typeof import('@opentelemetry/api')>('@opentelemetry/api');
    const first = load();
    expect(first).toBe(createRequire(import.meta.url)('@opentelemetry/api'));
    expect(typeof first!.trace.getTracer).toBe('function');
    expect(load()).toBe(first);
  });

  it('a package that is not installed is null, every time, without throwing', () => {
    const load = optionalPeer('@idempotency-kit/not-installed-anywhere');
    expect(load()).toBeNull();
    expect(load()).toBeNull();
  });
});
