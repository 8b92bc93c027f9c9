/**
 * Hand the request body the Hono middleware read (to fingerprint it) on to what runs after
 * it, without building a second `Request` for every request. Internal (not a package
 * sub-path); Hono is imported for its types only.
 *
 * This is the one file that reads Hono's private state: its request's body cache
 * (`bodyCache`, which its body methods consult before `raw`) and its request class, which
 * gets a subclass of its own on the request. When that shape is not there (another Hono,
 * a request whose prototype cannot change), the body is lent through Hono's public API
 * instead: `c.req.raw` becomes a `Request` with the same bytes, built at once.
 * test/adapters/hono-request.test.ts pins the shape to the installed Hono and runs both.
 * @module
 */
import type { HonoRequest } from 'hono';
import { withBody } from '../internal/web-io.js';

/** What the middleware read, and the `c.req.raw` handed out once something asked for it. */
interface Lent {
  readonly request: Request;
  readonly bytes: Uint8Array;
  raw?: Request;
  /** Whether `c.req.raw` is the accessor that builds it (RAW), not Hono's own field. */
  readonly accessor: boolean;
}

const LENT = Symbol('idempotency-kit.lent');

/**
 * Hono's body cache as it is at run time (its type names the values, it holds promises).
 * What was lent is kept there under a symbol, which Hono's walks of the cache (`for...in`)
 * never see: a symbol added to Hono's request itself, after its prototype changed, costs
 * about a microsecond a request.
 */
interface BodyCache {
  text?: Promise<string>;
  arrayBuffer?: Promise<ArrayBuffer>;
  formData?: Promise<FormData>;
  [LENT]?: Lent;
}
const bodyCache = (req: HonoRequest) => req.bodyCache as unknown as BodyCache;

const decoder = new TextDecoder();

/** The request whose url, method and headers stand for `c.req.raw`, without building it. */
function head(req: HonoRequest): Request {
  const lent = bodyCache(req)[LENT]!;
  return lent.raw ?? lent.request;
}

const lendingPrototypes = new WeakMap<object, object>();

/**
 * Hono's own request class with the members that read `c.req.raw` for its url, method or
 * headers, or for a body Hono already holds, answered without reading it. Hono's body
 * methods look at `raw` even when their answer is cached, and `c.req.header()` reads
 * `raw.headers`: without these, the first of them would build the raw `Request`. Built once
 * per Hono copy; what is not overridden is Hono's, unchanged.
 */
function lendingPrototype(base: object): object {
  const known = lendingPrototypes.get(base);
  if (known) return known;
  const inherited = base as HonoRequest;
  const proto: object = Object.create(base, {
    url: {
      get(this: HonoRequest) {
        return head(this).url;
      },
      configurable: true,
    },
    method: {
      get(this: HonoRequest) {
        return head(this).method;
      },
      configurable: true,
    },
    header: {
      value: function header(this: HonoRequest, name?: string) {
        const headers = head(this).headers;
        if (name) return headers.get(name) ?? undefined;
        const all: Record<string, string> = Object.create(null);
        headers.forEach((value, key) => {
          all[key] = value;
        });
        return all;
      },
      configurable: true,
      writable: true,
    },
    // A cached body is what Hono answers with; only a miss needs Hono's own method (and
    // raw). Text is made from the cached bytes on first use, as Hono would make it.
    text: {
      value: function text(this: HonoRequest) {
        const cache = bodyCache(this);
        if (cache.text) return cache.text;
        if (cache.arrayBuffer) return (cache.text = cache.arrayBuffer.then((b) => decoder.decode(b)));
        return inherited.text.call(this);
      },
      configurable: true,
      writable: true,
    },
    json: {
      value: function json(this: HonoRequest) {
        const cache = bodyCache(this);
        return cache.text || cache.arrayBuffer ? this.text().then((t) => JSON.parse(t)) : inherited.json.call(this);
      },
      configurable: true,
      writable: true,
    },
    arrayBuffer: {
      value: function arrayBuffer(this: HonoRequest) {
        return bodyCache(this).arrayBuffer ?? inherited.arrayBuffer.call(this);
      },
      configurable: true,
      writable: true,
    },
    bytes: {
      value: function bytes(this: HonoRequest) {
        const buffer = bodyCache(this).arrayBuffer;
        return buffer ? buffer.then((b) => new Uint8Array(b)) : inherited.bytes.call(this);
      },
      configurable: true,
      writable: true,
    },
  });
  lendingPrototypes.set(base, proto);
  return proto;
}

