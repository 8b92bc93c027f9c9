/**
 * The test Worker, run by workerd (./workerd.ts, ./config.ts). Which part of it a socket
 * reaches is in the socket's props (`role`):
 *
 *   control  POST /store/<kind>/<method>  one store call with JSON arguments (the contract)
 *            POST /apps                   a conformance scenario's app (fetch or Hono), now served on `app`
 *            GET  /apps/<id>/state        what that app's handlers, store and events saw
 *            GET  /d1/rows?table=         rows in a D1 table, expired ones included
 *   app      the current scenario's app
 *   edge     POST /orders?store=do|d1     a fetch-adapter route as an application writes it,
 *            GET  /count                  and how often its handler ran in this isolate
 *
 * Two services run this bundle (two isolates), both bound to one Durable Object namespace
 * and one D1 database: duplicates sent to both race on the store, as on Cloudflare.
 */
import { createStore } from '../../drivers/create-store.js';
import { d1Store } from '../../drivers/d1.js';
import { durableObjectStore, IdempotencyObject } from '../../drivers/durable-objects.js';
import type { D1DatabaseLike, DurableObjectNamespaceLike } from '../../drivers/cloudflare-bindings.js';
import { Hono } from 'hono';
import { stream as honoStream } from 'hono/streaming';
import { withIdempotency } from '../../adapters/fetch.js';
import { idempotency as honoIdempotency } from '../../adapters/hono/index.js';
import type { IdempotencyEvent } from '../../src/events.js';
import type { IdempotencyStore } from '../../src/store.js';
import { countingStore, hangingStore, type StoreMethod } from '../adapters/store-wrappers.js';
import { Calls, fetchWebApp, honoWebApp, type WebAppOptions } from '../adapters/web-apps.js';
import scenarioFunctions from 'virtual:scenario-functions';
import { fromWire, toWire } from './wire.js';

export { IdempotencyObject };

/** The alarm as shipped, allowed to run every 200 ms instead of every minute. */
export class QuickSweepObject extends IdempotencyObject {
  override sweepIntervalMs = 200;
}

/** Expired records stay until `store.sweep()`: what the maintenance contract counts and sweeps. */
export class ManualSweepObject extends IdempotencyObject {
  override async alarm(): Promise<void> {}
}

interface Env {
  /** IdempotencyObject, SQLite-backed, on disk. */
  IDEMPOTENCY: DurableObjectNamespaceLike;
  /** QuickSweepObject: an IdempotencyObject whose alarm may run every 200 ms. */
  QUICK: DurableObjectNamespaceLike;
  /** ManualSweepObject: an IdempotencyObject whose alarm deletes nothing (for the maintenance contract). */
  MANUAL: DurableObjectNamespaceLike;
  /** IdempotencyObject declared without SQLite storage (`new_classes`): every call fails. */
  BROKEN: DurableObjectNamespaceLike;
  DB: D1DatabaseLike;
  /** A D1 binding whose database service refuses connections. */
  BROKEN_DB: D1DatabaseLike;
  KV: unknown;
}

interface Props {
  role?: 'control' | 'app' | 'edge';
}

interface Context {
  props?: Props;
  waitUntil(promise: Promise<unknown>): void;
}

// ------------------------------------------------------------------ stores

const stores = new Map<string, IdempotencyStore>();

/**
 * The store of `kind`, made once per isolate (a binding is the isolate's, not a request's).
 * Kinds with parameters make stores of their own: `do:<prefix>:<objects>`,
 * `manual:<prefix>` (one object whose alarm does nothing), `d1:<table>:<sweepIntervalMs>`
 * (sweeping in batches of 10).
 */
function storeFor(kind: string, env: Env): IdempotencyStore {
  let store = stores.get(kind);
  if (store) return store;
  const [base, a, b] = kind.split(':');
  switch (base) {
    case 'do':
      store = durableObjectStore({ namespace: env.IDEMPOTENCY, objects: Number(b ?? 4), ...(a ? { prefix: a } : {}) });
      break;
    case 'quick':
      store = durableObjectStore({ namespace: env.QUICK, objects: 1, prefix: a! });
      break;
    case 'manual':
      store = durableObjectStore({ namespace: env.MANUAL, objects: 1, prefix: a! });
      break;
    case 'do-created':
      store = createStore(env.IDEMPOTENCY, { namespace: 'created' });
      break;
    case 'do-broken':
      store = durableObjectStore({ namespace: env.BROKEN, objects: 2, timeoutMs: 1000 });
      break;
    case 'd1':
      store = d1Store({ database: env.DB, ...(a ? { table: a, sweepIntervalMs: Number(b), sweepBatchSize: 10 } : {}) });
      break;
    case 'd1-created':
      store = createStore(env.DB, { namespace: 'created_records' });
      break;
    case 'd1-broken':
      store = d1Store({ database: env.BROKEN_DB, timeoutMs: 1000 });
      break;
    case 'kv-do':
      store = durableObjectStore({ namespace: env.KV as never });
      break;
    case 'kv-d1':
      store = d1Store({ database: env.KV as never });
      break;
    case 'kv':
      store = createStore(env.KV as object);
      break;
    default:
      throw new TypeError(`no store kind ${kind}`);
  }
  stores.set(kind, store);
  return store;
}

