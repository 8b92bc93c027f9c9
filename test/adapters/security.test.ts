/**
 * H15 / security: a key never crosses principals unless the user chose to share it. Each
 * adapter sits behind the auth middleware its users pick (express-jwt, passport-style
 * `req.user`, @fastify/jwt, koa-jwt), with no `scope` option.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import jwt from 'jsonwebtoken';
import { afterAll, describe, expect, it } from 'vitest';
import { memoryStore } from '../../drivers/memory.js';
import type { IdempotencyOptions } from '../../src/http.js';
import { expectProblem, send, type Reply } from './client.js';

const SECRET = 'test-secret-of-at-least-32-characters!!';
let tokenCounter = 0;
/** A fresh token for `sub`: a different string each time, as a refreshed token is. */
const token = (sub: string) => jwt.sign({ sub, jti: String(++tokenCounter) }, SECRET, { algorithm: 'HS256', expiresIn: 600 });
const auth = (sub: string) => ({ authorization: `Bearer ${token(sub)}` });

interface Server {
  url: string;
  executions: string[];
  close(): Promise<void>;
}

type Options = Omit<IdempotencyOptions<never>, 'store'>;
type Build = (options: Options, executions: string[]) => Promise<http.Server>;

const listen = async (server: http.Server): Promise<string> => {
  if (!server.listening) await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
};

