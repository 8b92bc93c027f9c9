/**
 * Internal: a SQL store's `transaction(work, completion)` on a transaction that an ORM opens
 * (a `TransactionRunner` from `idempotency-kit/transactions/<name>`). The ORM begins and
 * commits; the handler writes through the ORM's own transaction object; the record is
 * completed by one statement on that same connection before the ORM commits. Shared by the
 * PostgreSQL and MySQL stores and by every runner (placeholders, database error codes).
 * Loads no database client. Not a package entry.
 * @module
 */
import { LeaseLostError, StoreUnavailableError, TransactionConflictError } from '../src/errors.js';
import type { StoredResponse } from '../src/store.js';
import { withTimeout } from '../src/timers.js';
import type {
  TransactionCompletion,
  TransactionOutcome,
  TransactionRunner,
  TransactionStatement,
  TransactionStatementResult,
} from '../src/transaction.js';
import { assertInteger } from '../src/validate.js';

export type Dialect = TransactionStatement['dialect'];

/** What a store gives the runner's transactions. */
export interface RunnerContext {
  dialect: Dialect;
  /** The database in messages ('PostgreSQL'). */
  label: string;
  /** Creates the table on first use; throws when the store is closed. */
  ready: () => Promise<void>;
  /** The completion of the record at `key` (as the store's methods receive it), fenced by `token`. */
  completion: (key: string, token: string, response: StoredResponse, ttlMs: number) => TransactionStatement;
  /**
   * After a commit whose answer was lost, on the store's own connection: waits for the
   * record's row lock (a commit still in flight decides first), then whether `token`
   * completed the record.
   */
  committed: (key: string, token: string) => Promise<boolean>;
  timeoutMs: number;
}

export interface RunnerTransactionOptions {
  /**
   * How many times a transaction runs when the database aborts it with a serialization
   * failure or a deadlock; then TransactionConflictError.
   * @default 3
   */
  transactionAttempts?: number;
}

/**
 * The database's own code for an error that an ORM may have wrapped: a PostgreSQL SQLSTATE
 * (`'40001'`) or a MySQL error number (`'errno:1213'`; SQLSTATEs may be all digits too),
 * looked for on the error, its `cause`, its `driverError` (TypeORM) and its `meta` (Prisma).
 */
export function databaseCode(error: unknown, depth = 0): string | undefined {
  if (typeof error !== 'object' || error === null || depth > 6) return undefined;
  const e = error as Record<string, unknown>;
  // MySQL's number first (its errors carry a SQLSTATE too); Node's own errnos are negative.
  if (typeof e.errno === 'number' && e.errno > 0) return `errno:${e.errno}`;
  // Prisma's driver adapters: `{ kind: 'mysql', code: 1213 }`, `{ kind: 'postgres', code: '40001' }`.
  if (e.kind === 'mysql' && typeof e.code === 'number') return `errno:${e.code}`;
  for (const field of ['code', 'originalCode']) {
    const value = e[field];
    // A SQLSTATE's class is two digits or F0, HV, P0, XX: never Node's `EPIPE`.
    if (typeof value === 'string' && /^(?:\d\d|F0|HV|P0|XX)[0-9A-Z]{3}$/.test(value)) return value;
  }
  for (const inner of [e.cause, e.driverError, e.meta, (e.meta as Record<string, unknown> | undefined)?.driverAdapterError]) {
    const code = databaseCode(inner, depth + 1);
    if (code !== undefined) return code;
  }
  // Prisma's own code for "a write conflict or a deadlock", when it keeps no database code.
  if (e.code === 'P2034') return '40001';
  return undefined;
}

// PostgreSQL: serialization failure, deadlock. MySQL / MariaDB: deadlock (the transaction
// was rolled back whole); a lock wait timeout rolls back only the statement, so it is not here.
const RETRYABLE = new Set(['40001', '40P01', 'errno:1213']);
// MySQL / MariaDB client and server codes for a connection gone: server gone away (2006),
// lost during a query (2013), server shutdown (1053), connection killed (1927, MariaDB).
const MYSQL_GONE = new Set(['errno:2006', 'errno:2013', 'errno:1053', 'errno:1927']);

