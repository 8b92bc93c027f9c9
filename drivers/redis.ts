/**
 * Redis store over `@keyv/redis`: one key per record, atomic claims with `SET NX PX`,
 * compare-and-set by token in Lua. Safe across processes and hosts (S5), and on Redis
 * Cluster (every script touches a single key).
 * @module
 * @example
 * import { redisStore } from 'idempotency-kit/drivers/redis';
 * const store = redisStore({ url: 'redis://127.0.0.1:6379/0' });
 */
import { createHash } from 'node:crypto';
import KeyvRedis from '@keyv/redis';
import type { Keyv } from 'keyv';
import {
  decodeRecord,
  encodeRecord,
  type ClaimRequest,
  type ClaimResult,
  type IdempotencyRecord,
  type IdempotencyStore,
  type MaintenanceOptions,
  type ProcessingRecord,
  type StoreStats,
  type StoredResponse,
} from '../src/store.js';
import { withTimeout } from '../src/timers.js';
import { adapterFrom } from './keyv-input.js';
import { assertInteger } from '../src/validate.js';

export interface RedisStoreOptions {
  /**
   * Where Redis is: `redis://[[user][:password]@]host[:port][/db]`, or `rediss://…` for
   * TLS. Ignored when `adapter` or `keyv` is given.
   * @default 'redis://127.0.0.1:6379'
   */
  url?: string;
  /**
   * An existing `@keyv/redis` adapter: the store runs its scripts on the adapter's own
   * client (plain, cluster or sentinel) and leaves it open on `close()`.
   * @default undefined
   */
  adapter?: KeyvRedis<unknown>;
  /**
   * A `Keyv` instance whose store is a `@keyv/redis` adapter (same as passing `adapter`).
   * @default undefined
   */
  keyv?: Keyv;
  /**
   * Prefix of every key: records live at `<namespace>:<sha256 of the storage key>`.
   * @default 'idempotency-kit'
   */
  namespace?: string;
  /**
   * Longest wait, in ms, for the connection or for one command. Past it the call rejects
   * (S6); while Redis is known to be down, calls reject at once.
   * @default 2000
   */
  timeoutMs?: number;
}

