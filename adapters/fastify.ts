/**
 * Fastify adapter: a plugin (Fastify 5) registered app-wide, with per-route opt-out or
 * overrides through the route's `config.idempotency`.
 * @module
 * @example
 * import Fastify from 'fastify';
 * import { createStore } from 'idempotency-kit';
 * import { idempotency } from 'idempotency-kit/fastify';
 *
 * const app = Fastify();
 * await app.register(idempotency, { store: createStore('redis://127.0.0.1:6379') });
 * app.post('/orders', async (request, reply) => reply.code(201).send({ id: 42 }));
 * app.post('/pings', { config: { idempotency: false } }, async () => ({ ok: true }));
 * await app.listen({ port: 3000 });
 */
import type { ServerResponse } from 'node:http';
import { createRequire } from 'node:module';
import { Transform, finished } from 'node:stream';
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { BodyTooLargeError } from '../src/errors.js';
import { Idempotency, userIdentity, type AdapterDefaults, type CapturedResponse, type HttpClaim, type IdempotencyOptions } from '../src/http.js';
import { isJsonType, ParsedJsonBody, RawBody } from '../src/fingerprint.js';
import { documentOperation, idempotencyContract, type OpenApiDocument } from '../src/openapi.js';
import { captureStream, endAfterDrain, invalidHeader, isMultipart, keyHeaderLines, readBody, restoreBody, toNodeStream } from './internal/node-io.js';
import { uploadBody, type UploadSource } from './internal/uploads.js';

/** Every option of `IdempotencyOptions`; `scope` and `fingerprint` get the Fastify request. */
export type FastifyIdempotencyOptions = IdempotencyOptions<FastifyRequest>;

/** A route's `config.idempotency`: `false` turns the layer off, an object overrides options. */
export type FastifyRouteIdempotency = false | Partial<FastifyIdempotencyOptions>;

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * `false`: this route is not protected, even with a key. An object: plugin
     * options overridden for this route (`wait`, `required`, `scope`, ...).
     */
    idempotency?: FastifyRouteIdempotency;
  }
}

/**
 * What the plugin keeps for a covered request, on the request (and, once a claim is held,
 * on its raw response) under a symbol of the plugin's registration: one object per request
 * and shared hook functions, with no WeakMap entry or closure per request for the
 * collector to trace, so requests die young.
 */
class RequestState {
  /** The claim while the handler runs. */
  claim: HttpClaim | undefined;
  settled = false;
  /** Bytes of a chunked body counted on their way to the parser (a declared length is used as it is). */
  counted: number | undefined;
  /**
   * A JSON body's chunks as they went to the parser: Fastify's parser decodes them leniently
   * and rounds large numbers, so the fingerprint reads these (up to `maxBodyBytes`).
   */
  chunks: Buffer[] | undefined;

  constructor(
    readonly layer: Idempotency<FastifyRequest>,
    readonly reply: FastifyReply,
  ) {}
}

/** `null`: looked at, not covered. */
type Stateful = Record<symbol, RequestState | null | undefined>;

const noop = () => {};

/** The bytes of a non-stream payload, as Fastify will write them. */
function payloadBytes(payload: unknown): Uint8Array | undefined {
  if (payload === null || payload === undefined) return new Uint8Array(0);
  if (typeof payload === 'string') return Buffer.from(payload);
  if (payload instanceof Uint8Array) return payload;
  if (payload instanceof ArrayBuffer) return new Uint8Array(payload);
  return undefined;
}

/** Without `scope`: the user that @fastify/jwt and @fastify/passport leave on `request.user`. */
const fastifyDefaults: AdapterDefaults<FastifyRequest> = {
  name: 'idempotency-kit/fastify',
  principal: (request) => userIdentity((request as { user?: unknown }).user),
  principalSource: 'request.user.id and request.user.sub',
  scopeExample: '(request) => request.user.id',
};

const uploadSource: UploadSource = {
  adapter: 'idempotency-kit/fastify',
  where: 'request.body, as @fastify/multipart attaches it (attachFieldsToBody)',
  fix: 'Let the handler read the upload (request.file(), request.parts()) instead of attaching it to the body with an `onFile` that keeps no buffer',
};

/**
 * The fields and files of a body @fastify/multipart attached (`attachFieldsToBody`): part
 * objects (`true`: `{ type: 'file', _buf }` or `{ type: 'field', value }`), or plain values
 * (`'keyValues'`: a file is its Buffer, without its name or type).
 */
