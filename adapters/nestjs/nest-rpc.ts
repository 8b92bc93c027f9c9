/**
 * The NestJS adapter's microservice part: `@Idempotent()` on `@MessagePattern()` and
 * `@EventPattern()` handlers (`@nestjs/microservices`). The key comes from the message (a
 * header or property of the transport, or a payload field), the handler runs through
 * `idempotent()`, and what it answered (every value of its Observable, a promise's value,
 * a plain value) is stored and replayed to a redelivery.
 *
 * `@nestjs/microservices` is an optional peer: nothing here imports it at load time. The
 * transport context is duck-typed (NATS: `getHeaders()`; RabbitMQ: `getMessage().properties`),
 * and `RpcException` is loaded by name at the first rpc message, only to make the layer's
 * refusals render through Nest's own RPC exception filter.
 * @module
 */
import type { CallHandler, ExecutionContext, Type } from '@nestjs/common';
import { Observable, defer, from, lastValueFrom, mergeMap, toArray } from 'rxjs';
import { renamedOption } from '../../src/deprecation.js';
import { ResultNotStorableError, isIdempotencyError, type IdempotencyError, KeyMissingError } from '../../src/errors.js';
import { idempotentIn } from '../../src/idempotent.js';
import type { KeySpace } from '../../src/key.js';
import type { EngineOptions } from '../../src/options.js';
import { serializeResult } from '../../src/serialize.js';
import { assertFunction, assertInteger, describeValue } from '../../src/validate.js';
import { messagePatternOf } from './nest-private.js';

/**
 * The transport context a message handler gets (`@Ctx()`): a `NatsContext`, an
 * `RmqContext`, or another transport's. `key`, `scope`, `fingerprint` and `onReplay` get it.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type RpcContext = any;

/**
 * `rpc` options, on `IdempotencyModule.forRoot({ rpc })` or `@Idempotent({ rpc })`: how
 * a message handler's key, scope and fingerprint come from the message. Merged module,
 * then class, then handler, like the other options.
 */
export interface IdempotentRpcOptions {
  /**
   * Where a message's key is:
   *
   * - a string: the payload field that holds it (dotted for a nested one: `'order.id'`);
   * - a function `(data, context) => key`: anything of the message, e.g.
   *   `(data, ctx) => ctx.getMessage().properties.correlationId`.
   *
   * A string or a finite number is a key. Keys are hashed before they reach the store.
   * @default the transport's message id: on NATS the `Idempotency-Key` header (the module's
   * `header` option), else `Nats-Msg-Id`; on RabbitMQ the `Idempotency-Key` header of the
   * message, else its `messageId` property
   */
  key?: string | ((data: unknown, context: RpcContext) => unknown);
  /**
   * Whose key space a message's key belongs to: a function `(data, context) => tenant`
   * (a non-empty string or a finite number, else the message is refused with
   * `scope-required`), or `'shared'`.
   * @default 'shared': message ids are made by your own producers, there is no request user
   */
  scope?: 'shared' | ((data: unknown, context: RpcContext) => unknown);
  /**
   * What must be the same for a repeat to be the same message: a function
   * `(data, context) => value`, or `false` for the key alone. Another payload under a
   * used key is refused with `key-reused`.
   * @default the payload (`data`)
   */
  fingerprint?: false | ((data: unknown, context: RpcContext) => unknown);
  /**
   * Whether a message without a key is refused (`key-missing`, the handler does not run).
   * With `false` it runs unprotected.
   * @default true
   */
  required?: boolean;
  /**
   * How long a result replays, in ms. The module's `ttlMs` applies when it is a number (a
   * `ttlMs` function is the HTTP requests' own).
   * @default the module's `ttlMs` when a number, else 86400000 (24 h)
   */
  ttlMs?: number;
  /** @deprecated Renamed `ttlMs`; the old name works until the next minor release. */
  ttl?: number;
  /**
   * Called when the layer answers a message without running its handler (a replay,
   * including a duplicate that waited for the first): settle it with the broker here, as
   * your handler would have. On RabbitMQ with `noAck: false`:
   * `onReplay: (data, ctx) => ctx.getChannelRef().ack(ctx.getMessage())`.
   */
  onReplay?: (data: unknown, context: RpcContext) => void;
  /**
   * The name of the handler's key space: each protected handler keeps its keys apart from
   * every other handler's (two handlers of one event both run once), from HTTP keys and from
   * `idempotent()` callers. Set it when two handlers share a message pattern and a method
   * name (the start fails and says so), or to keep a handler's records when you rename it.
   * @default the handler's message pattern and method name (never its class name, which a
   * minifier may change between builds)
   */
  keySpace?: string;
}