/** The parts of a node-redis client (plain, cluster or sentinel) the store uses. */
interface ScriptClient {
  readonly isOpen: boolean;
  readonly isReady?: boolean;
  connect(): Promise<unknown>;
  get(key: string): Promise<unknown>;
  evalSha(sha: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
  eval(script: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
  on(event: string, listener: (...args: unknown[]) => void): unknown;
  off(event: string, listener: (...args: unknown[]) => void): unknown;
  close?(): Promise<unknown>;
  destroy?(): unknown;
  unref?(): unknown;
  // Maintenance only (the command line): plain clients have them; a cluster's SCAN
  // would see one node, so stats refuses clusters.
  del?(key: string): Promise<number>;
  scan?(cursor: string, options: { MATCH: string; COUNT: number }): Promise<{ cursor: string | number; keys: string[] }>;
  mGet?(keys: string[]): Promise<(string | null)[]>;
}

class Script {
  readonly sha: string;
  constructor(readonly source: string) {
    this.sha = createHash('sha1').update(source).digest('hex');
  }
}

// Every script reads and writes KEYS[1] only, so it runs on any Cluster node owning the slot.
// Record values are the JSON of encodeRecord() (src/store.ts); the scripts read `s`
// (state) and `t` (token) and rebuild the JSON by concatenation, so numbers and the
// stored response are never re-encoded by cjson.

/** ARGV: processing JSON, leaseMs. Returns '' when claimed, else the live record. */
const CLAIM = new Script(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return '' end
local current = redis.call('GET', KEYS[1])
if current then return current end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return ''
`);

const OWNED = `
local current = redis.call('GET', KEYS[1])
if not current then return 0 end
local record = cjson.decode(current)
if record.s ~= 'p' or record.t ~= ARGV[1] then return 0 end
`;

/** ARGV: token, response JSON, expiresAt, ttlMs. */
const COMPLETE = new Script(`${OWNED}
redis.call('SET', KEYS[1], '{"s":"c","f":' .. cjson.encode(record.f) .. ',"t":' .. cjson.encode(record.t)
  .. ',"c":' .. string.format('%.0f', record.c) .. ',"e":' .. ARGV[3] .. ',"r":' .. ARGV[2] .. '}', 'PX', ARGV[4])
return 1
`);

/** ARGV: token. */
const RELEASE = new Script(`${OWNED}
redis.call('DEL', KEYS[1])
return 1
`);

/** ARGV: token, leaseMs, leaseUntil. */
const EXTEND = new Script(`${OWNED}
redis.call('SET', KEYS[1], '{"s":"p","f":' .. cjson.encode(record.f) .. ',"t":' .. cjson.encode(record.t)
  .. ',"c":' .. string.format('%.0f', record.c) .. ',"l":' .. ARGV[3] .. '}', 'PX', ARGV[2])
return 1
`);

/** The `r` member of a completed record, exactly as encodeRecord() writes it. */
function responseJson(response: StoredResponse): string {
  return JSON.stringify({
    s: response.status,
    h: response.headers,
    b: response.body === null ? null : Buffer.from(response.body.buffer, response.body.byteOffset, response.body.byteLength).toString('base64'),
  });
}

function isLive(record: IdempotencyRecord, now: number): boolean {
  return record.state === 'processing' ? record.leaseUntil > now : record.expiresAt > now;
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message || error.name : String(error);
}

const timedOut = (what: string, ms: number) => `idempotency-kit: Redis ${what} timed out after ${ms} ms`;

function isRedisAdapter(value: unknown): value is KeyvRedis<unknown> {
  const candidate = value as { client?: unknown; getClient?: unknown } | null;
  return typeof candidate === 'object' && candidate !== null && typeof candidate.getClient === 'function' && typeof candidate.client === 'object';
}

/** The URL as shown in errors: a password never reaches a log. */
function shown(url: unknown): string {
  return typeof url === 'string'
    ? JSON.stringify(url.replace(/^([A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#@:]*:)[^/?#@]*@/, '$1***@'))
    : String(url);
}

function checkRedisUrl(url: unknown): asserts url is string {
  if (typeof url !== 'string') throw new TypeError(`Expected \`url\` to be a redis:// or rediss:// URL, got ${String(url)}`);
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new TypeError(`Expected \`url\` to be a redis:// or rediss:// URL, got ${shown(url)}`);
  }
  if (parsed.protocol !== 'redis:' && parsed.protocol !== 'rediss:') {
    throw new TypeError(`Expected \`url\` to start with redis:// or rediss://, got ${shown(url)}`);
  }
  if (!parsed.hostname) throw new TypeError(`Expected a host in the Redis URL ${shown(url)}, e.g. redis://127.0.0.1:6379`);
  if (parsed.pathname !== '' && parsed.pathname !== '/' && !/^\/\d+$/.test(parsed.pathname)) {
    throw new TypeError(
      `Expected the Redis URL path to be a database number (redis://host:6379/0), got ${JSON.stringify(parsed.pathname)} in ${shown(url)}`,
    );
  }
}

