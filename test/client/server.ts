/**
 * The server the client tests talk to: this package's Node adapter on a real store, with
 * routes that misbehave on purpose. It counts handler executions per Idempotency-Key and
 * remembers each key's first answer, and logs the key of every request that reaches it.
 *
 *   POST /orders                  201 {id, key, sku}, a new id per execution
 *   POST /flaky                   500 on a key's first execution, then 201
 *   POST /busy-once?status=&ra=   `status` with Retry-After `ra` on a key's first execution, then 201
 *   POST /busy?status=&ra=        always `status` with Retry-After `ra`
 *   POST /slow?ms=                201 after `ms`
 *   POST /hold                    201 once `release()` is called
 *   GET  /echo                    200 with the request's Idempotency-Key (not wrapped)
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, expect } from 'vitest';
import { withIdempotency, type IdempotentRequest } from '../../adapters/node.js';
import { memoryStore } from '../../drivers/memory.js';
import type { IdempotencyStore } from '../../src/store.js';
import { startFaultyProxy, type Action, type FaultyProxy } from '../helpers/faulty-proxy.js';

export interface OrderServer {
  url: string;
  /** Keys of every request that reached the server, wrapped routes or not, in arrival order. */
  seen: (string | undefined)[];
  executions(key: string): number;
  /** Sum of executions over all keys. */
  totalExecutions(): number;
  /** The body the first execution for `key` answered. */
  firstAnswer(key: string): string | undefined;
  /** Resolves when a /hold handler has started; `release()` lets it answer. */
  holding: Promise<void>;
  release(): void;
  close(): Promise<void>;
}

export async function startOrderServer(store: IdempotencyStore, options: { waitMs?: number } = {}): Promise<OrderServer> {
  const executions = new Map<string, number>();
  const answers = new Map<string, string>();
  const seen: (string | undefined)[] = [];
  let lastId = 0;
  let started!: () => void;
  const holding = new Promise<void>((resolve) => (started = resolve));
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));

  const answer = (res: http.ServerResponse, key: string, status: number, body: object, headers: http.OutgoingHttpHeaders = {}) => {
    const text = JSON.stringify(body);
    if (!answers.has(key)) answers.set(key, text);
    res.writeHead(status, { 'content-type': 'application/json', ...headers }).end(text);
  };

  const handler = withIdempotency(
    async (req: IdempotentRequest, res) => {
      const key = req.headers['idempotency-key'] as string;
      const n = (executions.get(key) ?? 0) + 1;
      executions.set(key, n);
      const url = new URL(req.url!, 'http://x');
      const q = (name: string) => url.searchParams.get(name);
      const order = () => ({ id: ++lastId, key, sku: (req.body as { sku?: string } | undefined)?.sku ?? null });
      switch (url.pathname) {
        case '/orders':
          return answer(res, key, 201, order());
        case '/flaky':
          return n === 1 ? answer(res, key, 500, { error: 'boom' }) : answer(res, key, 201, order());
        case '/busy-once':
          if (n === 1) return answer(res, key, Number(q('status')), { error: 'busy' }, { 'retry-after': q('ra') ?? undefined });
          return answer(res, key, 201, order());
        case '/busy':
          return answer(res, key, Number(q('status')), { error: 'busy' }, { 'retry-after': q('ra') ?? undefined });
        case '/slow':
          await new Promise((resolve) => setTimeout(resolve, Number(q('ms'))));
          return answer(res, key, 201, order());
        case '/hold':
          started();
          await released;
          return answer(res, key, 201, order());
        default:
          res.writeHead(404).end();
      }
    },
    // A function rather than 'shared', so the same test works before and after scope became required.
    { store, scope: () => 'client-tests', ...(options.waitMs === undefined ? {} : { waitMs: options.waitMs }) },
  );

  const server = http.createServer((req, res) => {
    seen.push(req.headers['idempotency-key'] as string | undefined);
    if (req.method === 'GET' && req.url === '/echo') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ key: req.headers['idempotency-key'] ?? null }));
      return;
    }
    void handler(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    executions: (key) => executions.get(key) ?? 0,
    totalExecutions: () => [...executions.values()].reduce((a, b) => a + b, 0),
    firstAnswer: (key) => answers.get(key),
    holding,
    release,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/**
 * A test file's server on a memory store, started before its tests and closed after them,
 * and faulty proxies in front of it that are closed after each test.
 */
export function useOrderServer(options: { waitMs?: number } = {}) {
  const store = memoryStore();
  let server: OrderServer | undefined;
  const proxies: FaultyProxy[] = [];
  beforeAll(async () => {
    server = await startOrderServer(store, options);
  });
  afterEach(async () => {
    await Promise.all(proxies.splice(0).map((p) => p.close()));
  });
  afterAll(async () => {
    await server?.close();
    await store.close();
  });
  return {
    get server(): OrderServer {
      if (!server) throw new Error('the order server is not started yet');
      return server;
    },
    async proxy(plan: (index: number) => Action): Promise<FaultyProxy> {
      const p = await startFaultyProxy(this.server.url, plan);
      proxies.push(p);
      return p;
    },
  };
}

/**
 * `calls` operations, `concurrency` at a time, each with its own key (`send(key)` returns the
 * answer's body); then each key ran exactly once on `servers` and got the first answer.
 */
export async function expectOncePerCall(
  servers: OrderServer[],
  { calls, concurrency, send }: { calls: number; concurrency: number; send: (key: string) => Promise<string> },
): Promise<void> {
  const results: { key: string; body: string }[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < calls) {
        const key = `once-${next++}-${Math.random().toString(36).slice(2)}`;
        results.push({ key, body: await send(key) });
      }
    }),
  );
  expect(results).toHaveLength(calls);
  for (const { key, body } of results) {
    expect(servers.reduce((sum, s) => sum + s.executions(key), 0), key).toBe(1);
    expect(body, key).toBe(servers.map((s) => s.firstAnswer(key)).find((a) => a !== undefined));
  }
}
