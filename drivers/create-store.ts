/**
 * `createStore(target)`: pick storage by a Keyv-style URL, a Keyv instance or a Keyv
 * store adapter. A driver module (and its database client) is loaded only when used, so
 * a bad target throws at once while `import 'idempotency-kit'` loads no database client.
 * @module
 * @example
 * const store = createStore(process.env.IDEMPOTENCY_STORE ?? 'sqlite://./.data/idempotency.sqlite');
 */
import type { ClaimRequest, IdempotencyRecord, IdempotencyStore, MaintenanceOptions, StoredResponse } from '../src/store.js';
import { assertInteger } from '../src/validate.js';
import { REDIS_CLUSTER_FORM, REDIS_SENTINEL_FORM, parseRedisClusterUrl, parseRedisSentinelUrl } from './redis-url.js';

export interface CreateStoreOptions {
  /**
   * Redis: the key prefix (`<namespace>:<hash>`). SQLite and PostgreSQL: the table name
   * (an SQL identifier). Not used by memory.
   * @default 'idempotency-kit' (Redis), 'idempotency_kit_records' (SQL)
   */
  namespace?: string;
  /**
   * Longest wait for a connection, a command or (SQLite) another process's lock, in ms (S6).
   * @default 2000
   */
  timeoutMs?: number;
  /**
   * SQLite and PostgreSQL: how often expired rows are swept, in ms; 0 disables.
   * @default 60000
   */
  sweepIntervalMs?: number;
}

/** What `createStore()` accepts: a URL, a Keyv instance, a Keyv store adapter or an empty Map. */
export type StoreTarget = string | Map<string, unknown> | object;

/** The URL schemes `createStore()` understands. */
export const SUPPORTED_SCHEMES = [
  'memory://',
  'sqlite://',
  'redis://',
  'rediss://',
  'redis+cluster://',
  'rediss+cluster://',
  'redis+sentinel://',
  'rediss+sentinel://',
  'postgres://',
  'postgresql://',
] as const;

const SUPPORTED_FORMS = [
  'memory://',
  'sqlite://relative/path.db',
  'sqlite:///absolute/path.db',
  'sqlite://:memory:',
  'redis://[user:password@]host[:port][/db]',
  'rediss://… (TLS)',
  `${REDIS_CLUSTER_FORM} (Redis Cluster; rediss+cluster:// for TLS)`,
  `${REDIS_SENTINEL_FORM} (Redis Sentinel)`,
  'postgres://user[:password]@host[:port]/database',
  'postgresql://…',
];

function unsupported(target: string, why: string): TypeError {
  return new TypeError(
    `idempotency-kit: cannot create a store from ${target}: ${why}. ` +
      `Supported: a URL (${SUPPORTED_FORMS.join(', ')}); a Keyv instance over @keyv/redis, @keyv/postgres or @keyv/sqlite; ` +
      'one of those adapters (new KeyvRedis(url), …); or an empty Map (in-process memory)',
  );
}

type Kind = 'memory' | 'sqlite' | 'redis' | 'postgres';

/** Where a driver comes from; a missing optional package gets an install hint. */
async function importDriver<T>(kind: Kind, load: () => Promise<T>): Promise<T> {
  try {
    return await load();
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') {
      const packages = { memory: '', sqlite: 'keyv @keyv/sqlite', redis: 'keyv @keyv/redis', postgres: 'keyv @keyv/postgres' }[kind];
      throw new Error(`idempotency-kit: the ${kind} store needs optional packages: npm install ${packages}`, { cause: error });
    }
    throw error;
  }
}

function maintained(store: IdempotencyStore, method: 'delete' | 'stats' | 'sweep'): IdempotencyStore {
  if (typeof store[method] !== 'function') throw new Error(`idempotency-kit: the ${store.name} store has no ${method}()`);
  return store;
}

/**
 * A store that loads its driver on first use, so that `createStore()` is synchronous and
 * a bad target throws at once, while the driver's client is imported only when needed.
 */
