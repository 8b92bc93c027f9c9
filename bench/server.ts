/**
 * A benchmark server in its own process (the load generator runs in another):
 * `node --import tsx bench/server.ts` with
 *   ADAPTER   node | express | fastify | koa | hono | fetch (the fetch adapter on @hono/node-server)
 *   STYLE     the handler style for hono and fetch (bench/apps.ts)
 *   IMPL      bare | ours | express-idempotency | node-idempotency
 *   STORE_URL our store (memory://, sqlite://…, redis://…, postgresql://…)
 *   PEER_STORE memory | redis (peers), REDIS_URL for the Redis one
 *   COUNT_PG=1 count the PostgreSQL queries this process sends (round trips)
 *   COUNT_KEYS=1 count executions per key (double executions)
 *   COUNT_OPS=1 count the store's operations (every method call) by name
 * Prints one JSON line `{"ready":true,"port":N}` on stdout, then serves until SIGTERM.
 * @module
 */
import { startApp, type Adapter, type Impl } from './apps.js';
import type { IdempotencyStore } from '../src/store.js';

const env = process.env;
const adapter = (env.ADAPTER ?? 'node') as Adapter;
const impl = (env.IMPL ?? 'bare') as Impl;

/** Queries sent through `pg` (each `query()` is one round trip), by leading keyword. */
const pgCount = { total: 0, byKind: {} as Record<string, number> };

async function countPgQueries(): Promise<void> {
  // Patched before the driver loads: Pool#query goes through Client#query, so every
  // statement the driver sends is counted exactly once.
  const pg = (await import('pg')).default;
  const original = pg.Client.prototype.query as (...args: unknown[]) => unknown;
  pg.Client.prototype.query = function query(this: unknown, ...args: unknown[]) {
    const config = args[0] as string | { text?: string } | undefined;
    const text = typeof config === 'string' ? config : (config?.text ?? '');
    const kind = /^\s*(\w+)/.exec(text)?.[1]?.toUpperCase() ?? '?';
    pgCount.total++;
    pgCount.byKind[kind] = (pgCount.byKind[kind] ?? 0) + 1;
    return original.apply(this, args);
  } as typeof pg.Client.prototype.query;
}

/** Store operations by method (each one round trip or so), with COUNT_OPS=1. */
const storeOps: Record<string, number> = {};

/** The store with every operation counted; `subscribe` (no round trip per call) passes through. */
function countOps(store: IdempotencyStore): IdempotencyStore {
  const counted = { ...store, name: store.name } as IdempotencyStore;
  for (const op of ['claim', 'get', 'complete', 'release', 'extend'] as const) {
    const run = store[op].bind(store) as (...args: unknown[]) => Promise<unknown>;
    (counted as unknown as Record<string, unknown>)[op] = (...args: unknown[]) => {
      storeOps[op] = (storeOps[op] ?? 0) + 1;
      return run(...args);
    };
  }
  return counted;
}

async function main(): Promise<void> {
  let store: IdempotencyStore | undefined;
  if (impl === 'ours') {
    if (env.COUNT_PG === '1') await countPgQueries();
    const { createStore } = await import('../drivers/create-store.js');
    store = createStore(env.STORE_URL ?? 'memory://', env.NAMESPACE ? { namespace: env.NAMESPACE } : {});
    if (env.COUNT_OPS === '1') store = countOps(store);
  }
  const app = await startApp({
    adapter,
    impl,
    style: env.STYLE,
    store,
    peerStore: (env.PEER_STORE as 'memory' | 'redis' | undefined) ?? 'memory',
    redisUrl: env.REDIS_URL,
    extraStats: () => ({
      ...(env.COUNT_PG === '1' ? { pgQueries: pgCount.total, pgByKind: { ...pgCount.byKind } } : {}),
      ...(env.COUNT_OPS === '1' ? { storeOps: { ...storeOps } } : {}),
    }),
  });
  let closing = false;
  const shutdown = async () => {
    if (closing) return;
    closing = true;
    const timer = setTimeout(() => process.exit(0), 3000);
    timer.unref();
    await app.close().catch(() => {});
    await store?.close().catch(() => {});
    process.exit(0);
  };
  process.on('SIGTERM', () => void shutdown());
  process.on('SIGINT', () => void shutdown());
  process.stdout.write(`${JSON.stringify({ ready: true, port: app.port })}\n`);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
