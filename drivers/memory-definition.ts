/**
 * Internal: what the memory driver declares (see drivers/definition.ts). Not a package entry.
 * @module
 */
import type { DriverDefinition } from './definition.js';

export const memoryDriver: DriverDefinition = {
  name: 'memory',
  factory: 'memoryStore',
  schemes: ['memory'],
  forms: ['memory://'],
  packages: [],
  checkUrl: (url) =>
    /^memory:(\/\/)?$/i.test(url) ? undefined : { reason: 'memory:// takes no host or path', expected: 'memory:// (no host or path), got' },
};
