/**
 * The demo's domain: accounts that start at 10 000 and debits that take money off them.
 * A debit is deliberately slow and deliberately not idempotent by itself: run it twice
 * and the money is gone twice. Balances persist in a JSON file so that a retry after a
 * restart can show the replay.
 */
import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';

export const OPENING_BALANCE = 10_000;

export interface Debit {
  id: string;
  accountId: string;
  amount: number;
  balance: number;
}

export interface Payments {
  balance(accountId: string): number;
  /** Take `amount` off the account; throws a RangeError on bad input or insufficient funds. */
  debit(accountId: string, amount: unknown): Promise<Debit>;
  reset(accountId: string): void;
  /** How many debits ran since start (the demo's "executions"). */
  readonly executions: number;
}

export function createPayments(options: { file?: string; workMs?: number } = {}): Payments {
  const balances = new Map<string, number>();
  const { file, workMs = 100 } = options;
  if (file) {
    try {
      for (const [id, value] of Object.entries(JSON.parse(readFileSync(file, 'utf8')) as Record<string, number>)) {
        balances.set(id, value);
      }
    } catch {
      // first start: no file yet
    }
  }
  const save = () => {
    if (!file) return;
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(file, JSON.stringify(Object.fromEntries(balances)));
  };
  let executions = 0;
  return {
    balance: (accountId) => balances.get(accountId) ?? OPENING_BALANCE,
    async debit(accountId, amount) {
      if (typeof amount !== 'number' || !Number.isInteger(amount) || amount <= 0) {
        throw new RangeError('amount must be a positive integer');
      }
      executions++;
      // The slow part (a call to a card processor, say): duplicates arrive meanwhile.
      await new Promise((resolve) => setTimeout(resolve, workMs));
      const balance = (balances.get(accountId) ?? OPENING_BALANCE) - amount;
      if (balance < 0) throw new RangeError('insufficient funds');
      balances.set(accountId, balance);
      save();
      return { id: randomUUID(), accountId, amount, balance };
    },
    reset(accountId) {
      balances.set(accountId, OPENING_BALANCE);
      save();
    },
    get executions() {
      return executions;
    },
  };
}
