/**
 * What only the Express adapter has to get right, run on Express 5 and 4: body parser
 * order, every way Express sends a response, per-route use, mounted routers, errors.
 * Run by test/adapters/express.test.ts (Express 5) and express4.test.ts.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import type express5 from 'express';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createStore } from '../../drivers/create-store.js';
import { memoryStore } from '../../drivers/memory.js';
import { idempotency } from '../../adapters/express.js';
import { hasRequestTransaction, inTransaction } from '../../src/transaction.js';
import { Calls, readAll } from '../adapters/apps.js';
import { expectProblem, send, sendAndAbortWhen } from '../adapters/client.js';

type Express = typeof express5;
type Handler = (req: express5.Request, res: express5.Response) => unknown;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export interface ExpressSuiteOptions {
  /**
   * Own cases, inside the suite's describe: `listen(app)` serves an app on a free port (closed
   * after each case) and gives its URL; `route(handler)` passes a rejection on to Express 4 too.
   */
  extra?: (context: { listen: (app: express5.Express) => Promise<string>; route: (handler: Handler) => express5.RequestHandler }) => void;
}

export function expressSuite(name: string, express: Express, { extra }: ExpressSuiteOptions = {}): void {
  describe(`${name} adapter specifics`, () => {
    const servers: http.Server[] = [];
    afterEach(async () => {
      for (const server of servers.splice(0)) {
        server.closeAllConnections();
        await new Promise((resolve) => server.close(resolve));
      }
    });
    const listen = async (app: express5.Express): Promise<string> => {
      const server = http.createServer(app);
      servers.push(server);
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    };
    // Express 4 does not pass rejected promises on: do it as Express 5 does.
    const route =
      (handler: Handler): express5.RequestHandler =>
      (req, res, next) => {
        Promise.resolve()
          .then(() => handler(req, res))
          .catch(next);
      };
    const key = () => randomUUID();

    it('two layers on one response (app-wide Idempotency-Key and a route\'s own header and store): both store it, each replays it', async () => {
      const calls = new Calls();
      const app = express();
      app.use(express.json());
      app.use(idempotency({ store: memoryStore(), scope: 'shared' }));
      app.post(
        '/orders',
        idempotency({ store: memoryStore(), scope: 'shared', header: 'X-Request-Id' }),
        route((req, res) => res.status(201).json({ n: calls.hit('orders') })),
      );
      const url = await listen(app);
      const k = key();
      const r = key();
      const first = await send(url, { path: '/orders', key: k, headers: { 'X-Request-Id': r }, body: { a: 1 } });
      expect(first.status).toBe(201);
      expect(first.json()).toEqual({ n: 1 });
      // The outer layer replays; with a new outer key, the inner layer does.
      for (const outer of [k, key()]) {
        const again = await send(url, { path: '/orders', key: outer, headers: { 'X-Request-Id': r }, body: { a: 1 } });
        expect(again.status).toBe(201);
        expect(again.json()).toEqual({ n: 1 });
        expect(again.headers['idempotent-replayed']).toBe('true');
      }
      expect(calls.count('orders')).toBe(1);
    });

    it('after express.json(): the parsed req.body is fingerprinted (key order free, 422 on change) and reaches the handler', async () => {
      const calls = new Calls();
      const app = express();
      app.use(express.json());
      app.use(idempotency({ store: memoryStore(), scope: 'shared' }));
      app.post('/orders', route((req, res) => res.status(201).json({ n: calls.hit('orders'), got: req.body })));
      const url = await listen(app);
      const k = key();
      const first = await send(url, { path: '/orders', key: k, body: '{"a":1,"b":[2]}', contentType: 'application/json' });
      expect(first.json()).toEqual({ n: 1, got: { a: 1, b: [2] } });
      const reordered = await send(url, { path: '/orders', key: k, body: '{"b":[2], "a":1}', contentType: 'application/json' });
      expect(reordered.headers['idempotent-replayed']).toBe('true');
      expectProblem(await send(url, { path: '/orders', key: k, body: { a: 2, b: [2] } }), 422, 'key-reused');
      expect(calls.count('orders')).toBe(1);
    });

    it('H14: after express.json() with a verify hook that keeps req.rawBody: numbers and bytes count as sent', async () => {
      const calls = new Calls();
      const app = express();
      app.use(express.json({ verify: (req, _res, buf) => void ((req as unknown as { rawBody?: Buffer }).rawBody = buf) }));
      app.use(idempotency({ store: memoryStore(), scope: 'shared' }));
      app.post('/orders', route((req, res) => res.status(201).json({ n: calls.hit('orders'), got: req.body })));
      const url = await listen(app);
      const k = key();
      const json = (body: string | Buffer) => ({ path: '/orders', key: k, body: Buffer.from(body), contentType: 'application/json' });
      expect((await send(url, json('{"id":12345678901234567890}'))).status).toBe(201);
      expectProblem(await send(url, json('{"id":12345678901234567891}')), 422, 'key-reused');
      expect((await send(url, json('{ "id": 12345678901234567890 }'))).headers['idempotent-replayed']).toBe('true');
      const bytes = key();
      const bad = (byte: number) => ({ ...json(Buffer.from([...Buffer.from('{"a":"'), byte, ...Buffer.from('"}')])), key: bytes });
      expect((await send(url, bad(0xff))).status).toBe(201);
      expectProblem(await send(url, bad(0xfe)), 422, 'key-reused');
      expect(calls.count('orders')).toBe(2);
    });

    it('without a body parser: the handler still reads the raw body stream, and finds req.body parsed', async () => {
      const app = express();
      app.use(idempotency({ store: memoryStore(), scope: 'shared' }));
      app.post(
        '/raw',
        route(async (req, res) => {
          const raw = (await readAll(req)).toString('utf8');
          res.json({ raw, parsed: req.body });
        }),
      );
      const url = await listen(app);
      const json = await send(url, { path: '/raw', key: key(), body: { x: 'ü' } });
      expect(json.json()).toEqual({ raw: '{"x":"ü"}', parsed: { x: 'ü' } });
      const form = await send(url, { path: '/raw', key: key(), body: 'a=1&b=two', contentType: 'application/x-www-form-urlencoded' });
      expect(form.json()).toEqual({ raw: 'a=1&b=two', parsed: { a: '1', b: 'two' } });
      // A parser after the layer reads the restored stream as usual.
      const withText = express();
      withText.use(idempotency({ store: memoryStore(), scope: 'shared' }));
      withText.use(express.text());
      withText.post('/text', route((req, res) => res.send(`got ${req.body}`)));
      const textUrl = await listen(withText);
      expect((await send(textUrl, { path: '/text', key: key(), body: 'hello' })).text).toBe('got hello');
    });

    it('H7: res.redirect, res.sendFile, res.write streams, res.send(Buffer) and res.end are captured and replayed byte for byte', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'idem-express-'));
      const file = join(dir, 'receipt.txt');
      writeFileSync(file, 'receipt '.repeat(500));
      const calls = new Calls();
      const app = express();
      app.use(idempotency({ store: memoryStore(), scope: 'shared' }));
      app.post('/redirect', route((_req, res) => res.redirect(303, `/orders/${calls.hit('redirect')}`)));
      app.post(
        '/file',
        route((_req, res) => {
          calls.hit('file');
          res.status(201).sendFile(file);
        }),
      );
      app.post(
        '/write',
        route(async (_req, res) => {
          res.status(202).type('text/plain');
          res.write('a,');
          await sleep(10);
          res.write(Buffer.from('b,'));
          res.end(`c${calls.hit('write')}`);
        }),
      );
      app.post('/buffer', route((_req, res) => res.send(Buffer.from([0, 1, 2, 255, calls.hit('buffer')]))));
      app.post(
        '/end',
        route((_req, res) => {
          res.statusCode = 200;
          res.setHeader('etag', '"v1"');
          res.end(`plain ${calls.hit('end')}`);
        }),
      );
      const url = await listen(app);
      for (const path of ['/redirect', '/file', '/write', '/buffer', '/end']) {
        const k = key();
        const first = await send(url, { path, key: k });
        const replay = await send(url, { path, key: k });
        expect(replay.status, path).toBe(first.status);
        expect(replay.body.equals(first.body), path).toBe(true);
        expect(replay.headers['content-type'], path).toBe(first.headers['content-type']);
        expect(replay.headers.location, path).toBe(first.headers.location);
        expect(replay.headers.etag, path).toBe(first.headers.etag);
        expect(replay.headers['idempotent-replayed'], path).toBe('true');
        expect(calls.count(path.slice(1)), path).toBe(1);
      }
    });

    it('per route: app.post(path, idempotency(options), handler) protects that route only', async () => {
      const calls = new Calls();
      const app = express();
      app.use(express.json());
      app.post('/protected', idempotency({ store: memoryStore(), scope: 'shared', waitMs: 0 }), (_req, res) => {
        res.status(201).json({ n: calls.hit('protected') });
      });
      app.post('/open', (_req, res) => {
        res.status(201).json({ n: calls.hit('open') });
      });
      const url = await listen(app);
      const k = key();
      await send(url, { path: '/protected', key: k });
      expect((await send(url, { path: '/protected', key: k })).headers['idempotent-replayed']).toBe('true');
      expectProblem(await send(url, { path: '/protected' }), 400, 'key-missing');
      await send(url, { path: '/open', key: k });
      await send(url, { path: '/open', key: k });
      expect([calls.count('protected'), calls.count('open')]).toEqual([1, 2]);
    });

    it('H14: under mounted routers the full path (req.originalUrl) is fingerprinted', async () => {
      const calls = new Calls();
      const router = express.Router();
      router.use(idempotency({ store: memoryStore(), scope: 'shared' }));
      router.post('/orders', (req, res) => {
        res.status(201).json({ n: calls.hit('orders'), at: req.originalUrl });
      });
      const app = express();
      app.use('/eu', router);
      app.use('/us', router);
      const url = await listen(app);
      const k = key();
      expect((await send(url, { path: '/eu/orders', key: k })).json()).toEqual({ n: 1, at: '/eu/orders' });
      // The same key on the other mount is another request, not a replay of the first.
      expectProblem(await send(url, { path: '/us/orders', key: k }), 422, 'key-reused');
      expect((await send(url, { path: '/eu/orders', key: k })).headers['idempotent-replayed']).toBe('true');
    });

    it('H10: an error handler answering a thrown error with 500 releases the key', async () => {
      const calls = new Calls();
      const app = express();
      app.use(idempotency({ store: memoryStore(), scope: 'shared' }));
      app.post(
        '/fails',
        route(() => {
          calls.hit('fails');
          throw new Error('boom');
        }),
      );
      app.use((_error: unknown, _req: express5.Request, res: express5.Response, _next: express5.NextFunction) => {
        res.status(500).json({ error: 'internal' });
      });
      const url = await listen(app);
      const k = key();
      const replies = [await send(url, { path: '/fails', key: k }), await send(url, { path: '/fails', key: k })];
      expect(replies.map((r) => r.status)).toEqual([500, 500]);
      expect(replies[1]!.headers['idempotent-replayed']).toBeUndefined();
      expect(calls.count('fails')).toBe(2);
    });

    it('H10 H17: an error after the headers went out (Express destroys the socket) frees the key within its lease, never stuck', async () => {
      const calls = new Calls();
      const app = express();
      app.set('env', 'test');
      app.use(idempotency({ store: memoryStore(), scope: 'shared', leaseMs: 200, waitMs: 0 }));
      app.post(
        '/half',
        route(async (_req, res) => {
          calls.hit('half');
          res.status(200).type('text/plain');
          res.write('partial');
          await sleep(20);
          throw new Error('failed mid-response');
        }),
      );
      const url = await listen(app);
      const k = key();
      await expect(send(url, { path: '/half', key: k })).rejects.toThrow();
      await sleep(350); // the lease (200 ms) is no longer renewed once the socket is gone
      await expect(send(url, { path: '/half', key: k })).rejects.toThrow();
      expect(calls.count('half')).toBe(2);
    });

    it('`scope` throwing is passed to Express error handling: 500, handler not run', async () => {
      const calls = new Calls();
      const app = express();
      app.set('env', 'test');
      app.use(
        idempotency({
          store: memoryStore(),
          scope: () => {
            throw new Error('no tenant');
          },
        }),
      );
      app.post('/orders', (_req, res) => void res.json({ n: calls.hit('orders') }));
      const url = await listen(app);
      expect((await send(url, { path: '/orders', key: key() })).status).toBe(500);
      expect(calls.count('orders')).toBe(0);
    });

    // Captured without adding properties to Express's response (the wrappers sit once on
    // Express's own response object: adapters/internal/express-response.ts, on Express 4 and
    // 5); the cases below are where that must still hold.
    const ownMethods = (res: http.ServerResponse) => ['writeHead', 'write', 'end'].filter((m) => Object.hasOwn(res, m));

    it('the response gets no own writeHead / write / end from the layer, and an app without a layer on the same Express answers as before', async () => {
      const calls = new Calls();
      const seen: string[][] = [];
      const app = express();
      app.use(idempotency({ store: memoryStore(), scope: 'shared' }));
      app.post(
        '/orders',
        route((_req, res) => {
          seen.push(ownMethods(res));
          res.status(201).json({ n: calls.hit('orders') });
        }),
      );
      const plain = express();
      plain.post('/orders', (_req, res) => {
        seen.push(ownMethods(res));
        res.status(200).type('text/plain');
        res.write('a,');
        res.end('b');
      });
      const url = await listen(app);
      const plainUrl = await listen(plain);
      const k = key();
      expect((await send(url, { path: '/orders', key: k })).json()).toEqual({ n: 1 });
      const replay = await send(url, { path: '/orders', key: k });
      expect(replay.headers['idempotent-replayed']).toBe('true');
      expect(replay.json()).toEqual({ n: 1 });
      for (let i = 0; i < 2; i++) {
        const answer = await send(plainUrl, { path: '/orders', key: k });
        expect([answer.status, answer.text, answer.headers['idempotent-replayed']]).toEqual([200, 'a,b', undefined]);
      }
      expect(seen).toEqual([[], [], []]);
      expect(calls.count('orders')).toBe(1);
    });

    it('a mounted sub-app (app.use("/api", sub)) with the layer in the parent, in the sub-app, or in both: captured, replayed, run once', async () => {
      const calls = new Calls();
      const seen: string[][] = [];
      const handler = (name: string) =>
        route((req, res) => {
          seen.push(ownMethods(res));
          res.status(201).json({ n: calls.hit(name), at: req.originalUrl });
        });
      // The layer in the parent, the handler in a sub-app (the response changes prototype on the way in and out).
      const sub = express();
      sub.post('/orders', handler('parent-layer'));
      const parent = express();
      parent.use(idempotency({ store: memoryStore(), scope: 'shared' }));
      parent.use('/api', sub);
      // The layer in the sub-app; the parent has none.
      const guarded = express();
      guarded.use(express.json());
      guarded.use(idempotency({ store: memoryStore(), scope: 'shared' }));
      guarded.post('/orders', handler('sub-layer'));
      const outer = express();
      outer.use('/api', guarded);
      // Both: a layer in the parent and another in the sub-app, on the same response.
      const inner = express();
      inner.use(idempotency({ store: memoryStore(), scope: 'shared', header: 'X-Request-Id' }));
      inner.post('/orders', handler('both'));
      const both = express();
      both.use(idempotency({ store: memoryStore(), scope: 'shared' }));
      both.use('/api', inner);
      for (const [app, name] of [
        [parent, 'parent-layer'],
        [outer, 'sub-layer'],
        [both, 'both'],
      ] as const) {
        const url = await listen(app);
        const k = key();
        const r = key();
        const first = await send(url, { path: '/api/orders', key: k, headers: { 'X-Request-Id': r }, body: { a: 1 } });
        expect([first.status, first.json()], name).toEqual([201, { n: 1, at: '/api/orders' }]);
        // Replayed by the outer layer, and (for `both`) by the inner one under a new outer key.
        for (const again of [k, ...(name === 'both' ? [key()] : [])]) {
          const replay = await send(url, { path: '/api/orders', key: again, headers: { 'X-Request-Id': r }, body: { a: 1 } });
          expect([replay.status, replay.json(), replay.headers['idempotent-replayed']], name).toEqual([201, { n: 1, at: '/api/orders' }, 'true']);
        }
        expect(calls.count(name), name).toBe(1);
      }
      // One layer: no own methods; two layers: the second one falls back to its own.
      expect(seen.slice(0, 2)).toEqual([[], []]);
      expect(seen[2]).toEqual(['writeHead', 'write', 'end']);
    });

    it('a middleware that replaces res.end and res.write on the response (as compression does), before or after the layer: the client gets the same bytes first and on replay', async () => {
      // Upper-cases the body on its way out, through the methods it saved: the ones it found
      // on the response, or Node's own (what it finds before the layer's first capture).
      const shout =
        (saveFrom: 'response' | 'node'): express5.RequestHandler =>
        (_req, res, next) => {
          const from = saveFrom === 'node' ? http.ServerResponse.prototype : res;
          const write = from.write as (...args: unknown[]) => boolean;
          const end = from.end as (...args: unknown[]) => unknown;
          const upper = (chunk: unknown) =>
            typeof chunk === 'string' ? chunk.toUpperCase() : chunk instanceof Uint8Array ? Buffer.from(Buffer.from(chunk).toString().toUpperCase()) : chunk;
          res.removeHeader('content-length');
          res.write = function (this: unknown, chunk: unknown, ...rest: unknown[]) {
            res.removeHeader('content-length');
            return write.call(this, upper(chunk), ...rest);
          } as typeof res.write;
          res.end = function (this: unknown, chunk?: unknown, ...rest: unknown[]) {
            if (!res.headersSent) res.removeHeader('content-length');
            return end.call(this, upper(chunk), ...rest);
          } as typeof res.end;
          next();
        };
      const calls = new Calls();
      for (const [place, saveFrom] of [
        ['before', 'response'],
        ['before', 'node'],
        ['after', 'response'],
      ] as const) {
        const name = `${place}-${saveFrom}`;
        const app = express();
        if (place === 'before') app.use(shout(saveFrom));
        app.use(idempotency({ store: memoryStore(), scope: 'shared' }));
        if (place === 'after') app.use(shout(saveFrom));
        app.post(
          '/orders',
          route((_req, res) => {
            res.status(201).json({ n: calls.hit(name), name });
          }),
        );
        app.post(
          '/stream',
          route(async (_req, res) => {
            res.status(202).type('text/plain');
            res.write('a,');
            await sleep(5);
            res.end(`b${calls.hit(`${name}-stream`)}`);
          }),
        );
        const url = await listen(app);
        const k = key();
        const first = await send(url, { path: '/orders', key: k });
        const replay = await send(url, { path: '/orders', key: k });
        expect([first.status, first.text], name).toEqual([201, `{"N":1,"NAME":"${name.toUpperCase()}"}`]);
        expect([replay.status, replay.text, replay.headers['idempotent-replayed']], name).toEqual([201, first.text, 'true']);
        const s = key();
        const streamed = await send(url, { path: '/stream', key: s });
        const streamReplay = await send(url, { path: '/stream', key: s });
        expect([streamed.status, streamed.text], name).toEqual([202, 'A,B1']);
        expect([streamReplay.status, streamReplay.text, streamReplay.headers['idempotent-replayed']], name).toEqual([202, 'A,B1', 'true']);
        expect([calls.count(name), calls.count(`${name}-stream`)], name).toEqual([1, 1]);
      }
    });

    it("end, write or getHeaders replaced on the app's own response object (app.response): the layer finds them there, as on the response itself, first and on replay", async () => {
      // The layer reads a response's methods from its prototype (never by a load on the
      // response), and must still find wrappers put on the app's response object, above
      // Express's own. With end and write replaced it records the response itself; with
      // getHeaders alone it keeps the shared capture and reads the headers through it.
      for (const replaced of [['write', 'end', 'getHeaders'], ['getHeaders']] as const) {
        const name = replaced.join('-');
        const calls = new Calls();
        const app = express();
        const proto = app.response as unknown as Record<string, (...args: unknown[]) => unknown>;
        const seen: string[] = [];
        for (const method of replaced) {
          const original = proto[method]!;
          proto[method] = function (this: unknown, ...args: unknown[]) {
            seen.push(method);
            return original.apply(this, args);
          };
        }
        app.use(express.json());
        app.use(idempotency({ store: memoryStore(), scope: 'shared' }));
        app.post(
          '/orders',
          route((_req, res) => {
            res.status(201).json({ n: calls.hit(name) });
          }),
        );
        const url = await listen(app);
        const k = key();
        const first = await send(url, { path: '/orders', key: k, body: { a: 1 } });
        expect([first.status, first.text], name).toEqual([201, '{"n":1}']);
        expect(seen, name).toContain('getHeaders');
        if (replaced.includes('end' as never)) expect(seen, name).toContain('end');
        seen.length = 0;
        const replay = await send(url, { path: '/orders', key: k, body: { a: 1 } });
        expect([replay.status, replay.text, replay.headers['idempotent-replayed']], name).toEqual([201, first.text, 'true']);
        expect(seen, name).toEqual(replaced.includes('end' as never) ? ['end'] : []);
        expect(calls.count(name), name).toBe(1);
      }
    });

    it('in a sub-app, res.json / res.send / res.redirect / res.sendFile / streams are captured and replayed, a thrown error releases the key, a client that left gets the replay', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'idem-express-sub-'));
      const file = join(dir, 'receipt.txt');
      writeFileSync(file, 'receipt '.repeat(500));
      const calls = new Calls();
      let started!: () => void;
      const sub = express();
      sub.post('/json', route((_req, res) => res.status(201).json({ n: calls.hit('json') })));
      sub.post('/send', route((_req, res) => res.send(`sent ${calls.hit('send')}`)));
      sub.post('/redirect', route((_req, res) => res.redirect(303, `/orders/${calls.hit('redirect')}`)));
      sub.post(
        '/file',
        route((_req, res) => {
          calls.hit('file');
          res.sendFile(file);
        }),
      );
      sub.post(
        '/stream',
        route(async (_req, res) => {
          res.type('text/plain');
          res.write('x,');
          await sleep(5);
          res.end(`y${calls.hit('stream')}`);
        }),
      );
      sub.post(
        '/fails',
        route(() => {
          calls.hit('fails');
          throw new Error('boom');
        }),
      );
      sub.post(
        '/slow',
        route(async (_req, res) => {
          started();
          await sleep(60);
          res.status(201).json({ n: calls.hit('slow') });
        }),
      );
      sub.use((_error: unknown, _req: express5.Request, res: express5.Response, _next: express5.NextFunction) => {
        res.status(500).json({ error: 'internal' });
      });
      const app = express();
      app.use(idempotency({ store: memoryStore(), scope: 'shared' }));
      app.use('/api', sub);
      const url = await listen(app);
      for (const path of ['/json', '/send', '/redirect', '/file', '/stream']) {
        const k = key();
        const first = await send(url, { path: `/api${path}`, key: k });
        const replay = await send(url, { path: `/api${path}`, key: k });
        expect(replay.status, path).toBe(first.status);
        expect(replay.body.equals(first.body), path).toBe(true);
        expect(replay.headers['content-type'], path).toBe(first.headers['content-type']);
        expect(replay.headers.location, path).toBe(first.headers.location);
        expect(replay.headers['idempotent-replayed'], path).toBe('true');
        expect(calls.count(path.slice(1)), path).toBe(1);
      }
      const f = key();
      const failures = [await send(url, { path: '/api/fails', key: f }), await send(url, { path: '/api/fails', key: f })];
      expect(failures.map((r) => [r.status, r.headers['idempotent-replayed']])).toEqual([
        [500, undefined],
        [500, undefined],
      ]);
      expect(calls.count('fails')).toBe(2);
      // The client leaves while the handler runs: the handler finishes, its answer is stored.
      const s = key();
      await sendAndAbortWhen(url, { path: '/api/slow', key: s }, () => new Promise<void>((resolve) => (started = resolve)));
      await sleep(150);
      const after = await send(url, { path: '/api/slow', key: s });
      expect([after.status, after.json(), after.headers['idempotent-replayed']]).toEqual([201, { n: 1 }, 'true']);
      expect(calls.count('slow')).toBe(1);
    });

    it('a request is let go once its response is done (stored, released, passed without a key, or run unprotected while the store is down): inTransaction(req) no longer holds it', async () => {
      // Express's requests cannot take a property of ours cheaply, so what inTransaction(req)
      // needs sits in a side table: an entry left there would keep the request, and all it
      // holds, alive through every young-generation collection until the next full one.
      const seen: express5.Request[] = [];
      const during: boolean[] = [];
      const orders = route((req, res) => {
        seen.push(req);
        during.push(hasRequestTransaction(req));
        res.status(201).json({ ok: true });
      });
      const app = express();
      app.use(express.json());
      app.use(idempotency({ store: memoryStore(), scope: 'shared', required: false }));
      app.post('/orders', orders);
      app.post(
        '/fails',
        route((req) => {
          seen.push(req);
          during.push(hasRequestTransaction(req));
          throw new Error('boom');
        }),
      );
      const url = await listen(app);
      expect((await send(url, { path: '/orders', key: key(), body: { a: 1 } })).status).toBe(201);
      expect((await send(url, { path: '/fails', key: key(), body: { a: 1 } })).status).toBe(500);
      expect((await send(url, { path: '/orders', body: { a: 1 } })).status).toBe(201);
      expect(during).toEqual([true, true, true]);
      await vi.waitFor(() => expect(seen.map((req) => hasRequestTransaction(req))).toEqual([false, false, false]), { timeout: 5_000, interval: 5 });
      // Called after its response, inTransaction says why it does not apply.
      await expect(inTransaction(seen[0]!, async () => ({ status: 200 }))).rejects.toThrow(/before the response is sent/);

      // Run unprotected (the store is unreachable and onStoreError is 'continue'): let go too.
      const unreachable = createStore('redis://127.0.0.1:1');
      const unprotected = express();
      unprotected.use(express.json());
      unprotected.use(idempotency({ store: unreachable, scope: 'shared', onStoreError: 'continue', storeTimeoutMs: 500 }));
      unprotected.post('/orders', orders);
      const unprotectedUrl = await listen(unprotected);
      expect((await send(unprotectedUrl, { path: '/orders', key: key(), body: { a: 1 } })).status).toBe(201);
      expect(during).toEqual([true, true, true, true]);
      await vi.waitFor(() => expect(hasRequestTransaction(seen[3]!)).toBe(false), { timeout: 5_000, interval: 5 });
      await unreachable.close();
    });

    it('bad options are a TypeError when the middleware is created', () => {
      expect(() => idempotency({ store: memoryStore(), scope: 'shared', leaseMs: -1 })).toThrow('Expected `leaseMs` to be a positive integer, got -1');
      expect(() => idempotency({ store: 'redis://localhost' as never })).toThrow(TypeError);
    });

    extra?.({ listen, route });
  });
}
