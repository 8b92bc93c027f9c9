/**
 * An answer sent before the request body was read to its end (413 for a body over the
 * limit, 400 for a bad key) reaches a client that is still writing: the server drains the
 * rest (bounded) before it closes, instead of resetting the connection under the client.
 *
 * The client here is Node's own http client used the plain way (`request.end(buffer)`, or
 * a stream piped in chunked), which does not read before it has written everything: on a
 * server that closes early it fails with EPIPE or ECONNRESET instead of seeing the answer.
 */
import http from 'node:http';
import net from 'node:net';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { memoryStore } from '../../drivers/memory.js';
import { DRAIN_MAX_BYTES } from '../../adapters/internal/node-io.js';
import { ADAPTERS, startApp, type RunningApp } from './apps.js';

const ROUNDS = 20;
const BODY = Buffer.alloc(3 * 1024 * 1024, 'x');

interface Outcome {
  status?: number;
  error?: string;
}

/** POST `body` the way a plain Node client does, with a Content-Length or chunked. */
function post(url: string, key: string | undefined, body: Buffer, mode: 'length' | 'chunked'): Promise<Outcome> {
  return new Promise((resolve) => {
    const headers: http.OutgoingHttpHeaders = { 'content-type': 'application/json' };
    if (key !== undefined) headers['idempotency-key'] = key;
    if (mode === 'length') headers['content-length'] = body.length;
    const request = http.request(`${url}/payments`, { method: 'POST', headers, agent: false });
    request.on('response', (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode }));
      res.on('error', (error) => resolve({ error: `${(error as NodeJS.ErrnoException).code ?? error.message} (response)` }));
    });
    request.on('error', (error) => resolve({ error: (error as NodeJS.ErrnoException).code ?? error.message }));
    if (mode === 'length') request.end(body);
    else Readable.from(chunks(body, 64 * 1024)).pipe(request);
  });
}

function* chunks(body: Buffer, size: number): Generator<Buffer> {
  for (let i = 0; i < body.length; i += size) yield body.subarray(i, i + size);
}

describe.each(ADAPTERS)('%s: an early answer reaches a client that is still sending', (adapter) => {
  let app: RunningApp;
  beforeAll(async () => {
    app = await startApp(adapter, { store: memoryStore() });
  });
  afterAll(() => app?.close());

  for (const mode of ['length', 'chunked'] as const) {
    it(`§5 body-too-large: a 3 MiB body (${mode === 'length' ? 'Content-Length' : 'chunked'}) gets 413, ${ROUNDS} of ${ROUNDS}`, async () => {
      const outcomes: Outcome[] = [];
      for (let i = 0; i < ROUNDS; i++) outcomes.push(await post(app.url, `huge-${mode}-${i}`, BODY, mode));
      expect(outcomes).toEqual(Array.from({ length: ROUNDS }, () => ({ status: 413 })));
      expect(app.calls.count('payments')).toBe(0);
    });
  }

  it(`H4: a bad key on a 3 MiB body gets 400 (answered before reading), ${ROUNDS} of ${ROUNDS}`, async () => {
    const outcomes: Outcome[] = [];
    for (let i = 0; i < ROUNDS; i++) outcomes.push(await post(app.url, '', BODY, i % 2 ? 'length' : 'chunked'));
    // Fastify's parser reads (and refuses, 413) the body before the layer looks at the key.
    const expected = adapter === 'fastify' ? 413 : 400;
    expect(outcomes).toEqual(Array.from({ length: ROUNDS }, () => ({ status: expected })));
  });
});

describe('the drain is bounded', () => {
  it('a body far past the drain bound is cut off: the server closes instead of reading forever', async () => {
    const app = await startApp('node', { store: memoryStore() });
    try {
      const socket = await new Promise<net.Socket>((resolve, reject) => {
        const s = net.connect(app.port, '127.0.0.1', () => resolve(s));
        s.once('error', reject);
      });
      const head =
        'POST /payments HTTP/1.1\r\nHost: x\r\nIdempotency-Key: endless\r\ncontent-type: application/json\r\n' +
        `content-length: ${DRAIN_MAX_BYTES * 4}\r\n\r\n`;
      socket.write(head);
      let answer = '';
      let closed = false;
      socket.on('data', (d: Buffer) => (answer += d.toString('latin1')));
      socket.on('error', () => undefined);
      socket.on('close', () => (closed = true));
      const chunk = Buffer.alloc(256 * 1024, 'x');
      let sent = 0;
      while (!closed && sent < DRAIN_MAX_BYTES * 4) {
        if (!socket.write(chunk)) await new Promise((resolve) => socket.once('drain', resolve).once('close', resolve));
        sent += chunk.length;
      }
      await new Promise((resolve) => (closed ? resolve(undefined) : socket.once('close', resolve)));
      expect(answer).toMatch(/^HTTP\/1\.1 413 /);
      expect(sent).toBeLessThan(DRAIN_MAX_BYTES * 4);
    } finally {
      await app.close();
    }
  });
});
