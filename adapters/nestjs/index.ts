/**
 * NestJS adapter (Nest 11 and 12, on @nestjs/platform-express and @nestjs/platform-fastify):
 * `IdempotencyModule.forRoot(options)` / `forRootAsync(...)` and `@Idempotent()` on a
 * controller or a handler. The layer is an interceptor, so it runs after the guards: the
 * user a Passport or JWT guard puts on `request.user` is the key space of its keys.
 * @module
 * @example
 * import { Body, Controller, Module, Post, UseGuards } from '@nestjs/common';
 * import { AuthGuard } from '@nestjs/passport';
 * import { Idempotent, IdempotencyModule } from 'idempotency-kit/nestjs';
 *
 * @Controller('orders')
 * @UseGuards(AuthGuard('jwt'))
 * @Idempotent()
 * class OrdersController {
 *   @Post()
 *   create(@Body() body: { amount: number }) {
 *     return { id: 42, ...body };
 *   }
 * }
 *
 * @Module({
 *   imports: [IdempotencyModule.forRoot({ store: 'redis://127.0.0.1:6379' })],
 *   controllers: [OrdersController],
 * })
 * export class AppModule {}
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import {
  applyDecorators,
  HttpException,
  Inject,
  Injectable,
  Logger,
  Module,
  SetMetadata,
  StreamableFile,
  UseInterceptors,
  type CallHandler,
  type DynamicModule,
  type ExecutionContext,
  type InjectionToken,
  type ModuleMetadata,
  type NestInterceptor,
  type OnApplicationShutdown,
  type OnModuleInit,
  type OptionalFactoryDependency,
  type Provider,
  type Type,
} from '@nestjs/common';
import { ModulesContainer, Reflector } from '@nestjs/core';
import { Observable, defer, lastValueFrom, type Subscriber, type Subscription } from 'rxjs';
import type { IdempotencyError } from '../../src/errors.js';
import type { RawBody } from '../../src/fingerprint.js';
import { Idempotency, userIdentity, type AdapterDefaults, type HttpClaim, type HttpDecision, type IdempotencyOptions } from '../../src/http.js';
import type { HttpResponse } from '../../src/problem.js';
import type { IdempotencyStore } from '../../src/store.js';
import { declareReprototyped, ObjectSlot } from '../../src/object-slot.js';
import { forgetRequestTransaction } from '../../src/transaction.js';
import { setRejectionHeaders } from './nest-http.js';
import { handlerTakesOver, silenceReplies, type HandlerTakesOver } from './nest-private.js';
import { documentHandlers } from './nest-swagger.js';
import { transactionDecorator } from './nest-transaction.js';
import {
  abandonOnClose,
  assertDeclaredLength,
  bodyConsumed,
  keyHeaderLines,
  parsedBody,
  readBody,
  restoreBody,
  sendResponse,
  setRequestBody,
} from '../internal/node-io.js';
import { captureExpressResponse } from '../internal/express-response.js';
import { NestRpc, checkRpcOptions, type IdempotentRpcOptions } from './nest-rpc.js';
import { checkGraphqlOptions, checkResolverLayer, graphqlExtensions, resolverCovered, runResolver, type GraphqlIdempotencyOptions } from './nest-graphql.js';

export type { IdempotentRpcOptions, RpcContext, RpcRefusal } from './nest-rpc.js';
export type { GraphqlContext, GraphqlIdempotencyOptions, ResolverInfo, ResolverKeyFunction } from './nest-graphql.js';

/**
 * The request as a Nest handler sees it: Express's `req` on @nestjs/platform-express, the
 * Fastify request on @nestjs/platform-fastify. `scope` and `fingerprint` get it.
 */
export interface NestRequest {
  method: string;
  url: string;
  headers: Record<string, string | string[] | undefined>;
  body?: unknown;
  /** Where Passport and @nestjs/jwt guards leave the authenticated user. */
  user?: unknown;
  [name: string]: unknown;
}

