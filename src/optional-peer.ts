/**
 * Optional peers: packages the application may have installed (`@opentelemetry/api`,
 * `@nestjs/swagger`), never our dependencies. Resolved once, from this package's place in
 * node_modules, the first time they are needed.
 * @module
 */
import { createRequire } from 'node:module';

/**
 * A getter for the optional package `name`: the application's copy, or null when it is not
 * installed (or fails to load). `createRequire` works in the ESM and the CommonJS build
 * without a top-level await; the packages read this way keep their state where the
 * application's own import sees it.
 */
export function optionalPeer<T>(name: string): () => T | null {
  let loaded: T | null | undefined;
  return () => {
    if (loaded === undefined) {
      try {
        const here = typeof __filename === 'string' ? __filename : import.meta.url;
        loaded = createRequire(here)(name) as T;
      } catch {
        loaded = null;
      }
    }
    return loaded;
  };
}
