/**
 * What only the Koa adapter has to get right, run on Koa 3 and 2: body parser order, every
 * kind of `ctx.body`, headers set with `ctx.set`, per-route use with @koa/router, errors.
 * Run by test/adapters/koa.test.ts (Koa 3) and koa2.test.ts.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import { bodyParser } from '@koa/bodyparser';
import Router from '@koa/router';
import type Koa from 'koa';
import { afterEach, describe, expect, it } from 'vitest';
import { memoryStore } from '../../drivers/memory.js';
import { idempotency } from '../../adapters/koa/index.js';
import { Calls, readAll } from '../adapters/apps.js';
import { expectProblem, send, sendAndAbort } from '../adapters/client.js';

type KoaClass = typeof Koa;

export interface KoaSuiteOptions {
  /** Own cases, inside the suite's describe: `listen(app)` serves an app on a free port (closed after each case) and gives its URL. */
  extra?: (context: { listen: (app: Koa) => Promise<string> }) => void;
}

export function koaSuite(name: string, KoaClass: KoaClass, major: 2 | 3, { extra }: KoaSuiteOptions = {}): void {
  describe(`${name} adapter specifics`, () => {
    const servers: http.Server[] = [];
    afterEach(async () => {
      for (const server of servers.splice(0)) {
        server.closeAllConnections();
        await new Promise((resolve) => server.close(resolve));
      }
    });
    const listen = async (app: Koa): Promise<string> => {
      app.silent = true;
      const server = http.createServer(app.callback());
      servers.push(server);
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    };
    const key = () => randomUUID();

    it('after @koa/bodyparser: the body is fingerprinted (key order free, 422 on change) and reaches the handler', async () => {
      const calls = new Calls();
      const app = new KoaClass();
      app.use(bodyParser());
      app.use(idempotency({ store: memoryStore(), scope: 'shared', maxBodyBytes: 2048 }));
      app.use((ctx) => {
        ctx.status = 201;
        ctx.body = { n: calls.hit('orders'), got: ctx.request.body };
      });
      const url = await listen(app);
      const k = key();
      const first = await send(url, { path: '/orders', key: k, body: '{"a":1,"b":[2]}', contentType: 'application/json' });
      expect(first.json()).toEqual({ n: 1, got: { a: 1, b: [2] } });
      const reordered = await send(url, { path: '/orders', key: k, body: '{ "b": [2], "a": 1 }', contentType: 'application/json' });
      expect(reordered.headers['idempotent-replayed']).toBe('true');
      expectProblem(await send(url, { path: '/orders', key: k, body: { a: 2, b: [2] } }), 422, 'key-reused');
      // Read by the parser, the body is still held to maxBodyBytes by its declared length.
      expectProblem(await send(url, { path: '/orders', key: key(), body: { big: 'x'.repeat(3000) } }), 413, 'body-too-large');
      expect(calls.count('orders')).toBe(1);
    });

    it('H14: after @koa/bodyparser: numbers count by the text the parser kept (ids beyond 2^53 stay apart)', async () => {
      const calls = new Calls();
      const app = new KoaClass();
      app.use(bodyParser());
      app.use(idempotency({ store: memoryStore(), scope: 'shared' }));
      app.use((ctx) => {
        ctx.status = 201;
        ctx.body = { n: calls.hit('orders') };
      });
      const url = await listen(app);
      const k = key();
      const json = (body: string) => ({ path: '/orders', key: k, body: Buffer.from(body), contentType: 'application/json' });
      expect((await send(url, json('{"id":12345678901234567890}'))).status).toBe(201);
      expectProblem(await send(url, json('{"id":12345678901234567891}')), 422, 'key-reused');
      expect((await send(url, json('{ "id": 12345678901234567890 }'))).headers['idempotent-replayed']).toBe('true');
      expect(calls.count('orders')).toBe(1);
    });

    it('without a body parser: the handler reads the raw body from ctx.req', async () => {
      const app = new KoaClass();
      app.use(idempotency({ store: memoryStore(), scope: 'shared' }));
      app.use(async (ctx) => {
        ctx.body = { raw: (await readAll(ctx.req)).toString('utf8') };
      });
      const url = await listen(app);
      expect((await send(url, { path: '/raw', key: key(), body: 'plain text' })).json()).toEqual({ raw: 'plain text' });
    });

    it('H7: every kind of ctx.body is replayed byte for byte, with the headers set by ctx.set', async () => {
      const calls = new Calls();
      const app = new KoaClass();
      app.use(idempotency({ store: memoryStore(), scope: 'shared' }));
      const router = new Router();
      router.post('/object', (ctx) => {
        ctx.status = 201;
        ctx.set({ location: '/things/1', etag: '"e1"', link: '</things>; rel="collection"', 'x-trace': 't1' });
        ctx.cookies.set('session', 's1');
        ctx.body = { n: calls.hit('object'), nested: { ok: true } };
      });
      router.post('/string', (ctx) => {
        ctx.body = `<p>${calls.hit('string')}</p>`;
      });
      router.post('/buffer', (ctx) => {
        ctx.body = Buffer.from([0, 1, 254, 255, calls.hit('buffer')]);
      });
      router.post('/status-only', (ctx) => {
        calls.hit('status-only');
        ctx.status = 202; // no body: Koa answers the status text
      });
      router.post('/explicit-null', (ctx) => {
        calls.hit('explicit-null');
        ctx.body = null; // Koa answers 204
      });
      router.post('/stream', (ctx) => {
        ctx.type = 'text/csv';
        ctx.body = Readable.from(['a,b\n', `1,${calls.hit('stream')}\n`]);
      });
      if (major === 3) {
        router.post('/web-stream', (ctx) => {
          const n = calls.hit('web-stream');
          ctx.type = 'text/plain';
          ctx.body = new ReadableStream({
            start(controller) {
              controller.enqueue(new TextEncoder().encode(`web ${n}`));
              controller.close();
            },
          });
        });
        router.post('/blob', (ctx) => {
          ctx.body = new Blob([`blob ${calls.hit('blob')}`], { type: 'text/plain' });
        });
      }
      app.use(router.routes());
      const url = await listen(app);
      const paths = ['/object', '/string', '/buffer', '/status-only', '/explicit-null', '/stream'];
      if (major === 3) paths.push('/web-stream', '/blob');
      for (const path of paths) {
        const k = key();
        const first = await send(url, { path, key: k });
        const replay = await send(url, { path, key: k });
        expect(replay.status, path).toBe(first.status);
        expect(replay.body.equals(first.body), path).toBe(true);
        expect(replay.headers['content-type'], path).toBe(first.headers['content-type']);
        expect(replay.headers['idempotent-replayed'], path).toBe('true');
        expect(calls.count(path.slice(1)), path).toBe(1);
        if (path === '/object') {
          expect(replay.headers).toMatchObject({ location: '/things/1', etag: '"e1"', link: '</things>; rel="collection"' });
          expect(first.headers['set-cookie']).toBeDefined();
          expect(replay.headers['set-cookie']).toBeUndefined();
          expect(replay.headers['x-trace']).toBeUndefined();
        }
        if (path === '/status-only') expect(replay.text).toBe('Accepted');
        if (path === '/explicit-null') expect(replay.status).toBe(204);
      }
    });

    it('middleware before the layer sees the same body on the first execution as on the replay: the bytes sent, typed as the handler typed them', async () => {
      const calls = new Calls();
      const seen: Array<{ path: string; buffer: boolean; type: string; length: number | undefined; text: string }> = [];
      const app = new KoaClass();
      app.use(async (ctx, next) => {
        await next();
        const body: unknown = ctx.body;
        seen.push({ path: ctx.path, buffer: Buffer.isBuffer(body), type: ctx.type, length: ctx.length, text: String(body) });
      });
      app.use(idempotency({ store: memoryStore(), scope: 'shared' }));
      app.use((ctx) => {
        ctx.status = 201;
        const n = calls.hit(ctx.path);
        if (ctx.path === '/object') ctx.body = { n, note: 'é' };
        else if (ctx.path === '/text') ctx.body = `order ${n} é`;
        else if (ctx.path === '/status-text') ctx.status = 202; // no body: Koa answers the status text
        else {
          ctx.type = 'application/vnd.api+json';
          ctx.body = { n };
        }
      });
      const url = await listen(app);
      for (const path of ['/object', '/text', '/typed', '/status-text']) {
        const k = key();
        const first = await send(url, { path, key: k });
        const replay = await send(url, { path, key: k });
        expect(replay.headers['idempotent-replayed'], path).toBe('true');
        expect(replay.body.equals(first.body), path).toBe(true);
        expect(first.headers['content-length'], path).toBe(String(first.body.length));
        expect(replay.headers['content-length'], path).toBe(first.headers['content-length']);
        expect(replay.headers['content-type'], path).toBe(first.headers['content-type']);
        const [atFirst, atReplay] = seen.splice(0);
        expect(atFirst, path).toEqual({ ...atReplay, path });
        expect(atFirst!.buffer, path).toBe(true);
        expect(atFirst!.text, path).toBe(first.body.toString('utf8'));
        expect(calls.count(path), path).toBe(1);
      }
      expect(seen).toEqual([]);
    });

    it('per route with @koa/router: only that route is protected, and the full path is fingerprinted', async () => {
      const calls = new Calls();
      const router = new Router();
      const protect = idempotency({ store: memoryStore(), scope: 'shared' });
      router.post('/orders', protect, (ctx) => {
        ctx.status = 201;
        ctx.body = { n: calls.hit('orders'), at: ctx.originalUrl };
      });
      router.post('/open', (ctx) => {
        ctx.body = { n: calls.hit('open') };
      });
      const outer = new Router();
      outer.use('/eu', router.routes());
      outer.use('/us', router.routes());
      const app = new KoaClass();
      app.use(outer.routes());
      const url = await listen(app);
      const k = key();
      expect((await send(url, { path: '/eu/orders', key: k })).json()).toEqual({ n: 1, at: '/eu/orders' });
      expectProblem(await send(url, { path: '/us/orders', key: k }), 422, 'key-reused');
      expect((await send(url, { path: '/eu/orders', key: k })).headers['idempotent-replayed']).toBe('true');
      await send(url, { path: '/eu/open', key: k });
      await send(url, { path: '/eu/open', key: k });
      expect([calls.count('orders'), calls.count('open')]).toEqual([1, 2]);
    });

    it('H10: a stream body that fails midway releases the key: the retry runs again', async () => {
      const calls = new Calls();
      const app = new KoaClass();
      app.on('error', () => {}); // Koa reports the stream error; the test only needs the outcome
      app.use(idempotency({ store: memoryStore(), scope: 'shared', waitMs: 0 }));
      app.use((ctx) => {
        calls.hit('failing');
        ctx.type = 'text/plain';
        let started = false;
        ctx.body = new Readable({
          read() {
            if (started) return;
            started = true;
            this.push('partial');
            setTimeout(() => this.destroy(new Error('disk gone')), 10);
          },
        });
      });
      const url = await listen(app);
      const k = key();
      // Koa 2 leaves such a response hanging (it pipes without ending): hang up ourselves.
      await sendAndAbort(url, { path: '/failing', key: k }, 150);
      await sendAndAbort(url, { path: '/failing', key: k }, 150);
      expect(calls.count('failing')).toBe(2);
    });

    it('H12: with ctx.respond = false the body is out of sight: a retry gets 409, never a second run', async () => {
      const calls = new Calls();
      const app = new KoaClass();
      app.use(idempotency({ store: memoryStore(), scope: 'shared' }));
      app.use((ctx) => {
        calls.hit('raw');
        ctx.respond = false;
        ctx.res.writeHead(201, { 'content-type': 'text/plain' }).end('written by hand');
      });
      const url = await listen(app);
      const k = key();
      const first = await send(url, { path: '/raw', key: k });
      expect([first.status, first.text]).toEqual([201, 'written by hand']);
      expectProblem(await send(url, { path: '/raw', key: k }), 409, 'response-not-replayable');
      expect(calls.count('raw')).toBe(1);
    });

    it('bad options are a TypeError when the middleware is created', () => {
      expect(() => idempotency({ store: memoryStore(), scope: 'shared', waitMs: 1.5 })).toThrow('Expected `waitMs` to be a non-negative integer, got 1.5');
      expect(() => idempotency({ store: memoryStore(), scope: 'shared', methods: 'POST' as never })).toThrow(TypeError);
    });

    extra?.({ listen });
  });
}
