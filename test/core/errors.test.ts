import { readFileSync } from 'node:fs';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import * as errors from '../../src/errors.js';
import { WebhookSignatureError } from '../../consumers/webhooks.js';

describe('errors (C4)', () => {
  it('C4: every error has a stable code, a status and a name of its own', () => {
    const cases: [errors.IdempotencyError, string, number][] = [
      [new errors.IdempotencyKeyError(undefined, 'm'), 'key-missing', 400],
      [new errors.IdempotencyKeyError('empty', 'm'), 'key-invalid', 400],
      [new errors.IdempotencyMismatchError(), 'key-reused', 422],
      [new errors.IdempotencyConflictError(), 'request-in-progress', 409],
      [new errors.ResponseNotReplayableError(), 'response-not-replayable', 409],
      [new errors.StoreUnavailableError(new Error('x')), 'store-unavailable', 503],
      [new errors.BodyTooLargeError(1), 'body-too-large', 413],
      [new errors.ResultNotStorableError('m'), 'result-not-storable', 500],
      [new errors.RecordUnreadableError('k1', 'key-missing'), 'record-unreadable', 500],
      [new errors.LeaseLostError(), 'lease-lost', 409],
      [new errors.TransactionConflictError(3, new Error('deadlock')), 'transaction-conflict', 409],
      [new errors.ScopeRequiredError('m'), 'scope-required', 500],
      [new WebhookSignatureError('m'), 'webhook-signature-invalid', 400],
    ];
    // Every code of IdempotencyErrorCode has its case here: the list is read from the source.
    const source = readFileSync(new URL('../../src/errors.ts', import.meta.url), 'utf8');
    const union = /export type IdempotencyErrorCode =([^;]+);/.exec(source)![1]!;
    const declared = [...union.matchAll(/'([a-z-]+)'/g)].map((m) => m[1]);
    expect(declared.length).toBeGreaterThanOrEqual(13);
    expect(cases.map(([, code]) => code).sort()).toEqual([...declared].sort());
    for (const [error, code, status] of cases) {
      expect(error.code).toBe(code);
      expect(error.status).toBe(status);
      expect(error).toBeInstanceOf(errors.IdempotencyError);
      expect(error).toBeInstanceOf(Error);
      expect(error.name).toBe(error.constructor.name);
      expect(errors.isIdempotencyError(error)).toBe(true);
    }
  });

  it('C4: isIdempotencyError checks the global brand, not instanceof, so it works across copies', () => {
    // An error made by "another copy" of the package: a different class, same global symbol.
    const foreign = runInNewContext(`
      const e = new Error('from another copy');
      Object.defineProperty(e, Symbol.for('idempotency-kit.error'), { value: true });
      e.code = 'key-reused';
      e;
    `);
    expect(foreign instanceof errors.IdempotencyError).toBe(false);
    expect(errors.isIdempotencyError(foreign)).toBe(true);
    expect(errors.isIdempotencyError(new Error('plain'))).toBe(false);
    expect(errors.isIdempotencyError({ code: 'key-reused' })).toBe(false);
    expect(errors.isIdempotencyError(null)).toBe(false);
    expect(errors.isIdempotencyError('key-reused')).toBe(false);
  });

  it('C3: conflict and store errors are retryable; mismatch is not', () => {
    expect(new errors.IdempotencyConflictError().retryable).toBe(true);
    expect(new errors.StoreUnavailableError('x').retryable).toBe(true);
    expect(new errors.IdempotencyMismatchError().retryable).toBe(false);
  });
});
