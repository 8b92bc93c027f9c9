import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';
import { vitestAliases } from './entries.js';

const here = (path: string) => fileURLToPath(new URL(path, import.meta.url));

export default defineConfig({
  resolve: {
    // Examples and docs snippets import the package by name; tests run them from source
    // (every entry of entries.ts, exactly).
    alias: vitestAliases(here('./')),
  },
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['./test/setup/provision.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    reporters: ['default', './test/helpers/summary-reporter.ts'],
  },
});
