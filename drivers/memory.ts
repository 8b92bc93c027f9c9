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
  CompletedRecord,
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
import { constants } from 'node:buffer';
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
   * Keep the records in this (empty) Map, e.g. `createStore(new Map())`, as record objects
   * you can read. Without it, the store keeps completed records packed (less heap, fewer
   * objects for the garbage collector). `close()` clears it.
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
    const raw = headers[name]!;
    const value = typeof raw === 'string' ? raw : [...raw];
    // `__proto__` is a valid header name: an own property, not the object's prototype.
    if (name === '__proto__') Object.defineProperty(copy, name, { value, enumerable: true, writable: true, configurable: true });
    else copy[name] = value;
  }
  return copy;
}

/**
 * The records of one scope (see memoryStore): its completed records in completion order, as
 * flat [key, record] pairs read from `head`, with their count and bytes.
 */
interface Partition {
  queue: (string | Kept | undefined)[];
  head: number;
  count: number;
  bytes: number;
}

/**
 * Bodies up to this many bytes are kept packed (see PackedRecord); a larger one stays a
 * record object with its bytes, where the bytes, not the objects, are what it costs.
 */
const PACKED_BODY_MAX = 64 * 1024;

/**
 * A completed record as the store keeps it by default: its expiry and counted bytes, and
 * everything else in one string (a JSON head, a line end, then the body's bytes one char
 * each). A store holding 100,000 records holds 100,000 of these and as many strings, where
 * record objects would be ten or more heap objects each (the record, its response, headers,
 * values, body, buffer): the garbage collector copies every young object that survives and
 * marks every old one on each full collection, so fewer objects per record is less collector
 * time on every request while the store is full. The first read builds the record object,
 * and the record keeps it for the reads after (only records read again carry both).
 */
class PackedRecord {
  constructor(
    /** Its partition (a packed record needs no entry in the store's partition map). */
    readonly partition: Partition,
    readonly expiresAt: number,
    /** What the record counts against `maxBytes` (recordBytes of its response). */
    public bytes: number,
    public text: string,
  ) {}

  /** The record object, once read: a key read once (a retry) is often read again. */
  decoded: CompletedRecord | undefined = undefined;
}

/** What the map holds: a record object, or a completed record packed. */
type Kept = IdempotencyRecord | PackedRecord;

/** `response` packed, or undefined when its body is too large to pack. */
function pack(
  record: { fingerprint: string; token: string; createdAt: number },
  partition: Partition,
  expiresAt: number,
  response: StoredResponse,
  maxBody = PACKED_BODY_MAX,
): PackedRecord | undefined {
  const { body } = response;
  if (body !== null && body.byteLength > maxBody) return undefined;
  // JSON escapes every line end inside it: the first '\n' ends the head, whatever follows.
  const head = JSON.stringify([record.createdAt, record.fingerprint, record.token, response.status, response.headers, body !== null]);
  const text = body === null ? head : `${head}\n${Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('latin1')}`;
  return new PackedRecord(partition, expiresAt, recordBytes(response), text);
}

/** The record a packed one holds, as a new object. */
function unpack(packed: PackedRecord): CompletedRecord {
  const { text } = packed;
  const end = text.indexOf('\n');
  const [createdAt, fingerprint, token, status, headers, hasBody] = JSON.parse(end === -1 ? text : text.slice(0, end)) as [
    number,
    string,
    string,
    number,
    StoredResponse['headers'],
    boolean,
  ];
  let body: Uint8Array | null = null;
  if (hasBody) {
    const bytes = Buffer.from(text.slice(end + 1), 'latin1');
    body = new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }
  return { state: 'completed', fingerprint, token, createdAt, expiresAt: packed.expiresAt, response: { status, headers, body } };
}

/** Whether a kept record is still live at `now`. */
function keptLive(kept: Kept, now: number): boolean {
  return kept instanceof PackedRecord ? kept.expiresAt > now : isLive(kept, now);
}

