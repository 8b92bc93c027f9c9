/**
 * Fetch-API plumbing shared by the fetch and Hono adapters: read a `Request` body within
 * a limit, describe a `Request` to the HTTP layer, answer with a `Response`, and record a
 * handler's `Response` on its way out. Internal (not a package sub-path). Web standards,
 * so that it runs on Node, Bun and Deno alike; what it reads of @hono/node-server's private
 * state is in hono-node-server.ts, each piece with the standard path as its fallback.
 * @module
 */
import { createHash } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { BodyTooLargeError } from '../../src/errors.js';
import { RawBody, UploadBody, type UploadedFile } from '../../src/fingerprint.js';
import type { CapturedResponse, HttpClaim, HttpRequestInfo, Idempotency } from '../../src/http.js';
import type { HttpResponse } from '../../src/problem.js';
import { BodyRecorder } from './body-recorder.js';
import { whenClientGone } from './client-gone.js';
import { endAfterDrain } from './drain.js';
import { keptParts, knownBody, plainKeptHeaders, readUnreadIncoming, unreadNodeIncoming } from './hono-node-server.js';

const EMPTY = new Uint8Array(0);

/** Statuses whose Response must not have a body (the Response constructor throws). */
const NULL_BODY_STATUSES = new Set([101, 103, 204, 205, 304]);

/** A declared Content-Length over `limit` is refused before a byte is read (413). */
export function assertDeclaredLength(headers: Headers, limit: number): void {
  const declared = Number(headers.get('content-length') ?? undefined);
  if (Number.isFinite(declared) && declared > limit) throw new BodyTooLargeError(limit);
}

/**
 * Read a request body stream's chunks, up to `limit` bytes (beyond it, BodyTooLargeError:
 * 413; the rest is left unread, and the stream cancelled unless `keepOpen`: on
 * @hono/node-server cancelling destroys Node's message and with it the connection, before
 * the 413 is out, so there the rest is drained instead, see drainAfterEarlyAnswer).
 */
async function readChunks(stream: ReadableStream<Uint8Array>, limit: number, keepOpen = false): Promise<{ chunks: Uint8Array[]; size: number }> {
  const reader = stream.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return { chunks, size };
    size += value.byteLength;
    if (size > limit) {
      if (keepOpen) reader.releaseLock();
      else reader.cancel().catch(() => undefined);
      throw new BodyTooLargeError(limit);
    }
    chunks.push(value);
  }
}

/**
 * A form body something before the layer parsed into a `FormData` (Hono's `c.req.formData()`),
 * for the fingerprint: its text entries in order and its files, hashed as they stream.
 * Its bytes cannot be had again (serialising it again draws a new boundary), so no record
 * of the release before the versioned fingerprint can match it.
 */
export async function formDataUpload(formData: FormData): Promise<UploadBody> {
  const fields = new URLSearchParams();
  const files: UploadedFile[] = [];
  for (const [name, value] of formData) {
    if (typeof value === 'string') {
      fields.append(name, value);
      continue;
    }
    const hash = createHash('sha256');
    for await (const chunk of value.stream() as unknown as AsyncIterable<Uint8Array>) hash.update(chunk);
    files.push({ name, filename: value.name, type: value.type === '' ? null : value.type, sha256: hash.digest('base64url') });
  }
  return new UploadBody(fields, files);
}

/** Bodies up to this size are read whole by the runtime's `arrayBuffer()`; larger ones in their chunks. */
const WHOLE_BODY_BYTES = 256 * 1024;

/**
 * Whether a body is read whole (`arrayBuffer()`): a declared Content-Length within `limit`
 * and WHOLE_BODY_BYTES, without Transfer-Encoding (an HTTP/1.1 server reads exactly that
 * many bytes). Any other body is read as a stream, counted.
 */
