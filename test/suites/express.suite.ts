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
import { afterEach, describe, expect, it } from 'vitest';
import { memoryStore } from '../../drivers/memory.js';
import { idempotency } from '../../adapters/express.js';
import { Calls, readAll } from '../adapters/apps.js';
import { expectProblem, send } from '../adapters/client.js';

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
      app.post('/protected', idempotency({ store: memoryStore(), scope: 'shared', wait: 0 }), (_req, res) => {
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
      app.use(idempotency({ store: memoryStore(), scope: 'shared', leaseMs: 200, wait: 0 }));
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

    it('bad options are a TypeError when the middleware is created', () => {
      expect(() => idempotency({ store: memoryStore(), scope: 'shared', leaseMs: -1 })).toThrow('Expected `leaseMs` to be a positive integer, got -1');
      expect(() => idempotency({ store: 'redis://localhost' as never })).toThrow(TypeError);
    });

    extra?.({ listen, route });
  });
}
