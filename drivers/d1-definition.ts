/**
 * Internal: the D1 driver's definition (docs/drivers/cloudflare.md#d1-store): it takes a D1
 * database binding, not a URL; `namespace` is its table. Not a package entry.
 * @module
 */
import { isD1Database } from './cloudflare-bindings.js';
import { sqlOptions, type DriverDefinition } from './definition.js';

export const d1Driver: DriverDefinition = {
  name: 'd1',
  factory: 'd1Store',
  schemes: [],
  forms: [],
  packages: [],
  binding: { kind: 'a D1 database', option: 'database', is: isD1Database },
  namespace: 'table',
  // Never called: no scheme is the driver's.
  checkUrl: () => ({ reason: 'a Cloudflare binding is passed as itself, not as a URL', expected: 'a binding, got' }),
  options: sqlOptions,
};
