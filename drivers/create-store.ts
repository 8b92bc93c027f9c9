/**
 * `createStore(target)`: pick storage by a Keyv-style URL. A driver module (and its
 * database client) is loaded only when its scheme is used.
 * @module
 * @example
 * const store = createStore(process.env.IDEMPOTENCY_STORE ?? 'memory://');
 */
import type { ClaimRequest, IdempotencyStore, StoredResponse } from '../src/store.js';

export interface CreateStoreOptions {
  /** Prefix for keys (Redis) or the table name (SQL). Driver-specific defaults. */
  namespace?: string;
}

type Loader = (url: URL, raw: string, options: CreateStoreOptions) => Promise<IdempotencyStore>;

const loaders: Record<string, Loader> = {
  'memory:': async () => (await import('./memory.js')).memoryStore(),
};

export const SUPPORTED_SCHEMES = ['memory://'];

function unsupported(target: string, why: string): TypeError {
  return new TypeError(
    `idempotency-kit: cannot create a store from ${JSON.stringify(target)}: ${why}. Supported: ${SUPPORTED_SCHEMES.join(', ')}`,
  );
}

/**
 * A store that loads its driver on first use, so that `createStore()` is synchronous and
 * a bad URL throws at once, while the driver's client is imported only when needed.
 */
function lazyStore(name: string, load: () => Promise<IdempotencyStore>): IdempotencyStore {
  let loaded: Promise<IdempotencyStore> | undefined;
  const store = () => (loaded ??= load());
  return {
    name,
    claim: async (key: string, request: ClaimRequest, leaseMs: number) => (await store()).claim(key, request, leaseMs),
    get: async (key: string) => (await store()).get(key),
    complete: async (key: string, token: string, response: StoredResponse, ttlMs: number) =>
      (await store()).complete(key, token, response, ttlMs),
    release: async (key: string, token: string) => (await store()).release(key, token),
    extend: async (key: string, token: string, leaseMs: number) => (await store()).extend(key, token, leaseMs),
    close: async () => {
      if (loaded) await (await loaded).close();
    },
  };
}

export function createStore(target: string, options: CreateStoreOptions = {}): IdempotencyStore {
  if (typeof target !== 'string') throw unsupported(String(target), 'expected a URL string');
  let url: URL;
  try {
    url = new URL(target);
  } catch {
    throw unsupported(target, 'it is not a URL');
  }
  const loader = loaders[url.protocol];
  if (!loader) throw unsupported(target, `unknown scheme ${JSON.stringify(url.protocol)}`);
  return lazyStore(url.protocol.slice(0, -1), () => loader(url, target, options));
}
