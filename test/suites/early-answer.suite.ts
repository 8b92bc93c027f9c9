/**
 * Every adapter (run by the conformance suite): an answer sent before the request body was read to its end (413 for a body over the
 * limit, 400 for a bad key) reaches a client that is still writing: the server drains the
 * rest (bounded) before it closes, instead of resetting the connection under the client.
 *
 * The client here is Node's own http client used the plain way (`request.end(buffer)`, or
 * a stream piped in chunked), which does not read before it has written everything: on a
 * server that closes early it fails with EPIPE or ECONNRESET instead of seeing the answer.
 */
import http from 'node:http';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { memoryStore } from '../../drivers/memory.js';
import type { RunningApp } from '../adapters/apps.js';
import type { AppStarter } from './http-conformance.suite.js';

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

/** Register the early-answer tests for `adapter`, its app started by `start`. */
export function earlyAnswerSuite(adapter: string, start: AppStarter): void {
  describe(`${adapter}: an early answer reaches a client that is still sending`, () => {
    let app: RunningApp;
    beforeAll(async () => {
      app = await start(adapter, { store: memoryStore() });
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
      // Fastify's parser, and Nest's (on both platforms: it runs before any interceptor),
      // reads (and refuses, 413) the body before the layer looks at the key.
      const expected = adapter === 'fastify' || adapter.startsWith('nest-') ? 413 : 400;
      expect(outcomes).toEqual(Array.from({ length: ROUNDS }, () => ({ status: expected })));
    });
  });
}