/** Create a Redis store. */
export function redisStore(options: RedisStoreOptions = {}): IdempotencyStore {
  const namespace = options.namespace ?? 'idempotency-kit';
  const timeoutMs = options.timeoutMs ?? 2000;
  if (typeof namespace !== 'string' || namespace === '') {
    throw new TypeError(`Expected \`namespace\` to be a non-empty string, got ${JSON.stringify(namespace)}`);
  }
  assertInteger('timeoutMs', timeoutMs, 1);
  if ([options.url, options.adapter, options.keyv].filter((v) => v !== undefined).length > 1) {
    throw new TypeError('Expected only one of `url`, `adapter` or `keyv`');
  }

  let adapter: KeyvRedis<unknown>;
  const owned = options.adapter === undefined && options.keyv === undefined;
  if (owned) {
    const url = options.url ?? 'redis://127.0.0.1:6379';
    checkRedisUrl(url);
    adapter = new KeyvRedis(
      {
        url,
        // Reject instead of queueing while disconnected (S6), and keep reconnecting in
        // the background with a short, capped backoff.
        disableOfflineQueue: true,
        socket: { connectTimeout: timeoutMs, reconnectStrategy: (retries: number) => Math.min(50 * 2 ** retries, 1000) },
      },
      { throwOnErrors: true, throwOnConnectError: true, connectionTimeout: timeoutMs },
    );
    // The adapter re-emits client errors; the store reports them through its calls.
    adapter.on('error', () => undefined);
  } else {
    adapter = adapterFrom(options, isRedisAdapter, '@keyv/redis', 'new KeyvRedis(url)');
  }

  const client = adapter.client as unknown as ScriptClient;
  const prefix = `${namespace}:`;
  const redisKey = (key: string) => prefix + createHash('sha256').update(key).digest('base64url');

  // Connection state, from the client's events: `down` is the last error seen while not
  // ready; it makes calls fail at once instead of each waiting for a dead server.
  let down: unknown;
  let closed = false;
  let waiting: Promise<void> | undefined;
  const isReady = () => client.isReady ?? client.isOpen;
  const onError = (error: unknown) => {
    if (!isReady()) down = error;
  };
  const onReady = () => {
    down = undefined;
  };
  client.on('error', onError);
  client.on('ready', onReady);

  let connecting: Promise<void> | undefined;
  const ready = (): Promise<void> => {
    if (closed) return Promise.reject(new Error('idempotency-kit: the Redis store is closed'));
    if (client.isReady === undefined) {
      // A cluster has no readiness flag: its connect() settles once the slots are known.
      if (!client.isOpen && !connecting) {
        connecting = client.connect().then(
          () => undefined,
          (error: unknown) => {
            connecting = undefined;
            throw new Error(`idempotency-kit: Redis is unreachable (${describe(error)})`, { cause: error });
          },
        );
      }
      return connecting ?? Promise.resolve();
    }
    if (isReady()) return Promise.resolve();
    if (!client.isOpen) {
      down = undefined;
      // Errors arrive as 'error' events; the client keeps retrying per its strategy.
      client.connect().catch((error: unknown) => {
        down = error;
      });
    }
    if (down !== undefined) {
      return Promise.reject(new Error(`idempotency-kit: Redis is unreachable (${describe(down)})`, { cause: down }));
    }
    waiting ??= new Promise<void>((resolve, reject) => {
      const settle = (error?: unknown) => {
        client.off('ready', onReadyOnce);
        client.off('error', onErrorOnce);
        waiting = undefined;
        if (error === undefined) resolve();
        else reject(new Error(`idempotency-kit: Redis is unreachable (${describe(error)})`, { cause: error }));
      };
      const onReadyOnce = () => settle();
      const onErrorOnce = (error: unknown) => settle(error);
      client.on('ready', onReadyOnce);
      client.on('error', onErrorOnce);
    });
    return waiting;
  };

  const run = <T>(what: string, command: () => Promise<T>): Promise<T> =>
    withTimeout(ready().then(command), timeoutMs, timedOut(what, timeoutMs));

  const evalScript = (script: Script, key: string, args: string[]): Promise<unknown> =>
    run('script', async () => {
      const call = { keys: [key], arguments: args };
      try {
        return await client.evalSha(script.sha, call);
      } catch (error) {
        // First use on this server (or after SCRIPT FLUSH): send the source once.
        if (describe(error).startsWith('NOSCRIPT')) return client.eval(script.source, call);
        throw error;
      }
    });

  return {
    name: 'redis',
    async claim(key: string, request: ClaimRequest, leaseMs: number): Promise<ClaimResult> {
      const record: ProcessingRecord = {
        state: 'processing',
        fingerprint: request.fingerprint,
        token: request.token,
        createdAt: request.createdAt,
        leaseUntil: Date.now() + leaseMs,
      };
      const reply = await evalScript(CLAIM, redisKey(key), [encodeRecord(record), String(leaseMs)]);
      if (reply === '') return { claimed: true, record };
      if (typeof reply !== 'string') throw new Error(`idempotency-kit: unexpected Redis reply to claim: ${String(reply)}`);
      return { claimed: false, record: decodeRecord(reply) };
    },
    async get(key: string) {
      const value = await run('GET', () => client.get(redisKey(key)));
      if (value === null || value === undefined) return undefined;
      const record = decodeRecord(String(value));
      return isLive(record, Date.now()) ? record : undefined;
    },
    async complete(key: string, token: string, response: StoredResponse, ttlMs: number) {
      const expiresAt = Date.now() + ttlMs;
      const reply = await evalScript(COMPLETE, redisKey(key), [token, responseJson(response), String(expiresAt), String(ttlMs)]);
      return reply === 1;
    },
    async release(key: string, token: string) {
      return (await evalScript(RELEASE, redisKey(key), [token])) === 1;
    },
    async extend(key: string, token: string, leaseMs: number) {
      const leaseUntil = Date.now() + leaseMs;
      return (await evalScript(EXTEND, redisKey(key), [token, String(leaseMs), String(leaseUntil)])) === 1;
    },
    async close() {
      if (closed) return;
      closed = true;
      client.off('error', onError);
      client.off('ready', onReady);
      if (!owned || !client.isOpen) return;
      // Not connected: nothing to flush, stop the reconnect loop at once.
      if (!isReady()) {
        client.destroy?.();
        return;
      }
      try {
        // Connected: let commands in flight finish, but not forever.
        await withTimeout(Promise.resolve(client.close?.()), timeoutMs, timedOut('close', timeoutMs));
      } catch {
        client.unref?.(); // a server that stopped answering must not keep the process alive
      }
    },
    async delete(key: string) {
      return (await run('DEL', () => client.del!(redisKey(key)))) === 1;
    },
    async stats(options: MaintenanceOptions = {}): Promise<StoreStats> {
      if (client.isReady === undefined || typeof client.scan !== 'function' || typeof client.mGet !== 'function') {
        throw new Error('idempotency-kit: stats needs SCAN on one Redis server; a cluster client scans one node only, run it against each node URL');
      }
      // The namespace is an operator's setting, but it may hold glob characters: match it literally.
      const match = `${prefix.replace(/[*?[\]\\]/g, '\\$&')}*`;
      const stats: StoreStats = { processing: 0, completed: 0, expired: 0, oldestExpiresAt: undefined };
      let cursor = '0';
      let visited = 0;
      do {
        // Each batch is one SCAN plus one MGET, each under the command timeout.
        const page = await run('SCAN', () => client.scan!(cursor, { MATCH: match, COUNT: 500 }));
        cursor = String(page.cursor);
        if (page.keys.length === 0) continue;
        const values = await run('MGET', () => client.mGet!(page.keys));
        const t = Date.now();
        for (const value of values) {
          if (value === null) continue; // expired or deleted since the SCAN
          const record = decodeRecord(value);
          const expiresAt = record.state === 'processing' ? record.leaseUntil : record.expiresAt;
          if (expiresAt <= t) stats.expired++;
          else stats[record.state]++;
          if (stats.oldestExpiresAt === undefined || expiresAt < stats.oldestExpiresAt) stats.oldestExpiresAt = expiresAt;
        }
        visited += page.keys.length;
        options.onProgress?.(visited);
      } while (cursor !== '0');
      return stats;
    },
    async sweep(options: MaintenanceOptions = {}) {
      // Records carry a Redis expiry (PX): Redis removes them itself.
      await run('connect', () => Promise.resolve());
      options.onProgress?.(0);
      return 0;
    },
  };
}
