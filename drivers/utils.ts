/**
 * Internal: what every driver needs and none should write again: option and URL checks,
 * password masking, the Keyv adapter inputs, loading an optional package with an install
 * hint, the claim-retry and sweep loops. Loads no database client. Not a package entry.
 * @module
 */
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import { warnDeprecated } from '../src/deprecation.js';
import { describeValue } from '../src/validate.js';
import { MemoryStoreInProductionError } from '../src/errors.js';
import type { ClaimResult, IdempotencyRecord, SettleListener } from '../src/store.js';

/** The URL as shown in errors (JSON-quoted): a password never reaches a log. */
export function redactUrl(url: unknown): string {
  return typeof url === 'string'
    ? JSON.stringify(url.replace(/^([A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#@:]*:)[^/?#@]*@/, '$1***@'))
    : String(url);
}

/** `new URL(text)`, or undefined when it is not a valid URL. */
export function parseUrl(text: string): URL | undefined {
  try {
    return new URL(text);
  } catch {
    return undefined;
  }
}

const SQL_IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

/** Whether `value` is a plain SQL identifier, or `schema.table` when `qualified`. */
function isSqlTableName(value: unknown, qualified: boolean): value is string {
  const parts = typeof value === 'string' ? value.split('.') : [];
  return parts.length >= 1 && parts.length <= (qualified ? 2 : 1) && parts.every((part) => SQL_IDENTIFIER.test(part));
}

/**
 * Throw unless `value` is a table name the SQL drivers can quote safely. `option` names
 * the option in the message, e.g. "`table`".
 */
export function assertTableName(option: string, value: unknown, qualified: boolean): asserts value is string {
  if (!isSqlTableName(value, qualified)) {
    throw new TypeError(
      `Expected ${option} to be an SQL identifier (letters, digits and _${qualified ? ', optionally schema.table' : ''}), got ${JSON.stringify(value)}`,
    );
  }
}

/**
 * The records table of the SQLite-dialect stores (SQLite, D1, the Durable Object's own
 * database): one row per record, the key as primary key, an index on the end
 * time for the sweep. `table`: an SQL identifier (checked by the caller).
 */
export function sqliteRecordsSchema(table: string): string[] {
  return [
    `CREATE TABLE IF NOT EXISTS "${table}" (
      key TEXT PRIMARY KEY,
      state TEXT NOT NULL CHECK (state IN ('processing', 'completed')),
      fingerprint TEXT NOT NULL,
      token TEXT NOT NULL,
      created_at INTEGER NOT NULL,
      expires_at INTEGER NOT NULL,
      status INTEGER,
      headers TEXT,
      body BLOB
    ) WITHOUT ROWID`,
    `CREATE INDEX IF NOT EXISTS "${table}_expires_at_idx" ON "${table}" (expires_at)`,
  ];
}

/** Whether a record is still in force at `now` (lease or replay window not ended). */
export function isLive(record: IdempotencyRecord, now: number): boolean {
  return record.state === 'processing' ? record.leaseUntil > now : record.expiresAt > now;
}

/**
 * The key as an SQL driver stores it. The engine hands every store a SHA-256 of (scope,
 * key) in base64url, which is stored as it is, so a row can be found from the key the
 * engine computed. Any other text (a caller using the store directly) is replaced by
 * `~` and its SHA-256: it then fits the column whatever its length, NUL bytes or
 * collation, and cannot equal an engine key (those never contain `~`).
 */
export function sqlKey(key: string): string {
  return /^[A-Za-z0-9_-]{1,86}$/.test(key) ? key : `~${createHash('sha256').update(key).digest('base64url')}`;
}

/** The body bytes as a Buffer over the same memory (what SQL clients bind as a blob). */
export function bodyBuffer(body: Uint8Array | null): Buffer | null {
  return body === null ? null : Buffer.from(body.buffer, body.byteOffset, body.byteLength);
}

/** The error for an optional package that is not installed, with the line that installs it. */
export function missingPackages(store: string, packages: readonly string[], cause: unknown): Error {
  return new Error(`idempotency-kit: the ${store} store needs optional packages: npm install ${packages.join(' ')}`, { cause });
}

export function isModuleNotFound(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND';
}

/**
 * Load `name` as installed with `viaPackage` (its dependency, e.g. `pg` under
 * `@keyv/postgres`), resolved from that package's location so it is found under any
 * package manager layout and never bundled. A missing package gets the install line.
 */
export function requireVia<T>(store: string, packages: readonly string[], viaPackage: string, name: string): T {
  const here = typeof __filename === 'string' ? __filename : import.meta.url;
  try {
    const via = createRequire(here).resolve(viaPackage);
    return createRequire(via)(name) as T;
  } catch (error) {
    if (isModuleNotFound(error)) throw missingPackages(store, packages, error);
    throw error;
  }
}

export interface KeyvInputOptions {
  url?: string;
  adapter?: unknown;
  keyv?: unknown;
}

/** Throw unless exactly one of `url`, `adapter` and `keyv` is given. */
export function assertOneSource(options: KeyvInputOptions): void {
  const given = [options.url, options.adapter, options.keyv].filter((v) => v !== undefined).length;
  if (given !== 1) throw new TypeError('Expected exactly one of `url`, `adapter` or `keyv`');
}

/**
 * The driver's Keyv adapter from `adapter`, or from the store of a `keyv` instance; a
 * TypeError naming the package and how to build one otherwise.
 */
export function adapterFrom<T>(
  options: KeyvInputOptions,
  adapter: { pkg: string; construct: string; is(value: unknown): boolean },
): T {
  const candidate = options.adapter ?? (options.keyv as { store?: unknown } | undefined)?.store;
  if (adapter.is(candidate)) return candidate as T;
  throw new TypeError(
    options.adapter === undefined
      ? `Expected \`keyv\` to be a Keyv instance over a ${adapter.pkg} adapter (new Keyv(${adapter.construct}))`
      : `Expected \`adapter\` to be a ${adapter.pkg} adapter (${adapter.construct})`,
  );
}

/**
 * Run `attempt` until it settles, at most 5 times in all (`tried`: attempts the caller
 * already made). An attempt returns undefined when the claim lost to a record that was
 * gone again by the time it was read (released or expired in between): the key is then
 * free and the claim is tried again.
 */
export async function claimUntilSettled(store: string, attempt: () => Promise<ClaimResult | undefined>, tried = 0): Promise<ClaimResult> {
  for (let i = tried; i < 5; i++) {
    const result = await attempt();
    if (result) return result;
  }
  throw new Error(`idempotency-kit: ${store} claim did not settle after 5 attempts (the key is churning)`);
}

/**
 * One sweep: delete expired rows in batches of `batchSize` (each batch one short
 * statement, so a sweep never holds locks for long), at most 10 batches per run.
 * `deleteBatch` returns how many rows it deleted.
 */
export async function sweepInBatches(deleteBatch: () => Promise<number>, batchSize: number, stopped: () => boolean): Promise<void> {
  for (let batch = 0; batch < 10 && !stopped(); batch++) {
    if ((await deleteBatch()) < batchSize) return;
  }
}

/**
 * The waiters a store's wake-up feed serves: whether the feed is live (told to each
 * listener as `ready` / `down`), settles fanned out to all, and a late subscriber told
 * `ready` when the feed already is. A listener's bug never stops the feed.
 */
export function settleListeners(): {
  add(listener: SettleListener): () => void;
  settled(key: string, record?: IdempotencyRecord | null): void;
  setLive(value: boolean): void;
  readonly live: boolean;
  clear(): void;
} {
  const listeners = new Set<SettleListener>();
  let live = false;
  const each = (call: (listener: SettleListener) => void) => {
    for (const listener of listeners) {
      try {
        call(listener);
      } catch {
        // a listener's bug must not stop the feed
      }
    }
  };
  return {
    add(listener) {
      listeners.add(listener);
      if (live) queueMicrotask(() => listeners.has(listener) && listener.ready());
      return () => {
        listeners.delete(listener);
      };
    },
    settled: (key, record) => each((listener) => listener.settled(key, record)),
    setLive(value) {
      if (live === value) return;
      live = value;
      each((listener) => (value ? listener.ready() : listener.down()));
    },
    get live() {
      return live;
    },
    clear: () => listeners.clear(),
  };
}

/** One connection of a wake-up feed, as {@link reconnectingFeed} opens it. */
export interface FeedLink {
  /** Settles once it is connected and subscribed (messages published from then on arrive); rejects if that failed. */
  ready: Promise<void>;
  /** End it (best effort; never rejects). */
  end(): unknown;
}

/** What a link reports to its feed. */
export interface FeedControl {
  /** A wake-up arrived. */
  settled(key: string, record?: IdempotencyRecord | null): void;
  /** Delivery stopped or resumed on this link without it being replaced. */
  setLive(live: boolean): void;
  /** The link is gone: it is ended, and a fresh one opens after a backoff (0.1 s doubling, at most 5 s). */
  drop(): void;
}

/**
 * A store's wake-up feed over one connection at a time, opened on the first `subscribe`
 * by `open` (undefined, or a throw: no feed, waiters poll). A dropped link is replaced
 * with backoff; its failures only make waiters poll, never fail a call. Reports from a
 * link that was replaced are ignored.
 */
export function reconnectingFeed(open: (control: FeedControl) => FeedLink | undefined): {
  subscribe: (listener: SettleListener) => () => void;
  close: () => Promise<void>;
} {
  const listeners = settleListeners();
  let link: FeedLink | undefined;
  let closed = false;
  let retry: NodeJS.Timeout | undefined;
  let attempt = 0;
  const start = () => {
    if (closed || link || retry) return;
    let current: FeedLink | undefined;
    const control: FeedControl = {
      settled: listeners.settled,
      setLive(live) {
        if (current !== undefined && link === current) listeners.setLive(live);
      },
      drop() {
        if (current === undefined || link !== current) return;
        link = undefined;
        listeners.setLive(false);
        current.end();
        if (closed) return;
        retry = setTimeout(() => {
          retry = undefined;
          start();
        }, Math.min(100 * 2 ** attempt++, 5000));
        retry.unref();
      },
    };
    try {
      current = open(control);
    } catch {
      return;
    }
    if (current === undefined) return;
    link = current;
    current.ready.then(
      () => {
        if (link !== current) return;
        attempt = 0;
        listeners.setLive(true);
      },
      () => control.drop(),
    );
  };
  return {
    subscribe(listener) {
      const unsubscribe = listeners.add(listener);
      start();
      return unsubscribe;
    },
    async close() {
      closed = true;
      if (retry) clearTimeout(retry);
      listeners.setLive(false);
      listeners.clear();
      const current = link;
      link = undefined;
      await current?.end();
    },
  };
}

/** What the memory store does when NODE_ENV is production: refuse to start, start with a warning, or start silently. */
export type InProduction = 'refuse' | 'warn' | 'allow';

/**
 * The memory store's production switch, `inProduction`, checked; the deprecated
 * `allowInProduction` / `warnInProduction` pair is read too (with a warning) and may not be
 * mixed with it.
 */
export function productionPolicy(options: { inProduction?: unknown; allowInProduction?: unknown; warnInProduction?: unknown }): InProduction {
  const { inProduction, allowInProduction, warnInProduction } = options;
  if (allowInProduction === undefined && warnInProduction === undefined) {
    if (inProduction === undefined) return 'refuse';
    if (inProduction === 'refuse' || inProduction === 'warn' || inProduction === 'allow') return inProduction;
    throw new TypeError(`Expected \`inProduction\` to be 'refuse', 'warn' or 'allow', got ${describeValue(inProduction)}`);
  }
  if (inProduction !== undefined) {
    throw new TypeError('Expected `inProduction` alone, got it with `allowInProduction` / `warnInProduction` (its deprecated names)');
  }
  for (const [name, value] of [['allowInProduction', allowInProduction], ['warnInProduction', warnInProduction]] as const) {
    if (value !== undefined && typeof value !== 'boolean') throw new TypeError(`Expected \`${name}\` to be a boolean, got ${describeValue(value)}`);
  }
  warnDeprecated('the `allowInProduction` and `warnInProduction` options', "`inProduction: 'refuse' | 'warn' | 'allow'`");
  if (allowInProduction !== true) return 'refuse';
  return warnInProduction === false ? 'allow' : 'warn';
}

/**
 * The memory store's refusal in a production process (`NODE_ENV=production`) unless
 * `inProduction` says otherwise: it protects one process, and a restart forgets every key.
 * Checked where the store is made (memoryStore) and where `createStore()` is given
 * `memory://` or a Map, so the refusal comes at start-up, not at the first request.
 */
export function refuseMemoryInProduction(policy: InProduction): void {
  if (policy !== 'refuse' || globalThis.process?.env?.NODE_ENV !== 'production') return;
  throw new MemoryStoreInProductionError(
    'idempotency-kit: refusing the memory store with NODE_ENV=production: it keeps keys in this one process only, ' +
      'so a second instance runs a retried request again and a restart or deploy forgets every key (a retry after it ' +
      'runs the payment again). Use a shared store: createStore("redis://…"), "postgres://…", "mysql://…", or ' +
      '"sqlite://./idempotency.db" for one machine. To keep memory anyway (one process, keys lost on restart), pass ' +
      "`inProduction: 'warn'` (memoryStore({ inProduction: 'warn' }) or createStore(\"memory://\", { inProduction: 'warn' })).",
  );
}

/** The scan options checked (precise TypeErrors), for every driver's `scan`. */
export function checkScanOptions(options: unknown): { cursor: string | undefined; limit: number } {
  if (typeof options !== 'object' || options === null) throw new TypeError(`Expected the scan options to be an object { cursor?, limit }, got ${options === null ? 'null' : typeof options}`);
  const { cursor, limit } = options as { cursor?: unknown; limit?: unknown };
  if (!Number.isInteger(limit) || (limit as number) < 1) throw new TypeError(`Expected \`limit\` to be a positive integer, got ${JSON.stringify(limit)}`);
  if (cursor !== undefined && (typeof cursor !== 'string' || cursor === '')) {
    throw new TypeError(`Expected \`cursor\` to be a cursor a previous scan returned, got ${JSON.stringify(cursor)}`);
  }
  return { cursor: cursor as string | undefined, limit: limit as number };
}