/** What `@Idempotent()` takes on a class or a handler: any option but the store (`keyArg` for GraphQL resolvers). */
export type IdempotentOptions = Partial<Omit<IdempotencyOptions<NestRequest>, 'store'>> &
  GraphqlIdempotencyOptions & {
    /** For `@MessagePattern()` / `@EventPattern()` handlers: the message's key, scope and fingerprint (docs/adapters/nestjs.md#microservices). */
    rpc?: IdempotentRpcOptions;
  };

/** `IdempotencyModule.forRoot` options: every option of the layer, `store` an instance or a URL. */
export interface IdempotencyModuleOptions extends Omit<IdempotencyOptions<NestRequest>, 'store'>, GraphqlIdempotencyOptions {
  /**
   * A store instance (left open at shutdown: its owner closes it), or a store URL
   * (`redis://`, `postgres://`, `mysql://`, `sqlite:`, `memory:`): the module creates that
   * store and closes it when the application shuts down.
   */
  store: IdempotencyStore | string;
  /** Whether the module is global (imported once, in the root module). @default true */
  isGlobal?: boolean;
  /** For `@MessagePattern()` / `@EventPattern()` handlers: the message's key, scope and fingerprint (docs/adapters/nestjs.md#microservices). */
  rpc?: IdempotentRpcOptions;
}

/** A class whose `createIdempotencyOptions()` returns the module options (`useClass`, `useExisting`). */
export interface IdempotencyOptionsFactory {
  createIdempotencyOptions(): Omit<IdempotencyModuleOptions, 'isGlobal'> | Promise<Omit<IdempotencyModuleOptions, 'isGlobal'>>;
}

export interface IdempotencyModuleAsyncOptions extends Pick<ModuleMetadata, 'imports'> {
  /** Providers to inject into `useFactory`, e.g. the app's Redis client or config service. */
  inject?: Array<InjectionToken | OptionalFactoryDependency>;
  useFactory?: (...args: any[]) => Omit<IdempotencyModuleOptions, 'isGlobal'> | Promise<Omit<IdempotencyModuleOptions, 'isGlobal'>>;
  useClass?: Type<IdempotencyOptionsFactory>;
  useExisting?: InjectionToken;
  /** @default true */
  isGlobal?: boolean;
  /** More providers of the module (e.g. the class `useClass` needs). */
  extraProviders?: Provider[];
}

/** The injection token of the module's options (as given, or as the async factory returned them). */
export const IDEMPOTENCY_OPTIONS: unique symbol = Symbol('idempotency-kit:nestjs:options');
/** The injection token of the store: inject it to use the same store elsewhere (`@Inject(IDEMPOTENCY_STORE)`). */
export const IDEMPOTENCY_STORE: unique symbol = Symbol('idempotency-kit:nestjs:store');
/** The injection token of the module's HTTP layer (`Idempotency`), built from the options at start. */
export const IDEMPOTENCY_LAYER: unique symbol = Symbol('idempotency-kit:nestjs:layer');
const OWNED_STORE: unique symbol = Symbol('idempotency-kit:nestjs:owned-store');

/** Where `@Idempotent()` keeps its options, on a class or a handler. */
export const IDEMPOTENT_METADATA = 'idempotency-kit:idempotent';

/**
 * Protect a controller's handlers (on the class) or one handler. Options are merged
 * module, then class, then handler. `@Idempotent(false)` on a handler turns the layer off
 * for it inside a protected class.
 *
 * It binds the module's interceptor to what it decorates (as `@UseInterceptors()` would),
 * after the application's global interceptors: a route without it runs none of the
 * layer's code. The module must be visible where it is used: global (the default), or
 * imported by the controller's module.
 */
export function Idempotent(options: IdempotentOptions | false = {}): ClassDecorator & MethodDecorator {
  if (options !== false && (typeof options !== 'object' || options === null || Array.isArray(options))) {
    throw new TypeError(`Expected @Idempotent() options to be an options object or false, got ${String(options)}`);
  }
  if (options !== false && 'store' in options) {
    throw new TypeError('`store` is a module option (IdempotencyModule.forRoot({ store })), not an @Idempotent() option');
  }
  if (options === false) return SetMetadata(IDEMPOTENT_METADATA, options);
  checkGraphqlOptions(options);
  return applyDecorators(SetMetadata(IDEMPOTENT_METADATA, options), UseInterceptors(IdempotencyBinding));
}

