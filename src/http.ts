/**
 * The HTTP policy every adapter shares: which requests are covered, key
 * parsing, fingerprinting, replay and problem responses, what is stored.
 * Adapters only translate their framework's request and response to these shapes.
 * @module
 */
import { Engine } from './engine.js';
import { KeyMissingError, isIdempotencyError, ResultNotStorableError, ScopeRequiredError, type IdempotencyError } from './errors.js';
import { FieldSelection, requestFingerprint, type FingerprintFields } from './fingerprint.js';
import { parseIdempotencyKey } from './key.js';
import { idempotencyDisabled } from './kill-switch.js';
import type { Lease } from './lease.js';
import { splitTtl, type EngineOptions } from './options.js';
import { problemResponse, type FormatError, type HttpResponse } from './problem.js';
import type { StoredResponse } from './store.js';
import { forgetRequestTransaction, isTransactionalStore, noteTransactionProblem, registerRequestTransaction, type RequestTransaction } from './transaction.js';
import { assertFunction, assertInteger, assertStringArray } from './validate.js';

export interface IdempotencyOptions<Req = unknown> extends Omit<EngineOptions, 'ttl' | 'ttlMs'> {
  /**
   * How long a stored response replays, in ms: a number, or a function of the
   * request and the handler's response, e.g. keep payments 7 days and searches 1 hour.
   * A function must return a positive integer synchronously; anything else (or a throw)
   * keeps the record 24 h and emits `ttl-invalid` (docs/semantics.md#per-operation-ttl).
   * @default 86400000 (24 h)
   */
  ttlMs?: number | ((req: Req, response: CapturedResponse) => number);
  /** @deprecated Renamed `ttlMs`; the old name works until the next minor release. */
  ttl?: number | ((req: Req, response: CapturedResponse) => number);
  /**
   * Methods the layer covers; others pass through untouched even with a key.
   * @default ['POST', 'PATCH']
   */
  methods?: string[];
  /**
   * Whether a covered request without the header is refused with 400 `key-missing`.
   * With `false` it runs unprotected.
   * @default true
   */
  required?: boolean;
  /** @default 'Idempotency-Key' */
  header?: string;
  /** @default 255 */
  maxKeyLength?: number;
  /**
   * Whose key space a request's key belongs to: the same key in two scopes is two records,
   * so one client never receives another's response (docs/semantics.md#security).
   *
   * - a function `(req) => id`: the tenant or user id of the request (never a raw token or
   *   password: scope by identity, so a refreshed token still replays). It must return a
   *   non-empty string or a finite number; anything else (`undefined`, `''`, `NaN`, an
   *   object) is answered 500 `scope-required`, never the shared space.
   * - `'shared'`: one key space for every client (keys must then be unguessable).
   * - not set: the authenticated user that the framework's usual auth middleware sets
   *   (each adapter's page says where it looks). A request without one is refused with a
   *   500 `scope-required` that says what to write; an adapter with no such convention
   *   (Node `http`, fetch) refuses to start without `scope`.
   */
  scope?: ((req: Req) => string | number | undefined | Promise<string | number | undefined>) | 'shared';
  /**
   * What of a request makes "the same request" beyond its method and path
   * (docs/semantics.md#the-fingerprint):
   *
   * - `{ exclude: ['metadata.sent_at'] }`: the body counts without these fields (a client
   *   timestamp, a trace id that changes between retries);
   * - `{ include: ['amount', 'customer.id'] }`: only these fields of the body count;
   * - a function `(req) => value`: what it returns replaces query, body and headers.
   *
   * Paths are dotted, walk through arrays, and apply to JSON and form bodies
   * (`metadata[sent_at]` in a form is `metadata.sent_at`); the query and
   * `fingerprintHeaders` count whole.
   * @default the whole query and body
   */
  fingerprint?: ((req: Req) => unknown) | FingerprintFields;
  /** Request headers that are part of the fingerprint. @default [] */
  fingerprintHeaders?: string[];
  /**
   * Which handler statuses are stored for replay. Others release the key.
   * @default status < 500 and not 401, 403, 408, 425 or 429
   */
  storeResponse?: (status: number) => boolean;
  /** Response headers replayed on top of the built-in allow-list. @default [] */
  replayHeaders?: string[];
  /**
   * Larger response bodies are not stored; a retry then gets 409 `response-not-replayable`.
   * @default 1048576 (1 MiB)
   */
  maxResponseBytes?: number;
  /**
   * Largest request body an adapter reads to fingerprint; beyond it, 413 `body-too-large`.
   * @default 1048576 (1 MiB)
   */
  maxBodyBytes?: number;
  /**
   * Reshape the body of the layer's own error responses (400, 409, 413, 422, 500, 503),
   * e.g. into the `{ error: { ... } }` envelope your API's SDKs expect, so that a client
   * library that only looks for its own error shape raises instead of mistaking a 409 for
   * a result. Status, headers and `code` are kept; the body is sent as `application/json`.
   * @default RFC 9457 problem details (`application/problem+json`)
   */
  formatError?: FormatError;
  /**
   * Change a replayed response before it is sent: add a header, a field of the body. Gets
   * the replay (status, headers with `idempotent-replayed`, body bytes) and the request;
   * returns the response to send (or nothing to send it as it is). Called for replays only,
   * never for the first execution or the layer's own errors; the stored record is not
   * changed. A hook that throws fails the request like a handler error.
   * @default none
   */
  onReplay?: (response: HttpResponse, req: Req) => HttpResponse | void;
}

