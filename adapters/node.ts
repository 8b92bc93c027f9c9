/**
 * Node.js `http` adapter: wrap a plain `(req, res)` handler.
 * @module
 * @example
 * import http from 'node:http';
 * import { createStore } from 'idempotency-kit';
 * import { withIdempotency } from 'idempotency-kit/node';
 *
 * const store = createStore('sqlite://./idempotency.sqlite');
 * http.createServer(withIdempotency(async (req, res) => {
 *   res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ ok: true }));
 * }, { store })).listen(3000);
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { isJsonType, ParsedJsonBody, type RawBody } from '../src/fingerprint.js';
import { Idempotency, type IdempotencyOptions } from '../src/http.js';
import { abandonOnClose, captureResponse, isClientAbort, keyHeaderLines, readBody, restoreBody, sendResponse, setRequestBody } from './internal/node-io.js';

/** The request a wrapped handler receives: the body is still readable, and parsed on `req.body`. */
export type IdempotentRequest = IncomingMessage & { body?: unknown };

export type NodeHandler<Req extends IncomingMessage = IdempotentRequest, Res extends ServerResponse = ServerResponse> = (
  req: Req,
  res: Res,
) => unknown;

export interface NodeIdempotencyOptions<Req extends IncomingMessage = IdempotentRequest> extends IdempotencyOptions<Req> {
  /**
   * Called when the wrapped handler throws or rejects (after the key was released, so a
   * retry runs the handler again), or when `scope` / `fingerprint` throws.
   * @default logs the error with `console.error` and answers 500 if nothing was sent yet,
   * else destroys the response
   */
  onError?: (error: unknown, req: Req, res: ServerResponse) => void;
}

function defaultOnError(error: unknown, _req: IncomingMessage, res: ServerResponse): void {
  // As Express and Koa do: an unhandled error is logged, never silent. A client that went
  // away while we read its body is not an error of the server's.
  if (!isClientAbort(error)) console.error(error);
  if (res.destroyed) return;
  if (!res.headersSent) {
    res.statusCode = 500;
    res.setHeader('content-type', 'text/plain; charset=utf-8');
    res.end('Internal Server Error');
  } else res.destroy();
}

/**
 * Wrap a Node `http` handler. Covered requests (POST and PATCH by default) with an
 * Idempotency-Key run once; repeats get the stored response.
 */
export function withIdempotency<Req extends IncomingMessage = IdempotentRequest, Res extends ServerResponse = ServerResponse>(
  handler: NodeHandler<Req, Res>,
  options: NodeIdempotencyOptions<Req> | Idempotency<Req>,
): (req: Req, res: Res) => Promise<void> {
  if (typeof handler !== 'function') throw new TypeError(`Expected \`handler\` to be a function, got ${String(handler)}`);
  // Node http has no convention for the authenticated user: `scope` is required.
  const layer = options instanceof Idempotency ? options : new Idempotency<Req>(options, { name: 'idempotency-kit/node', scopeExample: '(req) => req.user.id' });
  const onError = (options instanceof Idempotency ? undefined : options.onError) ?? defaultOnError;

  return async function idempotency(req: Req, res: Res): Promise<void> {
    if (!layer.covers(req.method ?? 'GET')) {
      await handler(req, res);
      return;
    }
    let raw: RawBody | undefined;
    let parsed: unknown;
    let decision;
    try {
      decision = await layer.begin({
        method: req.method ?? 'GET',
        url: req.url ?? '/',
        headers: req.headers,
        keyHeaderLines: keyHeaderLines(req, layer.headerName),
        body: async () => {
          raw = await readBody(req, layer.maxBodyBytes);
          // A JSON body is parsed once: for the fingerprint now, and for req.body.
          if (raw.byteLength > 0 && isJsonType(req.headers['content-type'])) {
            const bytes = raw.bytes();
            try {
              const text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8');
              parsed = JSON.parse(text);
              return new ParsedJsonBody(parsed, bytes, false, text);
            } catch {
              // Not valid JSON: fingerprinted by its bytes, and the handler decides what to answer.
            }
          }
          return raw;
        },
        raw: req,
      });
    } catch (error) {
      // The client went away while we read its body, or a `scope` / `fingerprint`
      // function threw: nothing was claimed, so there is nothing to release.
      onError(error, req, res);
      return;
    }
    if (decision.type === 'respond') {
      sendResponse(res, decision.response);
      return;
    }
    // The handler runs: it reads the body as if nobody had (and finds it parsed on req.body).
    if (raw !== undefined) {
      restoreBody(req, raw);
      if (parsed !== undefined) (req as { body?: unknown }).body ??= parsed;
      else setRequestBody(req, raw, req.headers['content-type']);
    }
    if (decision.type === 'pass') {
      await handler(req, res);
      return;
    }
    const { claim } = decision;
    const capture = captureResponse(res, claim);
    // The client left first: the claim now lives on its lease only (the handler may still finish).
    abandonOnClose(res, claim, () => capture.ended);
    try {
      await handler(req, res);
    } catch (error) {
      // Thrown before the response ended: release, so a retry runs again.
      if (!capture.ended) {
        capture.detach();
        await claim.fail(error);
      }
      onError(error, req, res);
    }
  };
}
