/**
 * In-process store: atomic within one Node.js process only. For tests, demos and
 * single-instance services; use SQLite, Redis or PostgreSQL when more than one process
 * serves the same keys.
 * @module
 * @example
 * import { memoryStore } from 'idempotency-kit/drivers/memory';
 * const store = memoryStore({ maxEntries: 10_000 });
 */
import type {
  ClaimContext,
  ClaimRequest,
  ClaimResult,
  IdempotencyRecord,
  IdempotencyStore,
  MaintenanceOptions,
  ScanOptions,
  ScanPage,
  StoreStats,
  StoredResponse,
} from '../src/store.js';
import { assertFunction, assertInteger } from '../src/validate.js';
import { checkScanOptions, isLive, productionPolicy, refuseMemoryInProduction, type InProduction } from './utils.js';

export interface MemoryStoreOptions {
  /**
   * Most records kept at once. When full, expired records are swept first, then the
   * oldest completed records are evicted; processing records are never evicted, and a
   * claim beyond the cap with nothing evictable throws.
   * @default 100000
   */
  maxEntries?: number;
  /**
   * Most bytes of completed responses kept at once (body length plus header names and
   * values, plus 200 bytes per record for the record itself). Past it, the oldest
   * completed records are evicted, as for `maxEntries`. Processing records do not count.
   * @default 67108864 (64 MiB)
   */
  maxBytes?: number;
  /**
   * How often expired records are swept, in ms (on an unref'd timer). 0 disables.
   * @default 60000
   */
  sweepIntervalMs?: number;
  /** Clock, for tests. @default Date.now */
  now?: () => number;
  /**
   * What to do when NODE_ENV is production, where the memory store protects one process
   * only and a restart forgets every key: `'refuse'` throws `MemoryStoreInProductionError`
   * (code `memory-store-in-production`), `'warn'` starts with a process warning, `'allow'`
   * starts silently.
   * @default 'refuse'
   */
  inProduction?: InProduction;
  /** @deprecated Use `inProduction: 'warn'` (or `'allow'`); works until the next minor release. */
  allowInProduction?: boolean;
  /** @deprecated Use `inProduction: 'allow'` for no warning; works until the next minor release. */
  warnInProduction?: boolean;
  /**
   * Keep the records in this (empty) Map, e.g. `createStore(new Map())`. `close()` clears it.
   * @default a new Map
   */
  map?: Map<string, IdempotencyRecord>;
}

/** What a completed record counts against `maxBytes`: its body, its headers, and 200 for the rest. */
function recordBytes(response: StoredResponse): number {
  let bytes = 200 + (response.body?.byteLength ?? 0);
  for (const name in response.headers) {
    const value = response.headers[name]!;
    bytes += name.length + (typeof value === 'string' ? value.length : value.join('').length);
  }
  return bytes;
}

/** A copy the caller cannot change afterwards (header arrays too: their bytes are counted). */
function copyHeaders(headers: StoredResponse['headers']): StoredResponse['headers'] {
  const copy: StoredResponse['headers'] = {};
  for (const name in headers) {
    const value = headers[name]!;
    copy[name] = typeof value === 'string' ? value : [...value];
  }
  return copy;
}