/**
 * What a framework adapter tells the layer about its conventions. Adapter authors pass it
 * as the second argument of `createIdempotency(options, defaults)`.
 */
export interface AdapterDefaults<Req> {
  /** The adapter's name, for error messages. */
  name: string;
  /**
   * The authenticated principal's identity on a request (a user id, a JWT `sub`), or
   * `undefined` when there is none. Leave it out when the framework has no convention:
   * `scope` is then required.
   */
  principal?: (req: Req) => unknown;
  /** Where `principal` looks, in the user's words, e.g. "req.auth.sub, req.user.id or req.user.sub". */
  principalSource?: string;
  /** What a user writes as `scope` on this framework, e.g. "(req) => req.user.id". */
  scopeExample?: string;
}

/**
 * The identity of a user object as auth middleware leaves it: the object's `id`, else its
 * `sub` (a JWT subject); a bare string or number is the identity itself.
 */
export function userIdentity(user: unknown): unknown {
  if (typeof user !== 'object' || user === null) return user;
  const { id, sub } = user as { id?: unknown; sub?: unknown };
  return id ?? sub;
}

/** What a request's key space is: a scope, `undefined` for the shared space, or the refusal to answer. */
type ScopeAnswer = string | undefined | ScopeRequiredError;

function isPromiseLike(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as PromiseLike<unknown> | null)?.then === 'function';
}

/** A principal's identity as a scope: a non-empty string or a finite number. */
function identity(value: unknown): string | undefined {
  if (typeof value === 'string') return value === '' ? undefined : value;
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  if (typeof value === 'bigint') return String(value);
  return undefined;
}

/** What an adapter knows about a request. */
export interface HttpRequestInfo<Req> {
  method: string;
  /** The request target, path plus `?query`. */
  url: string;
  headers: Record<string, string | string[] | undefined>;
  /** The key header's lines, each its own entry (`req.headersDistinct[name]`), to spot repeats. */
  keyHeaderLines: string[] | string | undefined;
  /** The body, or a function that reads it (called only when the request is covered and keyed). */
  body: () => unknown;
  raw: Req;
}

/** A response captured from the handler. `body: null` means it could not be captured (a stream). */
export interface CapturedResponse {
  status: number;
  headers: Record<string, string | string[] | number | undefined>;
  body: Uint8Array | null;
}

export interface HttpClaim {
  /** Store the response, or release the key for one that is not stored. Never throws: store failures become events. */
  finish(response: CapturedResponse): Promise<void>;
  /** The handler threw: release so a retry runs again. Never throws. */
  fail(error?: unknown): Promise<void>;
  /**
   * Stop renewing the lease: the adapter can no longer tell whether the handler will
   * finish (the connection closed first). `finish` still stores if it comes within the lease.
   */
  abandon(): void;
  readonly maxResponseBytes: number;
}

export type HttpDecision<Req> =
  | { type: 'pass' }
  | { type: 'respond'; response: HttpResponse; error?: IdempotencyError }
  | { type: 'execute'; claim: HttpClaim; body: unknown; request: HttpRequestInfo<Req> };

