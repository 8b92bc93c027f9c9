/**
 * Node http adapter specifics: a handler's thrown error is logged by default (as Express
 * and Koa do), and `onError` replaces the logging and the answer.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { withIdempotency } from '../../adapters/node.js';
import { memoryStore } from '../../drivers/memory.js';
import { send } from './client.js';

const servers: http.Server[] = [];
afterEach(async () => {
  vi.restoreAllMocks();
  for (const s of servers.splice(0)) await new Promise((resolve) => s.close(resolve));
});

async function serve(handler: http.RequestListener): Promise<string> {
  const server = http.createServer(handler);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe('node adapter: errors', () => {
  it('H10: a thrown handler error is logged with console.error by default, answered 500, and the key released', async () => {
    const logged = vi.spyOn(console, 'error').mockImplementation(() => undefined);
    let runs = 0;
    const boom = new Error('boom in the handler');
    const url = await serve(
      withIdempotency(
        async () => {
          runs++;
          throw boom;
        },
        { store: memoryStore(), scope: 'shared' },
      ) as http.RequestListener,
    );
    const first = await send(url, { path: '/x', key: 'thrown-1', body: { a: 1 } });
    expect(first.status).toBe(500);
    expect(logged).toHaveBeenCalledWith(boom);
    await send(url, { path: '/x', key: 'thrown-1', body: { a: 1 } });
    expect(runs).toBe(2); // released: the retry ran again
  });

  it('onError replaces the default logging and answer', async () => {
    const logged = vi.spyOn(console, 'error').mockImplementation(() => undefined);
    const seen: unknown[] = [];
    const url = await serve(
      withIdempotency(
        async () => {
          throw new Error('custom');
        },
        {
          store: memoryStore(),
          scope: 'shared',
          onError: (error, _req, res) => {
            seen.push(error);
            res.writeHead(502, { 'content-type': 'text/plain' }).end('bad gateway');
          },
        },
      ) as http.RequestListener,
    );
    const reply = await send(url, { path: '/x', key: 'thrown-2', body: { a: 1 } });
    expect(reply.status).toBe(502);
    expect(seen).toHaveLength(1);
    expect(logged).not.toHaveBeenCalled();
  });
});
