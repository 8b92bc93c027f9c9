import { readFileSync } from 'node:fs';
import { runInNewContext } from 'node:vm';
import { describe, expect, it, vi } from 'vitest';
import * as errors from '../../src/errors.js';
import { WebhookSignatureError } from '../../consumers/webhooks.js';

describe('errors (C4)', () => {
  it('C4: every error has a stable code, a status and a name of its own', () => {
    const cases: [errors.IdempotencyError, string, number][] = [
      [new errors.KeyMissingError(), 'key-missing', 400],
      [new errors.KeyInvalidError('empty', 'm'), 'key-invalid', 400],
      [new errors.KeyReusedError(), 'key-reused', 422],
      [new errors.RequestInProgressError(), 'request-in-progress', 409],
      [new errors.ResponseNotReplayableError(), 'response-not-replayable', 409],
      [new errors.StoreUnavailableError(new Error('x')), 'store-unavailable', 503],
      [new errors.BodyTooLargeError(1), 'body-too-large', 413],
      [new errors.ResultNotStorableError('m'), 'result-not-storable', 500],
      [new errors.RecordUnreadableError('k1', 'key-missing'), 'record-unreadable', 500],
      [new errors.LeaseLostError(), 'lease-lost', 409],
      [new errors.TransactionConflictError(3, new Error('deadlock')), 'transaction-conflict', 409],
      [new errors.ScopeRequiredError('m'), 'scope-required', 500],
      [new WebhookSignatureError('m'), 'webhook-signature-invalid', 400],
      [new errors.MemoryStoreInProductionError('m'), 'memory-store-in-production', 500],
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
      // Named for its code: key-reused is KeyReusedError, webhook-signature-invalid WebhookSignatureError.
      const pascal = code.replace(/(^|-)([a-z])/g, (_, __, c: string) => c.toUpperCase());
      expect(error.name).toBe(`${pascal === 'WebhookSignatureInvalid' ? 'WebhookSignature' : pascal}Error`);
    }
  });

  it('the old class names still work for a release: same instances, one deprecation warning each', async () => {
    const root = await import('../../src/index.js');
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    try {
      const reused = new errors.KeyReusedError();
      expect(reused).toBeInstanceOf(root.IdempotencyMismatchError);
      expect(new errors.RequestInProgressError()).toBeInstanceOf(root.IdempotencyConflictError);
      const made = new root.IdempotencyMismatchError();
      expect(made).toBeInstanceOf(errors.KeyReusedError);
      expect(made.code).toBe('key-reused');
      expect(new root.IdempotencyConflictError(3).retryAfterSeconds).toBe(3);
      const messages = warn.mock.calls.map(([message]) => String(message));
      expect(messages.filter((m) => m.includes('IdempotencyMismatchError is deprecated') && m.includes('KeyReusedError'))).toHaveLength(1);
      expect(messages.filter((m) => m.includes('IdempotencyConflictError is deprecated') && m.includes('RequestInProgressError'))).toHaveLength(1);
      expect(warn.mock.calls.every(([, options]) => (options as { type?: string }).type === 'DeprecationWarning')).toBe(true);
    } finally {
      warn.mockRestore();
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
    expect(new errors.RequestInProgressError().retryable).toBe(true);
    expect(new errors.StoreUnavailableError('x').retryable).toBe(true);
    expect(new errors.KeyReusedError().retryable).toBe(false);
  });
});
