/**
 * Koa adapter: `idempotency(options)` middleware for Koa 2 and 3, app-wide or per route.
 * @module
 * @example
 * import Koa from 'koa';
 * import { bodyParser } from '@koa/bodyparser';
 * import { createStore } from 'idempotency-kit';
 * import { idempotency } from 'idempotency-kit/koa';
 *
 * const app = new Koa();
 * app.use(bodyParser());
 * app.use(idempotency({ store: createStore('redis://127.0.0.1:6379') }));
 * app.use(async (ctx) => {
 *   ctx.status = 201;
 *   ctx.body = { id: 42, ...(ctx.request.body as object) };
 * });
 * app.listen(3000);
 */
import type { Context, Middleware, Next } from 'koa';
import { Idempotency, userIdentity, type AdapterDefaults, type CapturedResponse, type HttpClaim, type IdempotencyOptions } from '../../src/http.js';
import { isJsonType, ParsedJsonBody, type RawBody } from '../../src/fingerprint.js';
import { abandonOnClose, assertDeclaredLength, bodyConsumed, captureStream, endAfterDrain, isMultipart, keyHeaderLines, readBody, restoreBody, toNodeStream } from '../internal/node-io.js';
import { uploadBody, type UploadSource } from '../internal/uploads.js';
import { explicitNullBody } from './koa-response.js';

/** Every option of `IdempotencyOptions`; `scope` and `fingerprint` get the Koa context. */
export type KoaIdempotencyOptions = IdempotencyOptions<Context>;

/** Statuses Koa answers without a body whatever `ctx.body` holds. */
const EMPTY_STATUSES = new Set([204, 205, 304]);

type ParsedRequest = Context['request'] & { body?: unknown; rawBody?: unknown; file?: unknown; files?: unknown };

const uploadSource: UploadSource = {
  adapter: 'idempotency-kit/koa',
  where: 'ctx.request.file / ctx.request.files, left by @koa/multer or koa-body before the idempotency layer',
  fix: 'Put `idempotency()` before the upload middleware (app.use(idempotency(...)) before it)',
};

/**
 * Record what Koa is about to send: `ctx.status`, the headers set so far and `ctx.body`
 * as the bytes Koa's responder will write (objects as JSON). A stream body is swapped for
 * one that is captured on its way out (then nothing is returned: the stream completes the
 * claim). Not async: the caller awaits the store's own promise, with no wrapper around it,
 * and a body Koa could not send either (JSON.stringify throws) throws at once.
 */
function finishFromContext(ctx: Context, claim: HttpClaim): Promise<void> | undefined {
  const status = ctx.status;
  // `getHeaders()` is a fresh copy already (what `ctx.response.headers` returns): taken as it is.
  const head = (): Omit<CapturedResponse, 'body'> => ({ status, headers: ctx.res.getHeaders() as CapturedResponse['headers'] });
  if (ctx.respond === false) {
    // The handler wrote to ctx.res itself: the body is out of sight, so the record completes
    // without one and a retry gets 409, never a second run.
    return claim.finish({ status: ctx.res.statusCode, headers: ctx.res.getHeaders() as CapturedResponse['headers'], body: null });
  }
  const body: unknown = ctx.body;
  let bytes: Buffer;
  // A string or an object becomes bytes here: Koa then sends these bytes instead of
  // encoding (or stringifying) the body a second time, and the middleware before the layer
  // sees a Buffer, as it does on a replay.
  let sendBytes = false;
  if (body === null || body === undefined) {
    if (explicitNullBody(ctx.response) === true || EMPTY_STATUSES.has(status)) bytes = Buffer.alloc(0);
    else {
      // Koa would answer the status text as text/plain; say so now, so that the replay,
      // which has a body, sends exactly the same.
      const text = ctx.req.httpVersionMajor >= 2 ? String(status) : ctx.message || String(status);
      ctx.body = text;
      ctx.status = status;
      bytes = Buffer.from(text);
      sendBytes = true;
    }
  } else if (Buffer.isBuffer(body)) bytes = body;
  else if (typeof body === 'string') {
    bytes = Buffer.from(body);
    sendBytes = true;
  } else {
    // Koa 3 also answers with a web ReadableStream, a Blob or a Response.
    const stream = toNodeStream(body);
    if (stream) {
      ctx.body = captureStream(stream, claim, head());
      return undefined;
    }
    bytes = Buffer.from(JSON.stringify(body));
    sendBytes = true;
  }
  const { headers } = head();
  if (EMPTY_STATUSES.has(status)) return claim.finish({ status, headers, body: Buffer.alloc(0) });
  // Koa typed the body when it was set (Content-Type stays), and counts the bytes' length.
  if (sendBytes) ctx.body = bytes;
  return claim.finish({ status, headers, body: bytes });
}

