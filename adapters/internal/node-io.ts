/**
 * Request and response I/O shared by the adapters built on Node's `http` (node, express,
 * fastify, koa): reading a bounded body, making it readable again, recording a response,
 * and answering early without resetting a client that is still sending. Internal: not a
 * public entry point.
 * @module
 */
import { validateHeaderName, validateHeaderValue, type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse } from 'node:http';
import { Readable, Transform } from 'node:stream';
import { BodyTooLargeError } from '../../src/errors.js';
import { isJsonType, ParsedJsonBody, RawBody } from '../../src/fingerprint.js';
import { BodyRecorder } from './body-recorder.js';
import { whenClientGone } from './client-gone.js';
import { endAfterDrain } from './drain.js';
import type { CapturedResponse, HttpClaim, HttpRequestInfo } from '../../src/http.js';
import type { HttpResponse } from '../../src/problem.js';

export { DRAIN_MAX_BYTES, DRAIN_MAX_MS, endAfterDrain } from './drain.js';

/**
 * Read the whole body, up to `limit` bytes; beyond it, BodyTooLargeError (413). The chunks
 * are kept as they came (a large upload is never copied into one buffer here).
 */
export function readBody(req: IncomingMessage, limit: number): Promise<RawBody> {
  return new Promise((resolve, reject) => {
    const declared = Number(req.headers['content-length']);
    if (Number.isFinite(declared) && declared > limit) {
      // Not read: the answer (413) drains it, see endAfterDrain.
      reject(new BodyTooLargeError(limit));
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    const cleanup = () => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('aborted', onAborted);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        cleanup();
        req.pause();
        reject(new BodyTooLargeError(limit));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      cleanup();
      resolve(new RawBody(chunks, size));
    };
    const onError = (error: Error) => {
      cleanup();
      reject(error);
    };
    const onAborted = () => onError(Object.assign(new Error('request aborted while reading the body'), { code: 'ECONNABORTED' }));
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
    req.on('aborted', onAborted);
  });
}

/**
 * Make an already consumed request readable again with the same bytes, so the handler
 * (or a body parser after us) reads the body as usual: `for await`, `on('data')`, `pipe`.
 */
export function restoreBody(req: IncomingMessage, body: RawBody): void {
  // IncomingMessage is a Readable; re-running the Readable constructor gives it a fresh
  // readable state (listeners are kept), and an own _read stops it reading the socket.
  (Readable as unknown as { call(self: unknown, options: unknown): void }).call(req, {
    highWaterMark: req.readableHighWaterMark,
  });
  (req as unknown as { _read: () => void })._read = () => {};
  // The chunks as they came: an upload parser after us reads them one by one, as from the socket.
  for (const chunk of body.chunks) if (chunk.byteLength > 0) req.push(chunk);
  req.push(null);
}

/** Whether a content type is `multipart/form-data`. */
// The media type alone, any case, white space around it allowed: tested without splitting
// or lowering (asked up to three times per request).
const MULTIPART = /^\s*multipart\/form-data\s*(?:;|$)/i;

export function isMultipart(contentType: string | undefined): boolean {
  return contentType !== undefined && MULTIPART.test(contentType);
}

/**
 * Parse a read body the way users expect on `req.body`: JSON, form, text or bytes. Bytes
 * that came in several chunks (an upload) are joined only if something reads `req.body`.
 */
export function setRequestBody(req: IncomingMessage & { body?: unknown }, body: RawBody, contentType: string | undefined): void {
  if (req.body !== undefined || body.byteLength === 0) return;
  const type = contentType?.split(';', 1)[0]!.trim().toLowerCase() ?? '';
  if (isJsonType(contentType) || type === 'application/x-www-form-urlencoded' || type.startsWith('text/') || body.chunks.length === 1) {
    req.body = parseBody(body.bytes(), contentType);
    return;
  }
  Object.defineProperty(req, 'body', {
    get: () => body.bytes(),
    // An upload parser after us (multer) sets its own: then it is a plain property again.
    set(value: unknown) {
      Object.defineProperty(req, 'body', { value, writable: true, configurable: true, enumerable: true });
    },
    configurable: true,
    enumerable: true,
  });
}

/** Parse a read body the way users expect on `req.body`: JSON, form, text or bytes. */
export function parseBody(body: Buffer | Uint8Array, contentType: string | undefined): unknown {
  if (body.length === 0) return undefined;
  const bytes = Buffer.isBuffer(body) ? body : Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  if (isJsonType(contentType)) {
    try {
      return JSON.parse(bytes.toString('utf8'));
    } catch {
      return bytes; // not valid JSON: the handler decides what to answer
    }
  }
  const type = contentType?.split(';', 1)[0]!.trim().toLowerCase() ?? '';
  if (type === 'application/x-www-form-urlencoded') return Object.fromEntries(new URLSearchParams(bytes.toString('utf8')));
  if (type.startsWith('text/')) return bytes.toString('utf8');
  return bytes;
}