function lazyStore(name: Kind, load: () => Promise<IdempotencyStore>): IdempotencyStore {
  let loaded: Promise<IdempotencyStore> | undefined;
  const store = () => (loaded ??= importDriver(name, load));
  return {
    name,
    claim: async (key: string, request: ClaimRequest, leaseMs: number) => (await store()).claim(key, request, leaseMs),
    get: async (key: string) => (await store()).get(key),
    complete: async (key: string, token: string, response: StoredResponse, ttlMs: number) =>
      (await store()).complete(key, token, response, ttlMs),
    release: async (key: string, token: string) => (await store()).release(key, token),
    extend: async (key: string, token: string, leaseMs: number) => (await store()).extend(key, token, leaseMs),
    close: async () => {
      if (loaded) await (await loaded.catch(() => undefined))?.close();
    },
    // Maintenance (optional on a store, present on every built-in driver).
    delete: async (key: string) => maintained(await store(), 'delete').delete!(key),
    stats: async (options?: MaintenanceOptions) => maintained(await store(), 'stats').stats!(options),
    sweep: async (options?: MaintenanceOptions) => maintained(await store(), 'sweep').sweep!(options),
  };
}

const SQL_IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

function parseUrl(target: string, scheme: string): URL {
  try {
    return new URL(target);
  } catch {
    throw unsupported(redact(target), `it is not a valid ${scheme} URL`);
  }
}

