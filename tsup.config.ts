import { defineConfig } from 'tsup';
import { tsupEntry } from './entries.js';

export default defineConfig({
  entry: {
    // Every public entry point, from the one list (entries.ts).
    ...tsupEntry(),
    // The `idempotency-kit` command (package.json `bin`); its #! line is kept and the file made executable.
    cli: 'cli/index.ts',
  },
  format: ['esm', 'cjs'],
  dts: true,
  // One shared copy of the core (and its error classes) for every entry.
  splitting: true,
  sourcemap: true,
  clean: true,
  target: 'node20',
  platform: 'node',
  // Keep `node:crypto` as written: Deno resolves Node built-ins only with the prefix.
  removeNodeProtocol: false,
  treeshake: true,
  // workerd's own module, imported by the Durable Object class (Workers only).
  external: ['cloudflare:workers'],
});
