/**
 * Redis store over `@keyv/redis`: one key per record, atomic claims with `SET NX PX`,
 * compare-and-set by token in Lua. Safe across processes and hosts, and on Redis
 * Cluster (every script touches a single key).
 * @module
 * @example
 * import { redisStore } from 'idempotency-kit/drivers/redis';
 * const store = redisStore({ url: 'redis://127.0.0.1:6379/0' });
 */
import { createHash } from 'node:crypto';
import KeyvRedis from '@keyv/redis';
import type { Keyv } from 'keyv';
import type {
  ClaimRequest,
  ClaimResult,
  IdempotencyRecord,
  IdempotencyStore,
  MaintenanceOptions,
  ProcessingRecord,
  ScanOptions,
  ScanPage,
  StoreStats,
  SettleListener,
  StoredResponse,
} from '../src/store.js';
import { withTimeout } from '../src/timers.js';
import { assertDriverUrl } from './definition.js';
import { redisDriver } from './redis-definition.js';
import { decodeRecord, encodeResponse } from './record-json.js';
import { decodeValue, encodeCompletedTail, encodeProcessing, encodeResponseTail, ownerPrefix, time, unmarkedProcessing } from './redis-record.js';
import { adapterFrom, checkScanOptions, isLive, reconnectingFeed } from './utils.js';
import { assertInteger } from '../src/validate.js';
import { slotRefresher } from './node-redis-cluster.js';
import { isRedisClusterUrl, isRedisSentinelUrl, parseRedisClusterUrl, parseRedisSentinelUrl } from './redis-url.js';

export interface RedisStoreOptions {
  /**
   * Where Redis is: `redis://[[user][:password]@]host[:port][/db]`, or `rediss://…` for
   * TLS; a Cluster: `redis+cluster://host:port[,host:port…]`; Sentinel:
   * `redis+sentinel://sentinel:port[,sentinel:port…]/primary-name`. Ignored when `adapter`
   * or `keyv` is given.
   * @default 'redis://127.0.0.1:6379'
   */
  url?: string;
  /**
   * Wait until this many replicas have the claim, each lease extension and the completion
   * (Redis `WAIT`) before the call resolves. Redis replicates asynchronously: without it, a primary that dies
   * right after acknowledging a claim can take the claim with it, and a retry served by
   * the promoted replica runs the handler again. When fewer replicas acknowledge within
   * `timeoutMs`, the call fails closed: a claim is released and rejects (the handler does
   * not run), a completion (already stored on the primary) rejects so the failure is
   * reported. See docs/drivers/redis.md#failover.
   * @default undefined (no waiting)
   */
  waitForReplicas?: WaitForReplicas;
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
   * Prefix of every key: records live at `<namespace>:<storage key>` (the storage key
   * is the engine's SHA-256 of scope and idempotency key, never the client's text).
   * @default 'idempotency-kit'
   */
  namespace?: string;
  /**
   * Longest wait, in ms, for the connection or for one command. Past it the call rejects
   * (nothing hangs); while Redis is known to be down, calls reject at once.
   * @default 2000
   */
  timeoutMs?: number;
}

export interface WaitForReplicas {
  /** How many replicas must acknowledge (`WAIT numreplicas`). */
  replicas: number;
  /** Longest wait for them, in ms (`WAIT … timeout`; never 0, which would wait forever). */
  timeoutMs: number;
}

/** The parts of a node-redis client (plain, cluster or sentinel) the store uses. */
interface ScriptClient {
  readonly isOpen: boolean;
  readonly isReady?: boolean;
  connect(): Promise<unknown>;
  get(key: string): Promise<unknown>;
  on(event: string, listener: (...args: unknown[]) => void): unknown;
  off(event: string, listener: (...args: unknown[]) => void): unknown;
  close?(): Promise<unknown>;
  destroy?(): unknown;
  unref?(): unknown;
  /**
   * Plain client: `(args, options)`; cluster: `(firstKey, isReadonly, args, options)`;
   * sentinel: `(isReadonly, args, options)`.
   */
  sendCommand(...args: unknown[]): Promise<unknown>;
  // Maintenance only (the command line): plain clients have them; a cluster's SCAN
  // would see one node, so stats refuses clusters.
  del?(key: string): Promise<number>;
  scan?(cursor: string, options: { MATCH: string; COUNT: number }): Promise<{ cursor: string | number; keys: string[] }>;
  /** Cluster only: its primaries, and the client of one (for SCAN, which sees one node). */
  masters?: unknown[];
  nodeClient?(node: unknown): Promise<ScriptClient> | ScriptClient;
  /** A new client with the same options (plain, cluster or sentinel): the wake-up subscriber. */
  duplicate?(): SubscriberClient;
}

