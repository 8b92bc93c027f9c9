/**
 * What the web adapters read of @hono/node-server's private state, in one place. On that
 * server a `Request` is a lightweight object that keeps Node's message under a private
 * symbol, and a `Response` keeps its `[status, body, headers]` under another until
 * something reads it; reading the public members instead (`body`, `clone()`, `headers`)
 * builds full undici objects and streams, several times the layer's own cost. Each function
 * here returns `undefined` when what it looks for is not exactly there (another version,
 * another server, a runtime without it), and web-io.ts then takes the standard, public path:
 * test/adapters/hono-node-server.test.ts runs both paths and pins these shapes to the
 * installed version, so an upstream change fails there loudly instead of slowing down
 * silently. Internal (not a package sub-path); type imports only.
 * @module
 */
import { BodyTooLargeError } from '../../src/errors.js';

const EMPTY = new Uint8Array(0);
const encoder = new TextEncoder();

/** Node's IncomingMessage as @hono/node-server keeps it under its request (the members read here). */
export interface NodeIncoming {
  on(event: string, listener: (arg?: unknown) => void): unknown;
  off(event: string, listener: (arg?: unknown) => void): unknown;
  readonly readableDidRead: boolean;
  readonly readableEnded: boolean;
  readonly readableEncoding: string | null;
  readonly complete: boolean;
  rawBody?: unknown;
}

/**
 * Node's incoming message under a request of @hono/node-server that nothing has read or
 * turned into a full `Request` yet; `undefined` for any other request. That server's
 * lightweight Request keeps the message under a private symbol and reads the body from it
 * directly; a full `Request` (and a web stream of the body) is made only when something
 * asks for `body`, `clone()` or `signal`.
 */
export function unreadNodeIncoming(request: Request): NodeIncoming | undefined {
  let incoming: unknown;
  for (const symbol of Object.getOwnPropertySymbols(request)) {
    const value: unknown = (request as unknown as Record<symbol, unknown>)[symbol];
    switch (symbol.description) {
      case 'incomingKey':
        incoming = value;
        break;
      // Made into a full Request, or its body read: the standard path.
      case 'requestCache':
      case 'bodyConsumedDirectly':
      case 'bodyReadPromise':
        if (value !== undefined && value !== false) return undefined;
        break;
    }
  }
  const node = incoming as Partial<NodeIncoming> | undefined;
  if (typeof node !== 'object' || node === null || typeof node.on !== 'function' || typeof node.off !== 'function') return undefined;
  if (node.readableDidRead !== false || node.readableEnded !== false || node.readableEncoding !== null || 'rawBody' in node) return undefined;
  return node as NodeIncoming;
}

/**
 * The body of `incoming`, read whole from Node's message; the bytes are left as the
 * message's `rawBody`, which @hono/node-server reads a body from when it is there (as it
 * does on platforms that read the body before it), so the handler reads the same bytes from
 * the same, unread request (`text()`, `json()`, `arrayBuffer()`, `body`, `clone()`). For a
 * request whose declared length is within `limit`.
 */
export function readUnreadIncoming(incoming: NodeIncoming, limit: number): Promise<Uint8Array> {
  return new Promise<Uint8Array>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const done = (settle: () => void) => {
      incoming.off('data', onData);
      incoming.off('end', onEnd);
      incoming.off('error', onError);
      incoming.off('close', onClose);
      settle();
    };
    const onData = (chunk?: unknown) => {
      const bytes = chunk as Buffer;
      size += bytes.byteLength;
      chunks.push(bytes);
    };
    const onEnd = () =>
      done(() => {
        const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size);
        // An HTTP/1.1 server reads the declared length and no more; the check costs nothing.
        if (body.byteLength > limit) return reject(new BodyTooLargeError(limit));
        incoming.rawBody = body;
        resolve(body);
      });
    const onError = (error?: unknown) => done(() => reject(error));
    const onClose = () => {
      if (incoming.complete) onEnd();
      else done(() => reject(new Error('The client closed the connection before the request body was complete')));
    };
    incoming.on('data', onData);
    incoming.on('end', onEnd);
    incoming.on('error', onError);
    incoming.on('close', onClose);
  });
}