const builds: Record<string, Build> = {
  async 'express 5 + express-jwt'(options, executions) {
    const { default: express } = await import('express');
    const { expressjwt } = await import('express-jwt');
    const { idempotency } = await import('../../adapters/express.js');
    const app = express();
    app.set('env', 'test');
    app.use(expressjwt({ secret: SECRET, algorithms: ['HS256'], credentialsRequired: false }));
    app.use(express.json());
    app.use(idempotency({ store: memoryStore(), ...options } as never));
    app.post('/pay', (req, res) => {
      const payer = (req as { auth?: { sub?: string } }).auth?.sub ?? 'anonymous';
      executions.push(payer);
      res.status(201).json({ payer, n: executions.length });
    });
    return http.createServer(app);
  },
  async 'express 4 + passport-style req.user'(options, executions) {
    const { default: express } = await import('express4');
    const { idempotency } = await import('../../adapters/express.js');
    const app = express();
    app.set('env', 'test');
    // What passport's session or bearer strategy leaves: a user object with an id.
    app.use((req, _res, next) => {
      const header = req.headers.authorization;
      if (header) (req as { user?: unknown }).user = { id: (jwt.verify(header.slice(7), SECRET) as { sub: string }).sub, name: 'x' };
      next();
    });
    app.use(express.json());
    app.use(idempotency({ store: memoryStore(), ...options } as never) as never);
    app.post('/pay', (req, res) => {
      const payer = (req as { user?: { id: string } }).user?.id ?? 'anonymous';
      executions.push(payer);
      res.status(201).json({ payer, n: executions.length });
    });
    return http.createServer(app);
  },
  async 'fastify + @fastify/jwt'(options, executions) {
    const { default: Fastify } = await import('fastify');
    const { default: fastifyJwt } = await import('@fastify/jwt');
    const { idempotency } = await import('../../adapters/fastify.js');
    const app = Fastify();
    await app.register(fastifyJwt, { secret: SECRET });
    app.addHook('onRequest', async (request) => {
      if (request.headers.authorization) await request.jwtVerify();
    });
    await app.register(idempotency, { store: memoryStore(), ...options } as never);
    app.post('/pay', async (request, reply) => {
      const payer = (request.user as { sub?: string } | undefined)?.sub ?? 'anonymous';
      executions.push(payer);
      return reply.code(201).send({ payer, n: executions.length });
    });
    await app.ready();
    return app.server;
  },
  async 'koa + koa-jwt'(options, executions) {
    const { default: Koa } = await import('koa');
    const { default: koaJwt } = await import('koa-jwt');
    const { bodyParser } = await import('@koa/bodyparser');
    const { idempotency } = await import('../../adapters/koa/index.js');
    const app = new Koa();
    app.use(koaJwt({ secret: SECRET, passthrough: true }) as never);
    app.use(idempotency({ store: memoryStore(), ...options } as never));
    app.use(bodyParser());
    app.use(async (ctx) => {
      const payer = (ctx.state.user as { sub?: string } | undefined)?.sub ?? 'anonymous';
      executions.push(payer);
      ctx.status = 201;
      ctx.body = { payer, n: executions.length };
    });
    return http.createServer(app.callback());
  },
  async 'koa 2 + koa-passport-style ctx.state.user'(options, executions) {
    const { default: Koa } = await import('koa2');
    const { idempotency } = await import('../../adapters/koa/index.js');
    const app = new Koa();
    app.use(async (ctx, next) => {
      const header = ctx.get('authorization');
      if (header) ctx.state.user = { id: (jwt.verify(header.slice(7), SECRET) as { sub: string }).sub };
      await next();
    });
    app.use(idempotency({ store: memoryStore(), ...options } as never) as never);
    app.use(async (ctx) => {
      const payer = (ctx.state.user as { id?: string } | undefined)?.id ?? 'anonymous';
      executions.push(payer);
      ctx.status = 201;
      ctx.body = { payer, n: executions.length };
    });
    return http.createServer(app.callback());
  },
  async 'hono + hono/jwt'(options, executions) {
    const { Hono } = await import('hono');
    const { jwt: honoJwt } = await import('hono/jwt');
    const { createAdaptorServer } = await import('@hono/node-server');
    const { idempotency } = await import('../../adapters/hono/index.js');
    const app = new Hono();
    const verify = honoJwt({ secret: SECRET, alg: 'HS256' });
    // Optional authentication: hono/jwt answers 401 without a token, so it runs only with one.
    app.use((c, next) => (c.req.header('authorization') ? verify(c, next) : next()));
    app.use(idempotency({ store: memoryStore(), ...options } as never));
    app.post('/pay', (c) => {
      const payer = (c.get('jwtPayload') as { sub?: string } | undefined)?.sub ?? 'anonymous';
      executions.push(payer);
      return c.json({ payer, n: executions.length }, 201);
    });
    return createAdaptorServer({ fetch: app.fetch }) as http.Server;
  },
  async "hono + session-style c.set('user')"(options, executions) {
    const { Hono } = await import('hono');
    const { createAdaptorServer } = await import('@hono/node-server');
    const { idempotency } = await import('../../adapters/hono/index.js');
    const app = new Hono<{ Variables: { user: { id: string } | undefined } }>();
    // What session middleware (Better Auth's Hono example, for one) leaves: a user with an id.
    app.use(async (c, next) => {
      const header = c.req.header('authorization');
      c.set('user', header ? { id: (jwt.verify(header.slice(7), SECRET) as { sub: string }).sub } : undefined);
      await next();
    });
    app.use(idempotency({ store: memoryStore(), ...options } as never));
    app.post('/pay', (c) => {
      const payer = c.get('user')?.id ?? 'anonymous';
      executions.push(payer);
      return c.json({ payer, n: executions.length }, 201);
    });
    return createAdaptorServer({ fetch: app.fetch }) as http.Server;
  },
  async 'fetch handler + scope from its own auth'(options, executions) {
    const { withIdempotency } = await import('../../adapters/fetch.js');
    const { fetchServer } = await import('./fetch-server.js');
    const principal = (request: Request) => {
      const header = request.headers.get('authorization');
      return header ? (jwt.verify(header.slice(7), SECRET) as { sub: string }).sub : undefined;
    };
    // The fetch API has no convention: the scope is always written out.
    const handler = withIdempotency(
      async (request: Request) => {
        const payer = principal(request) ?? 'anonymous';
        executions.push(payer);
        return Response.json({ payer, n: executions.length }, { status: 201 });
      },
      { store: memoryStore(), scope: principal, ...options } as never,
    );
    return fetchServer(handler);
  },
  async 'node http + scope from its own auth'(options, executions) {
    const { withIdempotency } = await import('../../adapters/node.js');
    const principal = (req: http.IncomingMessage) => {
      const header = req.headers.authorization;
      return header ? (jwt.verify(header.slice(7), SECRET) as { sub: string }).sub : undefined;
    };
    // Node http has no convention: the scope is always written out.
    const handler = withIdempotency(
      async (req, res) => {
        const payer = principal(req) ?? 'anonymous';
        executions.push(payer);
        res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ payer, n: executions.length }));
      },
      { store: memoryStore(), scope: principal, ...options } as never,
    );
    return http.createServer((req, res) => void handler(req as never, res));
  },
};

