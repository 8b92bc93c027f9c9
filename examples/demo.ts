/**
 * `npm start`: the payments demo. ADAPTER=node|express|fastify|koa (default node),
 * IDEMPOTENCY_STORE=<url> (default an SQLite file under .data/), PORT (default 3000).
 */
import type http from 'node:http';
import { createStore, type IdempotencyEvent } from 'idempotency-kit';
import type { DemoDeps } from './apps/node.js';
import { serveDocs } from './docs.js';
import { exitWithParent } from './exit-with-parent.js';
import { createPayments } from './payments.js';

export const DEFAULT_STORE = 'sqlite://./.data/idempotency.sqlite';
type App = { createServer: (deps: DemoDeps) => Promise<http.Server> };
// Static imports per adapter: each app (and its framework) loads only when chosen.
const apps: Record<string, () => Promise<App>> = {
  node: () => import('./apps/node.js'),
  express: () => import('./apps/express.js'),
  fastify: () => import('./apps/fastify.js'),
  koa: () => import('./apps/koa.js'),
};
export const ADAPTERS = ['node', 'express', 'fastify', 'koa'] as const;
export type AdapterName = (typeof ADAPTERS)[number];

export async function startDemo(options: {
  adapter?: string;
  storeUrl?: string;
  port?: number;
  balancesFile?: string;
  workMs?: number;
  onEvent?: (event: IdempotencyEvent) => void;
}): Promise<{ server: http.Server; url: string; close: () => Promise<void>; payments: ReturnType<typeof createPayments> }> {
  const adapter = (options.adapter ?? 'node') as AdapterName;
  if (!ADAPTERS.includes(adapter)) {
    throw new TypeError(`ADAPTER must be one of ${ADAPTERS.join(', ')}, got ${JSON.stringify(options.adapter)}`);
  }
  const store = createStore(options.storeUrl ?? DEFAULT_STORE);
  const payments = createPayments({ file: options.balancesFile, workMs: options.workMs });
  const app = await apps[adapter]!();
  const server = await app.createServer({ store, payments, onEvent: options.onEvent });
  // The API's OpenAPI document at /openapi.json, and Swagger UI at /docs.
  serveDocs(server);
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(options.port ?? 0, '127.0.0.1', resolve);
    });
  } catch (error) {
    await store.close();
    if ((error as NodeJS.ErrnoException).code === 'EADDRINUSE') {
      throw new Error(`port ${options.port} is already in use: stop what runs there, or pick another port with PORT=3001 npm start`);
    }
    throw error;
  }
  const address = server.address() as { port: number };
  return {
    server,
    payments,
    url: `http://127.0.0.1:${address.port}`,
    close: async () => {
      await new Promise((resolve) => server.close(resolve));
      await store.close();
    },
  };
}

const isMain = process.argv[1] !== undefined && import.meta.url.endsWith(process.argv[1].replace(/\\/g, '/').split('/').pop()!);
if (isMain) {
  const storeUrl = process.env.IDEMPOTENCY_STORE ?? DEFAULT_STORE;
  let demo: Awaited<ReturnType<typeof startDemo>>;
  try {
    demo = await startDemo({
      adapter: process.env.ADAPTER,
      storeUrl,
      port: Number(process.env.PORT ?? 3000),
      balancesFile: './.data/balances.json',
      onEvent(event) {
        // A dead or slow store answers 503 to clients: say so here too.
        if (event.type === 'store-error') {
          const error = event.error as Error | undefined;
          console.error(`store error (${event.operation}) on ${redact(storeUrl)}: ${error?.cause instanceof Error ? error.cause.message : error?.message}`);
        }
      },
    });
  } catch (error) {
    console.error(`demo: ${(error as Error).message}`);
    process.exit(1);
  }
  const url = demo.url;
  console.log(`idempotency-kit demo (${process.env.ADAPTER ?? 'node'} adapter, store ${redact(storeUrl)}) on ${url}

  curl -s ${url}/accounts/acc_1
  curl -si -X POST ${url}/accounts/acc_1/debits -H 'content-type: application/json' \\
       -H 'Idempotency-Key: order-42' -d '{"amount":1000}'
  # send the same POST again: same answer, Idempotent-Replayed: true, balance still 9000
  open ${url}/docs     # the API's OpenAPI document in Swagger UI: "Try it out" twice with one key
  npm run demo:storm   # 50 identical debits at once, protected vs unprotected

Ctrl-C stops it.
`);
  const stop = () => void demo.close().then(() => process.exit(0));
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
  process.on('SIGHUP', stop);
  // Stop with whoever started us (npm and the shell it runs us in), even when it was killed
  // without passing a signal on.
  exitWithParent(stop);
}

/** The store URL without its password, for logs. */
export function redact(url: string): string {
  return url.replace(/\/\/([^:/@]*):[^@/]*@/, '//$1:***@');
}