/** `@SkipIdempotency()`: the same as `@Idempotent(false)`, for one handler of a protected class. */
export function SkipIdempotency(): ClassDecorator & MethodDecorator {
  return Idempotent(false);
}

export type { NestTransaction, NestTransactionResponse } from './nest-transaction.js';
/**
 * `@IdempotentTransaction() tx: NestTransaction<pg.PoolClient>` on a protected handler, on a
 * PostgreSQL store: `tx(work)` runs `work` in a transaction and stores the response it
 * returns in that same transaction, so the handler's writes and the stored response commit
 * together or not at all (docs/transactions.md). The layer's errors are `IdempotencyRejection`s.
 */
export const IdempotentTransaction: () => ParameterDecorator = transactionDecorator(
  (response, error) => new IdempotencyRejection(response, error),
);

/**
 * A refusal of the layer (400 key missing or invalid, 409 in progress or not replayable,
 * 413 body too large, 422 key reused, 503 store unavailable, 500 scope required). An
 * `HttpException`, so the application's exception filters render it; without one, Nest's
 * own filter sends its body, the problem details the other adapters send, with their
 * `Content-Type` (`application/problem+json`, on NestJS 11 and 12) and `Retry-After`. The
 * headers are on the response before the filters run; on the Express platform the
 * `Content-Type` is set when the refusal's own body is written (a filter that writes a
 * body of its own chooses its own type).
 */
export class IdempotencyRejection extends HttpException {
  /** The layer's error (`.code`: `key-missing`, `request-in-progress`, ...). */
  readonly error: IdempotencyError | undefined;
  /**
   * The refusal as GraphQL error extensions (`code`: the problem code, `type`, `status`,
   * `reason`, `retryAfterSeconds`): thrown from a resolver, graphql-js copies them onto the
   * GraphQL error.
   */
  readonly extensions: Record<string, unknown>;
  /** The headers of the refusal, as sent without a filter. */
  readonly headers: Record<string, string | string[]>;

  constructor(response: HttpResponse, error: IdempotencyError | undefined) {
    const text = Buffer.from(response.body.buffer, response.body.byteOffset, response.body.byteLength).toString('utf8');
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      body = text;
    }
    super(body as Record<string, unknown>, response.status, { cause: error });
    this.name = 'IdempotencyRejection';
    this.error = error;
    this.headers = response.headers;
    this.extensions = graphqlExtensions(error, response.status);
  }

  /** The layer's error code, e.g. `request-in-progress`. */
  get code(): string | undefined {
    return this.error?.code;
  }
}

/** Without `scope`: the principal a guard left, `request.user` (its `id`, else its `sub`) or `request.auth.sub`. */
const nestDefaults: AdapterDefaults<NestRequest> = {
  name: 'idempotency-kit/nestjs',
  principal: (req) => (req as { auth?: { sub?: unknown } }).auth?.sub ?? userIdentity(req.user),
  principalSource: 'request.user.id, request.user.sub and request.auth.sub, as guards leave them',
  scopeExample: '(request) => request.user.id',
};

type Unprotected = HandlerTakesOver | 'StreamableFile';

/** The requests the interceptor took (once per request, also when it is bound a second time). */
const handledRequests = new ObjectSlot<true>('handled');

/** The platform response: Express's `res` or Fastify's reply (with `.raw`). */
type PlatformResponse = Record<string, unknown> & { raw?: ServerResponse };

/**
 * The module's interceptor, which `@Idempotent()` binds to the classes and handlers it
 * decorates: it runs after the guards and protects the handlers marked `@Idempotent()`.
 */
