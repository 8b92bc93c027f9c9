/**
 * The one place the Redis store reads node-redis' private state (`@redis/client`, the client
 * `@keyv/redis` makes): the cluster client's slot map (`_slots.rediscover`) and its seed nodes
 * (`_options.rootNodes`), to read the slot map again after a failed call.
 *
 * node-redis learns a new slot map only from a MOVED reply, which a dead primary never
 * sends: after a failover it would keep routing that primary's slots to the dead node
 * ("client is offline") for good. The cluster client has no public call to read the map
 * again. Without the shape (another node-redis), the refresher does nothing and the store
 * relies on what node-redis does in public: it follows MOVED replies, so routing recovers
 * once the cluster answers one. test/stores/node-redis-cluster.test.ts pins the shape to the
 * installed node-redis and runs the store with it hidden.
 * @module
 */

/** The private members read, as node-redis 5 has them. */
interface ClusterInternals {
  _slots?: { rediscover?: (startWith: { options: unknown }) => Promise<void> };
  _options?: { rootNodes?: unknown[] };
}

/** A refresher of a cluster client's slot map, and whether it can refresh at all. */
export interface SlotRefresher {
  /** Asks the client to read the slot map again: one refresh at a time, at most every `minIntervalMs`. */
  refresh(): void;
  /** Whether the client has the private shape; false: `refresh` does nothing (recovery waits for a MOVED). */
  readonly internal: boolean;
}

/** Whether `client` has the slot map and seed nodes node-redis 5 keeps. */
export function hasSlotInternals(client: unknown): boolean {
  const internals = client as ClusterInternals | null | undefined;
  return typeof internals?._slots?.rediscover === 'function' && Array.isArray(internals._options?.rootNodes) && internals._options.rootNodes.length > 0;
}

/** The slot-map refresher of a node-redis cluster client; `stopped()` says when the store is closed. */
export function slotRefresher(client: unknown, stopped: () => boolean, minIntervalMs = 100): SlotRefresher {
  if (!hasSlotInternals(client)) return { refresh: () => undefined, internal: false };
  const internals = client as Required<ClusterInternals> & { _slots: { rediscover: (startWith: { options: unknown }) => Promise<void> } };
  let refreshing = false;
  let refreshedAt = 0;
  return {
    internal: true,
    refresh() {
      const seeds = internals._options.rootNodes ?? [];
      if (refreshing || stopped() || seeds.length === 0 || Date.now() - refreshedAt < minIntervalMs) return;
      refreshing = true;
      // Start from a random seed node (the client tries the others when that one fails).
      internals._slots
        .rediscover({ options: seeds[Math.floor(Math.random() * seeds.length)] })
        .catch(() => undefined)
        .finally(() => {
          refreshing = false;
          refreshedAt = Date.now();
        });
    },
  };
}
