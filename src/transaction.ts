/**
 * Effect and record in one database transaction: the contract a store implements to run
 * a handler inside a transaction of its own database and complete the record in that same
 * transaction, and `inTransaction(req, work)` for HTTP handlers. Knows no database client.
 * @module
 * @example
 * app.post('/orders', async (req, res) => {
 *   const response = await inTransaction(req, async (client) => {
 *     const { rows } = await client.query('INSERT INTO orders (sku) VALUES ($1) RETURNING id', [req.body.sku]);
 *     return { status: 201, body: { id: rows[0].id } };
 *   });
 *   res.status(response.status).set(response.headers).send(Buffer.from(response.body));
 * });
 */
import type { HttpResponse } from './problem.js';
import { ObjectSlot } from './object-slot.js';
import type { IdempotencyStore, StoredResponse } from './store.js';

/**
 * The least a transaction's client offers (a `pg` client has it). Stores type the client
 * they hand out more precisely, e.g. as the `PoolClient` of the application's own pool.
 */
export interface TransactionClient {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  query(text: string, values?: unknown[]): Promise<{ rows: any[]; rowCount?: number | null }>;
}

/** What a transaction must do with the record before it commits. */
export interface TransactionCompletion<T> {
  /** The storage key (hashed) and the claim's token: the record is completed only while this token owns it. */
  key: string;
  token: string;
  /** How long the completed record is replayed, in ms. */
  ttlMs: number;
  /**
   * The response to store for the value `work` returned. `undefined` rolls the
   * transaction back (nothing is stored, the effect does not happen): the caller then
   * releases the key.
   */
  response: (value: T) => StoredResponse | undefined;
}

export interface TransactionOutcome<T> {
  value: T;
  /** Whether the record was completed in the committed transaction. */
  stored: boolean;
}

/**
 * A store whose records live in a database that can also hold the application's data
 * (PostgreSQL, or MySQL with a transaction runner). `transaction(work, completion)` opens a transaction, runs `work` with its
 * client, completes the record (fenced by the token) and commits: the effect and the
 * stored result commit together or not at all.
 *
 * It throws `work`'s own error after rolling back; `LeaseLostError` when the token no
 * longer owns the record (rolled back); `TransactionConflictError` when serialization
 * failures or deadlocks outlast the retries; `StoreUnavailableError` when the database
 * failed (connect, the completion or COMMIT), after making sure the commit did not land.
 */
export interface TransactionalStore<Client = TransactionClient> extends IdempotencyStore {
  transaction<T>(work: (client: Client) => Promise<T>, completion?: TransactionCompletion<T>): Promise<TransactionOutcome<T>>;
}

/**
 * One SQL statement of a store, in the store's own dialect: `$1`, `$2`… placeholders on
 * PostgreSQL (a number may repeat), `?` on MySQL.
 */
export interface TransactionStatement {
  dialect: 'postgres' | 'mysql';
  text: string;
  values: unknown[];
}

/** A statement's answer: the rows it returned, and how many rows it changed when the driver says. */
export interface TransactionStatementResult {
  rows: Record<string, unknown>[];
  affectedRows?: number;
}

/**
 * A transaction opened with an ORM's or query builder's own API (Drizzle, Kysely, Knex,
 * TypeORM, Prisma, MikroORM: `idempotency-kit/transactions/<name>`), for a store to write
 * its record in. `run(body)` opens a transaction, calls `body` with the ORM's own
 * transaction object and a function that runs one statement on that transaction's
 * connection, commits once when `body` resolves and rolls back when it throws.
 * Give it to the store (`postgresStore({ url, transactions })`, `mysqlStore(...)`); the
 * handler then gets `tx` through `inTransaction(req, work)`, `idempotent(fn, { transaction:
 * true })` or `@IdempotentTransaction()`.
 */
export interface TransactionRunner<Tx> {
  /** The ORM, for messages (`'drizzle'`). */
  readonly name: string;
  /** The database the ORM talks to, when it can tell: a store refuses a runner on another kind of database. */
  readonly dialect?: 'postgres' | 'mysql';
  run<T>(body: (tx: Tx, execute: (statement: TransactionStatement) => Promise<TransactionStatementResult>) => Promise<T>): Promise<T>;
}

export function isTransactionalStore(store: IdempotencyStore): store is TransactionalStore<unknown> {
  return typeof (store as Partial<TransactionalStore<unknown>>).transaction === 'function';
}

/** The response a handler returns from `inTransaction`: stored in the transaction, then sent. */
export interface TransactionResponse {
  status: number;
  headers?: Record<string, string | string[]>;
  /** Bytes and strings are sent as they are; anything else as JSON (`content-type: application/json`). */
  body?: unknown;
}

