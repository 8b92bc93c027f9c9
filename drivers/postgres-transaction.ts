/**
 * Internal: the PostgreSQL store's `transaction(work, completion)`. The handler's writes
 * and the record's completion run in one transaction on one connection, so they commit
 * together or not at all. Not a package entry; `postgresStore` adds it to stores made from
 * `url` or `pool`.
 * @module
 */
import { LeaseLostError, StoreUnavailableError, TransactionConflictError } from '../src/errors.js';
import type { StoredResponse } from '../src/store.js';
import { withTimeout } from '../src/timers.js';
import type { TransactionCompletion, TransactionOutcome } from '../src/transaction.js';
import { assertInteger, assertOneOf } from '../src/validate.js';

/** A connection taken from a pool for one transaction (a `pg` `PoolClient` is one). */
export interface PostgresClient {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  query(text: string, values?: unknown[]): Promise<{ rows: any[]; rowCount?: number | null; command?: string }>;
  /** Back to the pool; with an error or `true` the connection is destroyed instead. */
  release(destroy?: Error | boolean): void;
  /** A `pg` client is an EventEmitter: a connection lost while checked out emits `error`. */
  on?(event: 'error', listener: (error: Error) => void): unknown;
  off?(event: 'error', listener: (error: Error) => void): unknown;
}

/** The application's own `pg` Pool, or anything with the same calls. */
export interface PostgresPool {
  connect(): Promise<PostgresClient>;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  query(config: { text: string; values: unknown[]; name?: string }): Promise<{ rows: any[] }>;
}

/**
 * The client type a pool hands out: `pg.Pool` gives `pg.PoolClient` (read from its
 * callback overload, because TypeScript infers from the last overload of `connect`).
 */
export type ClientOf<P> = P extends { connect(callback: (error: never, client: infer C, ...rest: never[]) => void): void }
  ? NonNullable<C>
  : P extends { connect(): Promise<infer C> }
    ? C
    : PostgresClient;

export type IsolationLevel = 'read committed' | 'repeatable read' | 'serializable';

export interface PostgresTransactionOptions {
  /**
   * Isolation level of the transactions `idempotent(fn, { transaction: true })` and
   * `inTransaction(req)` run (the claim itself is always its own statement).
   * @default 'read committed'
   */
  isolationLevel?: IsolationLevel;
  /**
   * How many times a transaction runs when PostgreSQL aborts it with a serialization
   * failure (40001) or deadlock (40P01). Each failed attempt is rolled back and the
   * handler runs again in a new transaction; after the last, TransactionConflictError.
   * @default 3
   */
  transactionAttempts?: number;
}

/** What the store shares with its transactions. */
export interface TransactionContext {
  connect: () => Promise<PostgresClient>;
  /** Creates the table on first use; throws when the store is closed. */
  ready: () => Promise<void>;
  /** One autocommit statement on the pool. */
  query: (text: string, values: unknown[]) => Promise<{ state: string; token: string }[]>;
  /** `UPDATE … SET state = 'completed' … WHERE key, token, processing, lease live RETURNING 1`. */
  completeSql: string;
  /** Its parameters, from the storage key as the store's methods receive it (not hashed). */
  completeValues: (key: string, token: string, response: StoredResponse, ttlMs: number) => unknown[];
  /** Waits for a transaction holding the row to end: `SELECT state, token … WHERE key = $1 FOR SHARE`. */
  lockedReadSql: string;
  hash: (key: string) => string;
  timeoutMs: number;
}

const RETRYABLE = new Set(['40001', '40P01']);
const sqlState = (error: unknown): string | undefined => {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
};
/**
 * The connection, not the statement, failed: no answer (reset, timeout), a connection
 * exception (class 08) or the server shutting the session down (57P01–57P05). A COMMIT that
 * fails this way may or may not have landed.
 */
const connectionLost = (error: unknown): boolean => {
  const code = sqlState(error);
  return code === undefined || code.startsWith('08') || code.startsWith('57P');
};

/** Fails with the store's own error type: the connection, not the handler, went wrong. */
class ConnectionFailure extends Error {}

