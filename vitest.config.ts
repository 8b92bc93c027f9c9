import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

const here = (path: string) => fileURLToPath(new URL(path, import.meta.url));

export default defineConfig({
  resolve: {
    // Examples and docs snippets import the package by name; tests run them from source.
    alias: [
      { find: /^idempotency-kit$/, replacement: here('./src/index.ts') },
      { find: /^idempotency-kit\/(node|express|fastify|koa|fetch|hono)$/, replacement: here('./adapters/$1.ts') },
      { find: /^idempotency-kit\/(nats|bullmq|mqtt|webhooks)$/, replacement: here('./consumers/$1.ts') },
      { find: /^idempotency-kit\/drivers\/(.*)$/, replacement: here('./drivers/$1.ts') },
      { find: /^idempotency-kit\/testing$/, replacement: here('./testing/store-contract.ts') },
      { find: /^idempotency-kit\/client$/, replacement: here('./client/index.ts') },
      { find: /^idempotency-kit\/client\/(got|ky)$/, replacement: here('./client/$1.ts') },
    ],
  },
  test: {
    include: ['test/**/*.test.ts'],
    // Creates the MySQL user and database and the PostgreSQL database the tests use, if missing.
    globalSetup: ['./test/setup/provision.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    reporters: ['default', './test/helpers/summary-reporter.ts'],
  },
});
