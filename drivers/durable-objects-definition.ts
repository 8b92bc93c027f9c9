/**
 * Internal: the Durable Objects driver's definition (docs/drivers/cloudflare.md): it takes
 * a Durable Object namespace binding, not a URL. Not a package entry.
 * @module
 */
import { isDurableObjectNamespace } from './cloudflare-bindings.js';
import type { DriverDefinition } from './definition.js';

export const durableObjectsDriver: DriverDefinition = {
  name: 'durable-objects',
  factory: 'durableObjectStore',
  // The entry also exports the Durable Object class, which loads only in workerd.
  factoryModule: './durable-object-store.js',
  schemes: [],
  forms: [],
  packages: [],
  binding: { kind: 'a Durable Object namespace bound to IdempotencyObject', option: 'namespace', is: isDurableObjectNamespace },
  // Never called: no scheme is the driver's.
  checkUrl: () => ({ reason: 'a Cloudflare binding is passed as itself, not as a URL', expected: 'a binding, got' }),
  options: (common) => ({
    ...(common.timeoutMs !== undefined ? { timeoutMs: common.timeoutMs } : {}),
    ...(common.namespace !== undefined ? { prefix: common.namespace } : {}),
  }),
};