/**
 * `object[name]` read without a property load on the object itself, for objects a framework
 * re-prototyped after building them (Express's requests and responses). Each of those has a
 * hidden class of its own, so a load of a name that nothing else read on it misses every
 * cache and walks the prototype chain in V8's runtime: 0.3 to 0.9 µs, measured in process on
 * real Express requests. `Object.hasOwn` (a few ns) says whether the object holds it;
 * otherwise it is read from the prototype (its app's, whose hidden class stays cached) with
 * the object as receiver, so getters run as they would. The same value as `object[name]`.
 */
export function inherited<T>(object: object, name: string): T {
  if (Object.hasOwn(object, name)) return (object as Record<string, T>)[name]!;
  const prototype = Object.getPrototypeOf(object) as object | null;
  return (prototype === null ? undefined : Reflect.get(prototype, name, object)) as T;
}

/** The client went away while its body was read: nothing for the server to log. */
export function isClientAbort(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === 'ECONNABORTED';
}

/**
 * Write a complete response (a replay or a problem). When it answers a request whose body
 * was not read to the end (a 413, a 400 before reading), the rest is drained first so that
 * a client still sending receives it (see endAfterDrain).
 */
export function sendResponse(res: ServerResponse, response: HttpResponse, req: IncomingMessage = res.req, reprototyped = false): void {
  endAfterDrain(req, res);
  // writeHead keeps headers other middleware set already, and builds the head in one go.
  const headers = { ...response.headers, 'content-length': response.body.byteLength };
  if (reprototyped) {
    // Express's response: its methods found without a load on it (see inherited).
    inherited<WriteHead>(res, 'writeHead').call(res, response.status, headers);
    inherited<End>(res, 'end').call(res, response.body);
    return;
  }
  res.writeHead(response.status, headers);
  res.end(response.body);
}

/** The headers object (or list) among writeHead's arguments after the status: `(status, [reason,] headers)`. */
function headersFromArgs(args: unknown[]): OutgoingHttpHeaders | undefined {
  let last: unknown;
  for (let i = 1; i < args.length && last === undefined; i++) {
    if (typeof args[i] === 'object' && args[i] !== null) last = args[i];
  }
  if (last === undefined) return undefined;
  if (!Array.isArray(last)) return last as OutgoingHttpHeaders;
  const out: OutgoingHttpHeaders = {};
  // writeHead also takes [name, value] pairs or a flat [name, value, name, value] list.
  if (Array.isArray(last[0])) for (const [k, v] of last as [string, string][]) out[k.toLowerCase()] = v;
  else for (let i = 0; i + 1 < last.length; i += 2) out[String(last[i]).toLowerCase()] = last[i + 1] as string;
  return out;
}

function toBytes(chunk: unknown, encoding: unknown): Buffer | undefined {
  if (chunk === undefined || chunk === null || typeof chunk === 'function') return undefined;
  if (typeof chunk === 'string') return Buffer.from(chunk, typeof encoding === 'string' ? (encoding as BufferEncoding) : 'utf8');
  if (chunk instanceof Uint8Array) return Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  return undefined;
}

/**
 * Capture what the handler writes, however it writes it (writeHead, setHeader, write,
 * end, pipe), and hold back the final `end` until the response is stored, so that a
 * client which has seen the response always gets the replay on retry.
 */
export interface ResponseCapture {
  /** Whether the handler has called `end`: from then on the outcome is the response. */
  readonly ended: boolean;
  /** Stop capturing (the handler failed before ending): the response methods are restored. */
  detach(): void;
}

export type WriteHead = (...args: unknown[]) => ServerResponse;
export type Write = (...args: unknown[]) => boolean;
export type End = (...args: unknown[]) => ServerResponse;

const CAPTURE: unique symbol = Symbol('idempotency-kit.capture');
type CapturedServerResponse = ServerResponse & { [CAPTURE]?: Capture };

/**
 * One response's capture. Its state is an instance on the response (under a symbol) and the
 * wrappers are shared functions that find it through `this`, so a capture allocates no
 * closures: nothing ties the request and response to longer-lived objects, and both die
 * young with the request (see docs/benchmarks.md#what-earlier-rounds-learned).
 */
export class Capture implements ResponseCapture {
  ended = false;
  readonly recorder: BodyRecorder;
  /** Headers passed to writeHead (they never reach `getHeaders()`), lower-cased. */
  headHeaders: OutgoingHttpHeaders | undefined;