/** The URL as shown in errors: a password never reaches a log. */
function redact(target: string): string {
  return JSON.stringify(target.replace(/^([A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#@:]*:)[^/?#@]*@/, '$1***@'));
}

/** Validate a URL target synchronously; returns the driver kind. */
function checkUrl(target: string, options: CreateStoreOptions): Kind {
  const shown = redact(target);
  const match = /^([A-Za-z][A-Za-z0-9+.-]*):/.exec(target);
  if (!match) throw unsupported(shown, 'it is not a URL (expected scheme://…)');
  const scheme = match[1]!.toLowerCase();
  const sqlTable = (schemaQualified: boolean) => {
    const parts = options.namespace?.split('.') ?? [];
    if (
      options.namespace !== undefined &&
      (parts.length > (schemaQualified ? 2 : 1) || !parts.every((part) => SQL_IDENTIFIER.test(part)))
    ) {
      throw new TypeError(
        `Expected \`namespace\` (the ${scheme} table name) to be an SQL identifier (letters, digits and _${schemaQualified ? ', optionally schema.table' : ''}), got ${JSON.stringify(options.namespace)}`,
      );
    }
  };
  switch (scheme) {
    case 'memory':
      if (!/^memory:(\/\/)?$/i.test(target)) throw unsupported(shown, 'memory:// takes no host or path');
      return 'memory';
    case 'sqlite': {
      if (!target.startsWith('sqlite://')) throw unsupported(shown, 'a SQLite URL starts with sqlite:// followed by the file path');
      const file = target.slice('sqlite://'.length);
      if (file === '' || file === '/') throw unsupported(shown, 'the SQLite URL names no file');
      sqlTable(false);
      return 'sqlite';
    }
    case 'redis':
    case 'rediss': {
      const url = parseUrl(target, 'Redis');
      if (!url.hostname) throw unsupported(shown, 'the Redis URL has no host');
      if (url.pathname !== '' && url.pathname !== '/' && !/^\/\d+$/.test(url.pathname)) {
        throw unsupported(shown, `the Redis URL path must be a database number such as /0, got ${JSON.stringify(url.pathname)}`);
      }
      return 'redis';
    }
    case 'redis+cluster':
    case 'rediss+cluster':
    case 'redis+sentinel':
    case 'rediss+sentinel':
      try {
        if (scheme.endsWith('cluster')) parseRedisClusterUrl(target);
        else parseRedisSentinelUrl(target);
      } catch (error) {
        throw unsupported(shown, (error as Error).message.replace(/^Expected/, 'expected'));
      }
      return 'redis';
    case 'postgres':
    case 'postgresql': {
      const url = parseUrl(target, 'PostgreSQL');
      if (!url.hostname && !url.searchParams.has('host')) throw unsupported(shown, 'the PostgreSQL URL has no host');
      sqlTable(true);
      return 'postgres';
    }
    default:
      throw unsupported(shown, `unknown scheme ${JSON.stringify(`${scheme}:`)}`);
  }
}

type AdapterKind = 'redis' | 'postgres' | 'sqlite';

/** Which official Keyv adapter this is, by shape (importing the packages would load their clients). */
function adapterKind(value: object): AdapterKind | undefined {
  const candidate = value as { client?: unknown; getClient?: unknown; query?: unknown; opts?: { dialect?: unknown } };
  if (typeof candidate.getClient === 'function' && typeof candidate.client === 'object' && candidate.client !== null) return 'redis';
  if (typeof candidate.query === 'function' && candidate.opts?.dialect === 'postgres') return 'postgres';
  if (typeof candidate.query === 'function' && candidate.opts?.dialect === 'sqlite') return 'sqlite';
  return undefined;
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

function driverStore(kind: AdapterKind, source: { url: string } | { adapter: object } | { keyv: object }, options: CreateStoreOptions) {
  const common = {
    ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
  };
  const sql = {
    ...common,
    ...(options.namespace !== undefined ? { table: options.namespace } : {}),
    ...(options.sweepIntervalMs !== undefined ? { sweepIntervalMs: options.sweepIntervalMs } : {}),
  };
  switch (kind) {
    case 'redis':
      return lazyStore('redis', async () =>
        (await import('./redis.js')).redisStore({
          ...common,
          ...(options.namespace !== undefined ? { namespace: options.namespace } : {}),
          ...(source as object),
        }),
      );
    case 'postgres':
      return lazyStore('postgres', async () => (await import('./postgres.js')).postgresStore({ ...sql, ...(source as object) }));
    case 'sqlite':
      return lazyStore('sqlite', async () => (await import('./sqlite.js')).sqliteStore({ ...sql, ...(source as object) }));
  }
}

/**
 * Create a store from a URL (`sqlite://…`, `redis://…`, `postgres://…`, `memory://`), a
 * Keyv instance, a `@keyv/redis` / `@keyv/postgres` / `@keyv/sqlite` adapter, or an empty
 * Map. Anything else throws a TypeError listing what is supported; there is never a
 * silent fallback to memory.
 */
export function createStore(target: StoreTarget, options: CreateStoreOptions = {}): IdempotencyStore {
  checkOptions(options);
  if (typeof target === 'string') {
    const kind = checkUrl(target, options);
    if (kind === 'memory') return lazyStore('memory', async () => (await import('./memory.js')).memoryStore());
    return driverStore(kind, { url: target }, options);
  }
  if (typeof target !== 'object' || target === null) {
    throw unsupported(describeValue(target), 'expected a URL string, a Keyv instance or a Keyv store adapter');
  }
  if (target instanceof Map) {
    if (target.size > 0) throw unsupported('a Map', 'the Map is not empty (the memory store needs a Map of its own)');
    const map = target as Map<string, IdempotencyRecord>;
    return lazyStore('memory', async () => (await import('./memory.js')).memoryStore({ map }));
  }
  const direct = adapterKind(target);
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
    const kind = typeof store === 'object' && store !== null ? adapterKind(store) : undefined;
    if (!kind) {
      throw unsupported(
        `a Keyv instance over ${describeValue(store)}`,
        'that Keyv store has no atomic claim path (idempotency needs SET NX / INSERT … ON CONFLICT, which plain get/set cannot give)',
      );
    }
    return driverStore(kind, { keyv: target }, options);
  }
  throw unsupported(describeValue(target), 'it is not a Keyv instance or an atomic Keyv store adapter');
}
