/**
 * The clients retry every body a caller can hand them with the same bytes (FormData,
 * URLSearchParams, Blob, ArrayBuffer, typed arrays, strings), against a real server (this
 * package's Node adapter) behind a proxy that loses the first answer: the handler runs once,
 * sees the bytes that were sent, and the retry is the same request. The server counts the
 * Content-Type in the fingerprint, so a FormData serialised again (a new boundary) would be
 * refused with 422 instead of replayed: the replay proves the retry resent the same bytes.
 */
import { createHash, randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import got from 'got';
import ky from 'ky';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { idempotentGot } from '../../client/got.js';
import { createIdempotentFetch, type AttemptEvent } from '../../client/index.js';
import { idempotentKy } from '../../client/ky.js';
import { withIdempotency } from '../../adapters/node.js';
import { memoryStore } from '../../drivers/memory.js';
import { scripted, startFaultyProxy, type FaultyProxy } from '../helpers/faulty-proxy.js';

const sha = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');

const store = memoryStore();
const executions = new Map<string, number>();
let server: http.Server;
let url: string;
const proxies: FaultyProxy[] = [];

beforeAll(async () => {
  server = http.createServer(
    withIdempotency(
      async (req, res) => {
        const key = req.headers['idempotency-key'] as string;
        executions.set(key, (executions.get(key) ?? 0) + 1);
        const chunks: Buffer[] = [];
        for await (const chunk of req) chunks.push(chunk as Buffer);
        const bytes = Buffer.concat(chunks);
        res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ key, size: bytes.length, sha256: sha(bytes), type: req.headers['content-type'] ?? null }));
      },
      { store, scope: 'shared', fingerprintHeaders: ['content-type'], waitMs: 0 },
    ),
  );
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterEach(async () => {
  await Promise.all(proxies.splice(0).map((p) => p.close()));
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
  await store.close();
});

/** A proxy that loses the server's first answer (the handler ran; the client never knows). */
async function dropFirst(): Promise<FaultyProxy> {
  const proxy = await startFaultyProxy(url, scripted(['drop']));
  proxies.push(proxy);
  return proxy;
}

const file = Uint8Array.from({ length: 5000 }, (_, i) => (i * 13) % 256);

/** Each body kind, made fresh per call, and the bytes it stands for (undefined: a multipart body, checked by its parts). */
const bodies: Record<string, { make: () => NonNullable<RequestInit['body']>; bytes?: Uint8Array }> = {
  FormData: {
    make: () => {
      const form = new FormData();
      form.append('title', 'Invoice 7');
      form.append('document', new Blob([file], { type: 'application/pdf' }), 'scan.pdf');
      return form;
    },
  },
  URLSearchParams: { make: () => new URLSearchParams([['b', '2'], ['a', '1']]), bytes: new TextEncoder().encode('b=2&a=1') },
  Blob: { make: () => new Blob([file], { type: 'application/octet-stream' }), bytes: file },
  ArrayBuffer: { make: () => file.slice().buffer, bytes: file },
  Uint8Array: { make: () => file.slice(), bytes: file },
  string: { make: () => 'plain text body', bytes: new TextEncoder().encode('plain text body') },
};

interface Seen {
  key: string;
  size: number;
  sha256: string;
  type: string | null;
}

function expectOnceWithBytes(seen: Seen, replayed: string | null | undefined, bytes: Uint8Array | undefined) {
  expect(replayed).toBe('true');
  expect(executions.get(seen.key)).toBe(1);
  if (bytes) expect(seen).toMatchObject({ size: bytes.byteLength, sha256: sha(bytes) });
  else {
    expect(seen.type).toMatch(/^multipart\/form-data; boundary=/);
    expect(seen.size).toBeGreaterThan(file.byteLength);
  }
}

describe('client bodies are retried with the same bytes when the first answer is lost', () => {
  for (const [kind, { make, bytes }] of Object.entries(bodies)) {
    it(`createIdempotentFetch: a ${kind} body: the handler runs once, the retry replays`, async () => {
      const proxy = await dropFirst();
      const events: AttemptEvent[] = [];
      const fetch = createIdempotentFetch({ minDelayMs: 5, maxDelayMs: 20, onAttempt: (e) => events.push(e) });
      const res = await fetch(`${proxy.url}/upload`, { method: 'POST', body: make() });
      expect(res.status).toBe(201);
      expect(proxy.log).toEqual(['drop', 'pass']);
      expect(events.map((e) => e.reason)).toEqual(['network-error', 'response']);
      expectOnceWithBytes((await res.json()) as Seen, res.headers.get('idempotent-replayed'), bytes);
    });

    if (kind !== 'string') {
      it(`idempotentKy: a ${kind} body: the handler runs once, the retry replays`, async () => {
        const proxy = await dropFirst();
        const api = idempotentKy(ky, { minDelayMs: 5, maxDelayMs: 20 });
        const res = await api.post(`${proxy.url}/upload`, { body: make() });
        expect(proxy.log).toEqual(['drop', 'pass']);
        expectOnceWithBytes((await res.json()) as Seen, res.headers.get('idempotent-replayed'), bytes);
      });
    }
  }

  const gotBodies: Record<string, { options: () => Record<string, unknown>; bytes?: Uint8Array }> = {
    FormData: { options: () => ({ body: bodies.FormData!.make() }) },
    'form (URLSearchParams)': { options: () => ({ form: { b: '2', a: '1' } }), bytes: new TextEncoder().encode('b=2&a=1') },
    Buffer: { options: () => ({ body: Buffer.from(file) }), bytes: file },
    string: { options: () => ({ body: 'plain text body' }), bytes: new TextEncoder().encode('plain text body') },
  };
  for (const [kind, { options, bytes }] of Object.entries(gotBodies)) {
    it(`idempotentGot: a ${kind} body: the handler runs once, the retry replays`, async () => {
      const proxy = await dropFirst();
      const client = idempotentGot(got, { minDelayMs: 5, maxDelayMs: 20 });
      const res = await client.post(`${proxy.url}/upload`, options());
      expect(res.statusCode).toBe(201);
      expect(proxy.log).toEqual(['drop', 'pass']);
      expectOnceWithBytes(JSON.parse(res.body) as Seen, res.headers['idempotent-replayed'] as string | undefined, bytes);
    });
  }

  it('a FormData serialised again (a new boundary) is a different request to this server: the replays above are the same bytes', async () => {
    const key = randomUUID();
    const post = () => fetch(`${url}/upload`, { method: 'POST', headers: { 'idempotency-key': key }, body: bodies.FormData!.make() });
    expect((await post()).status).toBe(201);
    expect((await post()).status).toBe(422);
  });
});