  constructor(
    readonly res: ServerResponse,
    readonly claim: HttpClaim,
    readonly writeHead: WriteHead,
    readonly write: Write,
    readonly end: End,
  ) {
    this.recorder = new BodyRecorder(claim.maxResponseBytes);
  }

  /** The headers set on the response so far (a copy). */
  outgoingHeaders(): CapturedResponse['headers'] {
    return this.res.getHeaders() as CapturedResponse['headers'];
  }

  keep(chunk: unknown, encoding: unknown): void {
    const bytes = toBytes(chunk, encoding);
    // Copy what the caller may reuse (its buffer); a string's bytes were made here.
    if (bytes) this.recorder.add(bytes, typeof chunk !== 'string');
  }

  detach(): void {
    const { res } = this;
    res.writeHead = this.writeHead as ServerResponse['writeHead'];
    res.write = this.write as ServerResponse['write'];
    res.end = this.end as ServerResponse['end'];
  }
}

export function writeHeadWith(capture: Capture, res: ServerResponse, args: unknown[]): ServerResponse {
  const headers = headersFromArgs(args);
  if (headers) {
    const kept = { ...capture.headHeaders };
    for (const [k, v] of Object.entries(headers)) kept[k.toLowerCase()] = v;
    capture.headHeaders = kept;
  }
  return capture.writeHead.apply(res, args);
}

export function writeWith(capture: Capture, res: ServerResponse, args: unknown[]): boolean {
  capture.keep(args[0], args[1]);
  return capture.write.apply(res, args);
}

export function endWith(capture: Capture, res: ServerResponse, args: unknown[]): ServerResponse {
  if (capture.ended) return capture.end.apply(res, args);
  capture.ended = true;
  const chunk = typeof args[0] === 'function' ? undefined : args[0];
  capture.keep(chunk, typeof args[1] === 'string' ? args[1] : undefined);
  // getHeaders() returns a copy: the writeHead headers go on top of it.
  const headers = capture.outgoingHeaders();
  if (capture.headHeaders) Object.assign(headers, capture.headHeaders);
  const captured: CapturedResponse = { status: capture.res.statusCode, headers, body: capture.recorder.bytes() };
  capture.detach();
  const target = capture.res;
  const send = () => capture.end.apply(target, args);
  void capture.claim.finish(captured).then(send, send);
  return target;
}

// The first capture of a response: shared wrappers that find it under the symbol.
function capturingWriteHead(this: CapturedServerResponse, ...args: unknown[]): ServerResponse {
  return writeHeadWith(this[CAPTURE]!, this, args);
}
function capturingWrite(this: CapturedServerResponse, ...args: unknown[]): boolean {
  return writeWith(this[CAPTURE]!, this, args);
}
function capturingEnd(this: CapturedServerResponse, ...args: unknown[]): ServerResponse {
  return endWith(this[CAPTURE]!, this, args);
}

export function captureResponse(res: ServerResponse, claim: HttpClaim): ResponseCapture {
  const capture = new Capture(res, claim, res.writeHead as WriteHead, res.write as Write, res.end as End);
  const target = res as CapturedServerResponse;
  if (target[CAPTURE] === undefined) {
    target[CAPTURE] = capture;
    res.writeHead = capturingWriteHead as ServerResponse['writeHead'];
    res.write = capturingWrite as ServerResponse['write'];
    res.end = capturingEnd as ServerResponse['end'];
  } else {
    // A second layer on the same response (another header, another store): its wrappers
    // hold it in closures and call the first one's, which still find theirs by the symbol.
    res.writeHead = function writeHead(this: ServerResponse, ...args: unknown[]) {
      return writeHeadWith(capture, this, args);
    } as ServerResponse['writeHead'];
    res.write = function write(this: ServerResponse, ...args: unknown[]) {
      return writeWith(capture, this, args);
    } as ServerResponse['write'];
    res.end = function end(this: ServerResponse, ...args: unknown[]) {
      return endWith(capture, this, args);
    } as ServerResponse['end'];
  }
  return capture;
}

/**
 * Whether something before us (a body parser) has already read the request body. Then the
 * body is taken from the parser's result, and its declared length is checked instead.
 */
export function bodyConsumed(req: IncomingMessage): boolean {
  return req.readableEnded;
}

/**
 * A JSON body a parser read before us, for the fingerprint: with the raw bytes or text the
 * parser kept (`rawBody`: Nest's `rawBody: true`, an Express `verify` hook that sets
 * `req.rawBody`), so that bytes that are not UTF-8 and numbers a double rounds count as
 * sent; else the parser's value alone.
 */
