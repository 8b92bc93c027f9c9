/**
 * A server for early-answer.test.ts, in its own process (in the test's process the client's
 * writes and the server's close take turns on one event loop and the reset never shows):
 * the Hono adapter (argv[2] = 'hono') or a fetch handler with the fetch adapter
 * (argv[2] = 'fetch'), served by @hono/node-server, `maxBodyBytes` 256 KiB. Run with
 * `node --import tsx`; it prints `listening <port>`.
 */
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import { createAdaptorServer } from '@hono/node-server';
import { Hono } from 'hono';
import { withIdempotency } from '../../adapters/fetch.js';
import { idempotency } from '../../adapters/hono/index.js';
import { memoryStore } from '../../drivers/memory.js';

const options = { store: memoryStore(), scope: 'shared' as const, maxBodyBytes: 256 * 1024 };
const answer = async (request: Request) => Response.json({ size: (await request.arrayBuffer()).byteLength }, { status: 201 });

let fetch: (request: Request, env?: any) => Response | Promise<Response>;
if (process.argv[2] === 'hono') {
  const app = new Hono();
  app.use(idempotency(options));
  app.post('/payments', (c) => answer(c.req.raw));
  fetch = app.fetch;
} else if (process.argv[2] === 'fetch') {
  fetch = withIdempotency(answer, options);
} else throw new Error(`unknown adapter ${process.argv[2]}`);

const server = createAdaptorServer({ fetch }) as http.Server;
server.listen(0, '127.0.0.1', () => console.log(`listening ${(server.address() as AddressInfo).port}`));
process.on('SIGTERM', () => process.exit(0));