/** Check the transaction options; returns the `transaction` method for a store. */
export function createTransaction(options: PostgresTransactionOptions, context: TransactionContext) {
  const isolationLevel = options.isolationLevel ?? 'read committed';
  const attempts = options.transactionAttempts ?? 3;
  assertOneOf('isolationLevel', isolationLevel, ['read committed', 'repeatable read', 'serializable'] as const);
  assertInteger('transactionAttempts', attempts, 1);
  const { timeoutMs } = context;
  const BEGIN = `BEGIN ISOLATION LEVEL ${isolationLevel.toUpperCase()}`;
  const bounded = <T>(promise: Promise<T>, what: string): Promise<T> =>
    withTimeout(promise, timeoutMs, `idempotency-kit: PostgreSQL did not answer ${what} within ${timeoutMs} ms`);

  /** A client, or StoreUnavailableError; a connection that arrives after the timeout goes back. */
  const connect = async (): Promise<PostgresClient> => {
    const pending = context.connect();
    try {
      return await bounded(pending, 'a connection');
    } catch (error) {
      pending.then((client) => client.release(), () => undefined);
      throw new StoreUnavailableError(error);
    }
  };

  /** After a COMMIT whose answer was lost: did it land? Waits for the row's lock, so a COMMIT still in flight decides first. */
  const committed = async (completion: TransactionCompletion<unknown>): Promise<boolean> => {
    const [row] = await bounded(context.query(context.lockedReadSql, [context.hash(completion.key)]), 'the commit check');
    return row?.state === 'completed' && row.token === completion.token;
  };

  return async function transaction<T>(
    work: (client: PostgresClient) => Promise<T>,
    completion?: TransactionCompletion<T>,
  ): Promise<TransactionOutcome<T>> {
    for (let attempt = 1; ; attempt++) {
      try {
        await context.ready();
      } catch (error) {
        throw new StoreUnavailableError(error);
      }
      const client = await connect();
      // A connection in an unknown state (a statement timed out or failed on the wire) is
      // destroyed, never pooled: the server then rolls back whatever it still holds.
      let broken = false;
      let released = false;
      // A pool listens for errors of idle clients only: without this, a connection lost
      // mid-transaction (server restart, pg_terminate_backend) would be an uncaught 'error'.
      const onError = () => {
        broken = true;
      };
      client.on?.('error', onError);
      const giveBack = (destroy: boolean) => {
        if (released) return;
        released = true;
        client.off?.('error', onError);
        client.release(destroy);
      };
      const statement = async (text: string, values: unknown[], what: string) => {
        try {
          return await bounded(client.query(text, values), what);
        } catch (error) {
          if (!connectionLost(error)) throw error;
          broken = true;
          throw new ConnectionFailure(String(error), { cause: error });
        }
      };
      try {
        let value: T;
        let stored = false;
        try {
          await statement(BEGIN, [], 'BEGIN');
          value = await work(client);
          if (completion) {
            const response = completion.response(value);
            if (response === undefined) {
              await statement('ROLLBACK', [], 'ROLLBACK');
              return { value, stored: false };
            }
            const { key, token, ttlMs } = completion;
            let rows;
            try {
              ({ rows } = await statement(context.completeSql, context.completeValues(key, token, response, ttlMs), 'the completion'));
            } catch (error) {
              if (sqlState(error) === '25P02') {
                throw new Error(
                  'idempotency-kit: the transaction was aborted by an earlier statement whose error the handler caught; ' +
                    'nothing was committed and the key was released',
                  { cause: error },
                );
              }
              throw error;
            }
            // Fenced in the same transaction: 0 rows means another claimer owns the key now.
            if (rows.length !== 1) throw new LeaseLostError();
            stored = true;
          }
        } catch (error) {
          if (!broken) {
            await statement('ROLLBACK', [], 'ROLLBACK').catch(() => {
              broken = true;
            });
          }
          throw error;
        }
        let result;
        try {
          result = await statement('COMMIT', [], 'COMMIT');
        } catch (error) {
          if (!(error instanceof ConnectionFailure)) throw error; // the server answered: rolled back
          // No answer: the COMMIT may or may not have landed. The connection is destroyed
          // first (finally below would be too late: its open transaction holds the row).
          giveBack(true);
          if (completion && (await committed(completion as TransactionCompletion<unknown>).catch(() => false))) {
            return { value, stored: true };
          }
          throw new StoreUnavailableError(error.cause ?? error);
        }
        // COMMIT of a transaction aborted by a statement whose error `work` caught answers ROLLBACK.
        if (result.command === 'ROLLBACK') {
          throw new Error(
            'idempotency-kit: the transaction was aborted by a statement whose error the handler caught, and rolled back',
          );
        }
        return { value, stored };
      } catch (error) {
        const code = sqlState(error);
        if (code !== undefined && RETRYABLE.has(code)) {
          if (attempt < attempts) {
            await new Promise((resolve) => setTimeout(resolve, 10 * 2 ** attempt * (0.5 + Math.random())));
            continue;
          }
          throw new TransactionConflictError(attempt, error);
        }
        if (error instanceof ConnectionFailure) throw new StoreUnavailableError(error.cause ?? error);
        throw error;
      } finally {
        giveBack(broken);
      }
    }
  };
}
