/**
 * Hono adapter: `idempotency(options)` middleware for Hono 4, app-wide or per route, on
 * any runtime Hono runs on with a reachable store (Node with `@hono/node-server`, Bun, Deno).
 * @module
 * @example
 * import { Hono } from 'hono';
 * import { jwt } from 'hono/jwt';
 * import { createStore } from 'idempotency-kit';
 * import { idempotency } from 'idempotency-kit/hono';
 *
 * const app = new Hono();
 * app.use('/orders/*', jwt({ secret: process.env.JWT_SECRET!, alg: 'HS256' }));
 * // Each user's keys are their own (jwtPayload.sub); see `scope` to choose otherwise.
 * app.use('/orders/*', idempotency({ store: createStore('redis://127.0.0.1:6379') }));
 * app.post('/orders', async (c) => c.json({ id: 42, ...(await c.req.json()) }, 201));
 */
import type { Context, Env, MiddlewareHandler } from 'hono';
import type { RawBody } from '../../src/fingerprint.js';
import { Idempotency, userIdentity, type AdapterDefaults, type IdempotencyOptions } from '../../src/http.js';
import { idempotencyContract, inlineContract, type ContractSource } from '../../src/openapi.js';
import { formDataReadBefore, lendBody } from './hono-request.js';
import {
  assertDeclaredLength,
  clientGoneFor,
  consumeBody,
  drainAfterEarlyAnswer,
  formDataUpload,
  keepAliveUntilSettled,
  nodeServerPair,
  peekNodeServerBody,
  recordResponse,
  requestInfo,
  toResponse,
  type WaitUntil,
} from '../internal/web-io.js';

/** Every option of the HTTP layer; `scope` and `fingerprint` receive Hono's `Context`. */
export type HonoIdempotencyOptions<E extends Env = any> = IdempotencyOptions<Context<E>>;

/**
 * Without `scope`: the principal Hono's auth middleware leaves on the context, the JWT
 * middleware's `jwtPayload.sub` (hono/jwt, hono/jwk), else a `user` variable's `id` or
 * `sub` (as session middleware such as Better Auth's examples set it).
 */
const honoDefaults: AdapterDefaults<Context> = {
  name: 'idempotency-kit/hono',
  principal: (c) => {
    const payload = c.get('jwtPayload') as { sub?: unknown } | undefined;
    return payload?.sub ?? userIdentity(c.get('user'));
  },
  principalSource: "c.get('jwtPayload').sub, c.get('user').id and c.get('user').sub",
  scopeExample: "(c) => c.get('jwtPayload').sub",
};

/**
 * The `waitUntil` of the runtime's execution context (Cloudflare Workers, Deno Deploy…).
 * Not asked on @hono/node-server, which has none: Hono's getter throws without one.
 */