function readsWhole(headers: Headers, limit: number): boolean {
  const length = headers.get('content-length');
  if (length === null || headers.has('transfer-encoding')) return false;
  const declared = Number(length);
  return Number.isSafeInteger(declared) && declared >= 0 && declared <= Math.min(limit, WHOLE_BODY_BYTES);
}

/**
 * A body read whole, as bytes, within `limit` all the same: a `Request` made in code can
 * declare a length its body does not have.
 */
function bounded(buffer: ArrayBuffer, limit: number): Uint8Array {
  if (buffer.byteLength > limit) throw new BodyTooLargeError(limit);
  return new Uint8Array(buffer);
}

/**
 * Read `request`'s body, consuming it, up to `limit` bytes (beyond it, BodyTooLargeError:
 * 413). A declared Content-Length without Transfer-Encoding is the body's exact size (an
 * HTTP/1.1 server reads no more), so such a body, when small, is read whole through the
 * runtime's own fast path (`arrayBuffer()`); a chunked or large one is read as a stream,
 * counted, and kept in its chunks (an `arrayBuffer()` of an upload would hold it about
 * three times over while it joins the chunks and copies the result).
 */
export async function consumeBody(request: Request, limit: number, keepOpen = false): Promise<Uint8Array | RawBody> {
  const method = request.method;
  if (method === 'GET' || method === 'HEAD') return EMPTY;
  assertDeclaredLength(request.headers, limit);
  if (readsWhole(request.headers, limit)) return bounded(await request.arrayBuffer(), limit);
  if (request.body === null) return EMPTY;
  const { chunks, size } = await readChunks(request.body, limit, keepOpen);
  return new RawBody(chunks, size);
}

/**
 * Node's message and response under a request served by @hono/node-server, which calls
 * `fetch(request, { incoming, outgoing })` (Hono's `c.env`); `undefined` elsewhere.
 */
export function nodeServerPair(env: unknown): { incoming: IncomingMessage; outgoing: ServerResponse } | undefined {
  if (typeof env !== 'object' || env === null) return undefined;
  const { incoming, outgoing } = env as { incoming?: Partial<IncomingMessage>; outgoing?: Partial<ServerResponse> };
  if (typeof incoming?.resume !== 'function' || typeof incoming.isPaused !== 'function' || typeof outgoing?.end !== 'function' || typeof outgoing.write !== 'function') {
    return undefined;
  }
  return { incoming: incoming as IncomingMessage, outgoing: outgoing as ServerResponse };
}

/**
 * After an answer of the layer's own sent before the request body was read to its end (a
 * 413, a 400 for a bad key), on @hono/node-server: the rest of the body is read and thrown
 * away (bounded) before the connection closes, as the Node adapter does, so that a client
 * still sending gets the answer instead of a reset. Nothing when the body was read whole.
 * Other runtimes manage their connections themselves.
 */
export function drainAfterEarlyAnswer(node: { incoming: IncomingMessage; outgoing: ServerResponse } | undefined): void {
  if (node !== undefined) endAfterDrain(node.incoming, node.outgoing);
}

/**
 * The body of a small request of @hono/node-server (a declared length within `limit`
 * and WHOLE_BODY_BYTES, no Transfer-Encoding), read from Node's message without reading
 * the request (see {@link readUnreadIncoming}), so the handler reads the same bytes from the
 * same, unread request. `undefined` for any other request: the caller takes the standard
 * path. Made for it: reading `body` or `clone()` there would make a full `Request` and tee
 * its stream, several times the cost of the layer's own work.
 */
export function peekNodeServerBody(request: Request, limit: number): Promise<Uint8Array> | undefined {
  const method = request.method;
  if (method === 'GET' || method === 'HEAD') return undefined;
  const incoming = unreadNodeIncoming(request);
  if (incoming === undefined || !readsWhole(request.headers, limit)) return undefined;
  return readUnreadIncoming(incoming, limit);
}