const errorOf = (error: unknown) => ({ name: (error as Error)?.name ?? 'Error', message: String((error as Error)?.message ?? error) });

async function storeCall(kind: string, method: string, args: unknown[], env: Env): Promise<Response> {
  try {
    const store = storeFor(kind, env) as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>;
    // Maintenance calls report progress through a callback: it is sent back as a list.
    const progress: number[] = [];
    if (method === 'stats' || method === 'sweep') args = [{ onProgress: (n: number) => progress.push(n) }];
    const value = await store[method]!(...args);
    return new Response(toWire({ value, progress }));
  } catch (error) {
    return new Response(toWire({ error: errorOf(error) }));
  }
}

// ------------------------------------------------------------------ conformance apps

interface ScenarioApp {
  handler: (request: Request, env: Env, ctx: Context) => Promise<Response>;
  calls: Calls;
  storeCalls: Record<StoreMethod, number>;
  events: Array<Record<string, unknown>>;
}

const apps = new Map<number, ScenarioApp>();
let current: ScenarioApp | undefined;
let appIds = 0;

/** Options from JSON: `{ $fn: i }` is the i-th function of the scenarios (generated into the bundle). */
const revive = (options: Record<string, unknown>): Partial<WebAppOptions> =>
  Object.fromEntries(
    Object.entries(options).map(([name, value]) => [
      name,
      typeof value === 'object' && value !== null && typeof (value as { $fn?: unknown }).$fn === 'number'
        ? scenarioFunctions[(value as { $fn: number }).$fn]
        : value,
    ]),
  ) as Partial<WebAppOptions>;

const eventOf = (event: IdempotencyEvent): Record<string, unknown> => {
  const { error, ...rest } = event as IdempotencyEvent & { error?: unknown };
  return error === undefined ? { ...rest } : { ...rest, error: errorOf(error) };
};

function startScenarioApp(spec: { adapter: 'fetch' | 'hono'; store: string; options: Record<string, unknown> }, env: Env): number {
  const calls = new Calls();
  const storeCalls: Record<StoreMethod, number> = { claim: 0, get: 0, complete: 0, release: 0, extend: 0 };
  const events: Array<Record<string, unknown>> = [];
  const base = spec.store === 'hanging' ? hangingStore() : storeFor(spec.store, env);
  const given = revive(spec.options);
  const options: WebAppOptions = {
    store: countingStore(base, storeCalls),
    onEvent: (event) => events.push(eventOf(event)),
    ...('scope' in given ? {} : { scope: 'shared' }),
    ...given,
  };
  let handler: ScenarioApp['handler'];
  if (spec.adapter === 'fetch') handler = fetchWebApp(options, calls) as ScenarioApp['handler'];
  else {
    const hono = honoWebApp(options, calls);
    handler = async (request, e, ctx) => hono.fetch(request, e, ctx as never);
  }
  const app: ScenarioApp = { handler, calls, storeCalls, events };
  const id = ++appIds;
  apps.set(id, app);
  current = app;
  return id;
}

// ------------------------------------------------------------------ the edge app

let executions = 0;
const edgeHandlers = new Map<string, (request: Request, env: Env, ctx: Context) => Promise<Response>>();

/**
 * An order endpoint as an application writes it: the handler takes 150 ms and counts its
 * runs; `/stream` answers in chunks over 600 ms. `store=hanging`: a store that never
 * answers, with a 300 ms store timeout.
 */
