/**
 * Internal: Cloudflare Workers bindings as stores. How a Durable Object namespace, a D1
 * database and a Workers KV namespace are recognised (by shape: the binding classes exist
 * only inside workerd), why KV is refused, and the row size both stores keep to.
 * Loads nothing of Cloudflare's. Not a package entry.
 * @module
 */
/**
 * What the Durable Objects store needs of a namespace binding (`env.IDEMPOTENCY`, bound
 * to the `IdempotencyObject` class). Declared with methods so that a namespace typed by
 * `@cloudflare/workers-types` (`DurableObjectNamespace<IdempotencyObject>`) fits.
 */
export interface DurableObjectNamespaceLike {
  idFromName(name: string): unknown;
  get(id: never, options?: never): unknown;
}

/** What the D1 store needs of a D1 database binding (`env.DB`); a `D1Database` fits. */
export interface D1DatabaseLike {
  prepare(query: string): D1StatementLike;
  batch(statements: never[]): Promise<unknown[]>;
}

/** A prepared D1 statement, as the D1 store uses it. */
export interface D1StatementLike {
  bind(...values: unknown[]): D1StatementLike;
  all(): Promise<{ results?: unknown[]; meta?: { changes?: number } }>;
  run(): Promise<{ meta?: { changes?: number } }>;
}

const hasMethods = (value: unknown, names: readonly string[]): boolean =>
  typeof value === 'object' &&
  value !== null &&
  names.every((name) => typeof (value as Record<string, unknown>)[name] === 'function');

/** A Durable Object namespace binding: it makes ids from names and stubs from ids. */
export const isDurableObjectNamespace = (value: unknown): value is DurableObjectNamespaceLike =>
  hasMethods(value, ['idFromName', 'idFromString', 'newUniqueId', 'get']);

/** A D1 database binding: prepared statements and batches. */
export const isD1Database = (value: unknown): value is D1DatabaseLike => hasMethods(value, ['prepare', 'batch', 'exec']);

/** A Workers KV namespace binding. */
export const isKvNamespace = (value: unknown): boolean => hasMethods(value, ['get', 'put', 'delete', 'list', 'getWithMetadata']);

/** Why a Workers KV namespace is no store, and what to use instead. */
const KV_REFUSED =
  'Workers KV has no atomic set-if-absent: two Workers that read "no record" and write one both succeed, and a write ' +
  'can take 60 s or more to be seen in other locations, so two retries of one request could both run the handler. ' +
  'Use a Durable Object namespace bound to the IdempotencyObject class (createStore(env.IDEMPOTENCY)), ' +
  'or a D1 database (createStore(env.DB)); see docs/drivers/cloudflare.md';

/** Throw the KV refusal when `value` is a KV namespace; `where` names what it was passed to. */
export function refuseKv(value: unknown, where: string): void {
  if (isKvNamespace(value)) throw new TypeError(`idempotency-kit: ${where} got a Workers KV namespace. ${KV_REFUSED}`);
}

/**
 * Whether a completed record fits in one row: SQLite-backed Durable Objects and D1 refuse
 * a string, BLOB or row over 2 MB. A response that would not fit is kept without its body
 * (a retry gets 409 response-not-replayable and the handler never runs twice), as one
 * over `maxResponseBytes` is. Header text counts 3 bytes a character (UTF-8 at worst);
 * the rest of the row is small.
 */
export const fitsInRow = (body: Uint8Array | null, headers: string): boolean =>
  body === null || body.byteLength + 3 * headers.length + 1024 <= 2_000_000;