/**
 * The request's body bytes, up to `limit`, leaving the request itself unread: a clone is
 * read, so the handler gets the very object it would have got (a Next.js `NextRequest`
 * keeps its `nextUrl` and `cookies`) and reads the same bytes. The clone's chunks are kept
 * as they came (no copy into one buffer): with the copy the handler's branch of the body
 * holds until it reads it, an upload costs about twice its size, not three times.
 */
export function readRequestBody(request: Request, limit: number): Promise<RawBody> {
  try {
    assertDeclaredLength(request.headers, limit);
  } catch (error) {
    return Promise.reject(error);
  }
  const peeking = peekNodeServerBody(request, limit);
  if (peeking !== undefined) return peeking.then(wholeBody);
  if (request.body === null || request.method === 'GET' || request.method === 'HEAD') return Promise.resolve(new RawBody([], 0));
  return readChunks(request.clone().body!, limit).then(({ chunks, size }) => new RawBody(chunks, size));
}

const wholeBody = (bytes: Uint8Array): RawBody => new RawBody(bytes.byteLength === 0 ? [] : [bytes], bytes.byteLength);

/**
 * A request like `request` whose body is `bytes`, for handlers that read a request whose
 * body was consumed (Hono's `c.req.raw`, which handlers pass on to tRPC, auth libraries...).
 */
export function withBody(request: Request, bytes: Uint8Array): Request {
  const method = request.method;
  const body = bytes.byteLength === 0 || method === 'GET' || method === 'HEAD' ? null : bytes;
  return new Request(request.url, { method, headers: request.headers, body: body as ResponseBody, signal: request.signal });
}

/** A flat record of the headers (repeated lines joined with ", ", as `Headers` keeps them). */
export function headersRecord(headers: Headers): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  headers.forEach((value, name) => {
    out[name] = value;
  });
  // forEach joins Set-Cookie lines with ", ", which breaks cookies that hold a date.
  const cookies = typeof headers.getSetCookie === 'function' ? headers.getSetCookie() : [];
  if (cookies.length > 1) out['set-cookie'] = cookies;
  return out;
}

/**
 * A view of request headers as a record, each read from `headers` when asked for. The HTTP
 * layer reads a few by name (content-type, the fingerprint's headers); copying them all
 * would make a server that keeps the headers in its own form (@hono/node-server reads them
 * from Node's) build a full `Headers` for every request. Listing the names still works.
 */
export function headersView(headers: Headers): Record<string, string | undefined> {
  // The Headers object is the proxy's target and the handler is shared: one object per
  // request, no closures. Headers keeps no own properties, so the proxy's invariants hold.
  return new Proxy(headers, HEADERS_VIEW) as unknown as Record<string, string | undefined>;
}

const headerOf = (headers: Headers, name: string | symbol): string | undefined =>
  typeof name === 'string' ? (headers.get(name) ?? undefined) : undefined;

const HEADERS_VIEW: ProxyHandler<Headers> = {
  get: headerOf,
  has: (headers, name) => headerOf(headers, name) !== undefined,
  ownKeys: (headers) => [...new Set(headers.keys())], // Set-Cookie lines come one by one
  getOwnPropertyDescriptor: (headers, name) => {
    const found = headerOf(headers, name);
    return found === undefined ? undefined : { value: found, enumerable: true, configurable: true, writable: false };
  },
  // A view: writes change nothing, as on a record the layer copied.
  set: () => true,
  deleteProperty: () => true,
};

/** The request target (path and query) of an absolute URL. */
export function requestTarget(url: string): string {
  const hash = url.indexOf('#');
  const end = hash === -1 ? url.length : hash;
  const scheme = url.indexOf('://');
  const slash = url.indexOf('/', scheme === -1 ? 0 : scheme + 3);
  if (slash === -1 || slash > end) {
    const query = url.indexOf('?');
    return query === -1 || query > end ? '/' : `/${url.slice(query, end)}`;
  }
  return url.slice(slash, end);
}

/**
 * What the HTTP layer needs to know about a `Request`. The key header's repeated lines
 * arrive joined with ", " (that is how `Headers` keeps them), which the key parser refuses
 * as several values, as it refuses repeated lines elsewhere.
 */
