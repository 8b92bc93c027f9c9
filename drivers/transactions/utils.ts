/**
 * Internal: what the ORM transaction runners share (option checks, the dialect from an
 * ORM's own name for its database). Not a package entry.
 * @module
 */
import type { TransactionRunner } from '../../src/transaction.js';

/** Throws a TypeError unless `value` is an object with the method `method`. */
export function assertDatabase(option: string, value: unknown, method: string, expected: string): void {
  if ((typeof value !== 'object' && typeof value !== 'function') || value === null || typeof (value as Record<string, unknown>)[method] !== 'function') {
    throw new TypeError(`Expected \`${option}\` to be ${expected}, got ${value === null ? 'null' : typeof value}`);
  }
}

/** PostgreSQL or MySQL from an ORM's name for its dialect or driver ('PgDialect', 'postgresql', 'mysql2', 'mariadb'), if it says. */
export function dialectOf(name: string | undefined): TransactionRunner<unknown>['dialect'] {
  if (name === undefined) return undefined;
  if (/^(pg|postgres)/i.test(name)) return 'postgres';
  if (/^(mysql|maria)/i.test(name)) return 'mysql';
  return undefined;
}
