/**
 * GraphQL resolvers (`@nestjs/graphql`) under the NestJS interceptor: a protected mutation
 * runs once per key, the key from the HTTP `Idempotency-Key` header of the GraphQL
 * context's request or from a mutation argument (`keyArg`), the scope from the context's
 * request as on HTTP (the user a guard left on `req.user`), the fingerprint over the
 * field and its arguments. Nothing here loads `@nestjs/graphql` or `graphql` (optional
 * peers): the interceptor hands over the execution context's `getArgs()`,
 * `[root, args, context, info]`, and the resolver's result.
 * @module
 */
import { IdempotencyKeyError, isIdempotencyError, ResultNotStorableError, ScopeRequiredError, type IdempotencyError, KeyInvalidError, KeyMissingError } from '../../src/errors.js';
import { FieldSelection, hashValue } from '../../src/fingerprint.js';
import type { Idempotency } from '../../src/http.js';
import { checkKey, parseIdempotencyKey, type KeyParseResult } from '../../src/key.js';
import { problemResponse, problemType, type HttpResponse } from '../../src/problem.js';
import { runOnce } from '../../src/run-once.js';
import { describeValue } from '../../src/validate.js';

/** The GraphQL context as `@nestjs/apollo` builds it: the HTTP request on `req` (and `res` when the app's `context` puts it there). */
export interface GraphqlContext {
  req?: GraphqlRequest;
  /** Express's response or Fastify's reply, when the app's `context` function passes it. */
  res?: unknown;
  reply?: unknown;
  [name: string]: unknown;
}

/** The HTTP request of a GraphQL operation (Express's `req`, the Fastify request). */
export interface GraphqlRequest {
  headers: Record<string, string | string[] | undefined>;
  user?: unknown;
  /** Express sets it: the response of this request. */
  res?: unknown;
  [name: string]: unknown;
}

/** What of graphql-js's `GraphQLResolveInfo` the layer reads (typed here so `graphql` stays optional). */
export interface ResolverInfo {
  fieldName: string;
  parentType: { name: string };
  /** Where the field is in the result; a root field's has no `prev`. */
  path?: { prev?: unknown };
  operation: { operation: 'query' | 'mutation' | 'subscription' | string };
  /** The field as the operation wrote it: what of its result the client selected. */
  fieldNodes?: readonly SelectionNode[];
  /** The operation's named fragments. */
  fragments?: Record<string, { selectionSet?: SelectionSet } | undefined>;
}

/** What of graphql-js's selection AST the layer reads: fields, fragment spreads, inline fragments. */
interface SelectionNode {
  kind: string;
  name?: { value: string };
  selectionSet?: SelectionSet;
}
interface SelectionSet {
  selections: readonly SelectionNode[];
}

/** A function that finds a mutation's key: `(args, context, info) => args.input.requestId`. */
export type ResolverKeyFunction = (
  args: Record<string, unknown>,
  context: GraphqlContext,
  info: ResolverInfo,
) => string | undefined | null;

/** The options only GraphQL resolvers read; `@Idempotent()` and the module take them with the others. */
export interface GraphqlIdempotencyOptions {
  /**
   * Where a GraphQL mutation carries its idempotency key, besides the `Idempotency-Key`
   * header of its HTTP request: the name of an argument (`'idempotencyKey'`), a dotted path
   * into an input argument (`'input.idempotencyKey'`), or a function
   * `(args, context, info) => key`. The argument's value is the key as it is (no quoting);
   * an argument left out or `null` falls back to the header; both given and different is
   * a 400-equivalent `key-invalid` refusal. A named argument does not count in the
   * fingerprint (the key is not part of "the same request").
   * @default undefined (the header only)
   */
  keyArg?: string | ResolverKeyFunction;
}


/** Check `keyArg` where it is written (`@Idempotent()`, the module options). */
export function checkGraphqlOptions(options: object): void {
  const { keyArg } = options as GraphqlIdempotencyOptions;
  if (keyArg === undefined || typeof keyArg === 'function') return;
  if (typeof keyArg !== 'string' || !/^[^.\s]+(\.[^.\s]+)*$/.test(keyArg)) {
    throw new TypeError(
      "Expected `keyArg` to be an argument name, a dotted path into an argument ('input.idempotencyKey') " +
        `or a function (args, context, info) => key, got ${describeValue(keyArg)}`,
    );
  }
}