export class IdempotencyInterceptor implements NestInterceptor, OnModuleInit {
  readonly #layer: Idempotency<NestRequest>;
  readonly #reflector = new Reflector();
  readonly #layers = new WeakMap<Function, Idempotency<NestRequest> | null>();
  readonly #warned = new Set<Unprotected>();
  /** Per handler: why it runs unprotected (read from its metadata once), or null. */
  readonly #unprotected = new WeakMap<Function, Unprotected | null>();
  readonly #logger = new Logger('Idempotency');

  readonly #modules: ModulesContainer | undefined;
  readonly #rpc: NestRpc;

  constructor(layer: Idempotency<NestRequest>, modules?: ModulesContainer, options?: IdempotencyModuleOptions) {
    this.#layer = layer;
    this.#modules = modules;
    const read = (target: object) => this.#reflector.get<Record<string, unknown> | false | undefined>(IDEMPOTENT_METADATA, target as Function);
    this.#rpc = new NestRpc(options ?? {}, layer.engine.options.store, read);
    // With @nestjs/swagger installed, protected handlers document the key and the refusals.
    documentHandlers(modules, (controller, handler) => this.layerFor(controller, handler));
  }

  /** Builds the layer of every handler now, so a bad `@Idempotent()` option fails the start. */
  onModuleInit(): void {
    for (const module of this.#modules?.values() ?? []) {
      // GraphQL resolvers are providers (classes, not factories): checked the same way.
      const resolvers = [...module.providers.values()].filter((wrapper) => !wrapper.inject);
      for (const wrapper of [...module.controllers.values(), ...resolvers]) {
        const controller = wrapper.metatype as Type<unknown> | null | undefined;
        if (typeof controller !== 'function' || typeof controller.prototype !== 'object') continue;
        const proto = controller.prototype as Record<string, unknown>;
        for (const name of Object.getOwnPropertyNames(proto)) {
          const descriptor = Object.getOwnPropertyDescriptor(proto, name);
          if (name === 'constructor' || typeof descriptor?.value !== 'function') continue;
          try {
            const layer = this.layerFor(controller, descriptor.value as Function);
            if (layer && !module.controllers.has(controller)) checkResolverLayer(layer);
            if (NestRpc.isMessageHandler(descriptor.value as Function)) this.#rpc.protectionFor(controller, descriptor.value as Function);
          } catch (error) {
            if (error instanceof TypeError) error.message = `@Idempotent() on ${controller.name}.${name}: ${error.message}`;
            throw error;
          }
        }
      }
    }
  }

  /**
   * The layer of a handler: the module's options merged with its class's and its own
   * `@Idempotent()` options, or `null` when it is not protected. Built (and so checked)
   * once per handler.
   */
  layerFor(controller: Type<unknown>, handler: Function): Idempotency<NestRequest> | null {
    const known = this.#layers.get(handler);
    if (known !== undefined) return known;
    const own = this.#reflector.get<IdempotentOptions | false | undefined>(IDEMPOTENT_METADATA, handler);
    const ofClass = this.#reflector.get<IdempotentOptions | false | undefined>(IDEMPOTENT_METADATA, controller);
    let layer: Idempotency<NestRequest> | null;
    if (own === false || (own === undefined && (ofClass === undefined || ofClass === false))) layer = null;
    else {
      const merged = { ...(ofClass || {}), ...(own || {}) };
      layer = Object.keys(merged).length === 0 ? this.#layer : this.#layer.with(merged);
    }
    this.#layers.set(handler, layer);
    return layer;
  }