export function requestInfo<Raw>(
  request: Request,
  layer: Idempotency<Raw>,
  raw: Raw,
  body: () => Promise<unknown>,
): HttpRequestInfo<Raw> {
  return {
    method: request.method,
    url: requestTarget(request.url),
    headers: headersView(request.headers),
    keyHeaderLines: request.headers.get(layer.headerName) ?? undefined,
    body,
    raw,
  };
}

/** A replay or a problem as a `Response`. */
export function toResponse(response: HttpResponse): Response {
  // A plain object (servers copy it faster than a Headers); a repeated header is joined
  // with ", ", which HTTP allows for every header that is replayed (never Set-Cookie).
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(response.headers)) headers[name] = Array.isArray(value) ? value.join(', ') : value;
  const body = NULL_BODY_STATUSES.has(response.status) ? null : response.body;
  return new Response(body as ResponseBody, { status: response.status, headers });
}

type Head = Omit<CapturedResponse, 'body'>;
type ResponseBody = ConstructorParameters<typeof Response>[0];
type Read = Awaited<ReturnType<ReadableStreamDefaultReader<Uint8Array>['read']>>;

const NOT_YET = Symbol('not yet');

/** Settles with NOT_YET after a few microtasks: a chunk a body already holds arrives sooner. */
function soon(): Promise<typeof NOT_YET> {
  return Promise.resolve(NOT_YET).then(same).then(same).then(same);
}
const same = <T>(value: T): T => value;

/**
 * Read what the body has ready within one turn of the event loop. A body made from a
 * string, bytes or a Blob is whole by then, so it is stored before the response goes out
 * and sent as plain bytes; a body still being produced (a stream) is not, and is recorded
 * as it streams (`streamOn`). With `untilEnd` (the client is gone: no one will read the
 * body) it reads to the end, or until the body is over the limit. The turn's timer is
 * only set once a read does not settle within a few microtasks, which every body already
 * held in memory does: most responses need no timer.
 */
async function readReady(
  reader: ReadableStreamDefaultReader<Uint8Array>,
  recording: BodyRecorder,
  untilEnd: boolean,
): Promise<{ done: boolean; sent: Uint8Array[]; pending?: Promise<Read> }> {
  const sent: Uint8Array[] = [];
  let timer: ReturnType<typeof setTimeout> | undefined;
  let turn: Promise<typeof NOT_YET> | undefined;
  try {
    for (;;) {
      const pending = reader.read();
      let result = untilEnd ? await pending : await Promise.race([pending, soon()]);
      if (result === NOT_YET) {
        turn ??= new Promise<typeof NOT_YET>((resolve) => (timer = setTimeout(resolve, 0, NOT_YET)));
        result = await Promise.race([pending, turn]);
      }
      if (result === NOT_YET) return { done: false, sent, pending }; // Promise.race handles its rejection until streamOn awaits it
      if (result.done) return { done: true, sent };
      sent.push(result.value);
      recording.add(result.value); // no one else has seen this chunk yet: no copy
      if (recording.overflow) return { done: false, sent };
    }
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Pass the rest of the body on chunk by chunk while recording it, and end it only once
 * the response is stored (or released), so that a client which has seen the whole
 * response always gets the replay on retry. Not `tee()`: a branch nobody reads would
 * buffer without bound, and a tee cannot hold back the end. Over `maxResponseBytes` the
 * record completes without a body; a failing source releases the claim (as a thrown error
 * does); a reader that goes away first (the client disconnected) completes it without a
 * body: the handler did run, so a retry must not run it again.
 */
function streamOn(
  reader: ReadableStreamDefaultReader<Uint8Array>,
  claim: HttpClaim,
  head: Head,
  recording: BodyRecorder,
  sent: Uint8Array[],
  pending: Promise<Read> | undefined,
): ReadableStream<Uint8Array> {
  let settled = false;
  const settle = (outcome: () => Promise<void>): Promise<void> => {
    if (settled) return Promise.resolve();
    settled = true;
    return outcome();
  };
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        if (sent.length > 0) {
          controller.enqueue(sent.shift()!);
          return;
        }
        let result: Read;
        try {
          result = await (pending ?? reader.read());
        } catch (error) {
          await settle(() => claim.fail(error));
          controller.error(error);
          return;
        } finally {
          pending = undefined;
        }
        if (result.done) {
          await settle(() => claim.finish({ ...head, body: recording.bytes() }));
          controller.close();
          return;
        }
        recording.add(result.value, true); // a copy: the consumer may reuse the buffer
        controller.enqueue(result.value);
      },
      async cancel(reason) {
        void settle(() => claim.finish({ ...head, body: null }));
        await reader.cancel(reason);
      },
    },
    { highWaterMark: 0 },
  );
}