/** The one decision to let a request through (nothing per request in it). */
const PASS: { readonly type: 'pass' } = Object.freeze({ type: 'pass' });

/** Replayed by default. Everything else (set-cookie, date, request ids, hop-by-hop) is not. */
const DEFAULT_REPLAY_HEADERS = [
  'content-type',
  'content-language',
  'content-location',
  'location',
  'etag',
  'last-modified',
  'link',
];
const NEVER_REPLAYED = new Set([
  'set-cookie',
  'date',
  'connection',
  'keep-alive',
  'transfer-encoding',
  'upgrade',
  'te',
  'trailer',
  'proxy-authenticate',
  'proxy-connection',
  'content-length',
  'idempotent-replayed',
]);
const NOT_STORED = new Set([401, 403, 408, 425, 429]);

export const defaultStoreResponse = (status: number): boolean => status < 500 && !NOT_STORED.has(status);

/** The claim of a request run unprotected (the store failed, `onStoreError: 'continue'`): nothing to store; the request is let go once answered. */
const unprotectedClaim = (raw: unknown, maxResponseBytes: number): HttpClaim => ({
  async finish() {
    forgetRequestTransaction(raw);
  },
  async fail() {
    forgetRequestTransaction(raw);
  },
  abandon() {},
  maxResponseBytes,
});

export class Idempotency<Req = unknown> {
  readonly engine: Engine;
  readonly methods: ReadonlySet<string>;
  readonly required: boolean;
  readonly header: string;
  readonly headerName: string;
  readonly maxKeyLength: number;
  readonly maxBodyBytes: number;
  readonly maxResponseBytes: number;
  readonly #replayHeaders: ReadonlySet<string>;
  readonly #options: IdempotencyOptions<Req>;
  readonly #fingerprintHeaders: string[];
  readonly #fields: FieldSelection | undefined;
  readonly #defaults: AdapterDefaults<Req> | undefined;
  readonly #ttl: ((req: Req, response: CapturedResponse) => number) | undefined;
  readonly #claims: LayerForClaims<Req>;
  /** The kill switch (`IDEMPOTENCY_KIT_DISABLED`) was on when the layer was made: nothing is covered. */
  readonly #disabled: boolean;

  constructor(options: IdempotencyOptions<Req>, defaults?: AdapterDefaults<Req>) {
    const [engineOptions, ttl] = splitTtl(options);
    this.engine = new Engine(engineOptions);
    this.#claims = this.#claimContext();
    this.#ttl = ttl;
    this.#options = options;
    this.#defaults = defaults;
    const methods = options.methods ?? ['POST', 'PATCH'];
    assertStringArray('methods', methods);
    this.methods = new Set(methods.map((m) => m.toUpperCase()));
    this.required = options.required ?? true;
    if (typeof this.required !== 'boolean') {
      throw new TypeError(`Expected \`required\` to be a boolean, got ${String(this.required)}`);
    }
    this.header = options.header ?? 'Idempotency-Key';
    if (typeof this.header !== 'string' || !/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(this.header)) {
      throw new TypeError(`Expected \`header\` to be an HTTP header name, got ${String(this.header)}`);
    }
    this.headerName = this.header.toLowerCase();
    this.maxKeyLength = options.maxKeyLength ?? 255;
    this.maxBodyBytes = options.maxBodyBytes ?? 1024 * 1024;
    this.maxResponseBytes = options.maxResponseBytes ?? 1024 * 1024;
    assertInteger('maxKeyLength', this.maxKeyLength, 1);
    assertInteger('maxBodyBytes', this.maxBodyBytes, 0);
    assertInteger('maxResponseBytes', this.maxResponseBytes, 0);
    if (options.scope === undefined) {
      if (!defaults?.principal) {
        const example = defaults?.scopeExample ?? '(req) => req.user.id';
        throw new TypeError(
          `Expected \`scope\`: ${defaults?.name ?? 'this layer'} cannot tell which user sent a request, and without a scope ` +
            `every client shares one key space (one client could receive another's stored response). ` +
            `Pass \`scope: ${example}\` (the authenticated user or tenant id), or \`scope: 'shared'\` if all clients may share keys.`,
        );
      }
    } else if (options.scope !== 'shared') {
      if (typeof options.scope !== 'function') {
        throw new TypeError(`Expected \`scope\` to be a function or 'shared', got ${typeof options.scope === 'string' ? JSON.stringify(options.scope) : String(options.scope)}`);
      }
    }
    // A function, or the paths of `{ include }` / `{ exclude }`, checked now.
    if (options.fingerprint !== undefined && typeof options.fingerprint !== 'function') this.#fields = FieldSelection.from(options.fingerprint);
    if (options.storeResponse !== undefined) assertFunction('storeResponse', options.storeResponse);
    if (options.formatError !== undefined) assertFunction('formatError', options.formatError);
    const fingerprintHeaders = options.fingerprintHeaders ?? [];
    assertStringArray('fingerprintHeaders', fingerprintHeaders);
    const replayHeaders = options.replayHeaders ?? [];
    assertStringArray('replayHeaders', replayHeaders);
    for (const h of replayHeaders) {
      if (NEVER_REPLAYED.has(h.toLowerCase())) {
        throw new TypeError(`\`replayHeaders\` cannot include ${JSON.stringify(h)}: it must never be replayed`);
      }
    }
    this.#replayHeaders = new Set([...DEFAULT_REPLAY_HEADERS, ...replayHeaders.map((h) => h.toLowerCase())]);
    this.#fingerprintHeaders = fingerprintHeaders.map((h) => h.toLowerCase());
    if (options.onReplay !== undefined) assertFunction('onReplay', options.onReplay);
    this.#disabled = idempotencyDisabled();
  }