/** What a layer's options compile to for resolvers, once per layer. */
interface ResolverPolicy {
  /** The key from the arguments, or `undefined` when they carry none. */
  argumentKey: ((args: Record<string, unknown>, context: GraphqlContext, info: ResolverInfo) => unknown) | undefined;
  /** Where `keyArg` points, in the user's words (messages). */
  keyArgName: string | undefined;
  /** The arguments that count in the fingerprint. */
  selection: FieldSelection | undefined;
}

const policies = new WeakMap<object, ResolverPolicy>();

function policyOf<Req>(layer: Idempotency<Req>): ResolverPolicy {
  let policy = policies.get(layer);
  if (policy) return policy;
  const options = layer.options as GraphqlIdempotencyOptions & { fingerprint?: unknown };
  checkGraphqlOptions(options);
  const { keyArg, fingerprint } = options;
  if (typeof fingerprint === 'function') {
    throw new TypeError(
      'A `fingerprint` function gets the HTTP request and does not apply to a GraphQL resolver: pass ' +
        "`fingerprint: { include: [...] }` or `{ exclude: [...] }`, paths into the mutation's arguments " +
        '(`{ exclude: [] }` on the resolver when the function is the module\'s, for its HTTP routes)',
    );
  }
  const path = typeof keyArg === 'string' ? keyArg.split('.') : undefined;
  let selection: FieldSelection | undefined;
  if (fingerprint !== undefined) {
    const fields = fingerprint as { include?: readonly string[]; exclude?: readonly string[] };
    selection = FieldSelection.from(
      fields.exclude !== undefined && typeof keyArg === 'string' ? { exclude: [...fields.exclude, keyArg] } : fingerprint,
    );
  } else if (typeof keyArg === 'string') selection = FieldSelection.from({ exclude: [keyArg] });
  policy = {
    argumentKey:
      typeof keyArg === 'function'
        ? keyArg
        : path &&
          ((args) => {
            let value: unknown = args;
            for (const segment of path) {
              value = typeof value === 'object' && value !== null && Object.hasOwn(value, segment) ? (value as Record<string, unknown>)[segment] : undefined;
            }
            return value;
          }),
    keyArgName: typeof keyArg === 'string' ? `the \`${keyArg}\` argument` : keyArg ? 'the `keyArg` function' : undefined,
    selection,
  };
  policies.set(layer, policy);
  return policy;
}

/** Check a resolver's options at module start (what `keyArg` and `fingerprint` mean there), as its first call would. */
export function checkResolverLayer<Req>(layer: Idempotency<Req>): void {
  policyOf(layer);
}

/** The GraphQL error `extensions` of a refusal: the library's code, problem type and status (docs/adapters/nestjs.md#graphql). */
export function graphqlExtensions(error: IdempotencyError | undefined, status: number): Record<string, unknown> {
  if (!error) return { status };
  const extensions: Record<string, unknown> = { code: error.code, type: problemType(error.code), status };
  if (error instanceof IdempotencyKeyError && error.reason) extensions.reason = error.reason;
  const retryAfter = (error as { retryAfterSeconds?: unknown }).retryAfterSeconds;
  if (typeof retryAfter === 'number') extensions.retryAfterSeconds = retryAfter;
  return extensions;
}

/** What the NestJS adapter lends this module. */
export interface ResolverDeps {
  /** The refusal to throw: the adapter's `IdempotencyRejection` (its `extensions` become the GraphQL error's). */
  reject(response: HttpResponse, error: IdempotencyError, message: string): Error;
  /** Run the resolver (Nest's `next.handle()`), to its last value. */
  run(): Promise<unknown>;
}

/** The header keys protected fields of one HTTP request used: one key names one mutation. */
const headerKeysUsed = new WeakMap<object, Set<string>>();

const handledCalls = new WeakSet<object>();

/** Whether a resolver is protected: a mutation field of a protected class or handler; a query only with its own `@Idempotent()`. */
export function resolverCovered(info: ResolverInfo | undefined, ownDecorator: boolean): boolean {
  if (!info || typeof info.fieldName !== 'string') return false;
  // Once per field call, also with the interceptor bound a second time (`@UseInterceptors`).
  if (handledCalls.has(info)) return false;
  handledCalls.add(info);
  const operation = info.operation?.operation;
  // Only root fields: a field resolver (@ResolveField) of a protected class runs for each
  // object of a result, replayed or not.
  if (info.path?.prev !== undefined) return false;
  if (operation === 'mutation') return true;
  return operation === 'query' && ownDecorator;
}

