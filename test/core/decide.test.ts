import { describe, expect, it } from 'vitest';
import { decide } from '../../src/decide.js';
import type { CompletedRecord, ProcessingRecord } from '../../src/store.js';

const now = 1_000_000;
const processing = (over: Partial<ProcessingRecord> = {}): ProcessingRecord => ({
  state: 'processing',
  fingerprint: 'fp',
  token: 't',
  createdAt: now - 10,
  leaseUntil: now + 1,
  ...over,
});
const completed = (over: Partial<CompletedRecord> = {}): CompletedRecord => ({
  state: 'completed',
  fingerprint: 'fp',
  token: 't',
  createdAt: now - 10,
  expiresAt: now + 1,
  response: { status: 201, headers: {}, body: new Uint8Array([1]) },
  ...over,
});

// The decision is a pure function of (record, fingerprint, now): the clock is a number.
describe('decide (SPEC §1)', () => {
  it('§1: no record -> execute', () => {
    expect(decide(undefined, 'fp', now)).toBe('execute');
  });

  it('§1/H17: processing with an expired lease -> execute (takeover), exactly at the boundary too', () => {
    expect(decide(processing({ leaseUntil: now }), 'fp', now)).toBe('execute');
    expect(decide(processing({ leaseUntil: now - 1 }), 'other', now)).toBe('execute');
  });

  it('§1/H8: processing with a valid lease and the same fingerprint -> wait', () => {
    expect(decide(processing(), 'fp', now)).toBe('wait');
  });

  it('§1/H7: completed with the same fingerprint -> replay', () => {
    expect(decide(completed(), 'fp', now)).toBe('replay');
  });

  it('§1/H14: a different fingerprint -> mismatch, at any live state', () => {
    expect(decide(processing(), 'other', now)).toBe('mismatch');
    expect(decide(completed(), 'other', now)).toBe('mismatch');
    expect(decide(completed({ response: { status: 200, headers: {}, body: null } }), 'other', now)).toBe('mismatch');
  });

  it('§1/H20: an expired completed record -> execute (the key is new again)', () => {
    expect(decide(completed({ expiresAt: now }), 'fp', now)).toBe('execute');
    expect(decide(completed({ expiresAt: now - 5 }), 'other', now)).toBe('execute');
  });

  it('H12: completed without a body -> not-replayable (never a second execution)', () => {
    expect(decide(completed({ response: { status: 200, headers: {}, body: null } }), 'fp', now)).toBe('not-replayable');
  });

  it('§1: exhaustive table over states x fingerprints x clock positions', () => {
    const clocks = [now - 1, now, now + 1];
    for (const boundary of clocks) {
      for (const fp of ['fp', 'other']) {
        const live = boundary > now;
        const p = decide(processing({ leaseUntil: boundary }), fp, now);
        const c = decide(completed({ expiresAt: boundary }), fp, now);
        if (!live) {
          expect(p).toBe('execute');
          expect(c).toBe('execute');
        } else if (fp !== 'fp') {
          expect(p).toBe('mismatch');
          expect(c).toBe('mismatch');
        } else {
          expect(p).toBe('wait');
          expect(c).toBe('replay');
        }
      }
    }
  });
});
