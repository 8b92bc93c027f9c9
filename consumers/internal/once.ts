/**
 * What the broker recipes (nats, bullmq, mqtt, webhooks) share: `idempotent()` over one
 * message with the recipe's own defaults for where the key, scope and fingerprint come
 * from, and the option checks of the settling options they all have. Internal.
 * @module
 */
import { idempotentIn, type IdempotentOptions } from '../../src/idempotent.js';
import type { KeySpace } from '../../src/key.js';
import type { TransactionalStore } from '../../src/transaction.js';
import { assertFunction, describeValue } from '../../src/validate.js';

/** Options every recipe takes: those of `idempotent()`, with the key, scope and fingerprint of a message defaulted. */
export interface MessageOptions<M, R> extends Omit<IdempotentOptions<[M], R>, 'key' | 'scope' | 'fingerprint'> {
  /** The message's idempotency key; `undefined` (no key) rejects the message before the handler runs. */
  key?: (message: M) => string | undefined;
  /** The key space of a message: the same key in two scopes is two records. */
  scope?: (message: M) => string | undefined;
  /**
   * What must be identical for a redelivery to count as the same message; a message with a
   * known key and another fingerprint is rejected (KeyReusedError), its handler
   * not run. `false`: only the key counts.
   */
  fingerprint?: ((message: M) => unknown) | false;
  /**
   * `true`: the handler runs in a transaction of the store's PostgreSQL database and gets its
   * client as its last argument; its writes and the stored result commit together
   * (docs/transactions.md).
   */
  transaction?: boolean;
}

export interface MessageDefaults<M> {
  key: (message: M) => string | undefined;
  scope?: (message: M) => string | undefined;
  fingerprint?: (message: M) => unknown;
}


/**
 * `idempotent()` around `run` in the recipe's own key space (`space`: no HTTP key, other
 * recipe or `idempotent()` caller can reach its records), keyed by the first argument (the
 * message). Options named in
 * `own` belong to the recipe and are not passed on. Throws the TypeErrors of bad options
 * when called, so that a recipe fails where it is set up.
 */
export function onceFor<M, Args extends [M, ...unknown[]], R>(
  space: KeySpace,
  run: (...args: Args) => R,
  options: MessageOptions<M, Awaited<R>>,
  defaults: MessageDefaults<M>,
  own: readonly string[],
): (...args: Args) => Promise<Awaited<R>> {
  if (typeof options !== 'object' || options === null) throw new TypeError(`Expected options with a \`store\`, got ${describeValue(options)}`);
  const { key = defaults.key, scope = defaults.scope, fingerprint = defaults.fingerprint, ...rest } = options;
  for (const name of own) delete (rest as Record<string, unknown>)[name];
  assertFunction('key', key);
  if (scope !== undefined) assertFunction('scope', scope);
  if (fingerprint !== undefined && fingerprint !== false) assertFunction('fingerprint', fingerprint);
  return idempotentIn(space, run as unknown as (...args: unknown[]) => Promise<Awaited<R>>, {
    ...(rest as IdempotentOptions<unknown[], Awaited<R>> & { store: TransactionalStore<unknown> }),
    key: (message: M) => key(message) as string,
    scope: scope && ((message: M) => scope(message)),
    fingerprint: fingerprint === false || fingerprint === undefined ? undefined : (message: M) => fingerprint(message),
  } as unknown as IdempotentOptions<unknown[]>) as unknown as (...args: Args) => Promise<Awaited<R>>;
}

/** A delay in ms: a non-negative integer, or a function of the delivery count returning one. */
export function assertDelay(name: string, value: unknown): void {
  if (typeof value === 'function') return;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0) {
    throw new TypeError(`Expected \`${name}\` to be a non-negative integer (ms) or a function returning one, got ${describeValue(value)}`);
  }
}

/** The value of a delay option for this attempt; a function returning nonsense falls back to `fallback`. */
export function delayFor(option: number | ((attempt: number) => number), attempt: number, fallback: number): number {
  if (typeof option === 'number') return option;
  let value: unknown;
  try {
    value = option(attempt);
  } catch {
    return fallback;
  }
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? Math.round(value) : fallback;
}

/** Exponential backoff from 1 s, doubling per attempt, capped at 60 s: the default delay after a handler error. */
export const backoff = (attempt: number): number => Math.min(60_000, 1000 * 2 ** Math.max(0, attempt - 1));

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