const servers: Server[] = [];
afterAll(async () => {
  for (const s of servers) await s.close();
});

async function start(name: string, options: Options = {}): Promise<Server> {
  const executions: string[] = [];
  const server = await builds[name]!(options, executions);
  const url = await listen(server);
  const running = { url, executions, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
  servers.push(running);
  return running;
}

const pay = (server: Server, key: string, headers: Record<string, string>): Promise<Reply> =>
  send(server.url, { path: '/pay', key, body: { amount: 10 }, headers });

describe.each(Object.keys(builds))('%s', (name) => {
  it('H15/security: two principals, same key and body: each runs its own operation, never sees the other\'s response', async () => {
    const server = await start(name);
    const alice = await pay(server, 'order-1001', auth('alice'));
    expect(alice.status, alice.text).toBe(201);
    expect(alice.json()).toEqual({ payer: 'alice', n: 1 });
    const bob = await pay(server, 'order-1001', auth('bob'));
    expect(bob.status, bob.text).toBe(201);
    expect(bob.headers['idempotent-replayed']).toBeUndefined();
    expect(bob.json()).toEqual({ payer: 'bob', n: 2 });
    expect(server.executions).toEqual(['alice', 'bob']);
  });

  it('H7/security: the same principal retrying, with a refreshed token, gets the replay', async () => {
    const server = await start(name);
    const first = await pay(server, 'order-2002', auth('carol'));
    const retry = await pay(server, 'order-2002', auth('carol')); // another token, same identity
    expect(retry.status).toBe(201);
    expect(retry.headers['idempotent-replayed']).toBe('true');
    expect(retry.body.equals(first.body)).toBe(true);
    expect(server.executions).toEqual(['carol']);
  });

  if (!name.startsWith('node') && !name.startsWith('fetch')) {
    it('security: no scope option and no authenticated user -> 500 scope-required saying what to write; nothing runs or is stored', async () => {
      const server = await start(name);
      const reply = await pay(server, 'order-3003', {});
      const problem = expectProblem(reply, 500, 'scope-required');
      expect(problem.detail).toMatch(/scope: 'shared'/);
      expect(problem.detail).toMatch(/scope: \(/);
      expect(server.executions).toEqual([]);
      // Once authenticated, the same key is simply new.
      expect((await pay(server, 'order-3003', auth('dave'))).status).toBe(201);
    });
  }

  it("security: scope: 'shared' is the explicit opt-in to one key space for every client", async () => {
    const server = await start(name, { scope: 'shared' });
    const alice = await pay(server, 'order-4004', auth('alice'));
    const bob = await pay(server, 'order-4004', auth('bob'));
    expect(bob.headers['idempotent-replayed']).toBe('true');
    expect(bob.body.equals(alice.body)).toBe(true);
    expect(server.executions).toEqual(['alice']);
  });
});

describe('adapters without a user convention', () => {
  it('security: Node http without `scope` refuses to start, and the error says what to write', async () => {
    const { withIdempotency } = await import('../../adapters/node.js');
    expect(() => withIdempotency(() => undefined, { store: memoryStore() })).toThrow(
      /Expected `scope`.*scope: \(req\) => req\.user\.id.*scope: 'shared'/,
    );
  });

  it('security: a fetch handler without `scope` refuses to start, and the error says what to write', async () => {
    const { withIdempotency } = await import('../../adapters/fetch.js');
    expect(() => withIdempotency(async () => new Response(), { store: memoryStore() })).toThrow(
      /Expected `scope`.*scope: \(request\) =>.*scope: 'shared'/,
    );
  });

  it('security: a scope that is neither a function nor "shared" is a TypeError', async () => {
    const { idempotency } = await import('../../adapters/express.js');
    expect(() => idempotency({ store: memoryStore(), scope: 'tenant' as never })).toThrow(
      "Expected `scope` to be a function or 'shared', got \"tenant\"",
    );
  });
});
