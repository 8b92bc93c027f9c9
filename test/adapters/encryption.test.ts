/**
 * Encryption at rest over HTTP on the Node adapter (a real server) and the Hono adapter:
 * what the store holds is sealed, replays are exact, concurrent duplicates of this
 * process get the first response, and a record no configured key opens is a 500
 * `record-unreadable` problem with the handler not run. The stores' raw bytes are
 * checked on every database in test/stores/encryption.test.ts.
 */
import { randomBytes } from 'node:crypto';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Hono } from 'hono';
import { afterEach, describe, expect, it } from 'vitest';
import { idempotency as honoIdempotency } from '../../adapters/hono/index.js';
import { withIdempotency } from '../../adapters/node.js';
import { memoryStore } from '../../drivers/memory.js';
import type { CompletedRecord, EncryptionKey, IdempotencyEvent, IdempotencyRecord, IdempotencyStore } from '../../src/index.js';
import { expectProblem, send } from './client.js';

const k1: EncryptionKey = { id: 'k1', key: randomBytes(32) };
const k2: EncryptionKey = { id: 'k2', key: randomBytes(32).toString('base64') };

const servers: http.Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await new Promise((resolve) => s.close(resolve));
});

/** A Node server on `store` whose handler takes `delayMs`, counting its runs. */
async function nodeApp(store: IdempotencyStore, keys: EncryptionKey[] | undefined, options: { delayMs?: number; maxResponseBytes?: number } = {}) {
  const runs = { count: 0 };
  const events: IdempotencyEvent[] = [];
  const server = http.createServer(
    withIdempotency(
      async (req, res) => {
        const n = ++runs.count;
        if (options.delayMs) await new Promise((resolve) => setTimeout(resolve, options.delayMs));
        res.writeHead(201, { 'content-type': 'application/json', location: `/orders/${n}` });
        res.end(JSON.stringify({ n, secret: 'card=4242' }));
      },
      {
        store,
        scope: 'shared',
        encryption: keys && { keys },
        onEvent: (e) => events.push(e),
        ...(options.maxResponseBytes ? { maxResponseBytes: options.maxResponseBytes } : {}),
      },
    ) as http.RequestListener,
  );
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, runs, events };
}

describe('encryption at rest: node adapter', () => {
  it('seals what it stores, replays it exactly, and answers concurrent duplicates with the first response', async () => {
    const map = new Map<string, IdempotencyRecord>();
    const store = memoryStore({ map });
    const app = await nodeApp(store, [k1], { delayMs: 150 });
    const replies = await Promise.all(Array.from({ length: 5 }, () => send(app.url, { path: '/orders', key: 'n-1', body: { a: 1 } })));
    expect(app.runs.count).toBe(1);
    for (const reply of replies) {
      expect(reply.status).toBe(201);
      expect(reply.json()).toEqual({ n: 1, secret: 'card=4242' });
      expect(reply.headers.location).toBe('/orders/1');
    }
    const later = await send(app.url, { path: '/orders', key: 'n-1', body: { a: 1 } });
    expect(later.headers['idempotent-replayed']).toBe('true');
    expect(later.text).toBe(replies[0]!.text);
    // What the store holds: status 0, no headers, an opaque envelope.
    const records = [...map.values()];
    expect(records).toHaveLength(1);
    const stored = (records[0] as CompletedRecord).response;
    expect(stored.status).toBe(0);
    expect(stored.headers).toEqual({});
    expect(Buffer.from(stored.body!).includes('card=4242')).toBe(false);
  });

  it('a record under a key this server does not have: 500 record-unreadable, the handler not run, the event names the key id', async () => {
    const store = memoryStore();
    const first = await nodeApp(store, [k2]);
    await send(first.url, { path: '/orders', key: 'n-2', body: { a: 1 } });
    const other = await nodeApp(store, [k1]);
    const reply = await send(other.url, { path: '/orders', key: 'n-2', body: { a: 1 } });
    expectProblem(reply, 500, 'record-unreadable');
    expect(other.runs.count).toBe(0);
    expect(other.events.filter((e) => e.type === 'record-unreadable').map((e) => e.keyId)).toEqual(['k2']);
    // The diagnostics channel says which key is missing too.
    const messages: { type: string; keyId?: string }[] = [];
    const listen = (message: unknown) => messages.push(message as { type: string; keyId?: string });
    subscribe('idempotency-kit:event', listen);
    try {
      expectProblem(await send(other.url, { path: '/orders', key: 'n-2', body: { a: 1 } }), 500, 'record-unreadable');
    } finally {
      unsubscribe('idempotency-kit:event', listen);
    }
    expect(messages.find((m) => m.type === 'record-unreadable')?.keyId).toBe('k2');
    expect(other.runs.count).toBe(0);
    // A different request under that key is still a mismatch (the fingerprint is not sealed).
    expectProblem(await send(other.url, { path: '/orders', key: 'n-2', body: { a: 2 } }), 422, 'key-reused');
  });

  it('a sealed record without a replayable body (too large) still answers 409 response-not-replayable', async () => {
    const store = memoryStore();
    const app = await nodeApp(store, [k1], { maxResponseBytes: 4 });
    expect((await send(app.url, { path: '/orders', key: 'n-3', body: {} })).status).toBe(201);
    expectProblem(await send(app.url, { path: '/orders', key: 'n-3', body: {} }), 409, 'response-not-replayable');
    expect(app.runs.count).toBe(1);
  });

  it('allowPlaintext: records stored in clear replay by default, and are refused with allowPlaintext: false', async () => {
    const store = memoryStore();
    const clear = await nodeApp(store, undefined);
    await send(clear.url, { path: '/orders', key: 'n-4', body: {} });
    const sealed = await nodeApp(store, [k1]);
    expect((await send(sealed.url, { path: '/orders', key: 'n-4', body: {} })).headers['idempotent-replayed']).toBe('true');
    const strict = http.createServer(
      withIdempotency((_req, res) => res.end('ran'), { store, scope: 'shared', encryption: { keys: [k1], allowPlaintext: false } }) as http.RequestListener,
    );
    servers.push(strict);
    await new Promise<void>((resolve) => strict.listen(0, '127.0.0.1', resolve));
    const reply = await send(`http://127.0.0.1:${(strict.address() as AddressInfo).port}`, { path: '/orders', key: 'n-4', body: {} });
    expectProblem(reply, 500, 'record-unreadable');
  });
});

describe('encryption at rest: hono adapter', () => {
  it('replays across a rotation and fails closed for a dropped key', async () => {
    const store = memoryStore();
    let runs = 0;
    const make = (keys: EncryptionKey[]) => {
      const app = new Hono();
      app.use('*', honoIdempotency({ store, scope: 'shared', encryption: { keys } }));
      app.post('/orders', (c) => c.json({ n: ++runs }, 201, { 'x-request-id': 'r' }));
      return (key: string) => app.request('/orders', { method: 'POST', headers: { 'idempotency-key': key }, body: '{}' });
    };
    const before = make([k1]);
    expect(await (await before('h-1')).json()).toEqual({ n: 1 });
    const during = make([k2, k1]);
    const replay = await during('h-1');
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(await replay.json()).toEqual({ n: 1 });
    expect(await (await during('h-2')).json()).toEqual({ n: 2 }); // sealed under k2
    const after = make([k2]);
    expect(await (await after('h-2')).json()).toEqual({ n: 2 });
    const refused = await after('h-1');
    expect(refused.status).toBe(500);
    expect(((await refused.json()) as { code: string }).code).toBe('record-unreadable');
    expect(runs).toBe(2);
  });
});