/** What the module options bring to message handlers: the engine's options, the key header, `rpc`. */
export interface NestRpcModuleOptions extends Partial<Omit<EngineOptions, 'store' | 'ttl' | 'ttlMs'>> {
  ttl?: unknown;
  ttlMs?: unknown;
  /** The largest answer that is stored (serialized, in bytes); a larger one is sent and not stored. @default 1048576 */
  maxResponseBytes?: number;
  header?: string;
  encryption?: EngineOptions['encryption'];
  rpc?: IdempotentRpcOptions;
}

/** What a refusal sends to the client (`error` of its `client.send()` observable). */
export interface RpcRefusal {
  status: 'error';
  /** The layer's error code: `key-missing`, `request-in-progress`, `key-reused`, ... */
  code: string;
  message: string;
  /** Whether the same message can succeed later (a conflict, the store down). */
  retryable: boolean;
}

const RPC_KEYS = new Set(['key', 'scope', 'fingerprint', 'required', 'ttlMs', 'ttl', 'onReplay', 'keySpace']);

/** Checks `rpc` options (module, class or handler level), with a TypeError naming the option. */
export function checkRpcOptions(rpc: unknown): asserts rpc is IdempotentRpcOptions | undefined {
  if (rpc === undefined) return;
  if (typeof rpc !== 'object' || rpc === null || Array.isArray(rpc)) {
    throw new TypeError(`Expected \`rpc\` to be an options object, got ${describeValue(rpc)}`);
  }
  for (const name of Object.keys(rpc)) {
    if (!RPC_KEYS.has(name)) throw new TypeError(`Unknown \`rpc\` option \`${name}\` (expected one of ${[...RPC_KEYS].join(', ')})`);
  }
  const { key, scope, fingerprint, required, onReplay, keySpace } = rpc as IdempotentRpcOptions;
  const ttl = renamedOption<unknown>(rpc, 'ttl', 'ttlMs');
  if (keySpace !== undefined && (typeof keySpace !== 'string' || keySpace === '')) {
    throw new TypeError(`Expected \`rpc.keySpace\` to be a non-empty string, got ${describeValue(keySpace)}`);
  }
  if (key !== undefined && typeof key !== 'function' && (typeof key !== 'string' || key === '')) {
    throw new TypeError(`Expected \`rpc.key\` to be a payload field name or a function (data, context) => key, got ${describeValue(key)}`);
  }
  if (scope !== undefined && scope !== 'shared' && typeof scope !== 'function') {
    throw new TypeError(`Expected \`rpc.scope\` to be a function (data, context) => tenant or 'shared', got ${describeValue(scope)}`);
  }
  if (fingerprint !== undefined && fingerprint !== false && typeof fingerprint !== 'function') {
    throw new TypeError(`Expected \`rpc.fingerprint\` to be a function (data, context) => value or false, got ${describeValue(fingerprint)}`);
  }
  if (required !== undefined && typeof required !== 'boolean') {
    throw new TypeError(`Expected \`rpc.required\` to be a boolean, got ${describeValue(required)}`);
  }
  if (ttl !== undefined) assertInteger('rpc.ttlMs', ttl, 1);
  if (onReplay !== undefined) assertFunction('rpc.onReplay', onReplay);
}

/** The first usable value of a NATS header: `MsgHdrs.get()` answers '' for a missing one. */
function natsHeader(headers: unknown, name: string): string | undefined {
  const get = (headers as { get?: (name: string) => string } | null | undefined)?.get;
  if (typeof get !== 'function') return undefined;
  const value = get.call(headers, name);
  return typeof value === 'string' && value !== '' ? value : undefined;
}

/** An AMQP header, by name in any case. */
function amqpHeader(headers: unknown, name: string): unknown {
  if (typeof headers !== 'object' || headers === null) return undefined;
  const wanted = name.toLowerCase();
  for (const [header, value] of Object.entries(headers)) if (header.toLowerCase() === wanted) return value;
  return undefined;
}

/** The transport's message id: NATS headers, RabbitMQ headers and `messageId`; undefined on others. */
function transportKey(context: RpcContext, header: string): unknown {
  if (typeof context?.getHeaders === 'function') {
    const headers = context.getHeaders();
    return natsHeader(headers, header) ?? natsHeader(headers, 'Nats-Msg-Id');
  }
  if (typeof context?.getMessage === 'function') {
    const properties = (context.getMessage() as { properties?: { headers?: unknown; messageId?: unknown } } | undefined)?.properties;
    return amqpHeader(properties?.headers, header) ?? properties?.messageId;
  }
  return undefined;
}

function field(data: unknown, path: string): unknown {
  let value = data;
  for (const part of path.split('.')) {
    if (typeof value !== 'object' || value === null) return undefined;
    value = (value as Record<string, unknown>)[part];
  }
  return value;
}

