import { defineConfig } from 'tsup';

export default defineConfig({
  entry: {
    index: 'src/index.ts',
    'adapters/node': 'adapters/node.ts',
    'adapters/express': 'adapters/express.ts',
    'adapters/fastify': 'adapters/fastify.ts',
    'adapters/koa': 'adapters/koa.ts',
    'adapters/fetch': 'adapters/fetch.ts',
    'adapters/hono': 'adapters/hono.ts',
    'consumers/nats': 'consumers/nats.ts',
    'consumers/bullmq': 'consumers/bullmq.ts',
    'consumers/mqtt': 'consumers/mqtt.ts',
    'consumers/webhooks': 'consumers/webhooks.ts',
    'drivers/memory': 'drivers/memory.ts',
    'drivers/redis': 'drivers/redis.ts',
    'drivers/postgres': 'drivers/postgres.ts',
    'drivers/sqlite': 'drivers/sqlite.ts',
    'drivers/mysql': 'drivers/mysql.ts',
    'drivers/durable-objects': 'drivers/durable-objects.ts',
    'drivers/d1': 'drivers/d1.ts',
    testing: 'testing/store-contract.ts',
    'client/index': 'client/index.ts',
    'client/got': 'client/got.ts',
    'client/ky': 'client/ky.ts',
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
