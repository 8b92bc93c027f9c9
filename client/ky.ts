/**
 * The client policy for ky: ky sends through `createIdempotentFetch`, so every ky call gets
 * one Idempotency-Key and the same retries as the fetch client.
 * @module
 * @example
 * import ky from 'ky';
 * import { idempotentKy } from 'idempotency-kit/client/ky';
 *
 * const api = idempotentKy(ky, { maxAttempts: 5 });
 * const order = await api.post('https://api.example.com/orders', { json: { sku: 'A1' } }).json();
 */
import type { KyInstance } from 'ky';
import { createIdempotentFetch, type IdempotentFetchOptions } from './index.js';
import { assertExtendable, type ExtendableClient } from './policy.js';

export type { IdempotentFetchOptions as IdempotentKyOptions } from './index.js';

/**
 * Extend a ky instance so that its requests go through {@link createIdempotentFetch}. ky's own
 * retry and timeout are turned off (one loop, one clock: `maxAttempts`, `timeoutMs` and
 * `maxTimeMs` apply); ky's hooks, `json()`, prefixUrl and HTTPError for a final 4xx/5xx
 * answer work as usual. When the policy gives up, the call rejects with
 * IdempotentRequestError. Pass `fetch` here, not to ky, to send through another fetch.
 */
export function idempotentKy<T extends ExtendableClient>(ky: T, options: IdempotentFetchOptions = {}): T {
  assertExtendable('ky', ky);
  return (ky as unknown as KyInstance).extend({ fetch: createIdempotentFetch(options), retry: 0, timeout: false }) as unknown as T;
}
