/**
 * The demo behind `npm start` and `npm run demo:storm`, on every adapter, on the embedded
 * SQLite store it uses by default.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ADAPTERS, startDemo } from '../examples/demo.js';
import { storm } from '../examples/storm.js';

const dir = mkdtempSync(join(tmpdir(), 'idempotency-demo-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe.each(ADAPTERS)('demo on %s', (adapter) => {
  it('H9: the storm runs the protected debit once (balance 9 000); the unprotected route runs it more', async () => {
    const demo = await startDemo({ adapter, storeUrl: `sqlite://${join(dir, `${adapter}-storm.sqlite`)}`, workMs: 50 });
    try {
      const protectedRow = await storm(demo.url, 'protected');
      expect(protectedRow).toMatchObject({ executions: 1, balance: 9000, conflicts: 0, errors: 0, replays: 54 });
      const unprotected = await storm(demo.url, 'unprotected');
      expect(unprotected.executions).toBeGreaterThan(1);
    } finally {
      await demo.close();
    }
  });

  it('H7: a retry after restarting the demo still replays from the SQLite file', async () => {
    const storeUrl = `sqlite://${join(dir, `${adapter}-restart.sqlite`)}`;
    const balancesFile = join(dir, `${adapter}-balances.json`);
    const debit = (url: string) =>
      fetch(`${url}/accounts/acc_restart/debits`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': 'restart-1' },
        body: JSON.stringify({ amount: 1000 }),
      });
    const first = await startDemo({ adapter, storeUrl, balancesFile, workMs: 1 });
    const original = await debit(first.url);
    const originalBody = await original.text();
    expect(original.status).toBe(201);
    await first.close();

    const second = await startDemo({ adapter, storeUrl, balancesFile, workMs: 1 });
    try {
      const retry = await debit(second.url);
      expect(retry.status).toBe(201);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(await retry.text()).toBe(originalBody);
      const account = (await (await fetch(`${second.url}/accounts/acc_restart`)).json()) as { balance: number };
      expect(account.balance).toBe(9000);
    } finally {
      await second.close();
    }
  });
});
