/**
 * The shipped store contract (`idempotency-kit/testing`, testing/store-contract.ts) on
 * vitest, as every driver's test file runs it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { storeContract as contract, type ContractTarget } from '../../testing/store-contract.js';

export type { ContractTarget };

export function storeContract(name: string, target: ContractTarget | undefined): void {
  contract(name, target, { describe, it, expect, beforeAll, afterAll });
}