/** The parts of a duplicated client the wake-up subscriber uses. */
interface SubscriberClient {
  connect(): Promise<unknown>;
  subscribe(channel: string, listener: (message: string) => void): Promise<unknown>;
  on(event: string, listener: (...args: unknown[]) => void): unknown;
  destroy?(): unknown;
  unref?(): unknown;
}

class Script {
  readonly sha: string;
  constructor(readonly source: string) {
    this.sha = createHash('sha1').update(source).digest('hex');
  }
}

// Every script reads and writes KEYS[1] only, so it runs on any Cluster node owning the slot.
// Values have the layout of redis-record.ts: the scripts check the state byte and compare
// the owner's token at byte 3 (ARGV[1] is the token and its line end), and copy the fixed
// part as it is; nothing is decoded. A value of an earlier release (JSON) is owned by no
// token of this one: its own instances complete it.

const OWNED = `
local current = redis.call('GET', KEYS[1])
if not current or string.byte(current, 1) ~= 80 or string.sub(current, 3, 2 + #ARGV[1]) ~= ARGV[1] then return 0 end
local fixed = string.find(current, '\\n', 3 + #ARGV[1], true)
fixed = string.find(current, '\\n', fixed + 1, true)
`;

/**
 * ARGV: owner, completed tail (expiresAt, status, headers, body), ttlMs, wake-up channel,
 * wake-up message. Publishes only when a claim found the record processing (waiters `w`).
 */
const COMPLETE = new Script(`${OWNED}
redis.call('SET', KEYS[1], 'C-' .. string.sub(current, 3, fixed) .. ARGV[2], 'PX', ARGV[3])
if string.byte(current, 2) == 119 then redis.call('PUBLISH', ARGV[4], ARGV[5]) end
return 1
`);

/**
 * The same, for the claims this store made itself (almost all): ARGV[2] is the whole
 * completed value, built by the store from what it wrote at the claim, so the script only
 * compares and writes.
 */
const COMPLETE_OWN = new Script(`
local current = redis.call('GET', KEYS[1])
if not current or string.byte(current, 1) ~= 80 or string.sub(current, 3, 2 + #ARGV[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
if string.byte(current, 2) == 119 then redis.call('PUBLISH', ARGV[4], ARGV[5]) end
return 1
`);

/** ARGV: owner, wake-up channel, wake-up message. */
const RELEASE = new Script(`${OWNED}
redis.call('DEL', KEYS[1])
if string.byte(current, 2) == 119 then redis.call('PUBLISH', ARGV[2], ARGV[3]) end
return 1
`);

/** ARGV: owner, leaseMs, leaseUntil. */
const EXTEND = new Script(`${OWNED}
redis.call('SET', KEYS[1], string.sub(current, 1, fixed) .. ARGV[3], 'PX', ARGV[2])
return 1
`);

/**
 * A claim that found the record processing marks it waited for (SETRANGE keeps the
 * expiry), so that its completion publishes; returns the value as it is now (nil: gone).
 */
const MARK_WAITED = new Script(`
local current = redis.call('GET', KEYS[1])
if current and string.byte(current, 1) == 80 and string.byte(current, 2) == 45 then
  redis.call('SETRANGE', KEYS[1], 1, 'w')
end
return current
`);