  #warnOnce(reason: Unprotected, where: string): void {
    if (this.#warned.has(reason)) return;
    this.#warned.add(reason);
    this.#logger.warn(
      `${where}: a handler answering with ${reason} runs without idempotency protection (its response cannot be stored and replayed). ` +
        'Return a value, a promise or an Observable of one, or use @Res({ passthrough: true }).',
    );
  }

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    if (context.getType() === 'rpc') return this.#rpc.intercept(context, next);
    if (context.getType<string>() === 'graphql') return this.#resolver(context, next);
    if (context.getType() !== 'http') return next.handle();
    const controller = context.getClass();
    const handler = context.getHandler();
    const layer = this.layerFor(controller, handler);
    const http = context.switchToHttp();
    const req = http.getRequest<NestRequest & { raw?: IncomingMessage; originalUrl?: string }>();
    // Once per request, also with the interceptor bound a second time (`@UseInterceptors`).
    if (!layer || !layer.covers(req.method) || handledRequests.get(req) !== undefined) return next.handle();
    const res = http.getResponse<PlatformResponse>();
    // On the Express platform, Express set its app's own prototypes on Node's request and
    // response: what the layer keeps per request goes beside them, not on them.
    if (res.raw === undefined) declareReprototyped(req, res);
    handledRequests.set(req, true);
    let unprotected = this.#unprotected.get(handler);
    if (unprotected === undefined) this.#unprotected.set(handler, (unprotected = handlerTakesOver(controller, handler) ?? null));
    if (unprotected) {
      this.#warnOnce(unprotected, `${controller.name}.${handler.name}`);
      return next.handle();
    }
    const rawReq = (req.raw ?? req) as unknown as IncomingMessage;
    const rawRes = (res.raw ?? res) as unknown as ServerResponse;
    const begun = this.#begin(layer, req, rawReq);
    // One Observable over the decision, not from() + mergeMap() + tap() + catchError(): the
    // same stream, with one subscriber of ours per request instead of four operators'.
    return new Observable<unknown>((subscriber) => {
      let inner: Subscription | undefined;
      let closed = false;
      begun.then(
        (decision) => {
          if (closed) {
            // Given up before the decision came (an outer interceptor's deadline, while this
            // request waited on its key): the handler will not run, so a claim it won is
            // released at once, and the next retry runs instead of waiting on it.
            if (decision.type === 'execute') void decision.claim.fail();
            return;
          }
          try {
            inner = this.#follow(decision, next, res, rawRes, controller, handler, subscriber);
          } catch (error) {
            subscriber.error(error);
          }
        },
        (error: unknown) => subscriber.error(error),
      );
      return () => {
        closed = true;
        inner?.unsubscribe();
        // The handler's stream is over: neither mark is needed again. On the Express
        // platform both sit beside the request, where they would keep it and all it holds
        // alive through every young-generation collection until the next full one.
        handledRequests.delete(req);
        forgetRequestTransaction(req);
      };
    });
  }

  /** What a request's decision makes of the handler's stream (see `intercept`). */
  #follow(
    decision: HttpDecision<unknown>,
    next: CallHandler,
    res: PlatformResponse,
    rawRes: ServerResponse,
    controller: Function,
    handler: Function,
    subscriber: Subscriber<unknown>,
  ): Subscription | undefined {
    if (decision.type === 'pass') return next.handle().subscribe(subscriber);
    if (decision.type === 'respond') {
      if (decision.error === undefined) {
        // A replay: written here, as stored; Nest's own reply after it does nothing.
        if (res.raw) {
          const { status, headers, body } = decision.response;
          (res as unknown as { code(n: number): { headers(h: object): { send(b: Buffer): void } } })
            .code(status)
            .headers(headers)
            .send(Buffer.from(body.buffer, body.byteOffset, body.byteLength));
        } else sendResponse(rawRes, decision.response);
        silenceReplies(res);
        subscriber.next(undefined);
        subscriber.complete();
        return undefined;
      }
      const rejection = new IdempotencyRejection(decision.response, decision.error);
      setRejectionHeaders(res, rejection.headers, rejection.getResponse());
      subscriber.error(rejection);
      return undefined;
    }
    const { claim } = decision;
    // Set when the answer is not to be stored (another error than an HttpException, a
    // StreamableFile): the response is still held until the key is released, so a
    // client that saw it never finds the key still processing.
    let released: { error?: unknown } | undefined;
    const guarded: HttpClaim = {
      maxResponseBytes: claim.maxResponseBytes,
      finish: (response) => (released ? claim.fail(released.error) : claim.finish(response)),
      fail: (error) => claim.fail(error),
      abandon: () => claim.abandon(),
    };
    const capture = captureExpressResponse(rawRes, guarded);
    const release = (error?: unknown) => {
      if (!capture.ended) released ??= { error };
    };
    // The client left before the response ended: the claim now lives on its lease only.
    abandonOnClose(rawRes, claim, () => capture.ended);
    return next.handle().subscribe({
      next: (value) => {
        if (value instanceof StreamableFile) {
          // Sent in its own way: not stored, released (a retry runs again).
          this.#warnOnce('StreamableFile', `${controller.name}.${handler.name}`);
          release();
        }
        subscriber.next(value);
      },
      error: (error: unknown) => {
        // An HttpException is an answer like any other: the filter writes it, and it is
        // stored by its status. Anything else releases the key.
        if (!(error instanceof HttpException)) release(error);
        subscriber.error(error);
      },
      complete: () => subscriber.complete(),
    });
  }

  /** A GraphQL resolver (nest-graphql.ts): protected mutations run once per key. */
  #resolver(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const handler = context.getHandler();
    const layer = this.layerFor(context.getClass(), handler);
    const args = context.getArgs();
    const own = this.#reflector.get<IdempotentOptions | false | undefined>(IDEMPOTENT_METADATA, handler);
    if (!layer || !resolverCovered(args[3] as never, own !== undefined && own !== false)) return next.handle();
    return defer(() =>
      runResolver(layer, args, {
        run: () => lastValueFrom(next.handle(), { defaultValue: undefined }),
        reject: (response, error, message) => Object.assign(new IdempotencyRejection(response, error), { message }),
      }),
    );
  }

  async #begin(layer: Idempotency<NestRequest>, req: NestRequest & { originalUrl?: string }, rawReq: IncomingMessage) {
    let raw: RawBody | undefined;
    const decision = await layer.begin({
      method: req.method,
      url: req.originalUrl ?? rawReq.url ?? req.url,
      headers: req.headers,
      keyHeaderLines: keyHeaderLines(rawReq, layer.headerName),
      body: () => {
        if (bodyConsumed(rawReq) || req.body !== undefined) {
          assertDeclaredLength(rawReq, layer.maxBodyBytes);
          // With `rawBody: true`, Nest keeps the bytes its parser read: they count as sent.
          return parsedBody(req.body, (req as { rawBody?: unknown }).rawBody, req.headers['content-type'] as string | undefined);
        }
        return readBody(rawReq, layer.maxBodyBytes).then((read) => (raw = read));
      },
      raw: req,
    });
    if (raw !== undefined) {
      restoreBody(rawReq, raw);
      setRequestBody(rawReq, raw, req.headers['content-type'] as string | undefined);
    }
    return decision;
  }
}
Injectable()(IdempotencyInterceptor);
Inject(IDEMPOTENCY_LAYER)(IdempotencyInterceptor, undefined, 0);
Inject(ModulesContainer)(IdempotencyInterceptor, undefined, 1);
Inject(IDEMPOTENCY_OPTIONS)(IdempotencyInterceptor, undefined, 2);