/** Whether a header value holds a character beyond ASCII. */
function nonAsciiHeader(headers: Head['headers']): boolean {
  for (const value of Object.values(headers)) {
    if (typeof value === 'string' ? /[^\x00-\x7f]/.test(value) : Array.isArray(value) && value.some((v) => /[^\x00-\x7f]/.test(String(v)))) {
      return true;
    }
  }
  return false;
}

/**
 * Record the handler's response for replay and return the one to send (see `readReady`
 * and `streamOn`). When the client has already gone (`signal` aborted), the body is read
 * here, so that the answer is still stored and a retry replays it.
 */
export async function recordResponse(response: Response, claim: HttpClaim, signal: { readonly aborted: boolean } | undefined): Promise<Response> {
  // Not `instanceof`: a server may swap in its own Response class (@hono/node-server does).
  if (typeof response !== 'object' || response === null || typeof (response as Response).status !== 'number' || !('body' in response)) {
    const error = new TypeError(`Expected the handler to return a Response, got ${response === null ? 'null' : typeof response}`);
    await claim.fail(error);
    throw error;
  }
  const kept = keptParts(response);
  const plain = kept && plainKeptHeaders(kept);
  let head: Head;
  try {
    // A server's Response may check header values only when they are read (@hono/node-server
    // does): a value refused here is the handler's error, and the claim is released.
    head = { status: response.status, headers: plain ?? headersRecord(response.headers) };
  } catch (error) {
    await claim.fail(error);
    throw error;
  }
  const known = kept && knownBody(kept, claim.maxResponseBytes);
  if (known !== undefined) {
    // Nothing read from it: the server sends it as it would have without us.
    await claim.finish({ status: head.status, headers: head.headers, body: known });
    // Node writes a head that goes out with a string body in the body's encoding (UTF-8), and
    // otherwise as latin1, as the replay (bytes) goes out: a non-ASCII header value is sent
    // with the body as bytes, so that the first response and its replay are the same bytes.
    if (typeof kept?.[1] === 'string' && known !== null && nonAsciiHeader(head.headers)) return new Response(known as ResponseBody, response);
    return response;
  }
  // A stream the server keeps as given is read from itself: reading `response.body` would
  // first build a full Response around it, and the headers of the one sent would be read
  // from that.
  const keptStream = kept !== undefined && isUnlockedStream(kept[1]) ? kept[1] : undefined;
  const body = keptStream ?? response.body;
  if (body === null) {
    await claim.finish({ ...head, body: EMPTY });
    return response;
  }
  // A kept response has no status text of its own (the server sends none), and asking for
  // one would build the full Response; its headers go out as they were given.
  const init = keptStream !== undefined ? { status: head.status, headers: plain ?? response.headers } : initOf(response);
  const reader = body.getReader();
  const recording = new BodyRecorder(claim.maxResponseBytes);
  let ready;
  try {
    ready = await readReady(reader, recording, signal?.aborted === true);
  } catch (error) {
    await claim.fail(error);
    throw error;
  }
  if (ready.done || (signal?.aborted && recording.overflow)) {
    if (!ready.done) reader.cancel().catch(() => undefined);
    const bytes = recording.bytes();
    await claim.finish({ ...head, body: bytes });
    return new Response(bytes as ResponseBody, init);
  }
  try {
    return new Response(streamOn(reader, claim, head, recording, ready.sent, ready.pending), init);
  } catch (error) {
    // Not sent, so never read: the claim would otherwise be left to its lease timer.
    reader.cancel().catch(() => undefined);
    await claim.fail(error);
    throw error;
  }
}

