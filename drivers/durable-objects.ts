/**
 * Durable Objects store for Cloudflare Workers: each record lives in the SQLite storage of
 * the `IdempotencyObject` that owns its key (keys spread over `objects` objects by hash),
 * and every store call is one RPC call to that object, atomic inside it. Export the class
 * from your Worker and bind it in wrangler.toml; see docs/drivers/cloudflare.md.
 * @module
 * @example
 * import { env } from 'cloudflare:workers';
 * import { createStore } from 'idempotency-kit';
 * export { IdempotencyObject } from 'idempotency-kit/drivers/durable-objects';
 *
 * // wrangler.toml: [[durable_objects.bindings]] name = "IDEMPOTENCY", class_name = "IdempotencyObject"
 * const store = createStore(env.IDEMPOTENCY); // or durableObjectStore({ namespace: env.IDEMPOTENCY, objects: 32 })
 */
export { durableObjectStore, type DurableObjectStoreOptions } from './durable-object-store.js';
export { IdempotencyObject, type IdempotencyObjectState } from './idempotency-object.js';
export type { DurableObjectNamespaceLike } from './cloudflare-bindings.js';
