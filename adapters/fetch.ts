/**
 * Fetch-API adapter: wrap any `(request: Request, ...rest) => Response` handler, as
 * Next.js route handlers, Remix / React Router actions, SvelteKit endpoints, Bun.serve and
 * Deno.serve take it. Web standards only: it runs on Node, Bun and Deno.
 * @module
 * @example
 * import { createStore } from 'idempotency-kit';
 * import { withIdempotency } from 'idempotency-kit/fetch';
 *
 * const store = createStore('redis://127.0.0.1:6379');
 * // app/orders/route.ts in Next.js
 * export const POST = withIdempotency(
 *   async (request: Request) => Response.json({ id: 42, ...(await request.json()) }, { status: 201 }),
 *   { store, scope: (request) => request.headers.get('x-account-id') ?? undefined },
 * );
 */
import { Idempotency, type IdempotencyOptions } from '../src/http.js';
import {
  clientGoneFor,
  drainAfterEarlyAnswer,
  keepAliveUntilSettled,
  nodeServerPair,
  platformWaitUntil,
  readRequestBody,
  recordResponse,
  requestInfo,
  toResponse,
} from './internal/web-io.js';

/**
 * Every option of the HTTP layer; `scope` and `fingerprint` receive the `Request`. `scope`
 * is required (the fetch API has no convention for the authenticated user): the user or
 * tenant id, or `'shared'` for one key space for every client.
 */
export type FetchIdempotencyOptions<Req extends Request = Request> = IdempotencyOptions<Req>;

/** A fetch-style handler: a `Request` (and whatever the platform passes after it) to a `Response`. */
export type FetchHandler<Req extends Request = Request, Rest extends unknown[] = unknown[]> = (
  request: Req,
  ...rest: Rest
) => Response | Promise<Response>;

/**
 * Wrap a fetch-style handler. Covered requests (POST and PATCH by default) with the same
 * Idempotency-Key run it once; repeats get the stored response. The handler receives the
 * request unread and the platform's other arguments as they were; an error it throws
 * releases the key (a retry runs again) and is thrown on to the platform.
 */
export function withIdempotency<Req extends Request = Request, Rest extends unknown[] = unknown[]>(
  handler: FetchHandler<Req, Rest>,
  options: FetchIdempotencyOptions<Req> | Idempotency<Req>,
): (request: Req, ...rest: Rest) => Promise<Response> {
  if (typeof handler !== 'function') throw new TypeError(`Expected \`handler\` to be a function, got ${String(handler)}`);
  // The fetch API has no convention for the authenticated user: `scope` is required.
  const layer =
    options instanceof Idempotency
      ? options
      : new Idempotency<Req>(options, { name: 'idempotency-kit/fetch', scopeExample: '(request) => session(request).userId' });

  return async function idempotency(request: Req, ...rest: Rest): Promise<Response> {
    if (!layer.covers(request.method)) return handler(request, ...rest);
    const decision = await layer.begin(requestInfo(request, layer, request, () => readRequestBody(request, layer.maxBodyBytes)));
    if (decision.type === 'respond') {
      drainAfterEarlyAnswer(nodeServerPair(rest[0]));
      return toResponse(decision.response);
    }
    if (decision.type === 'pass') return handler(request, ...rest);
    // Where the platform passes a context with `waitUntil` (a Worker's ctx), the claim keeps
    // the invocation alive until it settles, whenever the client leaves.
    const claim = keepAliveUntilSettled(decision.claim, platformWaitUntil(rest));
    const signal = clientGoneFor(request, rest, claim);
    let response: Response;
    try {
      response = await handler(request, ...rest);
    } catch (error) {
      // Thrown: release, so a retry runs again.
      await claim.fail(error);
      throw error;
    }
    return recordResponse(response, claim, signal);
  };
}

export default withIdempotency;
