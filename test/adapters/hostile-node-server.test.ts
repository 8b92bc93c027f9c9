/**
 * Hostile responses and requests against the Hono and fetch adapters served by
 * @hono/node-server (a file of its own: the server replaces the process's global `Request`
 * and `Response`): a header value refused only when read, non-ASCII header values, and a
 * body over `maxBodyBytes` from a client still writing it.
 */
import { randomUUID } from 'node:crypto';
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import { createAdaptorServer } from '@hono/node-server';
import { Hono } from 'hono';
import { afterAll, describe, expect, it } from 'vitest';
import { memoryStore } from '../../drivers/memory.js';
import { withIdempotency } from '../../adapters/fetch.js';
import { idempotency } from '../../adapters/hono.js';
import type { IdempotencyStore } from '../../src/store.js';
import { send } from './client.js';
import { countingStore, type StoreMethod } from './store-wrappers.js';

const servers: http.Server[] = [];
const stores: IdempotencyStore[] = [];

async function serve(fetch: (request: Request, env?: unknown) => Response | Promise<Response>): Promise<{ url: string; port: number }> {
  const server = createAdaptorServer({ fetch }) as http.Server;
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, port };
}

afterAll(async () => {
  for (const server of servers) server.closeAllConnections();
  await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
  await Promise.all(stores.map((s) => s.close()));
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

type Kind = 'hono' | 'fetch';

interface Counted {
  store: IdempotencyStore;
  calls: Record<StoreMethod, number>;
}

function counted(): Counted {
  const base = memoryStore();
  stores.push(base);
  const calls: Record<StoreMethod, number> = { claim: 0, get: 0, complete: 0, release: 0, extend: 0 };
  return { store: countingStore(base, calls), calls };
}

/** The same route on both adapters: `handler(request)` answers, `runs` counts its runs. */
async function app(kind: Kind, options: { store: IdempotencyStore } & Record<string, unknown>, handler: (request: Request) => Response | Promise<Response>) {
  const runs = { n: 0 };
  const counting = async (request: Request) => {
    runs.n++;
    return handler(request);
  };
  if (kind === 'fetch') return { ...(await serve(withIdempotency(counting, { scope: 'shared', ...options }))), runs };
  const hono = new Hono();
  hono.use('*', idempotency({ scope: 'shared', ...options }));
  hono.post('*', (c) => counting(c.req.raw));
  return { ...(await serve(hono.fetch)), runs };
}

describe.each(['hono', 'fetch'] as const)('%s on @hono/node-server: hostile responses', (kind) => {
  it('H17: a header value refused only when read (Content-Disposition from ?name= with a newline) settles the claim: no 409 after, no lease renewal', async () => {
    const { store, calls } = counted();
    const leaseMs = 300;
    const { url, runs } = await app(kind, { store, leaseMs }, (request) => {
      const name = new URL(request.url).searchParams.get('name') ?? 'file';
      return new Response('report', { status: 201, headers: { 'content-disposition': `attachment; filename="${name}"` } });
    });
    const key = randomUUID();
    const path = `/report?name=${encodeURIComponent('a\nb')}`;
    const first = await send(url, { path, key, body: { n: 1 } });
    expect(first.status).toBe(500);
    // The claim was failed (released) before the 500 went out: the retry runs again, no 409.
    const retry = await send(url, { path, key, body: { n: 1 } });
    expect(retry.status).toBe(500);
    expect(runs.n).toBe(2);
    expect(calls.release).toBe(2);
    // No lease timer left behind: nothing renews the claims (a renewal runs every leaseMs / 3).
    const extendsBefore = calls.extend;
    await sleep(leaseMs * 2);
    expect(calls.extend).toBe(extendsBefore);
    expect(extendsBefore).toBe(0);
  });
});
