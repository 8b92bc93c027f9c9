/**
 * Stores the conformance suite wraps around or stands in for the real one: counting the
 * calls an app makes, and a store that never answers. Web standards only: the suite's
 * apps in workerd (test/cloudflare/) use them too.
 */
import type { IdempotencyStore } from '../../src/store.js';

export type StoreMethod = 'claim' | 'get' | 'complete' | 'release' | 'extend';

/** `store`, counting its calls per method in `calls`. */
export function countingStore(store: IdempotencyStore, calls: Record<StoreMethod, number>): IdempotencyStore {
  const count =
    <A extends unknown[], R>(method: StoreMethod, fn: (...args: A) => Promise<R>) =>
    (...args: A): Promise<R> => {
      calls[method]++;
      return fn(...args);
    };
  return {
    name: store.name,
    claim: count('claim', store.claim.bind(store)),
    get: count('get', store.get.bind(store)),
    complete: count('complete', store.complete.bind(store)),
    release: count('release', store.release.bind(store)),
    extend: count('extend', store.extend.bind(store)),
    close: () => store.close(),
  };
}

/** A store whose calls never settle (the layer's own timeout must answer). */
export function hangingStore(): IdempotencyStore {
  const hang = () => new Promise<never>(() => {});
  return { name: 'hanging', claim: hang, get: hang, complete: hang, release: hang, extend: hang, close: async () => {} };
}
