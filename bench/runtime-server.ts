/**
 * A benchmark server on Bun or Deno: the fetch adapter (or the bare handler) on the
 * runtime's own HTTP server (`Bun.serve`, `Deno.serve`), with the fetch-style handler of
 * bench/web-handlers.ts. The bench bundles it (bench/lib.ts) and starts it with the
 * runtime's binary from node_modules, with
 *   RUNTIME   bun | deno
 *   STYLE     the handler style (FETCH_STYLES)
 *   IMPL      bare | ours (on the memory store)
 * Prints one JSON line `{"ready":true,"port":N}` on stdout, then serves until SIGTERM,
 * as bench/server.ts does.
 * @module
 */
import { withIdempotency } from '../adapters/fetch.js';
import { memoryStore } from '../drivers/memory.js';
import { statsSnapshot } from './handler.js';
import { fetchHandler, ordersRoute } from './web-handlers.js';

interface Served {
  port: number;
}
declare const Bun: { serve(options: { port: number; hostname: string; fetch: (request: Request, server: unknown) => Promise<Response> | Response }): Served } | undefined;
declare const Deno:
  | {
      serve(options: { port: number; hostname: string; onListen: (address: Served) => void }, handler: (request: Request, info: unknown) => Promise<Response> | Response): unknown;
      addSignalListener(signal: 'SIGTERM', listener: () => void): void;
      exit(code: number): never;
    }
  | undefined;

const impl = process.env.IMPL ?? 'bare';
const handler = fetchHandler(process.env.STYLE ?? 'text');
const store = impl === 'ours' ? memoryStore() : undefined;
const orders = store ? withIdempotency(handler, { store, scope: 'shared' }) : impl === 'bare' ? handler : undefined;
if (!orders) throw new Error(`${impl} runs on Node only`);

const route = ordersRoute<unknown>(orders, (path) =>
  JSON.stringify(statsSnapshot({}, new URLSearchParams(path.split('?')[1] ?? '').get('prefix') ?? '')),
);

const ready = (port: number) => process.stdout.write(`${JSON.stringify({ ready: true, port })}\n`);
if (typeof Bun !== 'undefined') {
  ready(Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: route }).port);
  process.on('SIGTERM', () => process.exit(0));
} else if (typeof Deno !== 'undefined') {
  Deno.serve({ port: 0, hostname: '127.0.0.1', onListen: ({ port }) => ready(port) }, route);
  Deno.addSignalListener('SIGTERM', () => Deno!.exit(0));
} else throw new Error('bench/runtime-server.ts runs on Bun or Deno');