/**
 * The handler's status, status text and headers, for the response sent in its place: what
 * `new Response(body, response)` reads, as a plain init. @hono/node-server's Response,
 * given a Response as its init, builds a full undici Response at once and the server
 * then sends it through a stream; given a plain init, it writes the bytes straight out.
 */
function initOf(response: Response): ResponseInit {
  return { status: response.status, statusText: response.statusText, headers: response.headers };
}

/** Whether `body` is a `ReadableStream` no one has started reading. */
function isUnlockedStream(body: unknown): body is ReadableStream<Uint8Array> {
  return typeof body === 'object' && body !== null && typeof (body as ReadableStream).getReader === 'function' && (body as ReadableStream).locked === false;
}

/** A platform's `waitUntil` (Cloudflare Workers, Vercel and Netlify edge functions): keep the invocation alive for a promise. */
export type WaitUntil = (promise: Promise<unknown>) => void;

/**
 * The `waitUntil` of the context a platform passes after the request (`fetch(request, env,
 * ctx)` on Workers, `(request, context)` elsewhere), if one of the arguments has it.
 */
export function platformWaitUntil(args: readonly unknown[]): WaitUntil | undefined {
  for (const arg of args) {
    const waitUntil = (arg as { waitUntil?: unknown } | null)?.waitUntil;
    if (typeof arg === 'object' && typeof waitUntil === 'function') return (promise) => waitUntil.call(arg, promise);
  }
  return undefined;
}

/**
 * The claim, with the invocation kept alive (`waitUntil`) until it settles. On Workers a
 * request's work is cancelled once its client is gone: a handler still running, or a
 * response still being recorded, would leave the claim neither stored nor released, and
 * the retry would wait out the lease and run the handler again.
 */
export function keepAliveUntilSettled(claim: HttpClaim, waitUntil: WaitUntil | undefined): HttpClaim {
  if (waitUntil === undefined) return claim;
  let done!: () => void;
  waitUntil(new Promise<void>((resolve) => (done = resolve)));
  return {
    finish: (response) => claim.finish(response).finally(done),
    fail: (error) => claim.fail(error).finally(done),
    abandon: () => claim.abandon(),
    maxResponseBytes: claim.maxResponseBytes,
  };
}

/**
 * Stop renewing the claim's lease once the client is gone, and say whether it is, from the
 * platform's arguments: on @hono/node-server (`fetch(request, { incoming, outgoing })`),
 * Node's response tells (closed before it finished), where the request's `signal` would
 * be made on first use, an AbortController and a listener for every request. Elsewhere,
 * the request's signal.
 */
export function clientGoneFor(request: Request, rest: readonly unknown[], claim: HttpClaim): { readonly aborted: boolean } {
  const node = nodeServerPair(rest[0])?.outgoing;
  if (node === undefined) {
    const { signal } = request;
    abandonOnAbort(signal, claim);
    return signal;
  }
  const state = { aborted: false };
  whenClientGone(node, () => {
    state.aborted = true;
    claim.abandon();
  });
  return state;
}

/** Stop renewing the claim's lease once the client is gone (the handler may still finish). */
export function abandonOnAbort(signal: AbortSignal | undefined, claim: HttpClaim): void {
  if (!signal) return;
  if (signal.aborted) claim.abandon();
  else signal.addEventListener('abort', () => claim.abandon(), { once: true });
}
