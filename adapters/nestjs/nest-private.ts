/**
 * Everything the NestJS adapter reads of Nest's private state, in one file: the metadata keys
 * Nest's decorators write (`@Sse()`, `@Res()` / `@Next()`, `@Res({ passthrough: true })`,
 * `@HttpCode()`, the route's `method`, `@MessagePattern()`), which Nest does not export from
 * its public entry, and the platform response made silent by a prototype of its own.
 *
 * Each has a fallback on Nest's public API or plain JavaScript. The keys are the values Nest 11
 * and 12 write; they are checked once, when first needed, by applying Nest's own public
 * decorators to a probe class and reading which keys those wrote: a key that moved is taken
 * from the probe. A response whose prototype cannot be changed gets its reply methods as
 * properties of its own. test/adapters/nest-private.test.ts pins the keys to the installed Nest
 * (it runs on Nest 11 and 12) and runs every fallback.
 * @module
 */
import { Get, HttpCode, Next, Post, RequestMethod, Res, Sse } from '@nestjs/common';

/** The metadata keys the adapter reads, and the route-argument types of `@Res()` and `@Next()`. */
export interface NestKeys {
  /** On a handler: `true` for `@Sse()`. */
  readonly sse: string;
  /** On (controller, method name): the route arguments, `{ '<type>:<index>': ... }`. */
  readonly routeArgs: string;
  /** On (controller, method name): `true` for `@Res({ passthrough: true })`. */
  readonly passthrough: string;
  /** On a handler: the status of `@HttpCode()`. */
  readonly httpCode: string;
  /** On a handler: its `RequestMethod` (a route handler has one). */
  readonly method: string;
  /** The route-argument type of `@Res()` / `@Response()`. */
  readonly responseType: number;
  /** The route-argument type of `@Next()`. */
  readonly nextType: number;
}

/** What Nest 11 and 12 write (their `@nestjs/common/constants` and `RouteParamtypes`). */
export const KNOWN_KEYS: NestKeys = {
  sse: '__sse__',
  routeArgs: '__routeArguments__',
  passthrough: '__responsePassthrough__',
  httpCode: '__httpCode__',
  method: 'method',
  responseType: 1,
  nextType: 2,
};

/**
 * `@nestjs/microservices`' key of `@MessagePattern()` / `@EventPattern()` on a handler (Nest 11
 * and 12). That package is optional, so it is not probed: a handler whose pattern is not
 * found under this key is served by the HTTP interceptor's path, and the pinned test fails.
 */
export const PATTERN_METADATA = 'microservices:pattern';

type MetadataReflect = {
  getMetadata?(key: unknown, target: object, property?: string | symbol): unknown;
  getOwnMetadataKeys?(target: object, property?: string | symbol): unknown[];
};
/** reflect-metadata, which Nest loads. */
const reflect = Reflect as unknown as MetadataReflect;

/** A metadata value, or undefined when reflect-metadata is not loaded. */
export const metadata = (key: string, target: object, property?: string): unknown => reflect.getMetadata?.(key, target, property);

/** The keys a decorator wrote, with their values. */
function written(target: object, property?: string): Map<string, unknown> {
  const keys = reflect.getOwnMetadataKeys?.(target, property) ?? [];
  return new Map(keys.filter((key): key is string => typeof key === 'string').map((key) => [key, reflect.getMetadata!(key, target, property)]));
}

/** The one key of `found` holding `value`, if exactly one does. */
function keyHolding(found: Map<string, unknown>, value: unknown, except: ReadonlySet<string> = new Set()): string | undefined {
  const keys = [...found].filter(([key, held]) => held === value && !except.has(key)).map(([key]) => key);
  return keys.length === 1 ? keys[0] : undefined;
}

/**
 * The keys as the installed Nest writes them, found by applying its public decorators to a
 * probe class; a key the probe cannot single out is left out (undefined when nothing was
 * found, e.g. without reflect-metadata).
 */