/** The record object of a kept one. */
function recordOf(kept: Kept): IdempotencyRecord {
  return kept instanceof PackedRecord ? (kept.decoded ??= unpack(kept)) : kept;
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
  // A Map the caller passes holds record objects (the caller reads them); the store's own
  // keeps completed records packed.
  const packs = options.map === undefined;
  const records: Map<string, Kept> = options.map ?? new Map<string, Kept>();
  // Fair across scopes: every record belongs to its scope's partition (the engine passes a
  // hash of the scope with each claim; a caller that passes none puts its records in one
  // partition). Past a bound, the evicted record is the oldest completed one of the
  // partition that holds the most (bytes for `maxBytes`, completed records for
  // `maxEntries`), so one tenant filling the store evicts its own records, never those of a
  // tenant that holds less. Each partition keeps its completed records in completion order,
  // as flat [key, record] pairs in a queue read from `head`: the oldest goes in O(1). A
  // pair whose record was since deleted or replaced is stale and skipped; a queue is
  // compacted when stale pairs outnumber live ones. When a record goes, its bytes are read
  // from it (a packed record carries them; a record object's are computed again).
  const partitions = new Map<string, Partition>();
  const partitionOf = new Map<string, Partition>();
  let completedCount = 0;
  let completedBytes = 0;

  const forget = (key: string): void => {
    const record = records.get(key);
    if (record === undefined) return;
    records.delete(key);
    let partition: Partition | undefined;
    if (record instanceof PackedRecord) partition = record.partition;
    else {
      partition = partitionOf.get(key);
      partitionOf.delete(key);
    }
    if (record instanceof PackedRecord || record.state === 'completed') {
      const bytes = record instanceof PackedRecord ? record.bytes : recordBytes(record.response);
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
  const enqueue = (partition: Partition, key: string, record: Kept): void => {
    partition.queue.push(key, record);
    const { queue, head } = partition;
    const pending = (queue.length - head) / 2;
    if (pending > 64 && pending > 2 * partition.count) {
      const live: (string | Kept | undefined)[] = [];
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
  /**
   * Partitions left without a record (every key released or gone) are dropped: those no
   * record object names and that count no completed record (a packed record names its own).
   * At most `partitionOf.size + completedCount` are in use, so a pass runs only when at least
   * half can go.
   */
  const dropEmpty = (): void => {
    if (partitions.size <= 2 * (partitionOf.size + completedCount + 1)) return;
    const used = new Set(partitionOf.values());
    for (const [name, partition] of partitions) if (partition.count === 0 && !used.has(partition)) partitions.delete(name);
  };

  const sweep = (): number => {
    const t = now();
    let deleted = 0;
    for (const [key, record] of records) {
      if (!keptLive(record, t)) {
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

  /** The live record kept under `key` (as kept: packed or not); an expired one goes. */
  const liveKept = (key: string): Kept | undefined => {
    const record = records.get(key);
    if (record === undefined) return undefined;
    if (keptLive(record, now())) return record;
    forget(key);
    return undefined;
  };

  const live = (key: string): IdempotencyRecord | undefined => {
    const record = liveKept(key);
    return record === undefined ? undefined : recordOf(record);
  };

  /** The processing record under `key` if `token` holds it (never a packed one: that is completed). */
  const owned = (key: string, token: string) => {
    const record = liveKept(key);
    return record !== undefined && !(record instanceof PackedRecord) && record.state === 'processing' && record.token === token ? record : undefined;
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
      const expiresAt = now() + ttlMs;
      const partition = partitionOf.get(key) ?? partitionFor('');
      const packed = packs ? pack(record, partition, expiresAt, response) : undefined;
      const done: Kept = packed ?? {
        state: 'completed',
        fingerprint: record.fingerprint,
        token,
        createdAt: record.createdAt,
        expiresAt,
        response: { status: response.status, headers: copyHeaders(response.headers), body: response.body === null ? null : new Uint8Array(response.body) },
      };
      records.set(key, done);
      if (packed === undefined) partitionOf.set(key, partition);
      else partitionOf.delete(key);
      enqueue(partition, key, done);
      const bytes = packed === undefined ? recordBytes(response) : packed.bytes;
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
        const state = record instanceof PackedRecord ? 'completed' : record.state;
        const expiresAt = record instanceof PackedRecord || record.state === 'completed' ? record.expiresAt : record.leaseUntil;
        if (expiresAt <= t) stats.expired++;
        else stats[state]++;
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
      for (const [key, record] of records) if ((cursor === undefined || key > cursor) && keptLive(record, t)) keys.push(key);
      keys.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
      const page = keys.slice(0, limit);
      return {
        records: page.map((key) => ({ key, record: recordOf(records.get(key)!) })),
        cursor: keys.length > limit ? page.at(-1) : undefined,
      };
    },
    async replaceResponse(key: string, token: string, response: StoredResponse) {
      const kept = liveKept(key);
      if (kept === undefined) return false;
      const record = recordOf(kept);
      if (record.state !== 'completed' || record.token !== token) return false;
      const replaced: StoredResponse = {
        status: response.status,
        headers: copyHeaders(response.headers),
        body: response.body === null ? null : new Uint8Array(response.body),
      };
      // The same kept object (the eviction queue knows the record by identity), with its
      // bytes counted anew.
      const delta = recordBytes(replaced) - recordBytes(record.response);
      let partition = partitionOf.get(key);
      if (kept instanceof PackedRecord) {
        partition = kept.partition;
        // Packed whatever its size, so that it keeps its place in the eviction queue; only a
        // body no string can hold becomes a record object, queued anew (then it is last to go).
        const repacked = pack(record, partition, record.expiresAt, replaced, constants.MAX_STRING_LENGTH - 65_536);
        if (repacked === undefined) {
          const done: CompletedRecord = { ...record, response: replaced };
          records.set(key, done);
          partitionOf.set(key, partition);
          enqueue(partition, key, done);
        } else {
          kept.text = repacked.text;
          kept.bytes = repacked.bytes;
          kept.decoded = undefined;
        }
      } else (kept as CompletedRecord).response = replaced;
      completedBytes += delta;
      if (partition) partition.bytes += delta;
      while (completedBytes > maxBytes && completedCount > 1) evictOldestCompleted('bytes');
      return true;
    },
  };
}
