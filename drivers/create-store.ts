/**
 * `createStore(target)`: pick storage by a Keyv-style URL, a Keyv instance or a Keyv
 * store adapter. A driver module (and its database client) is loaded only when used, so
 * a bad target throws at once while `import 'idempotency-kit'` loads no database client.
 * @module
 * @example
 * const store = createStore(process.env.IDEMPOTENCY_STORE ?? 'sqlite://./.data/idempotency.sqlite');
 */
import type { ClaimContext, ClaimRequest, IdempotencyRecord, IdempotencyStore, MaintenanceOptions, ScanOptions, SettleListener, StoredResponse } from '../src/store.js';
import { assertInteger } from '../src/validate.js';
import { refuseKv } from './cloudflare-bindings.js';
import { DRIVERS, driverForAdapter, driverForBinding, driverForScheme, type RegisteredDriver } from './registry.js';
import { assertTableName, isModuleNotFound, missingPackages, productionPolicy, redactUrl, refuseMemoryInProduction, type InProduction } from './utils.js';

export interface CreateStoreOptions {
  /**
   * Redis: the key prefix (`<namespace>:<storage key>`). SQLite, PostgreSQL and MySQL:
   * the table name (an SQL identifier). Not used by memory.
   * @default 'idempotency-kit' (Redis), 'idempotency_kit_records' (SQL)
   */
  namespace?: string;
  /**
   * Longest wait for a connection, a command or (SQLite) another process's lock, in ms.
   * @default 2000
   */
  timeoutMs?: number;
  /**
   * SQLite, PostgreSQL and MySQL: how often expired rows are swept, in ms; 0 disables.
   * D1: how often a claim also deletes a batch of expired rows (per isolate).
   * @default 60000
   */
  sweepIntervalMs?: number;
  /**
   * Memory only (`memory://` or a Map): what to do when NODE_ENV is production, where the
   * memory store protects one process only and a restart forgets every key: `'refuse'`
   * throws `MemoryStoreInProductionError`, `'warn'` starts with a warning, `'allow'` starts
   * silently.
   * @default 'refuse'
   */
  inProduction?: InProduction;
  /** @deprecated Use `inProduction: 'warn'`; works until the next minor release. */
  allowInProduction?: boolean;
}

/** What `createStore()` accepts: a URL, a Keyv instance, a Keyv store adapter or an empty Map. */
export type StoreTarget = string | Map<string, unknown> | object;

/** The in-process store, for `memory://` and an empty Map. */
const memory = driverForScheme('memory')!;

/** The URL schemes `createStore()` understands. */
export const SUPPORTED_SCHEMES: readonly string[] = DRIVERS.flatMap((driver) => driver.schemes.map((scheme) => `${scheme}://`));

function unsupported(target: string, why: string): TypeError {
  const forms = DRIVERS.flatMap((driver) => driver.forms);
  const adapters = DRIVERS.flatMap((driver) => (driver.adapter ? [driver.adapter.pkg] : []));
  const bindings = DRIVERS.flatMap((driver) => (driver.binding ? [driver.binding.kind] : []));
  return new TypeError(
    `idempotency-kit: cannot create a store from ${target}: ${why}. ` +
      `Supported: a URL (${forms.join(', ')}); a Keyv instance over ${adapters.slice(0, -1).join(', ')} or ${adapters.at(-1)}; ` +
      'one of those adapters (new KeyvRedis(url), …); ' +
      `a platform binding or client (${bindings.join(', ')}); or an empty Map (in-process memory)`,
  );
}

/** Where a driver comes from; a missing optional package gets an install hint. */
async function importDriver<T>(driver: RegisteredDriver, load: () => Promise<T>): Promise<T> {
  try {
    return await load();
  } catch (error) {
    if (isModuleNotFound(error)) throw missingPackages(driver.name, driver.packages, error);
    throw error;
  }
}

function maintained(store: IdempotencyStore, method: 'delete' | 'stats' | 'sweep' | 'scan' | 'replaceResponse'): IdempotencyStore {
  if (typeof store[method] !== 'function') throw new Error(`idempotency-kit: the ${store.name} store has no ${method}()`);
  return store;
}

