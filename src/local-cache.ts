/**
 * `withLocalCache(store, options)`: a bounded in-process cache of completed records in
 * front of a remote store, so that repeats of a request this process saw completed replay
 * without a store call (on DynamoDB, without a write unit). Never caches a record in
 * progress: claims, leases and fencing always go to the store.
 * @module
 * @example
 * const store = withLocalCache(createStore('dynamodb://idempotency'), { maxEntries: 1000, maxAgeMs: 60_000 });
 */
import type { ClaimContext, ClaimRequest, ClaimResult, CompletedRecord, IdempotencyStore, ProcessingRecord, StoredResponse } from './store.js';
import { assertInteger } from './validate.js';

export interface LocalCacheOptions {
  /**
   * Most completed records kept; the least recently used goes first.
   * @default 1000
   */
  maxEntries?: number;
  /**
   * Longest time a record is served from the cache, in ms (never past its own expiry).
   * A record deleted from the store (the command line's `purge`) may still replay from
   * another process's cache for this long.
   * @default 60000
   */
  maxAgeMs?: number;
}

/** Wrap `store` with a cache of the completed records this process wrote or read. */
export function withLocalCache(store: IdempotencyStore, options: LocalCacheOptions = {}): IdempotencyStore {
  const { maxEntries = 1000, maxAgeMs = 60_000 } = options;
  assertInteger('maxEntries', maxEntries, 1);
  assertInteger('maxAgeMs', maxAgeMs, 1);
  const cache = new Map<string, { record: CompletedRecord; until: number }>();
  // This process's claims, until they settle: what a completion needs to be cached.
  const mine = new Map<string, ProcessingRecord>();

  const remember = (key: string, record: CompletedRecord) => {
    const until = Math.min(record.expiresAt, Date.now() + maxAgeMs);
    cache.delete(key);
    cache.set(key, { record, until });
    if (cache.size > maxEntries) cache.delete(cache.keys().next().value!);
  };
  const cached = (key: string): CompletedRecord | undefined => {
    const entry = cache.get(key);
    if (!entry) return undefined;
    cache.delete(key);
    if (entry.until <= Date.now()) return undefined;
    cache.set(key, entry); // most recently used
    return entry.record;
  };
  const track = (key: string, record: ProcessingRecord) => {
    mine.set(key, record);
    if (mine.size > maxEntries) mine.delete(mine.keys().next().value!);
  };

  const wrapped: IdempotencyStore = {
    name: store.name,
    async claim(key: string, request: ClaimRequest, leaseMs: number, context?: ClaimContext): Promise<ClaimResult> {
      const hit = cached(key);
      if (hit) return { claimed: false, record: hit };
      const result = await store.claim(key, request, leaseMs, context);
      if (result.claimed) track(key, result.record);
      else if (result.record.state === 'completed') remember(key, result.record);
      return result;
    },
    async get(key: string) {
      const hit = cached(key);
      if (hit) return hit;
      const record = await store.get(key);
      if (record?.state === 'completed') remember(key, record);
      return record;
    },
    async complete(key: string, token: string, response: StoredResponse, ttlMs: number) {
      const done = await store.complete(key, token, response, ttlMs);
      const claim = mine.get(key);
      if (claim?.token === token) mine.delete(key);
      if (done && claim?.token === token) {
        remember(key, { state: 'completed', fingerprint: claim.fingerprint, token, createdAt: claim.createdAt, expiresAt: Date.now() + ttlMs, response });
      }
      return done;
    },
    async release(key: string, token: string) {
      if (mine.get(key)?.token === token) mine.delete(key);
      cache.delete(key);
      return store.release(key, token);
    },
    extend: (key, token, leaseMs) => store.extend(key, token, leaseMs),
    async close() {
      cache.clear();
      mine.clear();
      await store.close();
    },
  };
  if (store.stats) wrapped.stats = (maintenance) => store.stats!(maintenance);
  if (store.sweep) wrapped.sweep = (maintenance) => store.sweep!(maintenance);
  if (store.scan) wrapped.scan = (scan) => store.scan!(scan);
  if (store.delete) {
    wrapped.delete = async (key) => {
      cache.delete(key);
      return store.delete!(key);
    };
  }
  if (store.replaceResponse) {
    wrapped.replaceResponse = async (key, token, response) => {
      cache.delete(key);
      return store.replaceResponse!(key, token, response);
    };
  }
  if (store.subscribe) {
    // A wake-up may carry the completed record: keep it too.
    wrapped.subscribe = (listener) =>
      store.subscribe!({
        settled(key, record) {
          if (record?.state === 'completed') remember(key, record);
          else cache.delete(key);
          listener.settled(key, record);
        },
        ready: () => listener.ready(),
        down: () => listener.down(),
      });
  }
  return wrapped;
}