/** `c.req.raw`: a request with the body's bytes, built on first use. */
const RAW: PropertyDescriptor = {
  get(this: HonoRequest) {
    const lent = bodyCache(this)[LENT]!;
    return (lent.raw ??= withBody(lent.request, lent.bytes));
  },
  set(this: HonoRequest, value: Request) {
    bodyCache(this)[LENT]!.raw = value;
  },
  configurable: true,
  enumerable: true,
};

/**
 * Let the handlers read `bytes`, the body of `request` that the middleware consumed, as if
 * no one had: `c.req.json()`, `text()`, `arrayBuffer()`, `bytes()`, `blob()`, `formData()`
 * and `parseBody()` answer from Hono's body cache, and `c.req.raw` is a `Request` with the
 * same bytes (same url, method, headers and signal) when something asks for it: to read
 * it, pass it on to another fetch handler, or clone it. With `unread`, `request` can still
 * be read (@hono/node-server reads it again from Node's message), and is `c.req.raw`.
 */
export function lendBody(req: HonoRequest, request: Request, bytes: Uint8Array, unread = false, publicOnly = false): void {
  if (publicOnly || !lendable(req)) return lendPublicly(req, request, bytes, unread);
  const cache = bodyCache(req);
  const buffer = bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength ? bytes.buffer : bytes.slice().buffer;
  // Bytes only (text is made on first use): Hono makes a blob or form data from the first
  // entry, and text would not keep a binary body whole.
  cache.arrayBuffer = Promise.resolve(buffer as ArrayBuffer);
  const before = cache[LENT];
  // Once per request, and the same change for every request: V8 keeps the object fast.
  if (before === undefined && !Reflect.setPrototypeOf(req, lendingPrototype(Object.getPrototypeOf(req)))) {
    delete cache.arrayBuffer;
    return lendPublicly(req, request, bytes, unread);
  }
  if (unread) {
    // The request still holds its body (the server reads it again): it is `c.req.raw`
    // itself, as Hono set it, so no accessor is needed (defining one costs a microsecond).
    cache[LENT] = { request, bytes, raw: request, accessor: before?.accessor ?? false };
    return;
  }
  if (before?.accessor !== true) Object.defineProperty(req, 'raw', RAW);
  cache[LENT] = { request, bytes, accessor: true };
}

/** Whether Hono's request has the shape the lending above relies on. */
export function lendable(req: HonoRequest): boolean {
  const cache = (req as { bodyCache?: unknown }).bodyCache;
  const proto = Object.getPrototypeOf(req) as Record<string, unknown> | null;
  return (
    typeof cache === 'object' &&
    cache !== null &&
    proto !== null &&
    Object.isExtensible(req) &&
    ['text', 'json', 'arrayBuffer', 'bytes', 'header'].every((name) => typeof proto[name] === 'function')
  );
}

/**
 * The fallback on Hono's public API: `c.req.raw` is a `Request` with the same bytes (Hono's
 * body methods read it), or, still unread, the request itself.
 */
function lendPublicly(req: HonoRequest, request: Request, bytes: Uint8Array, unread: boolean): void {
  req.raw = unread ? request : withBody(request, bytes);
}

/**
 * The form data a handler-side reader took before the layer (`c.req.formData()`), when
 * Hono's body cache holds only that: its bytes again would be a new serialisation with a
 * new boundary. Undefined otherwise, and when the cache is not there (the body is then read
 * through `c.req.arrayBuffer()`, Hono's public method).
 */
export function formDataReadBefore(req: HonoRequest): Promise<FormData> | undefined {
  const cache = (req as { bodyCache?: unknown }).bodyCache as BodyCache | undefined;
  if (typeof cache !== 'object' || cache === null) return undefined;
  return cache.arrayBuffer === undefined ? cache.formData : undefined;
}