/**
 * A store that loads its driver on first use, so that `createStore()` is synchronous and
 * a bad target throws at once, while the driver's client is imported only when needed.
 */
function lazyStore(driver: RegisteredDriver, options: Record<string, unknown>): IdempotencyStore {
  let loaded: Promise<IdempotencyStore> | undefined;
  // The driver's store once loaded: the hot calls then go straight to it.
  let ready: IdempotencyStore | undefined;
  const store = () =>
    (loaded ??= importDriver(driver, async () => {
      const made = (await driver.load())(options);
      ready = made;
      return made;
    }));
  return {
    name: driver.name,
    // Once loaded, the hot calls return the driver's own promise (no async wrapper's ticks).
    claim: (key: string, request: ClaimRequest, leaseMs: number, context?: ClaimContext) =>
      ready ? ready.claim(key, request, leaseMs, context) : store().then((s) => s.claim(key, request, leaseMs, context)),
    get: (key: string) => (ready ? ready.get(key) : store().then((s) => s.get(key))),
    complete: (key: string, token: string, response: StoredResponse, ttlMs: number) =>
      ready ? ready.complete(key, token, response, ttlMs) : store().then((s) => s.complete(key, token, response, ttlMs)),
    release: async (key: string, token: string) => (await store()).release(key, token),
    extend: async (key: string, token: string, leaseMs: number) => (await store()).extend(key, token, leaseMs),
    close: async () => {
      if (loaded) await (await loaded.catch(() => undefined))?.close();
    },
    // Maintenance (optional on a store, present on every built-in driver).
    delete: async (key: string) => maintained(await store(), 'delete').delete!(key),
    stats: async (options?: MaintenanceOptions) => maintained(await store(), 'stats').stats!(options),
    sweep: async (options?: MaintenanceOptions) => maintained(await store(), 'sweep').sweep!(options),
    scan: async (options: ScanOptions) => maintained(await store(), 'scan').scan!(options),
    replaceResponse: async (key: string, token: string, response: StoredResponse) =>
      maintained(await store(), 'replaceResponse').replaceResponse!(key, token, response),
    // Wake-ups for waiting duplicates, once the driver is loaded (if it offers them).
    subscribe: (listener: SettleListener) => {
      let detach: (() => void) | undefined;
      let detached = false;
      store().then(
        (loadedStore) => {
          if (!detached && typeof loadedStore.subscribe === 'function') detach = loadedStore.subscribe(listener);
        },
        () => undefined, // the driver's calls report the failure; waiters poll
      );
      return () => {
        detached = true;
        detach?.();
      };
    },
  };
}

/** Validate a URL target synchronously; returns its driver. */
function checkUrl(target: string, options: CreateStoreOptions): RegisteredDriver {
  const shown = redactUrl(target);
  const match = /^([A-Za-z][A-Za-z0-9+.-]*):/.exec(target);
  if (!match) throw unsupported(shown, 'it is not a URL (expected scheme://…)');
  const scheme = match[1]!.toLowerCase();
  const driver = driverForScheme(scheme);
  if (!driver) throw unsupported(shown, `unknown scheme ${JSON.stringify(`${scheme}:`)}`);
  const problem = driver.checkUrl(target);
  if (problem) throw unsupported(shown, problem.reason);
  if (options.namespace !== undefined && (driver.namespace === 'table' || driver.namespace === 'qualified-table')) {
    assertTableName(`\`namespace\` (the ${scheme} table name)`, options.namespace, driver.namespace === 'qualified-table');
  }
  return driver;
}

function isKeyv(value: object): value is { store: unknown } {
  const candidate = value as { get?: unknown; set?: unknown; hooks?: unknown; opts?: unknown };
  return (
    'store' in value &&
    typeof candidate.get === 'function' &&
    typeof candidate.set === 'function' &&
    typeof candidate.hooks === 'object' &&
    typeof candidate.opts === 'object'
  );
}

