/**
 * Internal: the built-in drivers, one entry each. An entry says which URL schemes the
 * driver serves, which optional packages it needs, how to recognise a Keyv adapter it
 * runs on, how to check a URL, and how to load the driver. `createStore()` walks this
 * list; the drivers use their own entry's checks, so nothing is written twice.
 *
 * Entries only point at their driver through `load()` (a dynamic import): reading the
 * registry loads no database client. Not a package entry.
 * @module
 */
import type { IdempotencyStore } from '../src/store.js';
import { REDIS_CLUSTER_FORM, REDIS_SENTINEL_FORM, parseRedisClusterUrl, parseRedisSentinelUrl } from './redis-url.js';
import { parseUrl, redactUrl } from './utils.js';

/** A problem with a URL, worded for `createStore` (`reason`) and for the driver (`expected`). */
export interface UrlProblem {
  /** "the Redis URL has no host" */
  reason: string;
  /** "a host in the Redis URL" (the driver says "Expected <expected> <url>") */
  expected: string;
}

/** The options `createStore()` passes on, already checked. */
export interface CommonStoreOptions {
  namespace?: string;
  timeoutMs?: number;
  sweepIntervalMs?: number;
}

export interface DriverDefinition {
  /** The store's `name`, also used in messages ("the mysql store needs …"). */
  name: string;
  /** URL schemes without the colon, lower case. */
  schemes: readonly string[];
  /** The URL forms listed when `createStore()` refuses a target. */
  forms: readonly string[];
  /** Optional packages the driver needs, in the order of the install line. */
  packages: readonly string[];
  /** The Keyv adapter the driver runs on, recognised by shape (importing it would load its client). */
  adapter?: {
    /** Package name, e.g. '@keyv/redis'. */
    pkg: string;
    /** How a user builds one, e.g. 'new KeyvRedis(url)'. */
    construct: string;
    is(value: unknown): boolean;
  };
  /** What `namespace` means for this driver: a key prefix, a table, or a table that may be schema-qualified. */
  namespace?: 'prefix' | 'table' | 'qualified-table';
  /** A problem with `url` (whose scheme is one of `schemes`), if any. */
  checkUrl(url: string): UrlProblem | undefined;
  /** The driver's options from `createStore()`'s options and the source (`url`, `adapter` or `keyv`). */
  options?(common: CommonStoreOptions): Record<string, unknown>;
  /** Load the driver module (and so its client) and build the store. */
  load(): Promise<(options: Record<string, unknown>) => IdempotencyStore>;
}

/** Keyv's SQL adapters carry their dialect in `opts` and a `query()` of their own. */
const sqlAdapter = (dialect: string) => (value: unknown) => {
  const candidate = value as { query?: unknown; opts?: { dialect?: unknown } } | null;
  return typeof candidate === 'object' && candidate !== null && typeof candidate.query === 'function' && candidate.opts?.dialect === dialect;
};

const sqlOptions = (common: CommonStoreOptions) => ({
  ...(common.timeoutMs !== undefined ? { timeoutMs: common.timeoutMs } : {}),
  ...(common.namespace !== undefined ? { table: common.namespace } : {}),
  ...(common.sweepIntervalMs !== undefined ? { sweepIntervalMs: common.sweepIntervalMs } : {}),
});

/** A network URL of one of `schemes` with a host; `label` names the database in messages. */
function networkUrl(url: string, label: string): { parsed?: URL; problem?: UrlProblem } {
  const parsed = parseUrl(url);
  if (!parsed) return { problem: { reason: `it is not a valid ${label} URL`, expected: `a valid ${label} URL, got` } };
  if (!parsed.hostname && !parsed.searchParams.has('host')) {
    return { problem: { reason: `the ${label} URL has no host`, expected: `a host in the ${label} URL` } };
  }
  return { parsed };
}

export const memoryDriver: DriverDefinition = {
  name: 'memory',
  schemes: ['memory'],
  forms: ['memory://'],
  packages: [],
  checkUrl: (url) =>
    /^memory:(\/\/)?$/i.test(url) ? undefined : { reason: 'memory:// takes no host or path', expected: 'memory:// (no host or path), got' },
  load: async () => (await import('./memory.js')).memoryStore as never,
};

export const sqliteDriver: DriverDefinition = {
  name: 'sqlite',
  schemes: ['sqlite'],
  forms: ['sqlite://relative/path.db', 'sqlite:///absolute/path.db', 'sqlite://:memory:'],
  packages: ['keyv', '@keyv/sqlite'],
  adapter: { pkg: '@keyv/sqlite', construct: 'new KeyvSqlite(url)', is: sqlAdapter('sqlite') },
  namespace: 'table',
  // Not parsed with `URL`: `sqlite://:memory:` and relative paths are not valid URLs.
  checkUrl(url) {
    if (!url.startsWith('sqlite://')) {
      return {
        reason: 'a SQLite URL starts with sqlite:// followed by the file path',
        expected: '`url` to be sqlite://relative/path.db, sqlite:///absolute/path.db or sqlite://:memory:, got',
      };
    }
    const file = url.slice('sqlite://'.length);
    if (file === '' || file === '/') {
      return {
        reason: 'the SQLite URL names no file',
        expected: 'a file after sqlite:// (sqlite://relative/path.db, sqlite:///absolute/path.db or sqlite://:memory:) in',
      };
    }
    return undefined;
  },
  options: sqlOptions,
  load: async () => (await import('./sqlite.js')).sqliteStore as never,
};