  /** A copy with some options changed, sharing the store (per-route overrides). */
  with(overrides: Partial<IdempotencyOptions<Req>>): Idempotency<Req> {
    return new Idempotency({ ...this.#options, ...overrides }, this.#defaults);
  }

  /** Only covered methods are looked at. */
  covers(method: string): boolean {
    return !this.#disabled && this.methods.has(method.toUpperCase());
  }

  /** Decide what to do with a request: pass it through, answer it, or run the handler under a claim. */
  begin(request: HttpRequestInfo<Req>): Promise<HttpDecision<Req>> {
    return this.#begin(request);
  }

  /** Let the request through unprotected; `inTransaction(req)` in its handler then runs a plain transaction. */
  #pass(raw: Req): HttpDecision<Req> {
    registerRequestTransaction(raw, this.#plainTransaction);
    return PASS;
  }

  /** Without a claim (no key where keys are optional, or the store failed open): a transaction without a record. */
  readonly #plainTransaction: RequestTransaction = {
    transaction: async (work) => {
      const { store } = this.engine.options;
      if (!isTransactionalStore(store)) throw this.#claims.notTransactional();
      try {
        return (await store.transaction(work)).value;
      } catch (error) {
        throw this.#claims.noted(error);
      }
    },
  };

  /** What this layer's claims need of it: made once per layer, so a claim carries no closure of its own. */
  #claimContext(): LayerForClaims<Req> {
    return {
      engine: this.engine,
      stored: (response) => ((this.#options.storeResponse ?? defaultStoreResponse)(response.status) ? this.#toStored(response) : undefined),
      ttlFor: (raw, response, key, scope) => this.ttlFor(raw, response, key, scope),
      noted: (error) => {
        if (isIdempotencyError(error)) noteTransactionProblem(error, problemResponse(error, this.header, this.#options.formatError));
        return error;
      },
      notTransactional: () =>
        new TypeError(
          `inTransaction(req) needs a store that runs transactions (postgresStore({ url }) or postgresStore({ pool })), got the ${this.engine.options.store.name} store`,
        ),
    };
  }

  async #begin(request: HttpRequestInfo<Req>): Promise<HttpDecision<Req>> {
    if (!this.covers(request.method)) return this.#pass(request.raw);
    const parsed = parseIdempotencyKey(request.keyHeaderLines, this.maxKeyLength);
    if (parsed.key === undefined) {
      if (parsed.error) return this.#problem(parsed.error);
      if (!this.required) return this.#pass(request.raw);
      return this.#problem(new KeyMissingError());
    }
    const key = parsed.key;
    let body: unknown;
    try {
      // Synchronous when a body parser read the body already: no microtask for it.
      body = request.body();
      if (body instanceof Promise) body = await body;
    } catch (error) {
      if (isIdempotencyError(error)) return this.#problem(error);
      throw error;
    }
    const options = this.#options;
    // Only a scope function can be asynchronous: awaiting the other forms would cost every
    // request a microtask for nothing.
    let scope = this.scopeFor(request.raw);
    if (scope instanceof Promise) scope = await scope;
    if (scope instanceof ScopeRequiredError) return this.#problem(scope);
    const fingerprint = requestFingerprint({
      method: request.method,
      url: request.url,
      headers: request.headers,
      body,
      fingerprintHeaders: this.#fingerprintHeaders,
      custom: typeof options.fingerprint === 'function' ? await options.fingerprint(request.raw) : undefined,
      fields: this.#fields,
    });
    try {
      const acquired = await this.engine.acquire(key, scope, fingerprint);
      if (acquired.type === 'replay') {
        const stored = acquired.record.response;
        const response: HttpResponse = { status: stored.status, headers: { ...stored.headers, 'idempotent-replayed': 'true' }, body: stored.body! };
        return { type: 'respond', response: options.onReplay ? (options.onReplay(response, request.raw) ?? response) : response };
      }
      return { type: 'execute', claim: this.#claim(acquired.lease, request.raw), body, request };
    } catch (error) {
      if (!isIdempotencyError(error)) throw error;
      if (this.engine.runsUnprotected(error, key, scope)) {
        registerRequestTransaction(request.raw, this.#plainTransaction);
        return { type: 'execute', claim: unprotectedClaim(request.raw, this.maxResponseBytes), body, request };
      }
      return this.#problem(error);
    }
  }

  /**
   * The key space of a request by the `scope` option, or the adapter's principal without
   * one: `undefined` for `'shared'`, a ScopeRequiredError (to answer, not throw) when the
   * request has no identity. Adapters that protect something other than an HTTP request
   * with these options (a GraphQL resolver) ask it here, so the rule stays in one place.
   */
  scopeFor(raw: Req): ScopeAnswer | Promise<ScopeAnswer> {
    const options = this.#options;
    if (typeof options.scope === 'function') {
      // Only a non-empty string or a finite number is an identity: anything else (NaN from
      // `Number(id)`, '', undefined, an object) is refused, never the shared space.
      const value = options.scope(raw);
      if (isPromiseLike(value)) return Promise.resolve(value).then((v) => identity(v) ?? this.#scopeInvalid());
      return identity(value) ?? this.#scopeInvalid();
    }
    if (options.scope === undefined) return identity(this.#defaults!.principal!(raw)) ?? this.#scopeRequired();
    return undefined;
  }

  /** The ttl of a record completed for `raw` with `response`: the `ttl` option, or what its function returns (checked). */
  ttlFor(raw: Req, response: CapturedResponse, key: string, scope: string | undefined): number {
    const ttl = this.#ttl;
    return this.engine.ttlFor(ttl && (() => ttl(raw, response)), key, scope);
  }

  /** The options the layer was made with (after `with()`), as given: adapters read their own options here. */
  get options(): Readonly<IdempotencyOptions<Req>> {
    return this.#options;
  }

  #scopeRequired(): ScopeRequiredError {
    const d = this.#defaults!;
    return new ScopeRequiredError(
      `No \`scope\` option and no authenticated user on this request (looked at ${d.principalSource ?? 'the usual places'}), ` +
        `so its key cannot be kept apart from other clients' keys. Put the idempotency layer after your authentication, ` +
        `or pass \`scope: ${d.scopeExample ?? '(req) => req.user.id'}\`, or \`scope: 'shared'\` if all clients may share keys.`,
    );
  }

  #scopeInvalid(): ScopeRequiredError {
    return new ScopeRequiredError(
      'The `scope` function returned no identity for this request (it must return a non-empty string or a finite number), ' +
        "so its key cannot be kept apart from other clients' keys. Return the authenticated user or tenant id, " +
        "or pass `scope: 'shared'` if all clients may share keys.",
    );
  }

  #problem(error: IdempotencyError): HttpDecision<Req> {
    return { type: 'respond', response: problemResponse(error, this.header, this.#options.formatError), error };
  }

  #claim(lease: Lease, raw: Req): HttpClaim {
    const claim = new LeaseClaim(this.#claims, lease, raw, this.maxResponseBytes);
    registerRequestTransaction(raw, claim);
    return claim;
  }

  #toStored(response: CapturedResponse): StoredResponse {
    const headers: Record<string, string | string[]> = {};
    const captured = response.headers;
    // Own keys by `in` (no entry arrays): captured headers are a plain or null-prototype object.
    for (const name in captured) {
      if (!Object.prototype.hasOwnProperty.call(captured, name)) continue;
      const value = captured[name];
      const lower = name.toLowerCase();
      if (value === undefined || !this.#replayHeaders.has(lower)) continue;
      headers[lower] = Array.isArray(value) ? value.map(String) : String(value);
    }
    const tooLarge = response.body !== null && response.body.byteLength > this.maxResponseBytes;
    return { status: response.status, headers, body: tooLarge ? null : response.body };
  }
}

/** What a layer gives its claims (see Idempotency#claimContext); not the store's `ClaimContext`. */
interface LayerForClaims<Req> {
  engine: Engine;
  /** The response to store, or `undefined` when its status is not stored (then the key is released). */
  stored(response: CapturedResponse): StoredResponse | undefined;
  ttlFor(raw: Req, response: CapturedResponse, key: string, scope: string | undefined): number;
  /** An error out of a transaction, with the layer's answer to it noted (see transactionProblem). */
  noted(error: unknown): unknown;
  notTransactional(): TypeError;
}

/**
 * The claim an adapter holds while the handler runs: it stores the captured response, or
 * releases the key; `inTransaction(req)` runs through it. One object per request with its
 * methods on the prototype (no closures).
 */
class LeaseClaim<Req> implements HttpClaim, RequestTransaction {
  /** Set once `inTransaction` completed or released the claim: the response captured afterwards is the one it stored, or one not to store. */
  #settledByTransaction = false;

  constructor(
    readonly context: LayerForClaims<Req>,
    readonly lease: Lease,
    readonly raw: Req,
    readonly maxResponseBytes: number,
  ) {}

  /** The transaction `inTransaction(req)` runs under this claim: the handler's writes and the record in one commit. */
  async transaction(work: (client: unknown) => Promise<HttpResponse>): Promise<HttpResponse> {
    const { context } = this;
    if (!isTransactionalStore(context.engine.options.store)) throw context.notTransactional();
    if (this.#settledByTransaction) throw new TypeError('inTransaction(req) can run once per request');
    this.#settledByTransaction = true;
    try {
      const { value } = await this.lease.transaction(work, context.stored);
      return value;
    } catch (error) {
      throw context.noted(error);
    }
  }

  async finish(response: CapturedResponse): Promise<void> {
    // The response is out of the handler's hands: the request is no longer kept for `inTransaction`.
    forgetRequestTransaction(this.raw);
    if (this.#settledByTransaction) return;
    const { lease, context } = this;
    let operation: 'complete' | 'release' = 'complete';
    try {
      const stored = context.stored(response);
      if (stored === undefined) {
        operation = 'release';
        await lease.release(response.status);
      } else {
        if (stored.body === null && response.body !== null && context.engine.observed()) {
          // The same event as a returned result that is not stored (docs/semantics.md#results-that-are-not-stored).
          const error = new ResultNotStorableError(`The response body is ${response.body.byteLength} bytes, more than the ${this.maxResponseBytes} bytes allowed`);
          context.engine.emit({ type: 'result-not-stored', key: lease.key, scope: lease.scope, status: response.status, reason: 'too-large', error });
        }
        await lease.complete(stored, context.ttlFor(this.raw, response, lease.key, lease.scope));
      }
    } catch (error) {
      context.engine.storeError(operation, lease.key, lease.scope, error);
    }
  }

  async fail(): Promise<void> {
    forgetRequestTransaction(this.raw);
    if (this.#settledByTransaction) return;
    try {
      await this.lease.release();
    } catch (error) {
      this.context.engine.storeError('release', this.lease.key, this.lease.scope, error);
    }
  }

  abandon(): void {
    this.lease.abandon();
  }
}

/** Create the HTTP layer the adapters call. Most users call an adapter instead. */
export function createIdempotency<Req = unknown>(options: IdempotencyOptions<Req>, defaults?: AdapterDefaults<Req>): Idempotency<Req> {
  return new Idempotency(options, defaults);
}