/** Create an in-memory store. */
export function memoryStore(options: MemoryStoreOptions = {}): IdempotencyStore {
  const maxEntries = options.maxEntries ?? 100_000;
  const maxBytes = options.maxBytes ?? 64 * 1024 * 1024;
  const sweepIntervalMs = options.sweepIntervalMs ?? 60_000;
  assertInteger('maxEntries', maxEntries, 1);
  assertInteger('maxBytes', maxBytes, 1);
  assertInteger('sweepIntervalMs', sweepIntervalMs, 0);
  const now = options.now ?? Date.now;
  assertFunction('now', now);
  const policy = productionPolicy(options);
  refuseMemoryInProduction(policy);
  if (policy === 'warn' && process.env.NODE_ENV === 'production') {
    process.emitWarning(
      'idempotency-kit: the memory store protects one process only; use sqlite://, redis:// or postgres:// when several processes serve the same keys',
      { code: 'IDEMPOTENCY_MEMORY_STORE' },
    );
  }

  if (options.map !== undefined && (!(options.map instanceof Map) || options.map.size > 0)) {
    throw new TypeError('Expected `map` to be an empty Map');
  }
  const records = options.map ?? new Map<string, IdempotencyRecord>();
  // Fair across scopes: every record belongs to its scope's partition (the engine passes a
  // hash of the scope with each claim; a caller that passes none puts its records in one
  // partition). Past a bound, the evicted record is the oldest completed one of the
  // partition that holds the most (bytes for `maxBytes`, completed records for
  // `maxEntries`), so one tenant filling the store evicts its own records, never those of a
  // tenant that holds less. Each partition keeps its completed records in completion order,
  // as flat [key, record] pairs in a queue read from `head`: the oldest goes in O(1). A
  // pair whose record was since deleted or replaced is stale and skipped; a queue is
  // compacted when stale pairs outnumber live ones. A record's bytes are computed again
  // from it when it goes.
  interface Partition {
    queue: (string | IdempotencyRecord | undefined)[];
    head: number;
    count: number;
    bytes: number;
  }
  const partitions = new Map<string, Partition>();
  const partitionOf = new Map<string, Partition>();
  let completedCount = 0;
  let completedBytes = 0;

  const forget = (key: string): void => {
    const record = records.get(key);
    if (record === undefined) return;
    records.delete(key);
    const partition = partitionOf.get(key);
    partitionOf.delete(key);
    if (record.state === 'completed') {
      const bytes = recordBytes(record.response);
      completedCount--;
      completedBytes -= bytes;
      if (partition) {
        partition.count--;
        partition.bytes -= bytes;
      }
    }
  };
  /** The partition holding the most (by `by`) completed records, if any holds one. */
  const largest = (by: 'bytes' | 'count'): Partition | undefined => {
    let found: Partition | undefined;
    for (const partition of partitions.values()) {
      if (partition.count > 0 && (found === undefined || partition[by] > found[by])) found = partition;
    }
    return found;
  };
  const evictOldestCompleted = (by: 'bytes' | 'count'): boolean => {
    const partition = largest(by);
    if (partition === undefined) return false;
    const { queue } = partition;
    while (partition.head < queue.length) {
      const key = queue[partition.head] as string;
      const record = queue[partition.head + 1];
      queue[partition.head] = queue[partition.head + 1] = undefined;
      partition.head += 2;
      if (records.get(key) === record) {
        forget(key);
        return true;
      }
    }
    return false;
  };
  const enqueue = (partition: Partition, key: string, record: IdempotencyRecord): void => {
    partition.queue.push(key, record);
    const { queue, head } = partition;
    const pending = (queue.length - head) / 2;
    if (pending > 64 && pending > 2 * partition.count) {
      const live: (string | IdempotencyRecord | undefined)[] = [];
      for (let i = head; i < queue.length; i += 2) {
        if (records.get(queue[i] as string) === queue[i + 1]) live.push(queue[i], queue[i + 1]);
      }
      partition.queue = live;
      partition.head = 0;
    } else if (head > 128 && head * 2 > queue.length) {
      partition.queue = queue.slice(head);
      partition.head = 0;
    }
  };
  const partitionFor = (name: string): Partition => {
    let partition = partitions.get(name);
    if (partition === undefined) partitions.set(name, (partition = { queue: [], head: 0, count: 0, bytes: 0 }));
    return partition;
  };
  /** Partitions left without a record (every key released or gone) are dropped. */
  const dropEmpty = (): void => {
    if (partitions.size <= 2 * (partitionOf.size + 1)) return;
    const used = new Set(partitionOf.values());
    for (const [name, partition] of partitions) if (!used.has(partition)) partitions.delete(name);
  };

  const sweep = (): number => {
    const t = now();
    let deleted = 0;
    for (const [key, record] of records) {
      if (!isLive(record, t)) {
        forget(key);
        deleted++;
      }
    }
    return deleted;
  };
  const timer = sweepIntervalMs > 0 ? setInterval(sweep, sweepIntervalMs) : undefined;
  timer?.unref();

  const makeRoom = (): void => {
    while (records.size >= maxEntries && evictOldestCompleted('count'));
    if (records.size < maxEntries) return;
    // Only processing records left: expired leases can go (a full pass, only in this case).
    sweep();
    if (records.size >= maxEntries) {
      throw new Error(`idempotency-kit: memory store is full (${maxEntries} requests in flight)`);
    }
  };

  const live = (key: string): IdempotencyRecord | undefined => {
    const record = records.get(key);
    if (record === undefined) return undefined;
    if (isLive(record, now())) return record;
    forget(key);
    return undefined;
  };

  const owned = (key: string, token: string) => {
    const record = live(key);
    return record?.state === 'processing' && record.token === token ? record : undefined;
  };

  // Every method is synchronous inside: nothing can interleave between read and write,
  // which is what makes claim atomic within one process.
  return {
    name: 'memory',
    async claim(key: string, request: ClaimRequest, leaseMs: number, context?: ClaimContext): Promise<ClaimResult> {
      const current = live(key);
      if (current) return { claimed: false, record: current };
      makeRoom();
      const record = { state: 'processing' as const, ...request, leaseUntil: now() + leaseMs };
      records.set(key, record);
      partitionOf.set(key, partitionFor(typeof context?.partition === 'string' ? context.partition : ''));
      dropEmpty();
      return { claimed: true, record };
    },
    async get(key: string) {
      return live(key);
    },
    async complete(key: string, token: string, response: StoredResponse, ttlMs: number) {
      const record = owned(key, token);
      if (!record) return false;
      const body = response.body === null ? null : new Uint8Array(response.body);
      const done: IdempotencyRecord = {
        state: 'completed',
        fingerprint: record.fingerprint,
        token,
        createdAt: record.createdAt,
        expiresAt: now() + ttlMs,
        response: { status: response.status, headers: copyHeaders(response.headers), body },
      };
      records.set(key, done);
      const partition = partitionOf.get(key) ?? partitionFor('');
      partitionOf.set(key, partition);
      enqueue(partition, key, done);
      const bytes = recordBytes(response);
      completedCount++;
      completedBytes += bytes;
      partition.count++;
      partition.bytes += bytes;
      while (completedBytes > maxBytes && completedCount > 1) evictOldestCompleted('bytes');
      return true;
    },
    async release(key: string, token: string) {
      if (!owned(key, token)) return false;
      forget(key);
      return true;
    },
    async extend(key: string, token: string, leaseMs: number) {
      const record = owned(key, token);
      if (!record) return false;
      record.leaseUntil = now() + leaseMs;
      return true;
    },
    async close() {
      if (timer) clearInterval(timer);
      records.clear();
      partitions.clear();
      partitionOf.clear();
      completedCount = 0;
      completedBytes = 0;
    },
    async delete(key: string) {
      const had = records.has(key);
      forget(key);
      return had;
    },
    async stats(options: MaintenanceOptions = {}): Promise<StoreStats> {
      const t = now();
      const stats: StoreStats = { processing: 0, completed: 0, expired: 0, oldestExpiresAt: undefined };
      for (const record of records.values()) {
        const expiresAt = record.state === 'processing' ? record.leaseUntil : record.expiresAt;
        if (expiresAt <= t) stats.expired++;
        else stats[record.state]++;
        if (stats.oldestExpiresAt === undefined || expiresAt < stats.oldestExpiresAt) stats.oldestExpiresAt = expiresAt;
      }
      options.onProgress?.(records.size);
      return stats;
    },
    async sweep(options: MaintenanceOptions = {}) {
      const deleted = sweep();
      options.onProgress?.(deleted);
      return deleted;
    },
    async scan(options: ScanOptions): Promise<ScanPage> {
      const { cursor, limit } = checkScanOptions(options);
      // In key order, after the cursor (a key): stable whatever is added or removed meanwhile.
      // O(n log n) per page, fine for the sizes a memory store holds.
      const t = now();
      const keys: string[] = [];
      for (const [key, record] of records) if ((cursor === undefined || key > cursor) && isLive(record, t)) keys.push(key);
      keys.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
      const page = keys.slice(0, limit);
      return {
        records: page.map((key) => ({ key, record: records.get(key)! })),
        cursor: keys.length > limit ? page.at(-1) : undefined,
      };
    },
    async replaceResponse(key: string, token: string, response: StoredResponse) {
      const record = live(key);
      if (record?.state !== 'completed' || record.token !== token) return false;
      const replaced: StoredResponse = {
        status: response.status,
        headers: copyHeaders(response.headers),
        body: response.body === null ? null : new Uint8Array(response.body),
      };
      // The same record object (the eviction queue knows the record by identity), with its
      // bytes counted anew.
      const delta = recordBytes(replaced) - recordBytes(record.response);
      record.response = replaced;
      completedBytes += delta;
      const partition = partitionOf.get(key);
      if (partition) partition.bytes += delta;
      while (completedBytes > maxBytes && completedCount > 1) evictOldestCompleted('bytes');
      return true;
    },
  };
}