function attachedUpload(body: unknown): { fields: Record<string, unknown>; files: unknown[] } {
  const fields: Record<string, unknown> = Object.create(null);
  const files: unknown[] = [];
  if (typeof body !== 'object' || body === null) return { fields, files };
  for (const [name, entry] of Object.entries(body)) {
    const values: unknown[] = [];
    for (const item of Array.isArray(entry) ? entry : [entry]) {
      const part = item as { type?: unknown; value?: unknown } | null;
      if (Buffer.isBuffer(item)) files.push({ fieldname: name, buffer: item });
      else if (part?.type === 'file') files.push(part);
      else values.push(part?.type === 'field' ? part.value : item);
    }
    if (values.length > 0) fields[name] = values.length === 1 && !Array.isArray(entry) ? values[0] : values;
  }
  return { fields, files };
}

/** The Content-Length of a request, when it has a valid one. */
function declaredLength(value: string | undefined): number | undefined {
  if (value === undefined || !/^\d+$/.test(value)) return undefined;
  return Number(value);
}

async function plugin(fastify: FastifyInstance, options: FastifyIdempotencyOptions): Promise<void> {
  // Options are checked now, at registration, not at the first request.
  const layer = new Idempotency<FastifyRequest>(options, fastifyDefaults);
  const routeLayers = new WeakMap<object, Idempotency<FastifyRequest>>();
  // Each registration its own key: a plugin registered again in a child context keeps its own state.
  const STATE = Symbol('idempotency-kit.fastify');

  /**
   * The raw response closed. Sent without passing onSend (`reply.hijack()` and raw writes):
   * the handler ran, but its body was not seen, so it completes without one. Else the
   * client left while the handler runs: onSend still comes and stores it; if it never
   * does, the claim ends with its lease.
   */
  function onRawClose(this: ServerResponse): void {
    const state = (this as unknown as Stateful)[STATE];
    if (!state?.claim || state.settled) return;
    if (this.writableFinished) {
      state.settled = true;
      void state.claim.finish({ status: this.statusCode, headers: state.reply.getHeaders(), body: null });
    } else state.claim.abandon();
  }

  const routeLayer = (override: FastifyRouteIdempotency | undefined): Idempotency<FastifyRequest> | undefined => {
    if (override === undefined) return layer;
    if (override === false) return undefined;
    if (typeof override !== 'object' || override === null) {
      throw new TypeError(`Expected route \`config.idempotency\` to be false or an options object, got ${String(override)}`);
    }
    let found = routeLayers.get(override);
    if (!found) routeLayers.set(override, (found = layer.with(override)));
    return found;
  };
  /**
   * The request's state when its route's layer covers its method, else `null`. Worked out
   * once per request (`request.routeOptions` builds a new object at every read).
   */
  const stateOf = (request: FastifyRequest, reply: FastifyReply): RequestState | null => {
    const known = (request as unknown as Stateful)[STATE];
    if (known !== undefined) return known;
    const routed = routeLayer(request.routeOptions.config?.idempotency);
    const state = routed?.covers(request.method) ? new RequestState(routed, reply) : null;
    (request as unknown as Stateful)[STATE] = state;
    return state;
  };

  // Build (and so check) each route's overrides when the route is declared; note what it
  // covers, for the OpenAPI document.
  const covered: CoveredRoute[] = [];
  fastify.addHook('onRoute', (route) => {
    const routed = routeLayer(route.config?.idempotency);
    if (!routed) return;
    for (const method of Array.isArray(route.method) ? route.method : [route.method]) {
      if (routed.covers(method)) covered.push({ method: method.toLowerCase(), url: route.url, layer: routed });
    }
  });
  // With @fastify/swagger, its document carries the contract on every covered route.
  fastify.addHook('onReady', function idempotencyOpenapi(done) {
    documentSwagger(fastify, covered);
    done();
  });

  // Count the body's bytes on the way to Fastify's parser, for `maxBodyBytes` (413). The
  // hooks that need no await take Fastify's callback form: an async hook costs a promise
  // and a turn of the microtask queue per request, covered or not.
  fastify.addHook('preParsing', function idempotencyBodySize(request, reply, payload, done) {
    const state = stateOf(request, reply);
    // A declared length is the body's length (Node's parser reads exactly that many
    // bytes), so it is checked as it is; only a chunked body is counted on its way. An
    // upload is not read by a parser here (@fastify/multipart reads request.raw itself):
    // the layer reads and counts it in preHandler. A JSON body's bytes are kept on their
    // way, for the fingerprint.
    if (!state || isMultipart(request.headers['content-type'])) {
      done(null, payload);
      return;
    }
    const declared = declaredLength(request.headers['content-length']);
    const json = isJsonType(request.headers['content-type']);
    if (declared !== undefined && (!json || declared === 0 || declared > state.layer.maxBodyBytes)) {
      done(null, payload);
      return;
    }
    if (declared === undefined) state.counted = 0;
    const chunks: Buffer[] | undefined = json ? (state.chunks = []) : undefined;
    const limit = state.layer.maxBodyBytes;
    let kept = 0;
    const counter = new Transform({
      transform(chunk: Buffer, _encoding, callback) {
        if (state.counted !== undefined) state.counted += chunk.length;
        if (chunks !== undefined && (kept += chunk.length) <= limit) chunks.push(chunk);
        callback(null, chunk);
      },
    });
    // pipe + finished rather than pipeline(): pipeline makes an AbortController per call and
    // aborts it when done, building a DOMException with a stack trace for every request
    // (docs/benchmarks.md#what-earlier-rounds-learned). A failing or cut-short body still
    // fails the parser's stream, as pipeline would.
    finished(payload, (error) => {
      if (error) counter.destroy(error);
    });
    // Fastify's parser listens for errors only once it reads; a body refused by its declared
    // length is never read, and a client leaving then must not be an uncaught error.
    counter.on('error', noop);
    done(null, payload.pipe(counter));
  });

  // The callback form here too: the decision is a promise already, and an async hook would
  // wrap it in a second one (and resolve it with the reply, a thenable, on a replay).
  fastify.addHook('preHandler', function idempotency(request: FastifyRequest, reply: FastifyReply, done: (error?: Error) => void) {
    const state = stateOf(request, reply);
    if (!state) {
      done();
      return;
    }
    const routed = state.layer;
    routed.begin({
      method: request.method,
      url: request.url,
      headers: request.headers,
      keyHeaderLines: keyHeaderLines(request.raw, routed.headerName),
      body: () => {
        const size = state.counted ?? declaredLength(request.headers['content-length']) ?? 0;
        if (size > routed.maxBodyBytes) throw new BodyTooLargeError(routed.maxBodyBytes);
        if (isMultipart(request.headers['content-type'])) {
          if (!request.raw.readableEnded) {
            // @fastify/multipart reads the upload in the handler (request.file(), parts()):
            // read it here, bounded, and leave it readable for the handler.
            return readBody(request.raw, routed.maxBodyBytes).then((raw) => {
              restoreBody(request.raw, raw);
              return new RawBody(raw.chunks, raw.byteLength);
            });
          }
          // Attached to the body in preValidation (attachFieldsToBody): its fields and files.
          const { fields, files } = attachedUpload(request.body);
          return uploadBody(fields, files, uploadSource);
        }
        const { chunks } = state;
        // The parser's value, with the bytes it was parsed from (a body the parser did not
        // take, as with a custom parser that yields nothing, is the value alone).
        if (chunks !== undefined && chunks.length > 0 && request.body !== undefined) {
          return new ParsedJsonBody(request.body, chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks), true);
        }
        return request.body;
      },
      raw: request,
    }).then((decision) => {
      // What throws here is Fastify's to answer, as it was from an async hook (never an
      // unhandled rejection).
      try {
        if (decision.type === 'respond') {
          // Answered here: the route's handler does not run (a callback hook that sends does
          // not call `done`).
          const { status, headers, body } = decision.response;
          reply
            .code(status)
            .headers(headers)
            .send(Buffer.from(body.buffer, body.byteOffset, body.byteLength));
          return;
        }
        if (decision.type === 'execute') {
          state.claim = decision.claim;
          (reply.raw as unknown as Stateful)[STATE] = state;
          // A client gone already (it left while the claim was being made) counts at once.
          if (reply.raw.destroyed) onRawClose.call(reply.raw);
          else reply.raw.on('close', onRawClose);
        }
      } catch (error) {
        done(error as Error);
        return;
      }
      done();
    }, done);
  });

  fastify.addHook('onError', async function idempotencyError(request, _reply, error) {
    const state = (request as unknown as Stateful)[STATE];
    if (!state?.claim || state.settled) return;
    // Thrown, whatever status the error handler then answers: release.
    state.settled = true;
    await state.claim.fail(error);
  });

  fastify.addHook('onSend', function idempotencyCapture(request, reply, payload: unknown, done) {
    const state = stateOf(request, reply);
    // An answer before the body was read to its end (Fastify's own 413 for a body over
    // `bodyLimit`, our 400 before reading): drain before closing, so a client still sending
    // gets the answer instead of a reset.
    if (state && !request.raw.complete) endAfterDrain(request.raw, reply.raw);
    const claim = state?.claim;
    if (!claim || state.settled) {
      done(null, payload);
      return;
    }
    state.settled = true;
    const head: Omit<CapturedResponse, 'body'> = { status: reply.statusCode, headers: reply.getHeaders() };
    // A header Node refuses to write (a value with a newline) would throw after the record
    // is stored, outside Fastify's error handling: the client would get nothing and the
    // retry the stored response. It is the handler's error: release, and let Fastify answer.
    const invalid = invalidHeader(head.headers);
    if (invalid) {
      const failed = () => done(invalid);
      claim.fail(invalid).then(failed, failed);
      return;
    }
    const bytes = payloadBytes(payload);
    if (bytes) {
      // Held here until stored, so a client that saw the answer gets the replay on retry.
      // A string goes out as the bytes just stored (a Buffer, which Fastify writes as it is),
      // not encoded a second time: about 6 µs per request. Other payloads stay as given.
      const out = typeof payload === 'string' ? bytes : payload;
      claim.finish({ status: head.status, headers: head.headers, body: bytes }).then(() => done(null, out), done);
      return;
    }
    const sent = () => done(null, payload);
    // (Fastify sends a Response or a Blob in its own way: those stay as they are.)
    if (!(typeof Response !== 'undefined' && payload instanceof Response) && !(typeof Blob !== 'undefined' && payload instanceof Blob)) {
      const stream = toNodeStream(payload);
      if (stream) {
        done(null, captureStream(stream, claim, head));
        return;
      }
    }
    // Something Fastify sends in its own way (a fetch Response): not capturable.
    claim.finish({ ...head, body: null }).then(sent, done);
  });
}