/**
 * The connection, not a statement, failed: no database code at all (a reset, a timeout, a
 * socket closed), a PostgreSQL connection exception (class 08) or an administrator's
 * shutdown (57P01–57P05), or MySQL's connection codes. A COMMIT that fails so may or may not
 * have landed.
 */
export function connectionLost(error: unknown): boolean {
  const code = databaseCode(error);
  if (code === undefined) return true;
  if (code.startsWith('errno:')) return MYSQL_GONE.has(code) || sqlStateOf(error)?.startsWith('08') === true;
  return code.startsWith('08') || code.startsWith('57P');
}

/** The SQLSTATE beside a MySQL error number (mysql2's `sqlState`, Prisma's `state`): class 08 is a connection exception. */
function sqlStateOf(error: unknown, depth = 0): string | undefined {
  if (typeof error !== 'object' || error === null || depth > 6) return undefined;
  const e = error as Record<string, unknown>;
  for (const field of ['sqlState', 'state']) if (typeof e[field] === 'string') return e[field];
  for (const inner of [e.cause, e.driverError, e.meta, (e.meta as Record<string, unknown> | undefined)?.driverAdapterError]) {
    const state = sqlStateOf(inner, depth + 1);
    if (state !== undefined) return state;
  }
  return undefined;
}

/**
 * `statement` as text and values for APIs that take one placeholder style: the text split
 * around its placeholders (`parts.length === values.length + 1`), and the value of each,
 * in order (a PostgreSQL `$n` used twice gives its value twice).
 */
export function splitStatement(statement: TransactionStatement): { parts: string[]; values: unknown[] } {
  const parts: string[] = [];
  const values: unknown[] = [];
  const pattern = statement.dialect === 'postgres' ? /\$(\d+)/g : /\?/g;
  let last = 0;
  let index = 0;
  for (const match of statement.text.matchAll(pattern)) {
    parts.push(statement.text.slice(last, match.index));
    values.push(statement.dialect === 'postgres' ? statement.values[Number(match[1]) - 1] : statement.values[index++]);
    last = match.index! + match[0].length;
  }
  parts.push(statement.text.slice(last));
  return { parts, values };
}

/** `statement` with `?` placeholders (Knex's, MikroORM's): a `$n` used twice is bound twice. */
export function questionMarks(statement: TransactionStatement): { text: string; values: unknown[] } {
  if (statement.dialect === 'mysql') return { text: statement.text, values: statement.values };
  const { parts, values } = splitStatement(statement);
  return { text: parts.join('?'), values };
}

/**
 * Rows and changed-row count out of the shapes drivers answer with: an array of rows, a
 * mysql2 `[rows or ResultSetHeader, fields]` pair, a `pg` result (`rows`, `rowCount`), a
 * Kysely result (`rows`, `numAffectedRows`), a header (`affectedRows`).
 */
export function statementResult(raw: unknown): TransactionStatementResult {
  let value = raw;
  // mysql2's [result, fields]
  if (Array.isArray(value) && value.length === 2 && (Array.isArray(value[1]) || value[1] === undefined) && !isRow(value[0])) {
    value = value[0];
  }
  // TypeORM on PostgreSQL answers an UPDATE or DELETE (RETURNING or not) with [rows, affected].
  if (Array.isArray(value) && value.length === 2 && Array.isArray(value[0]) && typeof value[1] === 'number') {
    return { rows: value[0] as Record<string, unknown>[], affectedRows: value[1] };
  }
  if (Array.isArray(value)) return { rows: value as Record<string, unknown>[] };
  if (typeof value === 'number') return { rows: [], affectedRows: value };
  if (typeof value === 'object' && value !== null) {
    const v = value as Record<string, unknown>;
    const affected = v.affectedRows ?? v.numAffectedRows ?? v.rowCount;
    return {
      rows: Array.isArray(v.rows) ? (v.rows as Record<string, unknown>[]) : [],
      ...(affected !== undefined && affected !== null ? { affectedRows: Number(affected) } : {}),
    };
  }
  return { rows: [] };
}