/** What @hono/node-server's Response keeps of itself: `[status, body, headers]`. */
export type Kept = [status: number, body: unknown, headers: unknown];

/**
 * The `[status, body, headers]` a server's own Response class keeps as given, or
 * `undefined`. @hono/node-server's Response keeps them under a private symbol until
 * something reads `body`; reading it there would turn it into a full Response and a
 * stream, where the server otherwise writes a string or bytes straight to the socket.
 * Anything not of that exact shape takes the standard path (read the stream);
 * test/adapters/hono-node-server.test.ts pins both paths against the installed version.
 */
export function keptParts(response: Response): Kept | undefined {
  const kept = keptResponse(response);
  return Array.isArray(kept) && kept.length === 3 && kept[0] === response.status ? (kept as Kept) : undefined;
}

/** @hono/node-server's private key of a Response's kept `[status, body, headers]`, once found. */
let keptKey: symbol | undefined;

/**
 * What a Response keeps under a private symbol described `cache`, or `undefined`. The key
 * found once is tried first, so a server's responses are not scanned for it one by one; a
 * response without it (a stream, another Response class) is scanned, as the first one was.
 */
function keptResponse(response: Response): unknown {
  const own = response as unknown as Record<symbol, unknown>;
  if (keptKey !== undefined) {
    const kept = own[keptKey];
    if (kept !== undefined) return kept;
  }
  for (const symbol of Object.getOwnPropertySymbols(response)) {
    if (symbol.description !== 'cache') continue;
    keptKey = symbol;
    return own[symbol];
  }
  return undefined;
}

/**
 * The bytes of a kept body, `null` when they are over `limit` (not stored), or `undefined`
 * when it cannot be told without reading the body (a stream, a Blob).
 */
export function knownBody(kept: Kept, limit: number): Uint8Array | null | undefined {
  const body = kept[1];
  if (body === null) return EMPTY;
  // Over the limit it is not stored (`null`): no copy is made only to be dropped. A
  // string longer than the limit in UTF-16 units is longer in UTF-8 bytes too.
  if (typeof body === 'string') return body.length > limit ? null : encoder.encode(body);
  // A copy (`Buffer#slice` would not be one): the handler may reuse its buffer.
  if (body instanceof Uint8Array) return body.byteLength > limit ? null : new Uint8Array(body);
  return undefined;
}

/** What @hono/node-server sends as the type of a kept body given no headers at all. */
const NODE_SERVER_DEFAULT_TYPE = 'text/plain; charset=UTF-8';
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** A value Node would refuse (a control character) or `Headers` would change (edge whitespace). */
const UNSENDABLE_VALUE = /[^\t\x20-\x7e\x80-\xff]|^[\t ]|[\t ]$/;

/**
 * The headers of a kept response, read without reading `response.headers`, when they were
 * given as a plain record of strings (as `c.json`, `c.text` and `new Response(text, {
 * headers: { ... } })` give them) or not at all: @hono/node-server writes such a record as
 * it is, while reading `headers` would build a `Headers` from it (and the server would then
 * write from that). `undefined` for any other form, a repeated name in two cases, or a name
 * or value Node would refuse: the standard path reads them (and a bad one is the handler's
 * error there).
 */
export function plainKeptHeaders(kept: Kept): Record<string, string> | undefined {
  const given = kept[2];
  if (given === undefined || given === null) return kept[1] === null ? {} : { 'content-type': NODE_SERVER_DEFAULT_TYPE };
  if (typeof given !== 'object' || Object.getPrototypeOf(given) !== Object.prototype) return undefined;
  const out: Record<string, string> = {};
  for (const name in given) {
    const value = (given as Record<string, unknown>)[name];
    if (typeof value !== 'string' || !TOKEN.test(name) || UNSENDABLE_VALUE.test(value)) return undefined;
    const lower = name.toLowerCase();
    if (Object.hasOwn(out, lower)) return undefined;
    out[lower] = value;
  }
  return out;
}