/** A message's key as a string, or undefined when it has none. */
function keyString(value: unknown, from: string): string | undefined {
  if (value === undefined || value === null || value === '') return undefined;
  if (typeof value === 'string') return value;
  if ((typeof value === 'number' && Number.isFinite(value)) || typeof value === 'bigint') return String(value);
  if (Buffer.isBuffer(value) && value.length > 0) return value.toString('utf8');
  throw new KeyMissingError(`The message's key (${from}) is ${typeof value}, not a string or a number.`);
}

/**
 * What of a handler's values is stored: the values as they are, else as the JSON the
 * transport sends (a class instance as its JSON). Neither (a cycle, a BigInt in a plain
 * object's JSON) throws, and the flow completes the key without a stored result.
 */
function storedForm(values: unknown): unknown {
  try {
    serializeResult(values);
    return values;
  } catch (error) {
    if (!(error instanceof ResultNotStorableError)) throw error;
  }
  return JSON.parse(JSON.stringify(values)) as unknown;
}

type RpcExceptionClass = new (error: object) => Error;
let rpcException: Promise<RpcExceptionClass | undefined> | undefined;
/** `RpcException`, loaded by name (not bundled, and never needed by an app without microservices). */
function loadRpcException(): Promise<RpcExceptionClass | undefined> {
  const name = '@nestjs/microservices';
  rpcException ??= (import(name) as Promise<{ RpcException?: RpcExceptionClass; default?: { RpcException?: RpcExceptionClass } }>).then(
    // Nest 12 is ES modules; Nest 11's CommonJS exports may sit on `default`.
    (module) => module.RpcException ?? module.default?.RpcException,
    () => undefined,
  );
  return rpcException;
}

/**
 * A refusal as an `RpcException` whose error is `{ status: 'error', code, message, retryable }`,
 * so Nest's RPC filter sends it to the client as it is; `cause` is the layer's error.
 */
async function refusal(error: IdempotencyError): Promise<Error> {
  const RpcException = await loadRpcException();
  if (!RpcException) return error;
  const body: RpcRefusal = { status: 'error', code: error.code, message: error.message, retryable: error.retryable };
  const exception = new RpcException(body);
  Object.defineProperty(exception, 'cause', { value: error, configurable: true, writable: true });
  return exception;
}

/**
 * The transport contexts of the messages the layer has taken, with the handlers that took
 * each: once per message and handler (the handlers of one event share its context), also with
 * the interceptor bound a second time (`@UseInterceptors`, another instance).
 */
const seen = new WeakMap<object, Set<Function>>();

type Protected = (data: unknown, context: RpcContext, work: () => Promise<unknown[]>) => Promise<unknown[]>;

interface Protection {
  run: Protected | null;
  onReplay: ((data: unknown, context: RpcContext) => void) | undefined;
}

/**
 * The message handlers' half of the interceptor. `read(target)` gives the `@Idempotent()`
 * options on a class or a handler (`false`: switched off, `undefined`: none).
 */
export class NestRpc {
  readonly #options: NestRpcModuleOptions;
  readonly #store: EngineOptions['store'];
  readonly #read: (target: object) => Record<string, unknown> | false | undefined;
  readonly #handlers = new WeakMap<Function, Protection | null>();

  constructor(
    options: NestRpcModuleOptions,
    store: EngineOptions['store'],
    read: (target: object) => Record<string, unknown> | false | undefined,
  ) {
    checkRpcOptions(options.rpc);
    this.#options = options;
    this.#store = store;
    this.#read = read;
  }

  /** Whether a handler is a message or event handler (`@MessagePattern()`, `@EventPattern()`). */
  static isMessageHandler(handler: Function): boolean {
    return messagePatternOf(handler) !== undefined;
  }

  /** The protection of a handler, built (and its options checked) once; null when not `@Idempotent()`. */
  protectionFor(controller: Type<unknown>, handler: Function): Protection | null {
    const known = this.#handlers.get(handler);
    if (known !== undefined) return known;
    const own = this.#read(handler);
    const ofClass = this.#read(controller);
    let protection: Protection | null = null;
    if (own !== false && !(own === undefined && (ofClass === undefined || ofClass === false))) {
      protection = this.#build(controller, handler, ofClass || {}, own || {});
    }
    this.#handlers.set(handler, protection);
    return protection;
  }

  /** The key spaces of the handlers built so far, and whose each is: two handlers never share one. */
  readonly #spaces = new Map<string, { handler: Function; where: string }>();

