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

  it('S1/S2/S3/S4: each flawed store fails the tests of the rule it breaks, and passes the others', async () => {
    const vitest = path.resolve('node_modules/vitest/vitest.mjs');
    await promisify(execFile)(
      process.execPath,
      [vitest, 'run', '--config', 'test/testing/fixtures/vitest.config.ts', '--reporter=json', `--outputFile=${report}`],
      { cwd: process.cwd(), env: { ...process.env, CI: '' } },
    ).catch(() => undefined); // failing tests are the point: read the report
    const results = JSON.parse(await readFile(report, 'utf8')) as {
      testResults: Array<{ assertionResults: Array<{ status: string; fullName: string }> }>;
    };
    const failed = (store: string) =>
      results.testResults
        .flatMap((file) => file.assertionResults)
        .filter((test) => test.fullName.startsWith(`store contract: ${store} `))
        .map((test) => ({ failed: test.status === 'failed', name: test.fullName.slice(`store contract: ${store} `.length) }));
    const failing = (store: string) => failed(store).filter((t) => t.failed).map((t) => t.name.split(':')[0]);

    for (const store of ['racy claim', 'no token check', 'returns expired', 'swallows errors']) {
      expect(failed(store), store).toHaveLength(15); // every test ran
    }
    expect(failing('racy claim')).toEqual(['S1', 'S1/H17']);
    expect(failing('no token check')).toEqual(['S2', 'S2', 'S2/H17', 'H18']);
    expect(failing('returns expired')).toEqual(['S2', 'S3/H20', 'S3']);
    expect(failing('swallows errors')).toEqual(['S4/S6']);
  }, 120_000);
});