function edgeHandler(kind: string, env: Env) {
  let handler = edgeHandlers.get(kind);
  if (!handler) {
    handler = withIdempotency<Request, [Env, Context]>(
      async (request) => {
        const n = ++executions;
        const body = (await request.json()) as Record<string, unknown>;
        if (new URL(request.url).pathname === '/stream') {
          const encoder = new TextEncoder();
          let part = 0;
          const stream = new ReadableStream<Uint8Array>({
            async pull(controller) {
              await new Promise((resolve) => setTimeout(resolve, 150));
              if (++part > 4) controller.close();
              else controller.enqueue(encoder.encode(`part ${part} of run ${n};`));
            },
          });
          return new Response(stream, { status: 201, headers: { 'content-type': 'text/plain' } });
        }
        await new Promise((resolve) => setTimeout(resolve, 150));
        return Response.json({ order: crypto.randomUUID(), n, ...body }, { status: 201, headers: { location: `/orders/${n}` } });
      },
      {
        store: kind === 'hanging' ? hangingStore() : storeFor(kind, env),
        scope: (request) => request.headers.get('x-account') ?? 'public',
        leaseMs: 5000,
        waitMs: 8000,
        ...(kind === 'hanging' ? { storeTimeoutMs: 300 } : {}),
      },
    );
    edgeHandlers.set(kind, handler);
  }
  return handler;
}

/** The same streamed route as a Hono app writes it (`/hono/stream`). */
let honoEdge: Hono | undefined;
function honoEdgeApp(env: Env): Hono {
  if (honoEdge) return honoEdge;
  const app = new Hono();
  app.use(honoIdempotency({ store: storeFor('do', env), scope: 'shared', leaseMs: 5000, waitMs: 8000 }));
  app.post('/hono/stream', (c) => {
    const n = ++executions;
    c.header('content-type', 'text/plain');
    c.status(201);
    return honoStream(c, async (out) => {
      for (let part = 1; part <= 4; part++) {
        await out.sleep(150);
        await out.write(`part ${part} of run ${n};`);
      }
    });
  });
  return (honoEdge = app);
}

// ------------------------------------------------------------------ routing

async function control(request: Request, env: Env): Promise<Response> {
  const url = new URL(request.url);
  const parts = url.pathname.split('/').filter(Boolean);
  if (request.method === 'POST' && parts[0] === 'store' && parts.length === 3) {
    return storeCall(parts[1]!, parts[2]!, fromWire<unknown[]>(await request.text()), env);
  }
  if (request.method === 'POST' && url.pathname === '/apps') {
    return Response.json({ id: startScenarioApp((await request.json()) as Parameters<typeof startScenarioApp>[0], env) });
  }
  if (parts[0] === 'apps' && parts[2] === 'state') {
    const app = apps.get(Number(parts[1]));
    if (!app) return new Response('no such app', { status: 404 });
    return new Response(toWire({ calls: app.calls.toJSON(), storeCalls: app.storeCalls, events: app.events }));
  }
  if (url.pathname === '/do/objects') {
    // Each object's own counts, asked of it directly (its name as the store makes it).
    const prefix = url.searchParams.get('prefix')!;
    const objects = Number(url.searchParams.get('objects'));
    const counts = await Promise.all(
      Array.from({ length: objects }, (_, i) => {
        const namespace = (url.searchParams.get('namespace') === 'quick' ? env.QUICK : env.IDEMPOTENCY) as unknown as { idFromName(n: string): unknown; get(id: unknown): { stats(): Promise<unknown> } };
        return namespace.get(namespace.idFromName(`${prefix}:${i}`)).stats();
      }),
    );
    return Response.json(counts);
  }
  if (url.pathname === '/d1/rows') {
    const table = url.searchParams.get('table') ?? 'idempotency_kit_records';
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(table)) return new Response('bad table', { status: 400 });
    const key = url.searchParams.get('key');
    const statement = env.DB.prepare(`SELECT key, state, token, expires_at FROM "${table}"${key === null ? '' : ' WHERE key = ?1'}`);
    const { results } = await (key === null ? statement : statement.bind(key)).all();
    return Response.json(results ?? []);
  }
  return new Response('not found', { status: 404 });
}

export default {
  async fetch(request: Request, env: Env, ctx: Context): Promise<Response> {
    const role = ctx.props?.role;
    if (role === 'control') return control(request, env);
    if (role === 'app') {
      if (!current) return new Response('no scenario app', { status: 503 });
      return current.handler(request, env, ctx);
    }
    if (role === 'edge') {
      const url = new URL(request.url);
      if (url.pathname === '/count') return Response.json({ executions });
      if (url.pathname.startsWith('/hono/')) return honoEdgeApp(env).fetch(request, env, ctx as never);
      return edgeHandler(url.searchParams.get('store') ?? 'do', env)(request, env, ctx);
    }
    return new Response(`no role ${String(role)}`, { status: 500 });
  },
};
