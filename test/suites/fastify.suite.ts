/**
 * What only the Fastify plugin has to get right: per-route `config.idempotency`, option
 * checks at registration, inject(), every payload type in onSend, hijacked replies,
 * encapsulated prefixes, chunked bodies over the limit. Run by test/adapters/fastify.test.ts.
 */
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import { Readable } from 'node:stream';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { idempotency } from '../../adapters/fastify.js';
import { memoryStore } from '../../drivers/memory.js';
import { Calls } from '../adapters/apps.js';
import { expectProblem, send } from '../adapters/client.js';

export interface FastifySuiteOptions {
  /** Own cases, inside the suite's describe: `create()` gives an app closed after each case, `listen(app)` serves it and gives its URL. */
  extra?: (context: { create: () => FastifyInstance; listen: (app: FastifyInstance) => Promise<string> }) => void;
}

export function fastifySuite({ extra }: FastifySuiteOptions = {}): void {
  describe('fastify adapter specifics', () => {
    const apps: FastifyInstance[] = [];
    afterEach(async () => {
      for (const app of apps.splice(0)) await app.close();
    });
    const create = () => {
      const app = Fastify({ logger: false });
      apps.push(app);
      return app;
    };
    const listen = async (app: FastifyInstance) => {
      await app.listen({ port: 0, host: '127.0.0.1' });
      return `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
    };
    const key = () => randomUUID();

    it('per-route config: `false` turns it off, an object overrides the plugin options for that route', async () => {
      const calls = new Calls();
      const app = create();
      await app.register(idempotency, { store: memoryStore(), scope: 'shared' });
      app.post('/optional', { config: { idempotency: { required: false } } }, async () => ({ n: calls.hit('optional') }));
      app.post('/no-wait', { config: { idempotency: { waitMs: 0 } } }, async () => {
        await new Promise((resolve) => setTimeout(resolve, 300));
        return { n: calls.hit('no-wait') };
      });
      app.post('/off', { config: { idempotency: false } }, async () => ({ n: calls.hit('off') }));
      app.post('/default', async () => ({ n: calls.hit('default') }));
      const url = await listen(app);

      expect((await send(url, { path: '/optional' })).status).toBe(200);
      expectProblem(await send(url, { path: '/default' }), 400, 'key-missing');
      const k = key();
      const slow = send(url, { path: '/no-wait', key: k });
      await new Promise((resolve) => setTimeout(resolve, 80));
      expectProblem(await send(url, { path: '/no-wait', key: k }), 409, 'request-in-progress');
      expect((await slow).status).toBe(200);
      await send(url, { path: '/off', key: k });
      await send(url, { path: '/off', key: k });
      expect(calls.count('off')).toBe(2);
    });

    it('works with fastify.inject()', async () => {
      const calls = new Calls();
      const app = create();
      await app.register(idempotency, { store: memoryStore(), scope: 'shared' });
      app.post('/orders', async (request, reply) => reply.code(201).send({ n: calls.hit('orders'), got: request.body }));
      const k = key();
      const inject = () => app.inject({ method: 'POST', url: '/orders', headers: { 'idempotency-key': k }, payload: { a: 1 } });
      const first = await inject();
      const second = await inject();
      expect(first.statusCode).toBe(201);
      expect(first.json()).toEqual({ n: 1, got: { a: 1 } });
      expect(second.headers['idempotent-replayed']).toBe('true');
      expect(second.rawPayload.equals(first.rawPayload)).toBe(true);
    });

    it('bad plugin options fail registration; a bad route config fails when the route is declared', async () => {
      const app = create();
      await expect(app.register(idempotency, { store: memoryStore(), scope: 'shared', leaseMs: 0 }).ready()).rejects.toThrow(
        'Expected `leaseMs` to be a positive integer, got 0',
      );
      const other = create();
      await other.register(idempotency, { store: memoryStore(), scope: 'shared' });
      expect(() => other.post('/x', { config: { idempotency: { waitMs: -5 } } }, async () => ({}))).toThrow(
        'Expected `waitMs` to be a non-negative integer, got -5',
      );
      expect(() => other.post('/y', { config: { idempotency: 'yes' as never } }, async () => ({}))).toThrow(TypeError);
    });

    it('is a named, non-encapsulated plugin: routes in prefixed child contexts are covered, with the full path fingerprinted', async () => {
      const calls = new Calls();
      const app = create();
      await app.register(idempotency, { store: memoryStore(), scope: 'shared' });
      expect(app.hasPlugin('idempotency-kit')).toBe(true);
      const orders = async (child: FastifyInstance) => {
        child.post('/orders', async (request) => ({ n: calls.hit('orders'), at: request.url }));
      };
      await app.register(orders, { prefix: '/eu' });
      await app.register(orders, { prefix: '/us' });
      const url = await listen(app);
      const k = key();
      expect((await send(url, { path: '/eu/orders', key: k })).json()).toEqual({ n: 1, at: '/eu/orders' });
      expectProblem(await send(url, { path: '/us/orders', key: k }), 422, 'key-reused');
      expect((await send(url, { path: '/eu/orders', key: k })).headers['idempotent-replayed']).toBe('true');
    });

    it('registered inside the app\'s own setup plugin, its hooks reach that plugin\'s scope: the parent scope it was registered from, not a new one', async () => {
      const calls = new Calls();
      const app = create();
      // A user's setup plugin (encapsulated, as any plain async plugin) registers ours and declares routes itself.
      await app.register(async (scope) => {
        await scope.register(idempotency, { store: memoryStore(), scope: 'shared' });
        scope.post('/orders', async () => ({ n: calls.hit('orders') }));
      });
      app.post('/outside', async () => ({ n: calls.hit('outside') }));
      const url = await listen(app);
      expectProblem(await send(url, { path: '/orders' }), 400, 'key-missing');
      const k = key();
      await send(url, { path: '/orders', key: k });
      expect((await send(url, { path: '/orders', key: k })).headers['idempotent-replayed']).toBe('true');
      expect(calls.count('orders')).toBe(1);
      // The setup plugin is encapsulated: a sibling scope is not covered.
      expect((await send(url, { path: '/outside' })).status).toBe(200);
    });

    it('declares Fastify 5: a Fastify of another major refuses to register it, naming the plugin', async () => {
      for (const version of ['4.29.1', '6.0.0']) {
        const app = create();
        // Fastify checks a plugin's declared range against its own `version` at registration.
        Object.defineProperty(app, 'version', { value: version, configurable: true });
        await expect(app.register(idempotency, { store: memoryStore(), scope: 'shared' }).ready()).rejects.toMatchObject({
          code: 'FST_ERR_PLUGIN_VERSION_MISMATCH',
          message: expect.stringContaining(`idempotency-kit - expected '5.x' fastify version, '${version}' is installed`),
        });
      }
      // The installed Fastify 5 takes it.
      const app = create();
      await app.register(idempotency, { store: memoryStore(), scope: 'shared' }).ready();
      expect(app.version).toMatch(/^5\./);
      expect(app.hasPlugin('idempotency-kit')).toBe(true);
    });

    it('registered again in a child context (another header, another store), each registration keeps its own per-request state', async () => {
      const calls = new Calls();
      const app = create();
      await app.register(idempotency, { store: memoryStore(), scope: 'shared' });
      await app.register(async (child) => {
        await child.register(idempotency, { store: memoryStore(), scope: 'shared', header: 'X-Request-Key', waitMs: 0 });
        child.post('/orders', async () => ({ n: calls.hit('orders') }));
      });
      const url = await listen(app);
      const headers = { 'x-request-key': key() };
      const k = key();
      const first = await send(url, { path: '/orders', key: k, headers });
      expect(first.status, first.text).toBe(200);
      const again = await send(url, { path: '/orders', key: k, headers });
      expect(again.headers['idempotent-replayed']).toBe('true');
      expect(calls.count('orders')).toBe(1);
    });

    it('H7 H12: string, Buffer, Node and web stream payloads are replayed byte for byte; a hijacked reply completes without a body', async () => {
      const calls = new Calls();
      const app = create();
      await app.register(idempotency, { store: memoryStore(), scope: 'shared' });
      app.post('/string', async (_request, reply) => reply.type('text/html').send(`<b>${calls.hit('string')}</b>`));
      app.post('/buffer', async (_request, reply) => reply.send(Buffer.from([0, 255, calls.hit('buffer')])));
      app.post('/node-stream', async (_request, reply) =>
        reply.type('text/csv').send(Readable.from(['a,b\n', `1,${calls.hit('node-stream')}\n`])),
      );
      app.post('/web-stream', async (_request, reply) => {
        const n = calls.hit('web-stream');
        return reply.type('text/plain').send(
          new ReadableStream({
            start(controller) {
              controller.enqueue(new TextEncoder().encode(`web ${n}`));
              controller.close();
            },
          }),
        );
      });
      app.post('/empty', async (_request, reply) => {
        calls.hit('empty');
        return reply.code(204).send();
      });
      app.post('/hijacked', async (_request, reply) => {
        calls.hit('hijacked');
        reply.hijack();
        reply.raw.writeHead(200, { 'content-type': 'text/plain' });
        reply.raw.end('raw bytes');
      });
      const url = await listen(app);
      for (const path of ['/string', '/buffer', '/node-stream', '/web-stream', '/empty']) {
        const k = key();
        const first = await send(url, { path, key: k });
        const replay = await send(url, { path, key: k });
        expect(replay.status, path).toBe(first.status);
        expect(replay.body.equals(first.body), path).toBe(true);
        expect(replay.headers['content-type'], path).toBe(first.headers['content-type']);
        expect(replay.headers['idempotent-replayed'], path).toBe('true');
        expect(calls.count(path.slice(1)), path).toBe(1);
      }
      const k = key();
      expect((await send(url, { path: '/hijacked', key: k })).text).toBe('raw bytes');
      expectProblem(await send(url, { path: '/hijacked', key: k }), 409, 'response-not-replayable');
      expect(calls.count('hijacked')).toBe(1);
    });

    it('H14: a text/plain body is fingerprinted too', async () => {
      const app = create();
      await app.register(idempotency, { store: memoryStore(), scope: 'shared' });
      app.post('/notes', async (request) => ({ got: request.body }));
      const url = await listen(app);
      const k = key();
      expect((await send(url, { path: '/notes', key: k, body: 'first' })).json()).toEqual({ got: 'first' });
      expectProblem(await send(url, { path: '/notes', key: k, body: 'second' }), 422, 'key-reused');
    });

    it('a chunked body (no Content-Length) over maxBodyBytes: 413 body-too-large', async () => {
      const calls = new Calls();
      const app = create();
      await app.register(idempotency, { store: memoryStore(), scope: 'shared', maxBodyBytes: 1000 });
      app.post('/orders', async () => ({ n: calls.hit('orders') }));
      const url = new URL(await listen(app));
      const reply = await new Promise<{ status: number; body: string; type: string | undefined }>((resolve, reject) => {
        const request = http.request(
          {
            host: url.hostname,
            port: url.port,
            method: 'POST',
            path: '/orders',
            headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked', 'idempotency-key': key() },
          },
          (res) => {
            let body = '';
            res.on('data', (chunk) => (body += chunk));
            res.on('end', () => resolve({ status: res.statusCode!, body, type: res.headers['content-type'] }));
          },
        );
        request.on('error', reject);
        request.write('{"note":"');
        request.write('x'.repeat(1500));
        request.end('"}');
      });
      expect(reply.status).toBe(413);
      expect(reply.type).toBe('application/problem+json');
      expect(JSON.parse(reply.body)).toMatchObject({ code: 'body-too-large', status: 413 });
      expect(calls.count('orders')).toBe(0);
    });

    extra?.({ create, listen });
  });
}