/** ARGV: value, leaseMs. The claim on a server without \`SET … NX GET\` (before Redis 7.0). */
const CLAIM = new Script(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return false end
return redis.call('GET', KEYS[1])
`);

/**
 * ARGV: owner, response tail (status, headers, body), and for a value of an earlier
 * release its token and response JSON. Replaces the response of the completed record
 * while it has that token; fingerprint, times and the remaining expiry stay.
 */
const REPLACE_RESPONSE = new Script(`
local current = redis.call('GET', KEYS[1])
if not current then return 0 end
local ttl = redis.call('PTTL', KEYS[1])
if ttl <= 0 then return 0 end
if string.byte(current, 1) == 123 then
  local record = cjson.decode(current)
  if record.s ~= 'c' or record.t ~= ARGV[3] then return 0 end
  redis.call('SET', KEYS[1], '{"s":"c","f":' .. cjson.encode(record.f) .. ',"t":' .. cjson.encode(record.t)
    .. ',"c":' .. string.format('%.0f', record.c) .. ',"e":' .. string.format('%.0f', record.e) .. ',"r":' .. ARGV[4] .. '}', 'PX', ttl)
  return 1
end
if string.byte(current, 1) ~= 67 or string.sub(current, 3, 2 + #ARGV[1]) ~= ARGV[1] then return 0 end
local fixed = 2 + #ARGV[1]
for _ = 1, 3 do fixed = string.find(current, '\\n', fixed + 1, true) end
redis.call('SET', KEYS[1], string.sub(current, 1, fixed) .. ARGV[2], 'PX', ttl)
return 1
`);

/** Claims a store remembers for a lean completion (see `claimed`). */
const OWN_CLAIMS_MAX = 10_000;

/** node-redis's type mapping for bulk strings (RESP `$`, 36): Buffers, so bodies stay bytes. */
const BUFFER_REPLIES = { typeMapping: { 36: Buffer } };

/**
 * The wake-up message: the key alone (`{"k": key}`, plus `"r": null` for a release, which
 * spares waiters a read), small whatever the record. Earlier releases read it as well.
 */
function wakeMessage(key: string, released: boolean): string {
  return `{"k":${JSON.stringify(key)}${released ? ',"r":null' : ''}}`;
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message || error.name : String(error);
}

const timedOut = (what: string, ms: number) => `idempotency-kit: Redis ${what} timed out after ${ms} ms`;

function checkWaitForReplicas(value: WaitForReplicas | undefined): WaitForReplicas | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'object' || value === null) {
    throw new TypeError(`Expected \`waitForReplicas\` to be an object like { replicas: 1, timeoutMs: 100 }, got ${String(value)}`);
  }
  assertInteger('waitForReplicas.replicas', value.replicas, 1);
  assertInteger('waitForReplicas.timeoutMs', value.timeoutMs, 1);
  return { replicas: value.replicas, timeoutMs: value.timeoutMs };
}