export function probeNestKeys(): Partial<NestKeys> | undefined {
  if (typeof reflect.getOwnMetadataKeys !== 'function' || typeof reflect.getMetadata !== 'function') return undefined;
  try {
    class Probe {
      get(): void {}
      sse(): void {}
      code(): void {}
      res(_res: unknown, _next: unknown): void {}
      pass(_res: unknown): void {}
    }
    const proto = Probe.prototype as unknown as Record<string, Function>;
    const descriptor = (name: string) => Object.getOwnPropertyDescriptor(proto, name)!;
    Get('probe')(proto, 'get', descriptor('get'));
    Sse('probe')(proto, 'sse', descriptor('sse'));
    Post('probe')(proto, 'code', descriptor('code'));
    HttpCode(299)(proto, 'code', descriptor('code'));
    Res()(proto, 'res', 0);
    Next()(proto, 'res', 1);
    Res({ passthrough: true })(proto, 'pass', 0);

    const keys: { -readonly [K in keyof NestKeys]?: NestKeys[K] } = {};
    const ofGet = written(proto.get!);
    const method = keyHolding(written(proto.code!), RequestMethod.POST);
    if (method !== undefined) keys.method = method;
    const sse = keyHolding(written(proto.sse!), true, new Set(ofGet.keys()));
    if (sse !== undefined) keys.sse = sse;
    const code = keyHolding(written(proto.code!), 299);
    if (code !== undefined) keys.httpCode = code;
    const ofRes = written(Probe, 'res');
    if (ofRes.size === 1) {
      const [routeArgs, args] = [...ofRes][0]!;
      keys.routeArgs = routeArgs;
      const types = Object.keys((args ?? {}) as object).map((id) => id.split(':').map(Number));
      const at = (index: number) => types.find(([, i]) => i === index)?.[0];
      if (at(0) !== undefined && Number.isInteger(at(0))) keys.responseType = at(0);
      if (at(1) !== undefined && Number.isInteger(at(1))) keys.nextType = at(1);
    }
    const passthrough = keyHolding(written(Probe, 'pass'), true, new Set(keys.routeArgs === undefined ? [] : [keys.routeArgs]));
    if (passthrough !== undefined) keys.passthrough = passthrough;
    return keys;
  } catch {
    return undefined;
  }
}

/** The keys to read: what the probe found, each missing one from what Nest 11 and 12 write. */
export function resolveNestKeys(probed: Partial<NestKeys> | undefined): NestKeys {
  return { ...KNOWN_KEYS, ...probed };
}

let resolved: NestKeys | undefined;

/** The keys of the installed Nest, probed once. */
export function nestKeys(): NestKeys {
  return (resolved ??= resolveNestKeys(probeNestKeys()));
}

/** Why a handler cannot be protected, read from Nest's metadata. */
export type HandlerTakesOver = 'SSE' | '@Res() without passthrough';

/** Whether a handler streams (SSE) or writes its own response (`@Res()` / `@Next()` without passthrough). */
export function handlerTakesOver(controller: Function, handler: Function, keys: NestKeys = nestKeys()): HandlerTakesOver | undefined {
  if (metadata(keys.sse, handler)) return 'SSE';
  const args = (metadata(keys.routeArgs, controller, handler.name) ?? {}) as Record<string, unknown>;
  const handled = Object.keys(args).some((id) => {
    const type = Number(id.split(':')[0]);
    return type === keys.responseType || type === keys.nextType;
  });
  if (handled && metadata(keys.passthrough, controller, handler.name) !== true) return '@Res() without passthrough';
  return undefined;
}

/** A route handler's `RequestMethod`, undefined when the function is not a route. */
export const routeMethod = (handler: Function, keys: NestKeys = nestKeys()): RequestMethod | undefined =>
  metadata(keys.method, handler) as RequestMethod | undefined;

/** A handler's `@HttpCode()` status, if it has one. */
export const httpCodeOf = (handler: Function, keys: NestKeys = nestKeys()): number | undefined => metadata(keys.httpCode, handler) as number | undefined;

/** A handler's `@MessagePattern()` / `@EventPattern()` pattern, undefined when it has none. */
export const messagePatternOf = (handler: Function): unknown => metadata(PATTERN_METADATA, handler);

/** The reply methods Nest may call on a response the layer answered itself. */
const REPLY_METHODS = ['status', 'code', 'send', 'json', 'redirect', 'render', 'end'];
/** Per prototype of platform responses: an object on it whose reply methods do nothing. */
const silenced = new WeakMap<object, object>();
const returnThis = function (this: unknown) {
  return this;
};

/**
 * Make a platform response's reply methods no-ops: the layer answered it (a replay). The
 * response gets a prototype of its own prototype's whose methods do nothing (made once per
 * prototype): one change of the object's shape, where defining the seven methods on it
 * would make seven (on Express's responses each builds a hidden class of its own). Methods
 * something defined on the response itself (a middleware wrapping `end`) are replaced too.
 * A response that has no prototype, or cannot take another (frozen, sealed, a proxy that
 * refuses), gets the no-op methods as its own properties instead (`ownProperties` forces it).
 */
export function silenceReplies(res: Record<string, unknown>, ownProperties = false): void {
  const prototype = Object.getPrototypeOf(res) as object | null;
  let reprototyped = false;
  if (!ownProperties && prototype !== null) {
    let silent = silenced.get(prototype);
    if (silent === undefined) {
      silent = Object.create(prototype) as Record<string, unknown>;
      for (const name of REPLY_METHODS) if (typeof res[name] === 'function') (silent as Record<string, unknown>)[name] = returnThis;
      silenced.set(prototype, silent);
    }
    reprototyped = Reflect.setPrototypeOf(res, silent);
  }
  for (const name of REPLY_METHODS) {
    const own = Object.prototype.hasOwnProperty.call(res, name);
    if ((own || !reprototyped) && typeof res[name] === 'function') {
      try {
        Object.defineProperty(res, name, { value: returnThis, configurable: true, writable: true });
      } catch {
        // A frozen response: Nest's reply after the replay writes nothing anyway once the
        // response has ended (both platforms check it).
      }
    }
  }
}
