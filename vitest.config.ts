import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';
import { vitestAliases } from './entries.js';

const here = (path: string) => fileURLToPath(new URL(path, import.meta.url));

/** The NestJS tests that also run against NestJS 11 (the workspace test/nest11; the root has NestJS 12). */
const NEST11_TESTS = ['test/adapters/nest-private.test.ts', 'test/adapters/nestjs.test.ts', 'test/adapters/nestjs-specifics.test.ts', 'test/adapters/nestjs-transaction.test.ts'];

export default defineConfig({
  resolve: {
    // Examples and docs snippets import the package by name; tests run them from source
    // (every entry of entries.ts, exactly).
    alias: vitestAliases(here('./')),
  },
  test: {
    globalSetup: ['./test/setup/provision.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    reporters: ['default', './test/helpers/summary-reporter.ts'],
    projects: [
      { extends: true, test: { name: 'main', include: ['test/**/*.test.ts'] } },
      {
        extends: true,
        // NestJS 11: the adapter and the test apps import @nestjs/* from the workspace's own
        // copies, which import each other from there too.
        resolve: {
          alias: [{ find: /^@nestjs\/([a-z-]+)(\/.*)?$/, replacement: `${here('./test/nest11/node_modules/@nestjs/')}$1$2` }],
        },
        test: { name: 'nest11', include: NEST11_TESTS },
      },
    ],
  },
});
