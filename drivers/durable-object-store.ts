/**
 * The Durable Objects store, on the calling side: every store call is one RPC call to the
 * `IdempotencyObject` that owns the key, chosen by a hash of the key among `objects`
 * objects of the namespace. The object does the work inside its own storage
 * (./idempotency-object.ts). No wake-ups across isolates: a duplicate waiting on a request
 * that runs in another isolate reads the record again with backoff.
 * @module
 */
import type { ClaimRequest, ClaimResult, IdempotencyRecord, IdempotencyStore, MaintenanceOptions, ScanOptions, ScanPage, StoredResponse } from '../src/store.js';
import { assertInteger } from '../src/validate.js';
import { isD1Database, isDurableObjectNamespace, refuseKv, type DurableObjectNamespaceLike } from './cloudflare-bindings.js';
import { withTimeout } from '../src/timers.js';
import { statsFromGroups, type StatsGroup } from './sql-store.js';
import { checkScanOptions, sqlKey } from './utils.js';

export interface DurableObjectStoreOptions {
  /**
   * The Durable Object namespace binding of the `IdempotencyObject` class (`env.IDEMPOTENCY`
   * with `[[durable_objects.bindings]] name = "IDEMPOTENCY", class_name = "IdempotencyObject"`).
   */
  namespace: DurableObjectNamespaceLike;
  /**
   * How many objects the keys are spread over (by a hash of the key). One object serves
   * roughly a thousand calls a second; more objects, more throughput. Keep it fixed: a
   * key whose object changes is not found by its retries (they run the handler again).
   * @default 16
   */
  objects?: number;
  /**
   * The objects' names are `<prefix>:<n>`: two stores with other prefixes on one namespace
   * never share a record.
   * @default 'idempotency-kit'
   */
  prefix?: string;
  /**
   * Where to create the objects when first used (a Durable Objects location hint such as
   * 'weur' or 'enam'); by default near the Worker that first calls each object.
   * @default undefined
   */
  locationHint?: string;
  /**
   * Longest wait for one call to an object, in ms; then it rejects (the store never hangs).
   * @default 2000
   */
  timeoutMs?: number;
}

/** The object's RPC methods, as its stub offers them (each call returns a promise). */
interface ObjectStub {
  claim(key: string, request: ClaimRequest, leaseMs: number): Promise<ClaimResult>;
  read(key: string): Promise<IdempotencyRecord | undefined>;
  complete(key: string, token: string, response: StoredResponse, ttlMs: number): Promise<boolean>;
  release(key: string, token: string): Promise<boolean>;
  extend(key: string, token: string, leaseMs: number): Promise<boolean>;
  remove(key: string): Promise<boolean>;
  stats(): Promise<StatsGroup[]>;
  scan(after: string, limit: number): Promise<Array<{ key: string; record: IdempotencyRecord }>>;
  replaceResponse(key: string, token: string, response: StoredResponse): Promise<boolean>;
  sweep(limit: number): Promise<number>;
}

/** FNV-1a over the key's UTF-16 code units: which object owns a key. Never change it (keys would move). */
function objectIndex(key: string, objects: number): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) {
    hash ^= key.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return (hash >>> 0) % objects;
}

/**
 * A call the runtime says may be sent again (`retryable`: the object was reset or the
 * connection lost before it answered; not `overloaded`). Only calls that are safe to repeat
 * are retried: reads, extends, and claims (a claim sent again with its token wins again).
 */
const retryable = (error: unknown): boolean =>
  (error as { retryable?: unknown } | null)?.retryable === true && (error as { overloaded?: unknown }).overloaded !== true;

