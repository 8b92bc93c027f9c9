/**
 * Internal: what a driver declares about itself (`DriverDefinition`), and the checks the
 * definitions share. Each driver's definition lives in its own small module beside it
 * (`drivers/<name>-definition.ts`), imported by the driver (for its URL check, its
 * packages and its Keyv adapter's shape) and by the registry (for `createStore()`), so
 * that neither imports the other; `npm run sync-entries` finds it by that name. Loads no database client. Not a package entry.
 * @module
 */
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
  /** The store's `name`, also used in messages ("the mysql store needs …"); its entry is `./drivers/<name>`. */
  name: string;
  /** The driver module's export that makes the store (`redisStore`), loaded only when a target needs it. */
  factory: string;
  /**
   * The module exporting `factory`, from drivers/ (`./durable-object-store.js`), when it is
   * not the driver's entry: an entry that also loads what Node cannot (workerd's modules).
   */
  factoryModule?: string;
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
  /**
   * A platform binding the driver takes instead of a URL (a Cloudflare Durable Object
   * namespace, a D1 database), recognised by shape; `option` is the driver option it goes in.
   */
  binding?: { kind: string; option: string; is(value: unknown): boolean };
  /** What `namespace` means for this driver: a key prefix, a table, or a table that may be schema-qualified. */
  namespace?: 'prefix' | 'table' | 'qualified-table';
  /** A problem with `url` (whose scheme is one of `schemes`), if any. */
  checkUrl(url: string): UrlProblem | undefined;
  /** The driver's options from `createStore()`'s options and the source (`url`, `adapter` or `keyv`). */
  options?(common: CommonStoreOptions): Record<string, unknown>;
}

/** Keyv's SQL adapters carry their dialect in `opts` and a `query()` of their own. */
export const sqlAdapter = (dialect: string) => (value: unknown) => {
  const candidate = value as { query?: unknown; opts?: { dialect?: unknown } } | null;
  return typeof candidate === 'object' && candidate !== null && typeof candidate.query === 'function' && candidate.opts?.dialect === dialect;
};

/** `createStore()`'s options as the SQL drivers name them. */
export const sqlOptions = (common: CommonStoreOptions) => ({
  ...(common.timeoutMs !== undefined ? { timeoutMs: common.timeoutMs } : {}),
  ...(common.namespace !== undefined ? { table: common.namespace } : {}),
  ...(common.sweepIntervalMs !== undefined ? { sweepIntervalMs: common.sweepIntervalMs } : {}),
});

/** A network URL of one of `schemes` with a host; `label` names the database in messages. */
export function networkUrl(url: string, label: string): { parsed?: URL; problem?: UrlProblem } {
  const parsed = parseUrl(url);
  if (!parsed) return { problem: { reason: `it is not a valid ${label} URL`, expected: `a valid ${label} URL, got` } };
  if (!parsed.hostname && !parsed.searchParams.has('host')) {
    return { problem: { reason: `the ${label} URL has no host`, expected: `a host in the ${label} URL` } };
  }
  return { parsed };
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