/** The adapter a store opens for itself from a URL: one client, or a cluster client. */
function ownAdapter(url: string, timeoutMs: number): KeyvRedis<unknown> {
  // Reject instead of queueing while disconnected, and keep reconnecting in the
  // background with a short, capped backoff.
  const connection = {
    disableOfflineQueue: true,
    socket: { connectTimeout: timeoutMs, reconnectStrategy: (retries: number) => Math.min(50 * 2 ** retries, 1000) },
  };
  const keyvOptions = { throwOnErrors: true, throwOnConnectError: true, connectionTimeout: timeoutMs };
  if (typeof url === 'string' && isRedisClusterUrl(url)) {
    const cluster = parseRedisClusterUrl(url);
    return new KeyvRedis(
      {
        rootNodes: cluster.nodes.map(({ host, port }) => ({ socket: { host, port, ...(cluster.tls ? { tls: true as const } : {}) } })),
        defaults: {
          ...connection,
          ...(cluster.username !== undefined ? { username: cluster.username } : {}),
          ...(cluster.password !== undefined ? { password: cluster.password } : {}),
          socket: { ...connection.socket, ...(cluster.tls ? { tls: true as const } : {}) },
        },
      },
      keyvOptions,
    );
  }
  if (typeof url === 'string' && isRedisSentinelUrl(url)) {
    const sentinel = parseRedisSentinelUrl(url);
    const tls = sentinel.tls ? { tls: true as const } : {};
    return new KeyvRedis(
      {
        name: sentinel.name,
        sentinelRootNodes: sentinel.nodes,
        sentinelClientOptions: { socket: { ...connection.socket, ...tls } },
        nodeClientOptions: {
          ...connection,
          ...(sentinel.username !== undefined ? { username: sentinel.username } : {}),
          ...(sentinel.password !== undefined ? { password: sentinel.password } : {}),
          socket: { ...connection.socket, ...tls },
        },
      },
      keyvOptions,
    );
  }
  assertDriverUrl(redisDriver, url, 'redis://127.0.0.1:6379');
  return new KeyvRedis({ url, ...connection }, keyvOptions);
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

  const waitFor = checkWaitForReplicas(options.waitForReplicas);

  let adapter: KeyvRedis<unknown>;
  const owned = options.adapter === undefined && options.keyv === undefined;
  if (owned) {
    const url = options.url ?? 'redis://127.0.0.1:6379';
    adapter = ownAdapter(url, timeoutMs);
    // The adapter re-emits client errors; the store reports them through its calls.
    adapter.on('error', () => undefined);
  } else {
    adapter = adapterFrom(options, redisDriver.adapter!);
  }

  const client = adapter.client as unknown as ScriptClient;
  const prefix = `${namespace}:`;
  // Completes and releases publish the (already hashed) storage key here, in their script.
  const channel = `${namespace}:settled`;
  // A sentinel client keeps its own pub/sub connection to the primary: it subscribes itself.
  const sentinelSubscriber = (): SubscriberClient => {
    const shared = client as unknown as SubscriberClient;
    return {
      connect: () => ready(),
      subscribe: (name, listener) => shared.subscribe(name, listener),
      on: () => undefined, // the store's own listeners watch this client
    };
  };
  const feed = settleFeed(client, channel, timeoutMs, adapter.isSentinel() ? sentinelSubscriber : undefined);
  // The engine already hands the store a hash of (scope, key); Redis keys are binary-safe.
  const redisKey = (key: string) => prefix + key;

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
    if (client.isReady === undefined || adapter.isSentinel()) {
      // A cluster has no readiness flag and a sentinel client emits no 'ready': their
      // connect() settles once the slots, or the primary, are known.
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

  // After a failed call on a cluster, the slot map is read again (node-redis-cluster.ts).
  const slots = slotRefresher(client, () => closed);
  const refreshSlots = slots.refresh;
  const cluster = adapter.isCluster();

  const sentinel = adapter.isSentinel();
  /** A command on the connection that owns `key`, as each client shape takes it; bulk replies as Buffers. */
  const send = (key: string, args: (string | Buffer)[]): Promise<unknown> =>
    cluster
      ? client.sendCommand(key, false, args, BUFFER_REPLIES)
      : sentinel
        ? client.sendCommand(false, args, BUFFER_REPLIES)
        : client.sendCommand(args, BUFFER_REPLIES);
  /** The message a timed-out call rejects with, made once per kind of call. */
  const timeoutMessages = new Map<string, string>();
  const timeoutMessage = (what: string, ms: number): string => {
    const name = ms === timeoutMs ? what : `${what}/${ms}`;
    let message = timeoutMessages.get(name);
    if (message === undefined) timeoutMessages.set(name, (message = timedOut(what, ms)));
    return message;
  };

  const run = <T>(what: string, command: () => Promise<T>, ms = timeoutMs): Promise<T> => {
    let started: Promise<T>;
    // A connected plain client takes the command now: no turn of the microtask queue for it.
    if (!closed && !sentinel && client.isReady === true) {
      try {
        started = command();
      } catch (error) {
        started = Promise.reject(error);
      }
    } else started = ready().then(command);
    const call = withTimeout(started, ms, timeoutMessage(what, ms));
    if (!cluster) return call;
    return call.catch((error: unknown) => {
      refreshSlots();
      throw error;
    });
  };

  /** `WAIT` on the connection to the key's primary; rejects unless enough replicas have the write. */
  const waitForReplicas = async (wait: WaitForReplicas, key: string, what: string): Promise<void> => {
    const args = ['WAIT', String(wait.replicas), String(wait.timeoutMs)];
    const reply = await run('WAIT', () => send(key, args), timeoutMs + wait.timeoutMs);
    if (typeof reply !== 'number' || reply < wait.replicas) {
      throw new Error(
        `idempotency-kit: Redis replicas did not acknowledge the ${what} (${String(reply)} of ${wait.replicas} within ${wait.timeoutMs} ms); it may not survive a failover`,
      );
    }
  };

  /**
   * What this store wrote for its own live claims, by token: the value's fixed part
   * (`token \n fingerprint \n createdAt \n`), so that their completion sends the whole
   * completed value and its script copies nothing. Bounded: the oldest go first (their
   * completion then copies the fixed part in its script, as for another store's claim).
   */
  const claimed = new Map<string, string>();
  const remember = (token: string, value: string) => {
    claimed.set(token, value.slice(2, value.lastIndexOf('\n') + 1));
    if (claimed.size > OWN_CLAIMS_MAX) claimed.delete(claimed.keys().next().value!);
  };

  /**
   * One claim step: `SET key value NX GET PX leaseMs` sets the value when the key is free
   * (reply nil) or answers the live record, in one plain command. A server before Redis 7.0
   * refuses NX with GET: there the same runs as a small script, from then on.
   */
  let setNxGet = true;
  const claimOnce = (id: string, value: string, leaseMs: number): Promise<unknown> => {
    if (!setNxGet) return evalScript(CLAIM, id, [value, String(leaseMs)]);
    return run('SET', () => send(id, ['SET', id, value, 'NX', 'GET', 'PX', String(leaseMs)])).catch((error: unknown) => {
      if (!/syntax error/i.test(describe(error))) throw error;
      setNxGet = false;
      return evalScript(CLAIM, id, [value, String(leaseMs)]);
    });
  };

  /**
   * Run a script by its SHA1, as one raw command (not through the client's command
   * builders, which cost a parser and two async steps per call); on a server that does not
   * know it yet (first use, or after SCRIPT FLUSH), once more with its source.
   */
  const evalScript = (script: Script, key: string, args: (string | Buffer)[]): Promise<unknown> =>
    run('script', () => {
      const command: (string | Buffer)[] = ['EVALSHA', script.sha, '1', key, ...args];
      return send(key, command).catch((error: unknown) => {
        if (!String(describe(error)).startsWith('NOSCRIPT')) throw error;
        command[0] = 'EVAL';
        command[1] = script.source;
        return send(key, command);
      });
    });

  return {
    name: 'redis',
    async claim(key: string, request: ClaimRequest, leaseMs: number): Promise<ClaimResult> {
      const leaseUntil = Date.now() + leaseMs;
      const value = encodeProcessing(request.token, request.fingerprint, request.createdAt, leaseUntil);
      const id = redisKey(key);
      // A live record under the key comes back in the same step; a processing one is then
      // marked waited for (a second, rare step), so that its completion wakes this caller.
      // A record gone between the two steps (released) is claimed again.
      for (let attempt = 0; ; attempt++) {
        let reply = await claimOnce(id, value, leaseMs);
        if (reply === null || reply === undefined) {
          const record: ProcessingRecord = { state: 'processing', fingerprint: request.fingerprint, token: request.token, createdAt: request.createdAt, leaseUntil };
          try {
            if (waitFor) await waitForReplicas(waitFor, id, 'claim');
          } catch (error) {
            // Fail closed: the handler must not run on a claim a failover could lose. Free the
            // key (best effort) so a retry is not held off until the lease ends.
            await evalScript(RELEASE, id, [ownerPrefix(request.token), channel, wakeMessage(key, false)]).catch(() => undefined);
            throw error;
          }
          remember(request.token, value);
          return { claimed: true, record };
        }
        if (!Buffer.isBuffer(reply)) throw new Error(`idempotency-kit: unexpected Redis reply to claim: ${String(reply)}`);
        if (unmarkedProcessing(reply)) reply = await evalScript(MARK_WAITED, id, []);
        if (Buffer.isBuffer(reply)) return { claimed: false, record: decodeValue(reply) };
        if (attempt >= 2) throw new Error('idempotency-kit: Redis claim kept losing to records that went at once; try again');
      }
    },
    async get(key: string) {
      const id = redisKey(key);
      const value = await run('GET', () => send(id, ['GET', id]));
      if (value === null || value === undefined) return undefined;
      const record = decodeValue(value as Buffer);
      return isLive(record, Date.now()) ? record : undefined;
    },
    async complete(key: string, token: string, response: StoredResponse, ttlMs: number) {
      const expiresAt = Date.now() + ttlMs;
      const id = redisKey(key);
      const tail = encodeCompletedTail(expiresAt, response);
      const fixed = claimed.get(token);
      claimed.delete(token);
      const reply =
        fixed === undefined
          ? await evalScript(COMPLETE, id, [ownerPrefix(token), tail, String(ttlMs), channel, wakeMessage(key, false)])
          : await evalScript(COMPLETE_OWN, id, [ownerPrefix(token), Buffer.concat([Buffer.from(`C-${fixed}`), tail]), String(ttlMs), channel, wakeMessage(key, false)]);
      // Stored on the primary either way; a rejection here reports a completion that a
      // failover could still lose (a retry would then run again).
      if (reply === 1 && waitFor) await waitForReplicas(waitFor, id, 'completion');
      return reply === 1;
    },
    async release(key: string, token: string) {
      claimed.delete(token);
      return (await evalScript(RELEASE, redisKey(key), [ownerPrefix(token), channel, wakeMessage(key, true)])) === 1;
    },
    async extend(key: string, token: string, leaseMs: number) {
      const leaseUntil = Date.now() + leaseMs;
      const id = redisKey(key);
      const extended = (await evalScript(EXTEND, id, [ownerPrefix(token), String(leaseMs), time(leaseUntil)])) === 1;
      // A lease extension a failover could lose would let another claimer in while this
      // owner still runs; unacknowledged, it rejects and the owner keeps its old lease end.
      if (extended && waitFor) await waitForReplicas(waitFor, id, 'lease extension');
      return extended;
    },
    ...(feed ? { subscribe: feed.subscribe } : {}),
    async close() {
      if (closed) return;
      closed = true;
      void feed?.close();
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
      if (cluster || typeof client.scan !== 'function') {
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
        const values = (await run('MGET', () => send(page.keys[0]!, ['MGET', ...page.keys]))) as (Buffer | null)[];
        const t = Date.now();
        for (const value of values) {
          if (value === null) continue; // expired or deleted since the SCAN
          const record = decodeValue(value);
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
    async scan(options: ScanOptions): Promise<ScanPage> {
      // The cursor is `<node>:<SCAN cursor>`: node 0 on one server; on a Cluster each
      // primary in turn, by its index in the client's list of primaries (a failover or
      // resharding during a long scan may list a record twice or miss one: run again).
      const { cursor, limit } = checkScanOptions(options);
      const at = cursor === undefined ? ['0', '0'] : /^(\d+):(\d+)$/.exec(cursor)?.slice(1);
      if (!at) throw new TypeError(`Expected \`cursor\` to be a cursor a previous Redis scan returned, got ${JSON.stringify(cursor)}`);
      let node = Number(at[0]);
      let scanCursor = at[1]!;
      const masters = cluster ? await run('connect', async () => client.masters ?? []) : [undefined];
      if (cluster && (typeof client.nodeClient !== 'function' || masters.length === 0)) throw new Error('idempotency-kit: this Redis cluster client lists no primaries to scan');
      if (node >= masters.length) throw new TypeError(`Expected \`cursor\` to name one of the ${masters.length} Redis primaries, got ${JSON.stringify(cursor)}`);
      const scanner = cluster ? await run('connect', async () => client.nodeClient!(masters[node])) : client;
      if (typeof scanner.scan !== 'function') throw new Error('idempotency-kit: this Redis client cannot SCAN');
      const match = `${prefix.replace(/[*?[\]\\]/g, '\\$&')}*`;
      const page = await run('SCAN', () => scanner.scan!(scanCursor, { MATCH: match, COUNT: limit }));
      scanCursor = String(page.cursor);
      // A Cluster refuses MGET across slots: one GET per key there (in parallel).
      const values = (
        page.keys.length === 0
          ? []
          : cluster
            ? await Promise.all(page.keys.map((id) => run('GET', () => send(id, ['GET', id]))))
            : await run('MGET', () => send(page.keys[0]!, ['MGET', ...page.keys]))
      ) as (Buffer | null | undefined)[];
      const t = Date.now();
      const records: ScanPage['records'] = [];
      page.keys.forEach((id, i) => {
        const value = values[i];
        if (value === null || value === undefined) return; // expired or deleted since the SCAN
        const record = decodeValue(value);
        if (isLive(record, t)) records.push({ key: id.slice(prefix.length), record });
      });
      if (scanCursor === '0') {
        node++;
        if (node >= masters.length) return { records, cursor: undefined };
      }
      return { records, cursor: `${node}:${scanCursor}` };
    },
    async replaceResponse(key: string, token: string, response: StoredResponse) {
      return (await evalScript(REPLACE_RESPONSE, redisKey(key), [ownerPrefix(token), encodeResponseTail(response), token, encodeResponse(response)])) === 1;
    },
    async sweep(options: MaintenanceOptions = {}) {
      // Records carry a Redis expiry (PX): Redis removes them itself.
      await run('connect', () => Promise.resolve());
      options.onProgress?.(0);
      return 0;
    },
  };
}

/** A wake-up message: `{"k": key, "r"?: record JSON | null}`; undefined when unreadable. */
function parseWake(message: string): { key: string; record: IdempotencyRecord | null | undefined } | undefined {
  let parsed: { k?: unknown; r?: unknown };
  try {
    parsed = JSON.parse(message) as { k?: unknown; r?: unknown };
  } catch {
    return undefined;
  }
  const { k, r } = parsed;
  if (typeof k !== 'string') return undefined;
  if (r === null || r === undefined) return { key: k, record: r };
  try {
    return { key: k, record: decodeRecord(JSON.stringify(r)) };
  } catch {
    return { key: k, record: undefined }; // the waiter reads it
  }
}

/**
 * Wake-ups for waiting duplicates: ONE subscriber connection per store (a duplicate of the
 * store's client, so plain, sentinel and cluster clients all work), opened on the first
 * `subscribe`, unref'd so that it never keeps a process alive. It reconnects on its own;
 * a failure here only makes waiters poll, it never fails a request. On a cluster the
 * channel is a classic (not sharded) one: every message reaches every node.
 */
function settleFeed(
  client: ScriptClient,
  channel: string,
  timeoutMs: number,
  sharedSubscriber: (() => SubscriberClient) | undefined,
): { subscribe: (listener: SettleListener) => () => void; close: () => Promise<void> } | undefined {
  const open = sharedSubscriber ?? (typeof client.duplicate === 'function' ? () => client.duplicate!() : undefined);
  if (!open) return undefined;
  // Cluster and sentinel clients emit no 'ready' after a reconnect: their errors do not
  // stop the feed (node-redis resubscribes), the safety poll covers a gap.
  const cluster = client.isReady === undefined || sharedSubscriber !== undefined;
  return reconnectingFeed((control) => {
    const sub = open(); // a throw (cannot duplicate): no feed, waiters poll
    let subscribed = false;
    sub.on('error', () => {
      if (!cluster) control.setLive(false);
    });
    // node-redis re-sends SUBSCRIBE before it reports `ready` after a reconnect.
    sub.on('ready', () => {
      if (subscribed) control.setLive(true);
    });
    // Given up by its reconnect strategy (or never connected): start over with a fresh one.
    sub.on('end', control.drop);
    return {
      ready: (async () => {
        await withTimeout(sub.connect(), timeoutMs, timedOut('subscriber connect', timeoutMs));
        await withTimeout(
          sub.subscribe(channel, (message) => {
            const wake = parseWake(message);
            if (wake) control.settled(wake.key, wake.record);
          }),
          timeoutMs,
          timedOut('SUBSCRIBE', timeoutMs),
        );
        sub.unref?.();
        subscribed = true;
      })(),
      end: () => sub.destroy?.(),
    };
  });
}
