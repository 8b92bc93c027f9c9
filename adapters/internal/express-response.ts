/**
 * Express's responses, recorded without adding properties to them. Express gives every
 * response a prototype of its own app, and reaching into that prototype chain is the one
 * place the Node-based adapters touch Express's own objects: the capturing `writeHead`,
 * `write` and `end` are put once on Express's response object (the one directly above
 * Node's `ServerResponse.prototype`), and find each response's capture in a table. Whenever
 * that shape is not there (another Express, a response not Express's, methods replaced
 * before us), `captureResponse` from node-io.ts, which needs nothing of Express, records
 * the response instead; test/adapters/express.test.ts runs both paths on Express 4 and 5.
 * Internal (not a package sub-path).
 * @module
 */
import { ServerResponse } from 'node:http';
import type { CapturedResponse, HttpClaim } from '../../src/http.js';
import { ObjectSlot } from '../../src/object-slot.js';
import { Capture, captureResponse, endWith, inherited, writeHeadWith, writeWith, type End, type ResponseCapture, type Write, type WriteHead } from './node-io.js';

/**
 * A capture found through the shared table (captureExpressResponse) instead of the
 * response's own properties: stopping it only forgets the response, whose methods were
 * never replaced.
 */
class SharedCapture extends Capture {
  override detach(): void {
    captures.delete(this.res);
  }

  // `getHeaders` found without a load on the response (see inherited in node-io.ts).
  override outgoingHeaders(): CapturedResponse['headers'] {
    const { res } = this;
    return inherited<ServerResponse['getHeaders']>(res, 'getHeaders').call(res) as CapturedResponse['headers'];
  }
}

/**
 * The captures of Express responses, by response. Express gives every response a prototype
 * of its own app (and then `res.locals`), after which each property added to a response
 * makes V8 build that response a hidden class of its own, 10 to 30 µs for the four a
 * capture adds, against about 2 µs on a Node `http` response: the capture's methods are
 * shared, and the capture itself goes beside the response (the adapter declared it).
 */
const captures = new ObjectSlot<SharedCapture>('capture');

/** Express's response objects (one per copy of Express) that carry the shared wrappers. */
const patched = new WeakSet<object>();

const nodeResponse = ServerResponse.prototype as unknown as { writeHead: WriteHead; write: Write; end: End };

// The wrappers put once on Express's response object: a response with a capture is
// recorded, any other passes straight to Node's own method (read at each call, so that a
// later patch of Node's prototype, by an APM agent say, still runs).
function sharedWriteHead(this: ServerResponse, ...args: unknown[]): ServerResponse {
  const capture = captures.get(this);
  if (capture === undefined) return nodeResponse.writeHead.apply(this, args);
  return writeHeadWith(capture, this, args);
}
function sharedWrite(this: ServerResponse, ...args: unknown[]): boolean {
  const capture = captures.get(this);
  if (capture === undefined) return nodeResponse.write.apply(this, args);
  return writeWith(capture, this, args);
}
function sharedEnd(this: ServerResponse, ...args: unknown[]): ServerResponse {
  const capture = captures.get(this);
  if (capture === undefined) return nodeResponse.end.apply(this, args);
  return endWith(capture, this, args);
}

/**
 * Express's own response object in this response's prototype chain: the one directly above
 * Node's `ServerResponse.prototype`, from which every app's (and mounted sub-app's)
 * response object descends. Undefined for a response that is not Express's, or when that
 * object defines its own `writeHead`, `write` or `end` (not ours to wrap).
 */
function expressResponseObject(res: ServerResponse): object | undefined {
  let object: object | null = Object.getPrototypeOf(res) as object | null;
  if (object === ServerResponse.prototype) return undefined;
  while (object !== null) {
    const parent = Object.getPrototypeOf(object) as object | null;
    if (parent === ServerResponse.prototype) {
      if (patched.has(object)) return object;
      if (Object.hasOwn(object, 'writeHead') || Object.hasOwn(object, 'write') || Object.hasOwn(object, 'end')) return undefined;
      return object;
    }
    object = parent;
  }
  return undefined;
}

/**
 * Whether `res.writeHead`, `res.write` and `res.end` are the shared wrappers, read without
 * a property load on the response itself: each Express response has a hidden class of its
 * own, so such a load misses every cache and looks the name up along the prototype chain in
 * V8's runtime (0.5 to 0.9 µs for `write`, measured in process, which nothing else reads on
 * an Express response sent with `res.send`). An own property is found by `Object.hasOwn`
 * (a few ns); without one, the method is the prototype's, whose hidden class is its app's
 * and stays cached. The same answer as comparing `res.write` itself.
 */
function sharesWrappers(res: ServerResponse): boolean {
  if (Object.hasOwn(res, 'end') || Object.hasOwn(res, 'write') || Object.hasOwn(res, 'writeHead')) return false;
  const prototype = Object.getPrototypeOf(res) as { writeHead?: unknown; write?: unknown; end?: unknown } | null;
  return prototype !== null && prototype.end === sharedEnd && prototype.write === sharedWrite && prototype.writeHead === sharedWriteHead;
}

/**
 * captureResponse for an Express response, without adding properties to it. The capturing
 * `writeHead`, `write` and `end` are put once on Express's response object (the first time
 * a response of that copy of Express is captured), and find the capture in a table; a
 * response without one goes straight to Node's methods. Falls back to captureResponse when
 * the response's `writeHead`, `write` or `end` is not the shared one: something before us
 * replaced it on the response (compression, express-session, on-headers), a second layer
 * captures the same response, or the response is not Express's.
 */
export function captureExpressResponse(res: ServerResponse, claim: HttpClaim): ResponseCapture {
  if (!sharesWrappers(res)) {
    const object = expressResponseObject(res);
    if (object !== undefined && !patched.has(object)) {
      const methods = object as { writeHead: unknown; write: unknown; end: unknown };
      methods.writeHead = sharedWriteHead;
      methods.write = sharedWrite;
      methods.end = sharedEnd;
      patched.add(object);
    }
    if (!sharesWrappers(res)) return captureResponse(res, claim);
  }
  if (captures.get(res) !== undefined) return captureResponse(res, claim);
  const capture = new SharedCapture(res, claim, nodeResponse.writeHead, nodeResponse.write, nodeResponse.end);
  captures.set(res, capture);
  return capture;
}
