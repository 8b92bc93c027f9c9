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

    suite(adapter, start, {}, (app) => {
      const json = (text: string | Buffer) => ({ body: Buffer.isBuffer(text) ? text : Buffer.from(text), contentType: 'application/json' });

      it('H14: JSON numbers count by their decimal text: ids beyond 2^53 that differ in their last digits are 422, never a replay', async () => {
        const k = key();
        const first = await send(app().url, { path: '/payments', key: k, ...json('{"id":12345678901234567890,"amount":1}') });
        expect(first.status).toBe(201);
        expectProblem(await send(app().url, { path: '/payments', key: k, ...json('{"id":12345678901234567891,"amount":1}') }), 422, 'key-reused');
        expectProblem(await send(app().url, { path: '/payments', key: k, ...json('{"id":0.10000000000000001,"amount":1}') }), 422, 'key-reused');
        // The same request, its members in another order and spelled another way: a replay.
        const again = await send(app().url, { path: '/payments', key: k, ...json('{ "amount": 1.0, "id": 1234567890123456789e1 }') });
        expect(again.headers['idempotent-replayed']).toBe('true');
        expect(again.body.equals(first.body)).toBe(true);
        // Numbers a double holds as written count as before: 1 and 1.0 and 1e0 are one number.
        const small = key();
        await send(app().url, { path: '/payments', key: small, ...json('{"amount":1,"rate":0.1}') });
        const same = await send(app().url, { path: '/payments', key: small, ...json('{"rate":1e-1,"amount":1.0}') });
        expect(same.headers['idempotent-replayed']).toBe('true');
      });

      it('H14: a JSON body that is not UTF-8 counts by its bytes: 0xff and 0xfe are 422, the same bytes replay', async () => {
        const k = key();
        const bad = (byte: number) => json(Buffer.concat([Buffer.from('{"amount":1,"note":"'), Buffer.from([byte]), Buffer.from('"}')]));
        const first = await send(app().url, { path: '/payments', key: k, ...bad(0xff) });
        expectProblem(await send(app().url, { path: '/payments', key: k, ...bad(0xfe) }), 422, 'key-reused');
        expectProblem(await send(app().url, { path: '/payments', key: k, ...json('{"amount":1,"note":"\ufffd"}') }), 422, 'key-reused');
        const again = await send(app().url, { path: '/payments', key: k, ...bad(0xff) });
        expect(again.status).toBe(first.status);
        expect(again.headers['idempotent-replayed']).toBe('true');
        expect(again.body.equals(first.body)).toBe(true);
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
