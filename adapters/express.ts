/**
 * Express adapter: `idempotency(options)` middleware, app-wide or per route (Express 5 and 4).
 * @module
 * @example
 * import express from 'express';
 * import { createStore } from 'idempotency-kit';
 * import { idempotency } from 'idempotency-kit/express';
 *
 * const app = express();
 * app.use(express.json());
 * app.use(idempotency({ store: createStore('redis://127.0.0.1:6379') }));
 * app.post('/orders', async (req, res) => {
 *   res.status(201).location(`/orders/42`).json({ id: 42, ...req.body });
 * });
 * app.listen(3000);
 */
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { Idempotency, userIdentity, type AdapterDefaults, type IdempotencyOptions } from '../src/http.js';
import type { RawBody } from '../src/fingerprint.js';
import { declareReprototyped } from '../src/object-slot.js';
import { forgetRequestTransaction } from '../src/transaction.js';
import {
  abandonOnClose,
  assertDeclaredLength,
  inherited,
  isMultipart,
  keyHeaderLines,
  parsedBody,
  readBody,
  restoreBody,
  sendResponse,
  setRequestBody,
} from './internal/node-io.js';
import { captureExpressResponse } from './internal/express-response.js';
import { uploadBody, type UploadSource } from './internal/uploads.js';

/** The plugin options: every option of `IdempotencyOptions`; `scope`, `fingerprint` get Express's `req`. */
export type ExpressIdempotencyOptions = IdempotencyOptions<Request>;

type AuthenticatedRequest = Request & { auth?: { sub?: unknown }; user?: unknown };
/** What multer leaves: `req.file` (`.single()`) or `req.files` (`.array()`, `.any()`, `.fields()`). */
type UploadedRequest = Request & { file?: unknown; files?: unknown };

const multerSource: UploadSource = {
  adapter: 'idempotency-kit/express',
  where: 'req.file / req.files, left by an upload middleware before the idempotency layer',
  fix: 'Put `idempotency()` before the upload middleware (app.use(idempotency(...)) before multer)',
};

/** Without `scope`: the user that express-jwt (`req.auth.sub`) or passport and the like (`req.user`) set. */
const expressDefaults: AdapterDefaults<Request> = {
  name: 'idempotency-kit/express',
  principal: (req) => (req as AuthenticatedRequest).auth?.sub ?? userIdentity((req as AuthenticatedRequest).user),
  principalSource: 'req.auth.sub, req.user.id and req.user.sub',
  scopeExample: '(req) => req.user.id',
};

/** A `close` listener shared by every passed response: forget its request. */
function forgetOnClose(this: Response): void {
  forgetRequestTransaction(this.req);
}

/**
 * Protect the routes after it (`app.use(idempotency(options))`) or one route
 * (`app.post('/orders', idempotency(options), handler)`).
 *
 * Place it after authentication (so `scope` can read the tenant) and either before or after
 * `express.json()`: after a body parser it fingerprints `req.body`; before one, it reads the
 * body itself and leaves it readable for the parser.
 */
export function idempotency(options: ExpressIdempotencyOptions | Idempotency<Request>): RequestHandler {
  const layer = options instanceof Idempotency ? options : new Idempotency<Request>(options, expressDefaults);

  return async function idempotency(req: Request, res: Response, next: NextFunction): Promise<void> {
    if (!layer.covers(req.method)) {
      next();
      return;
    }
    // Express set its app's own prototypes on Node's request and response: what the layer
    // keeps per request goes beside them, not on them.
    declareReprototyped(req, res);
    let raw: RawBody | undefined;
    let decision;
    try {
      decision = await layer.begin({
        method: req.method,
        // The full path even when mounted on a sub-router or prefix, for the fingerprint.
        url: req.originalUrl,
        headers: req.headers,
        keyHeaderLines: keyHeaderLines(req, layer.headerName),
        body: () => {
          // `readableEnded` found without a load on Express's request (see inherited).
          if (inherited<boolean>(req, 'readableEnded')) {
            assertDeclaredLength(req, layer.maxBodyBytes);
            // An upload parsed before us (multer): its fields and its files, hashed.
            if (isMultipart(req.headers['content-type'])) {
              const { file, files } = req as UploadedRequest;
              return uploadBody(req.body, [file, files], multerSource);
            }
            // `in` first: a read of a property Express's request does not have walks its whole
            // prototype chain in the engine's runtime (each request has a hidden class of its
            // own), about 0.3 µs; the `in` test costs a few ns.
            const rawBody = 'rawBody' in req ? (req as { rawBody?: unknown }).rawBody : undefined;
            return parsedBody(req.body, rawBody, req.headers['content-type']);
          }
          return readBody(req, layer.maxBodyBytes).then((read) => (raw = read));
        },
        raw: req,
      });
    } catch (error) {
      // The client left while we read its body, or `scope` / `fingerprint` threw: nothing
      // was claimed. Express's error handling answers.
      next(error);
      return;
    }
    if (raw !== undefined) {
      // Readable again for a body parser after us; parsed already for a handler without one.
      restoreBody(req, raw);
      setRequestBody(req, raw, req.headers['content-type']);
    }
    if (decision.type === 'respond') {
      sendResponse(res, decision.response, req, true);
      return;
    }
    if (decision.type === 'pass') {
      // `inTransaction(req)` runs a plain transaction until the response is done; after
      // that the request is forgotten (kept beside it, it would outlive young collections).
      res.on('close', forgetOnClose);
      next();
      return;
    }
    const { claim } = decision;
    // res.json, res.send, res.redirect, res.sendFile and Express's error handler all end in
    // res.write / res.end: the response is stored (or released) whoever writes it.
    // Recorded without adding properties to the response (see captureExpressResponse).
    const capture = captureExpressResponse(res, claim);
    // Closed before anything ended the response: the client left (the handler may still
    // finish and store its answer) or an error after the headers went out made Express
    // destroy the socket. Either way the claim now lives on its lease only.
    abandonOnClose(res, claim, () => capture.ended, true);
    next();
  };
}

export default idempotency;