/**
 * What `@Idempotent()` binds: Nest makes an enhancer bound by a decorator once per module
 * that uses it, so this is that small per-module part, and the work is the module's one
 * interceptor's (its per-handler layers, its warnings, its checks at start).
 */
class IdempotencyBinding implements NestInterceptor {
  readonly #interceptor: IdempotencyInterceptor;

  constructor(interceptor: IdempotencyInterceptor) {
    this.#interceptor = interceptor;
  }

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return this.#interceptor.intercept(context, next);
  }
}
Injectable()(IdempotencyBinding);
Inject(IdempotencyInterceptor)(IdempotencyBinding, undefined, 0);

/** What the module knows of its store at shutdown. */
interface OwnedStore {
  store: IdempotencyStore;
  owned: boolean;
}

function checkOptions(options: unknown): asserts options is IdempotencyModuleOptions {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError(`Expected IdempotencyModule options to be an object, got ${String(options)}`);
  }
  checkGraphqlOptions(options);
  const { store, rpc } = options as { store?: unknown; rpc?: unknown };
  checkRpcOptions(rpc);
  if (typeof store === 'string') return;
  if (typeof store !== 'object' || store === null || typeof (store as IdempotencyStore).claim !== 'function') {
    throw new TypeError(`Expected \`store\` to be an idempotency store or a store URL, got ${store === null ? 'null' : typeof store}`);
  }
}