/** A route the plugin covers, for the OpenAPI document. */
interface CoveredRoute {
  method: string;
  url: string;
  layer: Idempotency<FastifyRequest>;
}

type SwaggerDecorator = (options?: { yaml?: boolean }) => unknown;

/** A Fastify route URL as @fastify/swagger writes it in the document: `/orders/:id` is `/orders/{id}`. */
const openapiPath = (url: string): string => url.replace(/:(\w+)(\([^)]*\))?/g, '{$1}');

/**
 * Wrap @fastify/swagger's `fastify.swagger()` (when registered) so that its document
 * carries the key header and the refusals on every covered route, as that route's own
 * layer says (per-route overrides included). The document is made once, as that plugin
 * makes its own once.
 */
function documentSwagger(fastify: FastifyInstance, covered: readonly CoveredRoute[]): void {
  const instance = fastify as unknown as { swagger?: SwaggerDecorator };
  const original = instance.swagger;
  if (typeof original !== 'function' || covered.length === 0) return;
  let made: { from: unknown; document: OpenApiDocument; yaml?: string } | undefined;
  const documented = (self: unknown): OpenApiDocument | undefined => {
    const from = original.call(self);
    if (typeof from !== 'object' || from === null || typeof (from as OpenApiDocument).openapi !== 'string') return undefined; // Swagger 2.0
    if (made?.from === from) return made.document;
    const document = structuredClone(from) as OpenApiDocument;
    const components = (document.components ??= {});
    for (const route of covered) {
      const operation = document.paths?.[openapiPath(route.url)]?.[route.method];
      if (typeof operation === 'object' && operation !== null) {
        documentOperation(operation as Record<string, unknown>, idempotencyContract(route.layer, document.openapi), components);
      }
    }
    made = { from, document };
    return document;
  };
  instance.swagger = function swagger(this: unknown, options?: { yaml?: boolean }) {
    const document = documented(this);
    if (document === undefined) return original.call(this, options);
    if (!options?.yaml) return document;
    // YAML as @fastify/swagger writes it, with its own copy of `yaml`.
    try {
      const here = typeof __filename === 'string' ? __filename : import.meta.url;
      const yaml = createRequire(createRequire(here).resolve('@fastify/swagger'))('yaml') as { stringify(value: unknown, options: object): string };
      made!.yaml ??= yaml.stringify(document, { strict: false });
      return made!.yaml;
    } catch {
      return original.call(this, options);
    }
  };
}

/**
 * The plugin. Register it before the routes it protects:
 * `await app.register(idempotency, { store })`. It is not encapsulated: it covers the
 * routes of the instance it is registered on and of that instance's children.
 */
export const idempotency: FastifyPluginAsync<FastifyIdempotencyOptions> = Object.assign(plugin, {
  // The metadata fastify-plugin would write, written here so that no user installs it:
  // Fastify registers the hooks in the caller's scope instead of a new encapsulated one
  // (skip-override), names the plugin in its errors and `hasPlugin()` (display-name), and
  // refuses at registration a Fastify whose version is outside `fastify` (plugin-meta).
  [Symbol.for('skip-override')]: true,
  [Symbol.for('fastify.display-name')]: 'idempotency-kit',
  [Symbol.for('plugin-meta')]: { name: 'idempotency-kit', fastify: '5.x' },
});

export default idempotency;
