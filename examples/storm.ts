/**
 * `npm run demo:storm`: the same debit of 1 000, fired 50 times at once and then retried
 * 5 times in a row, at the protected route and at the unprotected one. The protected
 * account must end at 9 000 with 1 execution; the unprotected one shows the damage.
 */
import { randomUUID } from 'node:crypto';
import { DEFAULT_STORE, redact, startDemo } from './demo.js';
import { OPENING_BALANCE } from './payments.js';

export interface StormRow {
  route: string;
  executions: number;
  replays: number;
  conflicts: number;
  /** Answers >= 400 other than 409, by status. */
  errors: number;
  unavailable: number;
  balance: number;
}

export async function storm(
  baseUrl: string,
  route: 'protected' | 'unprotected',
  options: { concurrent?: number; retries?: number } = {},
): Promise<StormRow> {
  const { concurrent = 50, retries = 5 } = options;
  const account = `acc_${route}_${randomUUID().slice(0, 8)}`;
  await fetch(`${baseUrl}/accounts/${account}/reset`, { method: 'POST' });
  const path = route === 'protected' ? `/accounts/${account}/debits` : `/unprotected/accounts/${account}/debits`;
  const key = randomUUID();
  const send = async () => {
    const res = await fetch(baseUrl + path, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify({ amount: 1000 }),
    });
    await res.arrayBuffer();
    return res;
  };
  const responses = await Promise.all(Array.from({ length: concurrent }, send));
  for (let i = 0; i < retries; i++) responses.push(await send());
  const { balance } = (await (await fetch(`${baseUrl}/accounts/${account}`)).json()) as { balance: number };
  return {
    route,
    executions: Math.round((OPENING_BALANCE - balance) / 1000),
    replays: responses.filter((r) => r.headers.get('idempotent-replayed') === 'true').length,
    conflicts: responses.filter((r) => r.status === 409).length,
    errors: responses.filter((r) => r.status >= 400 && r.status !== 409).length,
    unavailable: responses.filter((r) => r.status === 503).length,
    balance,
  };
}

const isMain = process.argv[1]?.endsWith('storm.ts');
if (isMain) {
  const storeUrl = process.env.IDEMPOTENCY_STORE ?? DEFAULT_STORE;
  const demo = await startDemo({ adapter: process.env.ADAPTER, storeUrl });
  try {
    const rows = [await storm(demo.url, 'protected'), await storm(demo.url, 'unprotected')];
    console.log(`50 identical debits of 1 000 at once, then 5 retries (adapter ${process.env.ADAPTER ?? 'node'}, store ${storeUrl})\n`);
    console.table(rows);
    const guarded = rows[0]!;
    const ok = guarded.executions === 1 && guarded.balance === 9000;
    if (ok) console.log('protected route: 1 execution, balance 9 000');
    else if (guarded.executions === 0 && guarded.unavailable > 0) {
      console.log(
        `the protected route never ran: ${guarded.unavailable} answers were 503 store-unavailable. ` +
          `Is the store at ${redact(storeUrl)} up? (IDEMPOTENCY_STORE picks another)`,
      );
    } else if (guarded.executions === 0) console.log(`the protected route never ran (${guarded.errors} error answers)`);
    else console.log(`UNEXPECTED: the protected route ran ${guarded.executions} times`);
    process.exitCode = ok ? 0 : 1;
  } finally {
    await demo.close();
  }
}
