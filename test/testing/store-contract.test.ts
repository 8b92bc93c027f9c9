/**
 * `idempotency-kit/testing`: the store contract is usable from outside the package (by
 * its published name, with the runner passed in or as test globals), a correct outside
 * store passes it, and a store that breaks one rule fails exactly the tests for that rule.
 */
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { storeContract } from 'idempotency-kit/testing';
import { mapStore } from './fixtures/map-store.js';

// An outside store, with vitest's functions passed in.
storeContract(
  'an outside store (Map behind an async mutex)',
  {
    create: async () => mapStore(),
    broken: async () => ({ store: mapStore({}, true), failingKey: 'k', allOperations: true }),
  },
  { describe, it, expect, beforeAll, afterAll },
);

describe('the contract notices a store that breaks a rule', () => {
  const report = path.join(tmpdir(), `idempotency-kit-contract-${randomUUID()}.json`);
  afterAll(async () => {
    await rm(report, { force: true });
  });

  it('each flawed store fails the tests of the guarantee it breaks and passes the others; `extra` cases run inside the contract', async () => {
    const vitest = path.resolve('node_modules/vitest/vitest.mjs');
    await promisify(execFile)(
      process.execPath,
      [vitest, 'run', '--config', 'test/testing/fixtures/vitest.config.ts', '--reporter=json', `--outputFile=${report}`],
      { cwd: process.cwd(), env: { ...process.env, CI: '' } },
    ).catch(() => undefined); // failing tests are the point: read the report
    const results = JSON.parse(await readFile(report, 'utf8')) as {
      testResults: Array<{ assertionResults: Array<{ status: string; ancestorTitles: string[]; title: string }> }>;
    };
    /** The store's tests as `<guarantee> > <title>` (the guarantee is the contract's inner describe). */
    const tests = (store: string) =>
      results.testResults
        .flatMap((file) => file.assertionResults)
        .filter((test) => test.ancestorTitles[0] === `store contract: ${store}`)
        .map((test) => ({ failed: test.status === 'failed', name: [...test.ancestorTitles.slice(1), test.title].join(' > ') }));
    const failing = (store: string) => tests(store).filter((t) => t.failed).map((t) => t.name);

    const atomic = 'claims are atomic: exactly one concurrent claim wins';
    const owner = 'only the token that owns a claim can complete, release or extend it';
    const expired = 'expired records are never returned';
    const failingBackend = 'a failing backend rejects every call, in bounded time';
    for (const store of ['racy claim', 'no token check', 'returns expired', 'swallows errors']) {
      expect(tests(store), store).toHaveLength(19); // every test ran: the contract's 18 and the extra one
      // The extra case sits directly in the contract's describe, on its (open) store.
      expect(tests(store)).toContainEqual({ failed: false, name: 'extra: the contract store is open and named' });
    }
    expect(failing('racy claim')).toEqual([
      `${atomic} > of 60 concurrent claimers on one key exactly one wins; losers see the winner`,
      `${atomic} > after the lease expires exactly one of many claimers takes over with a new token`,
    ]);
    expect(failing('no token check')).toEqual([
      `${owner} > complete stores status, headers and body bytes; only the owner can complete`,
      `${owner} > release deletes only for the owner`,
      `${owner} > extend pushes the lease only for the owner (lease renewal of a slow handler)`,
      `${owner} > a fenced-out owner cannot complete, release or extend after a takeover`,
    ]);
    expect(failing('returns expired')).toEqual([
      `${owner} > an expired lease cannot be extended or completed by its old owner`,
      `${expired} > get never returns an expired record, and the key is new again after ttl`,
      `${expired} > get never returns a processing record whose lease ended`,
    ]);
    expect(failing('swallows errors')).toEqual([
      `${failingBackend} > claim (and, for network and file stores, every other call) rejects with an error within 5 s, never "not found"`,
    ]);
  }, 120_000);
});