interface ResponseStream {
  once(event: 'close', listener: () => void): unknown;
  off(event: 'close', listener: () => void): unknown;
  writableEnded?: boolean;
}

/** The Node response of the operation's HTTP request (Express's `res`, Fastify's `reply.raw`), when the context leads to it. */
function responseStream(context: GraphqlContext): ResponseStream | undefined {
  const res = (context.res ?? context.reply ?? context.req?.res) as (Partial<ResponseStream> & { raw?: Partial<ResponseStream> }) | undefined;
  const raw = res?.raw ?? res;
  if (!raw || typeof raw.once !== 'function' || typeof raw.off !== 'function' || raw.writableEnded) return undefined;
  return raw as ResponseStream;
}

function setReplayedHeader(context: GraphqlContext): void {
  const res = (context.res ?? context.reply ?? context.req?.res) as
    | { header?(name: string, value: string): unknown; setHeader?(name: string, value: string): unknown; headersSent?: boolean; sent?: boolean }
    | undefined;
  if (!res || res.headersSent || res.sent) return;
  if (typeof res.header === 'function') res.header('Idempotent-Replayed', 'true');
  else if (typeof res.setHeader === 'function') res.setHeader('Idempotent-Replayed', 'true');
}

/**
 * Run one protected resolver call: the refusal (thrown), the replay (the stored result,
 * the resolver not run), or the resolver under a claim: its result stored, a throw
 * releasing the key.
 */
export async function runResolver<Req>(
  layer: Idempotency<Req>,
  [, rawArgs, rawContext, info]: unknown[],
  deps: ResolverDeps,
): Promise<unknown> {
  const policy = policyOf(layer);
  const args = (typeof rawArgs === 'object' && rawArgs !== null ? rawArgs : {}) as Record<string, unknown>;
  const context = (typeof rawContext === 'object' && rawContext !== null ? rawContext : {}) as GraphqlContext;
  const resolverInfo = info as ResolverInfo;
  const req = context.req;
  const refuse = (error: IdempotencyError, message = error.message): never => {
    const response = problemResponse(error, layer.header);
    throw deps.reject(response, error, message);
  };

  // The key: the argument, else the header; both and different is ambiguous.
  const fromHeader = req ? parseIdempotencyKey(req.headers[layer.headerName], layer.maxKeyLength) : { key: undefined, error: undefined };
  let parsed: KeyParseResult = fromHeader;
  let fromArgument = false;
  if (policy.argumentKey) {
    const value = policy.argumentKey(args, context, resolverInfo);
    if (value !== undefined && value !== null) {
      if (typeof value !== 'string') {
        throw new TypeError(`Expected ${policy.keyArgName} to give the idempotency key as a string (a String or ID argument), got ${typeof value}`);
      }
      parsed = checkKey(value, layer.maxKeyLength);
      fromArgument = true;
      if (parsed.key !== undefined && fromHeader.key !== undefined && fromHeader.key !== parsed.key) {
        refuse(
          new KeyInvalidError('several-values', 'The request carries more than one idempotency key.'),
          `The ${layer.header} header and ${policy.keyArgName} name different idempotency keys; send one of them.`,
        );
      }
    }
  }
  if (parsed.key === undefined) {
    if (parsed.error) refuse(parsed.error);
    if (!layer.required) return deps.run();
    const where = policy.keyArgName ? `${policy.keyArgName} or the ${layer.header} header` : `the ${layer.header} header`;
    refuse(new KeyMissingError('Idempotency key missing.'), `This mutation requires an idempotency key: ${where}.`);
  }
  const key = parsed.key as string;
  if (!fromArgument && req) {
    // One header key names one mutation: a second protected field of the same HTTP
    // request (an alias, a batch) would otherwise get the first one's result.
    const used = headerKeysUsed.get(req) ?? new Set<string>();
    headerKeysUsed.set(req, used);
    if (used.has(key)) {
      refuse(
        new KeyInvalidError('several-values', 'The request carries more than one idempotency key.'),
        `The ${layer.header} header names one mutation, and this request has several protected mutations: give each its own key` +
          (policy.keyArgName ? ` through ${policy.keyArgName}.` : ' (with the `keyArg` option, an argument of each).'),
      );
    }
    used.add(key);
  }

  const scope = await layer.scopeFor((req ?? {}) as Req);
  if (scope instanceof ScopeRequiredError) refuse(scope);
  const scopeValue = scope as string | undefined;

  // The field (as method and route are for HTTP) and its arguments, canonically: object
  // key order does not matter; another mutation with this key is a different request.
  const counted = policy.selection ? policy.selection.apply(args) : args;
  const fingerprint = `gql:${hashValue({ field: `${resolverInfo.parentType.name}.${resolverInfo.fieldName}`, args: counted ?? null })}`;

  // The one "run once, store the result" flow, with what GraphQL adds: the refusals as
  // GraphQL errors, the stored form (the fields the operation selected, read as GraphQL
  // reads them), renewals stopped when the client has gone.
  let outcome;
  let ran = false;
  try {
    outcome = await runOnce(layer.engine, {
      key,
      scope: scopeValue,
      fingerprint,
      run: () => {
        ran = true;
        return deps.run();
      },
      maxResultBytes: layer.maxResponseBytes,
      storedForm: (result) => selectedData(result, resolverInfo),
      ttlMs: (_result, stored) => layer.ttlFor((req ?? {}) as Req, stored, key, scopeValue),
      watchClient: (abandon) => {
        const response = responseStream(context);
        response?.once('close', abandon);
        return () => response?.off('close', abandon);
      },
    });
  } catch (error) {
    // A thrown error of the resolver (a GraphQLError, an HttpException, anything) is not a
    // result: the flow released the key and it reaches the client as it is.
    if (!ran && isIdempotencyError(error)) refuse(error);
    throw error;
  }
  if (outcome.type === 'replayed') setReplayedHeader(context);
  return outcome.value;
}

