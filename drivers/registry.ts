/**
 * Internal: the built-in drivers, one line each: the driver's definition (its URL
 * schemes, optional packages, Keyv adapter's shape and URL check, in
 * `drivers/<name>-definition.ts`) and how to load it. `createStore()` walks this list.
 *
 * The list is not written by hand: `npm run sync-entries` writes it from entries.ts (every
 * entry `./drivers/<name>` is a driver), in the entries' order, and test/entries.test.ts
 * fails while it is out of date. Only the two marked regions are written.
 *
 * A driver is reached only through its `load()` (a dynamic import): reading the registry
 * loads no database client, and no driver imports the registry back. Not a package entry.
 * @module
 */
import type { IdempotencyStore } from '../src/store.js';
import type { DriverDefinition } from './definition.js';
// <drivers: imports> written by `npm run sync-entries` from entries.ts
import { d1Driver } from './d1-definition.js';
import { durableObjectsDriver } from './durable-objects-definition.js';
import { dynamodbDriver } from './dynamodb-definition.js';
import { memoryDriver } from './memory-definition.js';
import { mysqlDriver } from './mysql-definition.js';
import { postgresDriver } from './postgres-definition.js';
import { redisDriver } from './redis-definition.js';
import { sqliteDriver } from './sqlite-definition.js';
// </drivers: imports>

/** A driver's factory as `createStore()` calls it, with the options it built. */
export type StoreFactory = (options: Record<string, unknown>) => IdempotencyStore;

/** A built-in driver: its definition, and how to load it. */
export interface RegisteredDriver extends DriverDefinition {
  /** Load the driver module (and so its client) and return its factory. */
  load(): Promise<StoreFactory>;
}

const registered = (definition: DriverDefinition, load: () => Promise<unknown>): RegisteredDriver => ({
  ...definition,
  load: load as () => Promise<StoreFactory>,
});

/** Every built-in driver, in the order error messages list them. */
export const DRIVERS: readonly RegisteredDriver[] = [
  // <drivers: list> written by `npm run sync-entries` from entries.ts
  registered(memoryDriver, async () => (await import('./memory.js')).memoryStore),
  registered(sqliteDriver, async () => (await import('./sqlite.js')).sqliteStore),
  registered(redisDriver, async () => (await import('./redis.js')).redisStore),
  registered(postgresDriver, async () => (await import('./postgres.js')).postgresStore),
  registered(mysqlDriver, async () => (await import('./mysql.js')).mysqlStore),
  registered(durableObjectsDriver, async () => (await import('./durable-object-store.js')).durableObjectStore),
  registered(d1Driver, async () => (await import('./d1.js')).d1Store),
  registered(dynamodbDriver, async () => (await import('./dynamodb.js')).dynamodbStore),
  // </drivers: list>
];

/** The driver serving a URL scheme (without the colon, any case). */
export function driverForScheme(scheme: string): RegisteredDriver | undefined {
  const lower = scheme.toLowerCase();
  return DRIVERS.find((driver) => driver.schemes.includes(lower));
}

/** The driver that takes `value` as its binding (a Cloudflare Durable Object namespace, a D1 database). */
export function driverForBinding(value: unknown): RegisteredDriver | undefined {
  return DRIVERS.find((driver) => driver.binding?.is(value));
}

/** The driver whose Keyv adapter `value` is. */
export function driverForAdapter(value: unknown): RegisteredDriver | undefined {
  return DRIVERS.find((driver) => driver.adapter?.is(value));
}