async function ownStore(options: unknown): Promise<OwnedStore> {
  checkOptions(options);
  if (typeof options.store !== 'string') return { store: options.store, owned: false };
  // The package's own `createStore` (its drivers load only for the URL's scheme).
  const { createStore } = await import('idempotency-kit');
  return { store: createStore(options.store), owned: true };
}

function buildLayer(options: IdempotencyModuleOptions, store: IdempotencyStore): Idempotency<NestRequest> {
  const { isGlobal: _isGlobal, store: _store, ...rest } = options;
  return new Idempotency<NestRequest>({ ...rest, store }, nestDefaults);
}

const coreProviders: Provider[] = [
  { provide: OWNED_STORE, useFactory: ownStore, inject: [IDEMPOTENCY_OPTIONS] },
  { provide: IDEMPOTENCY_STORE, useFactory: (owned: OwnedStore) => owned.store, inject: [OWNED_STORE] },
  {
    provide: IDEMPOTENCY_LAYER,
    useFactory: (options: IdempotencyModuleOptions, owned: OwnedStore) => buildLayer(options, owned.store),
    inject: [IDEMPOTENCY_OPTIONS, OWNED_STORE],
  },
  IdempotencyInterceptor,
];

const exported = [IDEMPOTENCY_OPTIONS, IDEMPOTENCY_STORE, IDEMPOTENCY_LAYER, IdempotencyInterceptor];

/** The module: `IdempotencyModule.forRoot({ store })` or `IdempotencyModule.forRootAsync({ ... })`, in the root module. */
export class IdempotencyModule implements OnApplicationShutdown {
  readonly #owned: OwnedStore;

  constructor(owned: OwnedStore) {
    this.#owned = owned;
  }

  /** Closes the store the module created from a URL; a store it was given stays open. */
  async onApplicationShutdown(): Promise<void> {
    if (this.#owned.owned) await this.#owned.store.close();
  }

  static forRoot(options: IdempotencyModuleOptions): DynamicModule {
    // Checked now, so a bad option fails where it is written.
    checkOptions(options);
    return {
      module: IdempotencyModule,
      global: options.isGlobal ?? true,
      providers: [{ provide: IDEMPOTENCY_OPTIONS, useValue: options }, ...coreProviders],
      exports: exported,
    };
  }

  static forRootAsync(options: IdempotencyModuleAsyncOptions): DynamicModule {
    const ways = [options.useFactory, options.useClass, options.useExisting].filter((w) => w !== undefined).length;
    if (ways !== 1) {
      throw new TypeError('Expected IdempotencyModule.forRootAsync() to get exactly one of `useFactory`, `useClass` or `useExisting`');
    }
    if (options.useFactory !== undefined && typeof options.useFactory !== 'function') {
      throw new TypeError(`Expected \`useFactory\` to be a function, got ${typeof options.useFactory}`);
    }
    let optionsProvider: Provider;
    const extra: Provider[] = [...(options.extraProviders ?? [])];
    if (options.useFactory) {
      optionsProvider = { provide: IDEMPOTENCY_OPTIONS, useFactory: options.useFactory, inject: options.inject ?? [] };
    } else {
      const token = options.useExisting ?? options.useClass!;
      if (options.useClass) extra.push(options.useClass);
      optionsProvider = {
        provide: IDEMPOTENCY_OPTIONS,
        useFactory: (factory: IdempotencyOptionsFactory) => factory.createIdempotencyOptions(),
        inject: [token],
      };
    }
    return {
      module: IdempotencyModule,
      global: options.isGlobal ?? true,
      imports: options.imports ?? [],
      providers: [optionsProvider, ...extra, ...coreProviders],
      exports: exported,
    };
  }
}
Module({})(IdempotencyModule);
Inject(OWNED_STORE)(IdempotencyModule, undefined, 0);
