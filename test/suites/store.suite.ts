/**
 * The store contract every driver passes: the shipped one (`idempotency-kit/testing`,
 * testing/store-contract.ts), run on vitest, so that our stores prove themselves with
 * exactly the suite a third-party store runs. Driver-specific cases go in `extra` (inside
 * the contract's describe, on its store) or in the driver's own "specifics" describe.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { IdempotencyStore } from '../../src/store.js';
import { storeContract, type ContractTarget } from '../../testing/store-contract.js';

export type StoreSuiteTarget = Omit<ContractTarget, 'extra'>;

export interface StoreSuiteOptions {
  /** Own cases, inside the contract's describe: `store()` is the contract's store. */
  extra?: (context: { store: () => IdempotencyStore }) => void;
}

/** `target` undefined registers the suite as skipped (the store's server is not reachable). */
export function storeSuite(name: string, target: StoreSuiteTarget | undefined, { extra }: StoreSuiteOptions = {}): void {
  storeContract(name, target && { ...target, extra }, { describe, it, expect, beforeAll, afterAll });
}
