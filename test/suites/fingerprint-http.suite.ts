/**
 * The fingerprint over HTTP on every adapter (run by the conformance suite): the query is canonical but keeps the
 * order of a repeated name's values, a text body cannot spell the JSON or the empty-body
 * branch (regressions: Fastify parses text/plain to a string, Koa's parser keeps rawBody),
 * and `fingerprint: { exclude }` / `{ include }` leave fields out of JSON bodies.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { memoryStore } from '../../drivers/memory.js';
import type { AppOptions, RunningApp } from '../adapters/apps.js';
import { expectProblem, send } from '../adapters/client.js';
import type { AppStarter } from './http-conformance.suite.js';

let n = 0;
const key = () => `fp-http-${process.pid}-${n++}`;

function suite(adapter: string, start: AppStarter, options: Partial<AppOptions>, run: (app: () => RunningApp) => void) {
  const store = memoryStore();
  let app: RunningApp;
  beforeAll(async () => {
    app = await start(adapter, { store, ...options });
  });
  afterAll(async () => {
    await app?.close();
    await store.close();
  });
  run(() => app);
}

/** Register the fingerprint-over-HTTP tests for `adapter`, its app started by `start`. */
export function fingerprintHttpSuite(adapter: string, start: AppStarter): void {
  describe(`${adapter}: the fingerprint over HTTP`, () => {
    suite(adapter, start, {}, (app) => {
      it('H14: the query in another order replays; a repeated name’s values in another order is 422', async () => {
        const k = key();
        const first = await send(app().url, { path: '/payments?a=1&b=2&ids=1&ids=2', key: k, body: { amount: 1 } });
        const again = await send(app().url, { path: '/payments?ids=1&b=2&ids=2&a=1', key: k, body: { amount: 1 } });
        expect(again.headers['idempotent-replayed']).toBe('true');
        expect(again.body.equals(first.body)).toBe(true);
        expectProblem(await send(app().url, { path: '/payments?a=1&b=2&ids=2&ids=1', key: k, body: { amount: 1 } }), 422, 'key-reused');
      });

      it('H14: a text body spelling the JSON branch (`\\0json{...}`) or the empty one (`\\0none`) is 422, not the other request’s replay', async () => {
        const k = key();
        expect((await send(app().url, { path: '/echo-body', key: k, body: { amount: 1 } })).status).toBe(200);
        expectProblem(await send(app().url, { path: '/echo-body', key: k, body: '\u0000json{"amount":1}' }), 422, 'key-reused');
        const empty = key();
        expect((await send(app().url, { path: '/payments', key: empty })).status).toBe(201);
        expectProblem(await send(app().url, { path: '/payments', key: empty, body: '\u0000none' }), 422, 'key-reused');
      });
    });

    suite(adapter, start, { fingerprint: { exclude: ['metadata.sent_at'] } }, (app) => {
      it('H14: fingerprint: { exclude } leaves a changing field out; the rest still counts', async () => {
        const k = key();
        const first = await send(app().url, { path: '/payments', key: k, body: { amount: 3, metadata: { sent_at: 1, order: 'o' } } });
        const again = await send(app().url, { path: '/payments', key: k, body: { metadata: { order: 'o', sent_at: 2 }, amount: 3 } });
        expect(again.headers['idempotent-replayed']).toBe('true');
        expect(again.body.equals(first.body)).toBe(true);
        expectProblem(await send(app().url, { path: '/payments', key: k, body: { amount: 4, metadata: { sent_at: 1, order: 'o' } } }), 422, 'key-reused');
      });
    });

    suite(adapter, start, { fingerprint: { include: ['amount'] } }, (app) => {
      it('H14: fingerprint: { include } counts only the paths', async () => {
        const k = key();
        await send(app().url, { path: '/payments', key: k, body: { amount: 3, note: 'a' } });
        expect((await send(app().url, { path: '/payments', key: k, body: { amount: 3, note: 'b' } })).headers['idempotent-replayed']).toBe('true');
        expectProblem(await send(app().url, { path: '/payments', key: k, body: { amount: 4, note: 'a' } }), 422, 'key-reused');
      });
    });
  });
}