  /** A handler's key space: `rpc.keySpace`, else its message pattern and method name (class names change under minifiers). */
  #spaceOf(controller: Type<unknown>, handler: Function, keySpace: string | undefined): KeySpace {
    const name = keySpace ?? `${JSON.stringify(messagePatternOf(handler) ?? null)}#${handler.name}`;
    const where = `${controller.name}.${handler.name}`;
    const holder = this.#spaces.get(name);
    if (holder !== undefined && holder.handler !== handler) {
      throw new TypeError(
        `The message handlers ${holder.where} and ${where} would share one key space (${name}): one would answer the ` +
          "other's messages as replays. Give one of them its own `rpc: { keySpace: '...' }` in @Idempotent().",
      );
    }
    this.#spaces.set(name, { handler, where });
    return `message:nest:${name}`;
  }

  #build(controller: Type<unknown>, handler: Function, ofClass: Record<string, unknown>, own: Record<string, unknown>): Protection {
    checkRpcOptions(ofClass.rpc);
    checkRpcOptions(own.rpc);
    const merged = { ...this.#options, ...ofClass, ...own } as NestRpcModuleOptions;
    const rpc: IdempotentRpcOptions = {
      ...this.#options.rpc,
      ...(ofClass.rpc as IdempotentRpcOptions | undefined),
      ...(own.rpc as IdempotentRpcOptions | undefined),
    };
    const header = merged.header ?? 'Idempotency-Key';
    const { key, scope, fingerprint, required = true, onReplay } = rpc;
    const moduleTtl = merged.ttlMs ?? merged.ttl;
    const ttlMs = rpc.ttlMs ?? rpc.ttl ?? (typeof moduleTtl === 'number' ? moduleTtl : undefined);
    const keyOf =
      typeof key === 'function'
        ? (data: unknown, context: RpcContext) => keyString(key(data, context), 'the `rpc.key` function')
        : typeof key === 'string'
          ? (data: unknown) => keyString(field(data, key), `payload field ${JSON.stringify(key)}`)
          : (data: unknown, context: RpcContext) => keyString(transportKey(context, header), 'the message id');
    // Each handler has its own key space: two handlers of one event both run once.
    const space = this.#spaceOf(controller, handler, rpc.keySpace);
    const run = idempotentIn(
      space,
      (_data: unknown, _context: RpcContext, work: () => Promise<unknown[]>) => work(),
      {
        store: this.#store,
        waitMs: merged.waitMs ?? merged.wait,
        leaseMs: merged.leaseMs,
        storeTimeoutMs: merged.storeTimeoutMs,
        onStoreError: merged.onStoreError,
        onEvent: merged.onEvent,
        now: merged.now,
        telemetry: merged.telemetry,
        encryption: merged.encryption,
        ttlMs,
        key: (data, context) => {
          const value = keyOf(data, context);
          if (value === undefined) throw new KeyMissingError(`The message has no idempotency key (${keyWhere(key, header)}).`);
          return value;
        },
        scope: typeof scope === 'function' ? (data, context) => scope(data, context) as string : undefined,
        fingerprint: fingerprint === false ? undefined : fingerprint ? (data, context) => fingerprint(data, context) : (data) => data,
        maxResultBytes: merged.maxResponseBytes,
      },
      { storedForm },
    );
    return {
      run: required ? run : (data, context, work) => (keyOf(data, context) === undefined ? work() : run(data, context, work)),
      onReplay,
    };
  }

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const protection = this.protectionFor(context.getClass(), context.getHandler());
    if (!protection?.run) return next.handle();
    const run = protection.run;
    const rpc = context.switchToRpc();
    const data = rpc.getData<unknown>();
    const transport = rpc.getContext<RpcContext>();
    if (typeof transport === 'object' && transport !== null) {
      // Once per handler: the handlers of one event share its context, and each is protected.
      const handler = context.getHandler();
      const handled = seen.get(transport) ?? new Set<Function>();
      if (handled.has(handler)) return next.handle();
      seen.set(transport, handled.add(handler));
    }
    void loadRpcException();
    return defer(async () => {
      let ran = false;
      try {
        const values = await run(data, transport, async () => {
          ran = true;
          return lastValueFrom(next.handle().pipe(toArray()));
        });
        if (!ran) protection.onReplay?.(data, transport);
        return from(values);
      } catch (error) {
        // The handler's own errors (and their redelivery) are the application's.
        if (!ran && isIdempotencyError(error)) throw await refusal(error as IdempotencyError);
        throw error;
      }
    }).pipe(mergeMap((values) => values));
  }
}

function keyWhere(key: IdempotentRpcOptions['key'], header: string): string {
  if (typeof key === 'function') return 'the `rpc.key` function returned none';
  if (typeof key === 'string') return `payload field ${JSON.stringify(key)}`;
  return `NATS header ${header} or Nats-Msg-Id, RabbitMQ header ${header} or messageId`;
}