/** How the HTTP layer runs `inTransaction` for one request (set by the middleware): the request's claim, or a plain transaction. */
export interface RequestTransaction {
  transaction(work: (client: unknown) => Promise<HttpResponse>): Promise<HttpResponse>;
}

const requestTransactions = new ObjectSlot<RequestTransaction>('transaction');

/** Called by the HTTP layer for every request it lets through to a handler. */
export function registerRequestTransaction(raw: unknown, run: RequestTransaction): void {
  if (typeof raw === 'object' && raw !== null) requestTransactions.set(raw, run);
}

/**
 * Called once the request's response is settled (stored, released, or passed and sent):
 * `inTransaction(req)` no longer applies. Where the request could not take a property
 * (Express's re-prototyped requests), this also ends the side table's entry, which would
 * otherwise keep the request and all it holds alive through every young-generation
 * collection until the next full one.
 */
export function forgetRequestTransaction(raw: unknown): void {
  if (typeof raw === 'object' && raw !== null) requestTransactions.delete(raw);
}

// The layer's own answer to an error its transaction threw (its `formatError`, its key
// header), kept for adapters that answer such errors themselves (NestJS).
const transactionProblems = new WeakMap<object, HttpResponse>();

/** Called by the HTTP layer when `inTransaction` fails with one of its errors. */
export function noteTransactionProblem(error: object, response: HttpResponse): void {
  transactionProblems.set(error, response);
}

/** The layer's response to an error `inTransaction` threw, if the layer rendered one. */
export function transactionProblem(error: unknown): HttpResponse | undefined {
  return typeof error === 'object' && error !== null ? transactionProblems.get(error) : undefined;
}

/** Whether the HTTP layer let this request through to its handler, so `inTransaction(req)` can run. */
export function hasRequestTransaction(req: object): boolean {
  return requestTransactions.get(req) !== undefined;
}

/** The response as it is stored and sent: body bytes, and a content type for JSON or text. */
export function toHttpResponse(response: TransactionResponse): HttpResponse {
  if (typeof response !== 'object' || response === null || !Number.isInteger(response.status)) {
    throw new TypeError(`Expected the transaction's work to return { status, headers?, body? }, got ${String(response)}`);
  }
  const headers: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(response.headers ?? {})) headers[name.toLowerCase()] = value;
  const { body } = response;
  let bytes: Uint8Array;
  if (body === undefined || body === null) bytes = new Uint8Array();
  else if (body instanceof Uint8Array) bytes = body;
  else if (typeof body === 'string') {
    bytes = new Uint8Array(Buffer.from(body));
    headers['content-type'] ??= 'text/plain; charset=utf-8';
  } else {
    bytes = new Uint8Array(Buffer.from(JSON.stringify(body)));
    headers['content-type'] ??= 'application/json; charset=utf-8';
  }
  return { status: response.status, headers, body: bytes };
}

/**
 * Run `work` in a transaction on the idempotency store's database and store the response
 * it returns in that same transaction, so the business writes and the stored response
 * commit together or not at all. Send the response this returns: it is the one committed,
 * and the one every retry with the same key replays.
 *
 * `req` is what the handler got from its framework: Express and Node `req`, Fastify
 * `request`, Koa `ctx`, Hono `c`, the fetch adapter's `Request`. The store must run transactions (`postgresStore({ url })`,
 * `postgresStore({ pool })`, or a PostgreSQL or MySQL store given your ORM's `transactions`: `work` then gets
 * the ORM's transaction object).
 *
 * - `work` throws: rolled back, the key is released (a retry runs again), the error is rethrown;
 * - the status is not stored (5xx, 401, 403, 408, 425, 429 by default): rolled back, the key released, the response returned;
 * - the lease ended before the commit (another request took the key over): rolled back, `LeaseLostError` (409);
 * - serialization failure or deadlock: `work` runs again in a new transaction (bounded),
 *   then `TransactionConflictError` (409).
 *
 * Without a key on a route where keys are optional, `work` runs in a plain transaction.
 * Call it once per request. See docs/transactions.md.
 */
export async function inTransaction<C = TransactionClient>(
  req: object,
  work: (client: C) => Promise<TransactionResponse>,
): Promise<HttpResponse> {
  const run = typeof req === 'object' && req !== null ? requestTransactions.get(req) : undefined;
  if (!run) {
    throw new TypeError(
      'inTransaction(req) found no idempotency middleware for this request: pass the request object your handler got ' +
        '(Express / Node `req`, Fastify `request`, Koa `ctx`) on a route the middleware covers (POST, PATCH by default), ' +
        'before the response is sent',
    );
  }
  return run.transaction(async (client) => toHttpResponse(await work(client as C)));
}