function respond(ctx: Context, response: { status: number; headers: Record<string, string | string[]>; body: Uint8Array }): void {
  // A 413 (or a 400 sent before the body was read): drain before closing, so a client
  // still sending gets the answer instead of a reset.
  endAfterDrain(ctx.req, ctx.res);
  ctx.status = response.status;
  ctx.set(response.headers);
  if (response.body.byteLength === 0 && !('content-type' in response.headers)) {
    // An empty answer without a type (`ctx.body = null`): setting a Buffer would add one.
    ctx.body = null;
    ctx.status = response.status;
    return;
  }
  ctx.body = Buffer.from(response.body.buffer, response.body.byteOffset, response.body.byteLength);
}

/** Without `scope`: the user that koa-jwt and koa-passport leave on `ctx.state.user`. */
const koaDefaults: AdapterDefaults<Context> = {
  name: 'idempotency-kit/koa',
  principal: (ctx) => userIdentity((ctx.state as { user?: unknown } | undefined)?.user),
  principalSource: 'ctx.state.user.id and ctx.state.user.sub',
  scopeExample: '(ctx) => ctx.state.user.id',
};

/**
 * Protect the middleware after it. Place it after authentication (so `scope` can read the
 * tenant) and before or after `@koa/bodyparser`: after it, the parsed body is fingerprinted;
 * before it, the body is read here and left readable for the parser.
 */
export function idempotency(options: KoaIdempotencyOptions | Idempotency<Context>): Middleware {
  const layer = options instanceof Idempotency ? options : new Idempotency<Context>(options, koaDefaults);

  return async function idempotency(ctx: Context, next: Next): Promise<void> {
    // `ctx.method` and `ctx.headers` are getters delegated to these: read once, at the source.
    const { req } = ctx;
    const method = req.method!;
    if (!layer.covers(method)) {
      await next();
      return;
    }
    let raw: RawBody | undefined;
    const decision = await layer.begin({
      method,
      // The full path even under a mount prefix or a nested router, for the fingerprint.
      url: ctx.originalUrl,
      headers: req.headers,
      keyHeaderLines: keyHeaderLines(req, layer.headerName),
      body: () => {
        if (bodyConsumed(req)) {
          assertDeclaredLength(req, layer.maxBodyBytes);
          // The parser's raw text when it kept it: the same bytes we would have read.
          const request = ctx.request as ParsedRequest;
          const text = request.rawBody;
          const parsed = typeof text === 'string' ? text : request.body;
          const contentType = req.headers['content-type'];
          if (isMultipart(contentType)) {
            // @koa/multer also sets ctx.file / ctx.files; koa-body (formidable) ctx.request.files.
            const { file, files } = ctx as unknown as { file?: unknown; files?: unknown };
            return uploadBody(request.body, [request.file ?? file, request.files ?? files], uploadSource);
          }
          // JSON the parser parsed from that text: its value counts (checked to be plain
          // JSON data), so the text is not parsed a second time.
          if (typeof text === 'string' && text.length > 0 && request.body !== undefined && isJsonType(contentType)) {
            return new ParsedJsonBody(request.body, text, true);
          }
          return parsed;
        }
        return readBody(req, layer.maxBodyBytes).then((read) => (raw = read));
      },
      raw: ctx,
    });
    if (decision.type === 'respond') {
      respond(ctx, decision.response);
      return;
    }
    // The rest of the chain (a body parser after us) reads the body as if nobody had.
    if (raw !== undefined) restoreBody(req, raw);
    if (decision.type === 'pass') {
      await next();
      return;
    }
    const { claim } = decision;
    // The client left before the response ended: the claim now lives on its lease only.
    abandonOnClose(ctx.res, claim, () => false);
    try {
      await next();
    } catch (error) {
      // Thrown, whatever status Koa's error handling then answers: release.
      await claim.fail(error);
      throw error;
    }
    try {
      await finishFromContext(ctx, claim);
    } catch (error) {
      // A body Koa could not send either (JSON.stringify threw): it is an error response.
      await claim.fail(error);
      throw error;
    }
  };
}

export default idempotency;
