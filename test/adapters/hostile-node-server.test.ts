/**
 * Hostile responses and requests against the Hono and fetch adapters served by
 * @hono/node-server (a file of its own: the server replaces the process's global `Request`
 * and `Response`): a header value refused only when read, non-ASCII header values, and a
 * body over `maxBodyBytes` from a client still writing it.
 */
import { randomUUID } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import type http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { createAdaptorServer } from '@hono/node-server';
import { Hono } from 'hono';
import { Readable } from 'node:stream';
import { afterAll, describe, expect, it } from 'vitest';
import { memoryStore } from '../../drivers/memory.js';
import { withIdempotency } from '../../adapters/fetch.js';
import { idempotency } from '../../adapters/hono/index.js';
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

/** One request over a raw socket; the whole answer as bytes (the connection closes after it). */
function rawExchange(port: number, request: Buffer | string): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.once('end', () => resolve(Buffer.concat(chunks)));
    socket.once('error', reject);
    socket.end(request);
  });
}

/** The head's lines as bytes, without those that differ between a response and its replay. */
function headLines(response: Buffer): Buffer[] {
  const end = response.indexOf('\r\n\r\n');
  expect(end).toBeGreaterThan(0);
  const lines: Buffer[] = [];
  for (let at = 0; at < end; ) {
    const next = response.indexOf('\r\n', at);
    const line = response.subarray(at, next === -1 || next > end ? end : next);
    at = (next === -1 || next > end ? end : next) + 2;
    const name = line.toString('latin1').split(':', 1)[0]!.toLowerCase();
    if (!['date', 'idempotent-replayed', 'connection', 'keep-alive'].includes(name)) lines.push(line);
  }
  return lines;
}

describe.each(['hono', 'fetch'] as const)('%s on @hono/node-server: hostile responses', (kind) => {
  it('H7: a non-ASCII header value replays as the very bytes the first response sent', async () => {
    const { store } = counted();
    const { port } = await app(kind, { store, replayHeaders: ['x-file-name'] }, () =>
      new Response('{"ok":true}', {
        status: 201,
        headers: { 'content-type': 'application/json', location: '/files/caf\u00e9', 'x-file-name': 'r\u00e9sum\u00e9.pdf' },
      }),
    );
    const request = `POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nIdempotency-Key: ${randomUUID()}\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}`;
    const first = await rawExchange(port, request);
    const replay = await rawExchange(port, request);
    expect(replay.toString('latin1')).toMatch(/idempotent-replayed: true/i);
    const firstLines = headLines(first).map((line) => line.toString('hex'));
    const replayLines = headLines(replay).map((line) => line.toString('hex'));
    expect(replayLines.sort()).toEqual(firstLines.sort());
    expect(replay.subarray(replay.indexOf('\r\n\r\n'))).toEqual(first.subarray(first.indexOf('\r\n\r\n')));
  });


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

const ROUNDS = 20;
const BODY = Buffer.alloc(3 * 1024 * 1024, 'x');

/** POST `body` the way a plain Node client does (it reads only once it has written it all). */
function post(url: string, key: string, body: Buffer, mode: 'length' | 'chunked', pauseMs = 0): Promise<{ status?: number; error?: string }> {
  return new Promise((resolve) => {
    const headers: http.OutgoingHttpHeaders = { 'content-type': 'application/json', 'idempotency-key': key };
    if (mode === 'length') headers['content-length'] = body.length;
    const request = httpRequest(`${url}/payments`, { method: 'POST', headers, agent: false });
    request.on('response', (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode }));
      res.on('error', (error) => resolve({ error: `${(error as NodeJS.ErrnoException).code ?? error.message} (response)` }));
    });
    request.on('error', (error) => resolve({ error: (error as NodeJS.ErrnoException).code ?? error.message }));
    if (mode === 'length' && pauseMs === 0) request.end(body);
    else {
      // A slow client: a pause between its 64 KiB pieces (the body takes longer to arrive).
      const pieces = async function* () {
        for (let i = 0; i < body.length; i += 64 * 1024) {
          if (pauseMs > 0) await sleep(pauseMs);
          yield body.subarray(i, i + 64 * 1024);
        }
      };
      Readable.from(pieces()).pipe(request);
    }
  });
}

describe.each(['hono', 'fetch'] as const)('%s on @hono/node-server: a 413 reaches a client still writing its body', (kind) => {
  for (const mode of ['length', 'chunked'] as const) {
    it(`§5 body-too-large: a 3 MiB body (${mode === 'length' ? 'Content-Length' : 'chunked'}) gets 413, ${ROUNDS} of ${ROUNDS}`, async () => {
      const { store } = counted();
      const { url, runs } = await app(kind, { store }, () => new Response('{}', { status: 201 }));
      const outcomes = [];
      for (let i = 0; i < ROUNDS; i++) outcomes.push(await post(url, `huge-${mode}-${i}-${randomUUID()}`, BODY, mode));
      expect(outcomes).toEqual(Array.from({ length: ROUNDS }, () => ({ status: 413 })));
      expect(runs.n).toBe(0);
    });

    it(`§5 body-too-large: a slow client's 3 MiB body (${mode === 'length' ? 'Content-Length' : 'chunked'}, over a second or more) still gets 413`, async () => {
      const { store } = counted();
      const { url, runs } = await app(kind, { store }, () => new Response('{}', { status: 201 }));
      const outcomes = [];
      for (let i = 0; i < 3; i++) outcomes.push(await post(url, `slow-${mode}-${i}-${randomUUID()}`, BODY, mode, 25));
      expect(outcomes).toEqual(Array.from({ length: 3 }, () => ({ status: 413 })));
      expect(runs.n).toBe(0);
    });
  }
});