export function parsedBody(body: unknown, rawBody: unknown, contentType: string | readonly string[] | undefined): unknown {
  if (body === undefined || !isJsonType(contentType)) return body;
  if (typeof rawBody === 'string' || rawBody instanceof Uint8Array) return rawBody.length > 0 ? new ParsedJsonBody(body, rawBody, true) : body;
  return body;
}

/** A body read by someone else was not counted: refuse it by its declared length (413). */
export function assertDeclaredLength(req: IncomingMessage, limit: number): void {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) throw new BodyTooLargeError(limit);
}

type WebStream = Parameters<typeof Readable.fromWeb>[0];

/**
 * A response body that is a stream, as a Node stream: a Node Readable (or anything with
 * `pipe`), a web ReadableStream, a Blob, or a fetch Response (Koa 3 and Fastify accept all
 * of them). `undefined` for bodies that are not streams.
 */
export function toNodeStream(body: unknown): Readable | undefined {
  if (typeof body !== 'object' || body === null) return undefined;
  if (body instanceof Readable || typeof (body as Readable).pipe === 'function') return body as Readable;
  if (typeof ReadableStream !== 'undefined' && body instanceof ReadableStream) return Readable.fromWeb(body as WebStream);
  if (typeof Blob !== 'undefined' && body instanceof Blob) return Readable.fromWeb(body.stream() as WebStream);
  if (typeof Response !== 'undefined' && body instanceof Response) {
    return body.body ? Readable.fromWeb(body.body as WebStream) : Readable.from([]);
  }
  return undefined;
}

/**
 * Capture a response body stream (Koa's `ctx.body`, Fastify's payload) on its way out. The
 * returned stream passes every chunk on and ends only once the response is stored, as
 * captureResponse holds back `end`. Over `maxResponseBytes` the record completes without a
 * body. A failing source releases the claim, like a thrown error; a consumer
 * that goes away first (the client disconnected) completes it without a body: the
 * handler did run, so a retry must not run it again.
 */
export function captureStream(source: Readable, claim: HttpClaim, head: Omit<CapturedResponse, 'body'>): Readable {
  const recorder = new BodyRecorder(claim.maxResponseBytes);
  let settled = false;
  const settle = (outcome: () => Promise<void>): Promise<void> => {
    if (settled) return Promise.resolve();
    settled = true;
    return outcome();
  };
  const tee = new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      recorder.add(chunk);
      callback(null, chunk);
    },
    flush(callback) {
      void settle(() => claim.finish({ ...head, body: recorder.bytes() })).then(() => callback());
    },
  });
  source.once('error', (error) => {
    void settle(() => claim.fail(error));
    tee.destroy(error);
  });
  tee.once('close', () => {
    void settle(() => claim.finish({ ...head, body: null }));
    if (!source.destroyed) source.destroy();
  });
  source.pipe(tee);
  return tee;
}

/**
 * The error Node would throw when writing these headers (a value holding a newline), if
 * any: checked before a response is stored, so that a response that cannot be sent is
 * released like a thrown error instead of being stored.
 */
export function invalidHeader(headers: CapturedResponse['headers']): Error | undefined {
  try {
    // Own keys by `in` (no entry arrays): the headers are a plain or null-prototype object.
    for (const name in headers) {
      if (!Object.prototype.hasOwnProperty.call(headers, name)) continue;
      const value = headers[name];
      if (value === undefined) continue;
      validateHeaderName(name);
      if (Array.isArray(value)) for (const one of value) validateHeaderValue(name, String(one));
      else validateHeaderValue(name, String(value));
    }
  } catch (error) {
    return error as Error;
  }
  return undefined;
}

/**
 * Stop renewing the claim's lease once the client is gone before the response ended (the
 * handler may still finish and store its answer within the lease): a handler that hangs
 * after its client left then holds the key only until the lease ends. A client already
 * gone (it left while the claim was being made) counts at once. `ended` says whether the
 * response ended first.
 */
export function abandonOnClose(res: ServerResponse, claim: HttpClaim, ended: () => boolean, reprototyped = false): void {
  // On a re-prototyped response (Express's), `on` is found without a load on it (see inherited).
  whenClientGone(res, () => claim.abandon(), ended, reprototyped ? inherited<ServerResponse['on']>(res, 'on') : undefined);
}

/** The key header's lines, one entry per line, so repeated lines are spotted. */
export function keyHeaderLines(req: IncomingMessage, headerName: string): string[] | string | undefined {
  const joined = req.headers[headerName];
  // Node joins repeated lines with ", ": a value without a comma was one line, and the
  // per-line view (built for every header at once) is only needed otherwise.
  if (typeof joined === 'string' && !joined.includes(',')) return joined;
  return req.headersDistinct?.[headerName] ?? joined;
}