export const redisDriver: DriverDefinition = {
  name: 'redis',
  schemes: ['redis', 'rediss', 'redis+cluster', 'rediss+cluster', 'redis+sentinel', 'rediss+sentinel'],
  forms: [
    'redis://[user:password@]host[:port][/db]',
    'rediss://… (TLS)',
    `${REDIS_CLUSTER_FORM} (Redis Cluster; rediss+cluster:// for TLS)`,
    `${REDIS_SENTINEL_FORM} (Redis Sentinel)`,
  ],
  packages: ['keyv', '@keyv/redis'],
  adapter: {
    pkg: '@keyv/redis',
    construct: 'new KeyvRedis(url)',
    is: (value) => {
      const candidate = value as { client?: unknown; getClient?: unknown } | null;
      return (
        typeof candidate === 'object' &&
        candidate !== null &&
        typeof candidate.getClient === 'function' &&
        typeof candidate.client === 'object' &&
        candidate.client !== null
      );
    },
  },
  namespace: 'prefix',
  checkUrl(url) {
    const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):/.exec(url)?.[1]?.toLowerCase() ?? '';
    if (scheme.endsWith('+cluster') || scheme.endsWith('+sentinel')) {
      // Several hosts: not a WHATWG URL, parsed by redis-url.ts (which loads no client).
      try {
        if (scheme.endsWith('+cluster')) parseRedisClusterUrl(url);
        else parseRedisSentinelUrl(url);
        return undefined;
      } catch (error) {
        const message = (error as Error).message;
        return { reason: message.replace(/^Expected/, 'expected'), expected: message.replace(/^Expected /, '') + ' in' };
      }
    }
    const parsed = parseUrl(url);
    if (!parsed) return { reason: 'it is not a valid Redis URL', expected: 'a valid Redis URL, got' };
    if (!parsed.hostname) return { reason: 'the Redis URL has no host', expected: 'a host in the Redis URL' };
    if (parsed.pathname !== '' && parsed.pathname !== '/' && !/^\/\d+$/.test(parsed.pathname)) {
      return {
        reason: `the Redis URL path must be a database number such as /0, got ${JSON.stringify(parsed.pathname)}`,
        expected: `the Redis URL path to be a database number (redis://host:6379/0), got ${JSON.stringify(parsed.pathname)} in`,
      };
    }
    return undefined;
  },
  options: (common) => ({
    ...(common.timeoutMs !== undefined ? { timeoutMs: common.timeoutMs } : {}),
    ...(common.namespace !== undefined ? { namespace: common.namespace } : {}),
  }),
  load: async () => (await import('./redis.js')).redisStore as never,
};

export const postgresDriver: DriverDefinition = {
  name: 'postgres',
  schemes: ['postgres', 'postgresql'],
  forms: ['postgres://user[:password]@host[:port]/database', 'postgresql://…'],
  packages: ['keyv', '@keyv/postgres'],
  adapter: { pkg: '@keyv/postgres', construct: 'new KeyvPostgres({ uri })', is: sqlAdapter('postgres') },
  namespace: 'qualified-table',
  checkUrl: (url) => networkUrl(url, 'PostgreSQL').problem,
  options: sqlOptions,
  load: async () => (await import('./postgres.js')).postgresStore as never,
};

export const mysqlDriver: DriverDefinition = {
  name: 'mysql',
  schemes: ['mysql'],
  forms: ['mysql://user[:password]@host[:port]/database (MySQL or MariaDB)'],
  packages: ['keyv', '@keyv/mysql'],
  adapter: { pkg: '@keyv/mysql', construct: 'new KeyvMysql(uri)', is: sqlAdapter('mysql') },
  namespace: 'table',
  checkUrl: (url) => networkUrl(url, 'MySQL').problem,
  options: sqlOptions,
  load: async () => (await import('./mysql.js')).mysqlStore as never,
};

/** Every built-in driver, in the order error messages list them. */
export const DRIVERS: readonly DriverDefinition[] = [memoryDriver, sqliteDriver, redisDriver, postgresDriver, mysqlDriver];

/** The driver serving a URL scheme (without the colon, any case). */
export function driverForScheme(scheme: string): DriverDefinition | undefined {
  const lower = scheme.toLowerCase();
  return DRIVERS.find((driver) => driver.schemes.includes(lower));
}

/** The driver whose Keyv adapter `value` is. */
export function driverForAdapter(value: unknown): DriverDefinition | undefined {
  return DRIVERS.find((driver) => driver.adapter?.is(value));
}

/**
 * Throw the driver's TypeError for a bad `url`: the scheme must be one of the driver's
 * and `checkUrl` must find nothing wrong. Used by the drivers' own factories.
 */
export function assertDriverUrl(driver: DriverDefinition, url: unknown, example: string): asserts url is string {
  const schemes = driver.schemes.map((s) => `${s}://`);
  const list = schemes.length === 1 ? schemes[0]! : `${schemes.slice(0, -1).join(', ')} or ${schemes.at(-1)}`;
  if (typeof url !== 'string') throw new TypeError(`Expected \`url\` to be a ${list} URL, got ${String(url)}`);
  const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):/.exec(url)?.[1]?.toLowerCase();
  if (scheme === undefined || !driver.schemes.includes(scheme)) {
    throw new TypeError(`Expected \`url\` to start with ${list}, got ${redactUrl(url)}`);
  }
  const problem = driver.checkUrl(url);
  if (problem) throw new TypeError(`Expected ${problem.expected} ${redactUrl(url)}${example ? `, e.g. ${example}` : ''}`);
}