function describeValue(value: unknown): string {
  if (value === null || typeof value !== 'object') return typeof value === 'string' ? JSON.stringify(value) : String(value);
  const name = (value as { constructor?: { name?: unknown } }).constructor?.name;
  return typeof name === 'string' && name !== 'Object' ? `a ${name}` : 'an object';
}

function checkOptions(options: CreateStoreOptions): void {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError(`Expected createStore options to be an object, got ${String(options)}`);
  }
  if (options.namespace !== undefined && (typeof options.namespace !== 'string' || options.namespace === '')) {
    throw new TypeError(`Expected \`namespace\` to be a non-empty string, got ${JSON.stringify(options.namespace)}`);
  }
  if (options.timeoutMs !== undefined) assertInteger('timeoutMs', options.timeoutMs, 1);
  if (options.sweepIntervalMs !== undefined) assertInteger('sweepIntervalMs', options.sweepIntervalMs, 0);
}

function driverStore(driver: RegisteredDriver, source: { url: string } | { adapter: object } | { keyv: object }, options: CreateStoreOptions) {
  return lazyStore(driver, { ...driver.options?.(options), ...source });
}

/**
 * Create a store from a URL (`sqlite://…`, `redis://…`, `postgres://…`, `mysql://…`,
 * `memory://`), a Keyv instance, a `@keyv/redis` / `@keyv/postgres` / `@keyv/sqlite` /
 * `@keyv/mysql` adapter, a Cloudflare binding (a Durable Object namespace bound to
 * `IdempotencyObject`, a D1 database; a Workers KV namespace is refused), a `DynamoDBClient`
 * (`dynamodb://table?region=…` as a URL), or an empty Map. Anything else throws a TypeError listing what is supported; there is never a
 * silent fallback to memory.
 */
export function createStore(target: StoreTarget, options: CreateStoreOptions = {}): IdempotencyStore {
  checkOptions(options);
  if (typeof target === 'string') {
    const driver = checkUrl(target, options);
    if (driver !== memory) return driverStore(driver, { url: target }, options);
    const inProduction = productionPolicy(options);
    refuseMemoryInProduction(inProduction);
    return lazyStore(driver, { inProduction });
  }
  if (typeof target !== 'object' || target === null) {
    throw unsupported(describeValue(target), 'expected a URL string, a Keyv instance or a Keyv store adapter');
  }
  if (target instanceof Map) {
    if (target.size > 0) throw unsupported('a Map', 'the Map is not empty (the memory store needs a Map of its own)');
    const map = target as Map<string, IdempotencyRecord>;
    const inProduction = productionPolicy(options);
    refuseMemoryInProduction(inProduction);
    return lazyStore(memory, { map, inProduction });
  }
  // Workers bindings are recognised by their methods; a KV namespace is refused with why.
  refuseKv(target, 'createStore()');
  const bound = driverForBinding(target);
  if (bound) {
    if (options.namespace !== undefined && bound.namespace === 'table') assertTableName(`\`namespace\` (the ${bound.name} table name)`, options.namespace, false);
    return lazyStore(bound, { ...bound.options?.(options), [bound.binding!.option]: target });
  }
  const direct = driverForAdapter(target);
  if (direct) return driverStore(direct, { adapter: target }, options);
  if (isKeyv(target)) {
    const store = target.store;
    if (store instanceof Map) {
      throw unsupported(
        'a Keyv instance',
        'it keeps data in an in-process Map. Note that new Keyv("redis://…") does not connect to Redis: it silently uses a Map. ' +
          'Pass the URL itself, new Keyv(new KeyvRedis(url)), or createStore("memory://") if in-process memory is what you want',
      );
    }
    const driver = driverForAdapter(store);
    if (!driver) {
      throw unsupported(
        `a Keyv instance over ${describeValue(store)}`,
        'that Keyv store has no atomic claim path (idempotency needs SET NX / INSERT … ON CONFLICT, which plain get/set cannot give)',
      );
    }
    return driverStore(driver, { keyv: target }, options);
  }
  throw unsupported(describeValue(target), 'it is not a Keyv instance or an atomic Keyv store adapter');
}