function waitUntilOf(c: Context): WaitUntil | undefined {
  if ((c.env as { outgoing?: unknown } | undefined)?.outgoing !== undefined) return undefined;
  try {
    const ctx = c.executionCtx as { waitUntil?: unknown };
    return typeof ctx.waitUntil === 'function' ? (promise) => (ctx.waitUntil as WaitUntil).call(ctx, promise) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Protect the handlers after it. Place it after authentication (the key space is the
 * authenticated principal's unless `scope` says otherwise) and before the handlers; a
 * validator before it is fine too (the layer then fingerprints the body Hono kept). Errors
 * the handlers throw release the key (a retry runs again) whatever `app.onError` answers.
 */
export function idempotency<E extends Env = any>(options: HonoIdempotencyOptions<E> | Idempotency<Context<E>>): MiddlewareHandler<E> {
  const layer = options instanceof Idempotency ? options : new Idempotency<Context<E>>(options, honoDefaults as AdapterDefaults<Context<E>>);

  return async function idempotency(c, next) {
    if (!layer.covers(c.req.method)) return next();
    const request = c.req.raw;
    let consumed: Uint8Array | RawBody | undefined;
    let unread: Uint8Array | undefined;
    const readBody = async (): Promise<unknown> => {
      if (request.bodyUsed) {
        // Read before us (a validator): Hono keeps the body; count it by its declared length.
        assertDeclaredLength(request.headers, layer.maxBodyBytes);
        // Only as form data (c.req.formData()): its bytes again would be a new serialisation
        // with a new boundary, so the entries count (parseBody() keeps the bytes too).
        const form = formDataReadBefore(c.req);
        if (form !== undefined) return formDataUpload(await form);
        return new Uint8Array(await c.req.arrayBuffer());
      }
      // On @hono/node-server, a small body is read from Node's message and left where the
      // server reads it from: `c.req.raw` stays the server's own request, unread.
      const peeking = peekNodeServerBody(request, layer.maxBodyBytes);
      if (peeking !== undefined) return (unread = await peeking);
      // The request itself, through the server's fast path (a clone would build a second
      // body stream); the handlers read the same bytes from Hono's body cache, or from a
      // `c.req.raw` built when they ask for it.
      return (consumed = await consumeBody(request, layer.maxBodyBytes, nodeServerPair(c.env) !== undefined));
    };
    const decision = await layer.begin(requestInfo(request, layer, c, readBody));
    if (consumed !== undefined && decision.type !== 'respond') lendBody(c.req, request, consumed instanceof Uint8Array ? consumed : consumed.bytes());
    // Still unread: `c.req.raw` is the request itself; Hono's methods answer from the cache.
    if (unread !== undefined && decision.type !== 'respond') lendBody(c.req, request, unread, true);
    if (decision.type === 'respond') {
      drainAfterEarlyAnswer(nodeServerPair(c.env));
      return toResponse(decision.response);
    }
    if (decision.type === 'pass') return next();
    // On Workers the claim keeps the invocation alive until it settles, whenever the client leaves.
    const claim = keepAliveUntilSettled(decision.claim, waitUntilOf(c));
    // On @hono/node-server `c.env` holds Node's response (`outgoing`), as a fetch handler's second argument does.
    const signal = clientGoneFor(request, [c.env], claim);
    try {
      await next();
    } catch (error) {
      // Only without an error handler in the chain: Hono normally catches it first (below).
      await claim.fail(error);
      throw error;
    }
    if (c.error !== undefined) {
      // A handler threw and `app.onError` (or Hono's default) answered: release, whatever
      // status it chose.
      await claim.fail(c.error);
      return;
    }
    const recorded = await recordResponse(c.res, claim, signal);
    if (recorded === c.res) return;
    // Cleared first: assigning over a response merges the old one's headers into the new.
    c.res = undefined;
    c.res = recorded;
  };
}

/** What `idempotentRoute` reads and writes of a `createRoute()` config of `@hono/zod-openapi`. */
export interface OpenApiRouteConfig {
  method: string;
  responses: Record<string | number, unknown>;
  parameters?: unknown[];
}

/**
 * Document a `@hono/zod-openapi` route as the layer protects it: the key header (a plain
 * OpenAPI parameter, so that the route's own validation never sees it: the layer answers a
 * bad key itself), the layer's refusals, and the replay header on the route's own
 * responses. A route whose method the layer does not cover is returned as it is.
 * @example
 * import { createRoute, z } from '@hono/zod-openapi';
 * import { idempotentRoute } from 'idempotency-kit/hono';
 *
 * const route = idempotentRoute(createRoute({ method: 'post', path: '/orders', responses: { 201: { description: 'Created' } } }), options);
 */
export function idempotentRoute<R extends OpenApiRouteConfig>(route: R, source: ContractSource): R {
  if (typeof route !== 'object' || route === null || typeof route.method !== 'string') {
    throw new TypeError(`Expected a route config of @hono/zod-openapi (createRoute({ method, path, responses })), got ${String(route)}`);
  }
  const contract = idempotencyContract(source, '3.1');
  if (!contract.methods.includes(route.method.toUpperCase())) return route;
  const inline = inlineContract(contract);
  const responses: Record<string, unknown> = {};
  for (const [status, response] of Object.entries(route.responses ?? {})) {
    const config = response as { headers?: unknown } | null;
    // A replay of the route's own answer (never a 5xx, which is not stored) carries the replay header.
    const plainHeaders = config?.headers === undefined || (typeof config.headers === 'object' && config.headers !== null && !('_def' in config.headers) && !('_zod' in config.headers));
    responses[status] =
      status.startsWith('5') || !plainHeaders || config === null
        ? response
        : { ...config, headers: { ...(config.headers as object | undefined), [inline.replayedHeader.name]: inline.replayedHeader.header } };
  }
  for (const [status, response] of Object.entries(inline.responses)) responses[status] ??= response;
  return { ...route, parameters: [...(route.parameters ?? []), inline.parameter], responses };
}

export default idempotency;