// A row is a plain object with columns; a ResultSetHeader or an array of rows is not.
const isRow = (value: unknown): boolean =>
  typeof value === 'object' && value !== null && !Array.isArray(value) && !('affectedRows' in value) && !('fieldCount' in value);

/** Thrown inside the runner to roll back a transaction whose response is not stored. */
class RollBack extends Error {}

/** Check the runner; returns the `transaction` method of a store on `context`. */
export function runnerTransaction<Tx>(runner: TransactionRunner<Tx>, options: RunnerTransactionOptions, context: RunnerContext) {
  if (typeof runner !== 'object' || runner === null || typeof runner.run !== 'function') {
    throw new TypeError(
      `Expected \`transactions\` to be a transaction runner (e.g. drizzleTransactions(db) from idempotency-kit/transactions/drizzle), got ${String(runner)}`,
    );
  }
  if (runner.dialect !== undefined && runner.dialect !== context.dialect) {
    throw new TypeError(
      `Expected \`transactions\` on ${context.label}, the store's database, got a ${runner.name} runner on ${runner.dialect === 'postgres' ? 'PostgreSQL' : 'MySQL'}`,
    );
  }
  const attempts = options.transactionAttempts ?? 3;
  assertInteger('transactionAttempts', attempts, 1);
  const { timeoutMs } = context;

  return async function transaction<T>(work: (tx: Tx) => Promise<T>, completion?: TransactionCompletion<T>): Promise<TransactionOutcome<T>> {
    for (let attempt = 1; ; attempt++) {
      try {
        await context.ready();
      } catch (error) {
        throw new StoreUnavailableError(error);
      }
      // Where the transaction got to: a failure before `work` is the database's (BEGIN,
      // no connection); `work`'s own errors are rethrown as they are; after the record's
      // completion, a failure is at COMMIT.
      let stage = 'begin' as 'begin' | 'work' | 'completion' | 'commit';
      let value!: T;
      let stored = false;
      try {
        await runner.run(async (tx, execute) => {
          stage = 'work';
          value = await work(tx);
          if (!completion) {
            stage = 'commit';
            return;
          }
          const response = completion.response(value);
          if (response === undefined) throw new RollBack();
          stage = 'completion';
          const statement = context.completion(completion.key, completion.token, response, completion.ttlMs);
          let result: TransactionStatementResult;
          try {
            result = await execute(statement);
          } catch (error) {
            if (databaseCode(error) === '25P02') {
              throw new Error(
                'idempotency-kit: the transaction was aborted by an earlier statement whose error the handler caught; ' +
                  'nothing was committed and the key was released',
                { cause: error },
              );
            }
            throw error;
          }
          // Fenced in the same transaction: no row means another claimer owns the key now.
          // The rows it returned (PostgreSQL), or the rows it changed or returned as the driver counts them.
          const changed = Math.max(result.rows.length, result.affectedRows ?? 0);
          if (changed !== 1) throw new LeaseLostError();
          stored = true;
          stage = 'commit';
        });
        return { value, stored };
      } catch (error) {
        if (error instanceof RollBack) return { value, stored: false };
        if (error instanceof LeaseLostError) throw error;
        const code = databaseCode(error);
        if (code !== undefined && RETRYABLE.has(code)) {
          if (attempt < attempts) {
            await new Promise((resolve) => setTimeout(resolve, 10 * 2 ** attempt * (0.5 + Math.random())));
            continue;
          }
          throw new TransactionConflictError(attempt, error);
        }
        if (stage === 'commit' && stored && completion) {
          // The COMMIT failed. Without an answer it may have landed: the record says.
          const landed = await withTimeout(
            context.committed(completion.key, completion.token),
            timeoutMs,
            `idempotency-kit: ${context.label} did not answer the commit check within ${timeoutMs} ms`,
          ).catch(() => false);
          if (landed) return { value, stored: true };
          if (connectionLost(error)) throw new StoreUnavailableError(error);
          throw error; // the server answered: rolled back (a deferred constraint, …)
        }
        if (stage === 'begin' || ((stage === 'completion' || stage === 'commit') && connectionLost(error))) {
          throw new StoreUnavailableError(error);
        }
        throw error;
      }
    }
  };
}