/** Create a Durable Objects store. */
export function durableObjectStore(options: DurableObjectStoreOptions): IdempotencyStore {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError('Expected options with a `namespace`, e.g. durableObjectStore({ namespace: env.IDEMPOTENCY })');
  }
  const { namespace, locationHint } = options;
  refuseKv(namespace, 'durableObjectStore({ namespace })');
  if (!isDurableObjectNamespace(namespace)) {
    throw new TypeError(
      isD1Database(namespace)
        ? 'Expected `namespace` to be a Durable Object namespace binding, got a D1 database: use d1Store({ database }) or createStore(env.DB)'
        : `Expected \`namespace\` to be a Durable Object namespace binding (env.IDEMPOTENCY), got ${typeof namespace === 'object' && namespace !== null ? 'another object' : String(namespace)}`,
    );
  }
  const objects = options.objects ?? 16;
  const prefix = options.prefix ?? 'idempotency-kit';
  const timeoutMs = options.timeoutMs ?? 2000;
  assertInteger('objects', objects, 1);
  assertInteger('timeoutMs', timeoutMs, 1);
  if (typeof prefix !== 'string' || prefix === '') throw new TypeError(`Expected \`prefix\` to be a non-empty string, got ${JSON.stringify(prefix)}`);
  if (locationHint !== undefined && (typeof locationHint !== 'string' || locationHint === '')) {
    throw new TypeError(`Expected \`locationHint\` to be a location such as 'weur', got ${JSON.stringify(locationHint)}`);
  }
  const getOptions = locationHint === undefined ? undefined : { locationHint };

  // Ids are plain values, made once; stubs are made for each call, since a stub belongs to
  // the request that made it.
  const ids: unknown[] = [];
  const stubAt = (index: number): ObjectStub => {
    const id = (ids[index] ??= namespace.idFromName(`${prefix}:${index}`));
    return (namespace.get as (id: unknown, options?: unknown) => unknown)(id, getOptions) as ObjectStub;
  };
  let closed = false;
  const message = `idempotency-kit: the Durable Object did not answer within ${timeoutMs} ms`;
  /** One call to the object at `index`; `again`: it may be sent a second time after a retryable failure. */
  const call = <T>(index: number, method: (stub: ObjectStub) => Promise<T>, again: boolean): Promise<T> => {
    if (closed) return Promise.reject(new Error('idempotency-kit: the Durable Objects store is closed'));
    const attempt = () => method(stubAt(index));
    return withTimeout(again ? attempt().catch((error: unknown) => (retryable(error) ? attempt() : Promise.reject(error))) : attempt(), timeoutMs, message);
  };
  /** Calls on `key`: its stored form and its object. */
  const on = <T>(key: string, method: (stub: ObjectStub, stored: string) => Promise<T>, again: boolean): Promise<T> => {
    if (typeof key !== 'string') return Promise.reject(new TypeError(`Expected the key to be a string, got ${typeof key}`));
    const stored = sqlKey(key);
    return call(objectIndex(stored, objects), (stub) => method(stub, stored), again);
  };
  const everyObject = <T>(method: (stub: ObjectStub) => Promise<T>): Promise<T[]> =>
    Promise.all(Array.from({ length: objects }, (_, index) => call(index, method, true)));

  return {
    name: 'durable-objects',
    claim: (key: string, request: ClaimRequest, leaseMs: number) =>
      on(key, (stub, k) => stub.claim(k, { fingerprint: request.fingerprint, token: request.token, createdAt: request.createdAt }, leaseMs), true),
    get: (key: string) => on(key, (stub, k) => stub.read(k), true),
    // Not sent twice: a completion that landed before its answer was lost would be refused
    // the second time, which the engine handles (it reads the record and finds its token).
    complete: (key: string, token: string, response: StoredResponse, ttlMs: number) =>
      on(key, (stub, k) => stub.complete(k, token, { status: response.status, headers: response.headers, body: response.body }, ttlMs), false),
    release: (key: string, token: string) => on(key, (stub, k) => stub.release(k, token), false),
    extend: (key: string, token: string, leaseMs: number) => on(key, (stub, k) => stub.extend(k, token, leaseMs), true),
    async close() {
      closed = true;
    },
    delete: (key: string) => on(key, (stub, k) => stub.remove(k), false),
    stats: async (opts?: MaintenanceOptions) => statsFromGroups((await everyObject((stub) => stub.stats())).flat(), opts),
    async scan(opts: ScanOptions): Promise<ScanPage> {
      // The cursor is `<object index>:<last key seen there>`: one object at a time, by key.
      const { cursor, limit } = checkScanOptions(opts);
      const at = cursor === undefined ? ['0', ''] : /^(\d+):([A-Za-z0-9_~-]*)$/.exec(cursor)?.slice(1);
      if (!at || Number(at[0]) >= objects) {
        throw new TypeError(`Expected \`cursor\` to be a cursor a previous scan of this store returned, got ${JSON.stringify(cursor)}`);
      }
      const index = Number(at[0]);
      const rows = await call(index, (stub) => stub.scan(at[1]!, limit), true);
      // A key kept as `~` and a hash (not one the engine made) cannot be given back as written.
      const records = rows.filter((row) => !row.key.startsWith('~'));
      if (rows.length === limit) return { records, cursor: `${index}:${rows.at(-1)!.key}` };
      return { records, cursor: index + 1 < objects ? `${index + 1}:` : undefined };
    },
    replaceResponse: (key: string, token: string, response: StoredResponse) =>
      on(key, (stub, k) => stub.replaceResponse(k, token, { status: response.status, headers: response.headers, body: response.body }), false),
    async sweep(opts: MaintenanceOptions = {}) {
      // Each object in batches of 1000, one call (and one time bound) per batch.
      let deleted = 0;
      await Promise.all(
        Array.from({ length: objects }, async (_, index) => {
          for (;;) {
            const n = await call(index, (stub) => stub.sweep(1000), true);
            deleted += n;
            opts.onProgress?.(deleted);
            if (n < 1000) return;
          }
        }),
      );
      return deleted;
    },
  };
}