const KEPT = [Date, Uint8Array, Map, Set];

/**
 * The part of a resolver's result that the operation selected, as plain data: for each
 * selected field (fragments and inline fragments included, aliases by the field's name, as
 * GraphQL's default field resolver reads them) the value of that property, own or a getter,
 * awaited when it is a promise. Fields the operation did not select are never read, so a
 * getter the client did not ask for cannot fail the storing, and properties outside the
 * schema (an entity's password hash) never reach the store. A result without the
 * operation's field nodes is not stored.
 */
async function selectedData(result: unknown, info: ResolverInfo): Promise<unknown> {
  const sets = (info.fieldNodes ?? []).map((node) => node.selectionSet);
  if (sets.length === 0) throw new ResultNotStorableError('the resolver info has no field nodes');
  return project(result, sets, info.fragments ?? {});
}

async function project(value: unknown, sets: readonly (SelectionSet | undefined)[], fragments: NonNullable<ResolverInfo['fragments']>): Promise<unknown> {
  if (isThenable(value)) value = await value;
  const selected = sets.filter((set): set is SelectionSet => set !== undefined);
  // A leaf (a scalar or an enum, a JSON scalar too) is stored whole.
  if (selected.length === 0 || typeof value !== 'object' || value === null || KEPT.some((type) => value instanceof type)) return value;
  if (Array.isArray(value)) return Promise.all(value.map((item) => project(item, selected, fragments)));
  const fields = new Map<string, (SelectionSet | undefined)[]>();
  const collect = (set: SelectionSet, depth: number) => {
    if (depth > 64) throw new ResultNotStorableError('the selection nests fragments too deep');
    for (const node of set.selections) {
      if (node.kind === 'Field' && node.name) {
        const list = fields.get(node.name.value) ?? [];
        list.push(node.selectionSet);
        fields.set(node.name.value, list);
      } else if (node.kind === 'InlineFragment' && node.selectionSet) collect(node.selectionSet, depth + 1);
      else if (node.kind === 'FragmentSpread' && node.name) {
        const fragment = fragments[node.name.value]?.selectionSet;
        if (fragment) collect(fragment, depth + 1);
      }
    }
  };
  for (const set of selected) collect(set, 0);
  const out: Record<string, unknown> = {};
  for (const [name, subsets] of fields) {
    const field = (value as Record<string, unknown>)[name];
    if (field === undefined) continue;
    Object.defineProperty(out, name, { value: await project(field, subsets, fragments), enumerable: true, writable: true, configurable: true });
  }
  return out;
}

const isThenable = (value: unknown): value is PromiseLike<unknown> =>
  typeof value === 'object' && value !== null && typeof (value as { then?: unknown }).then === 'function';
