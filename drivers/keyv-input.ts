/**
 * Internal: how the Keyv-based drivers take a Keyv adapter (or a Keyv over one) instead of
 * a URL. Not a package entry.
 * @module
 */

export interface KeyvInputOptions {
  url?: string;
  adapter?: unknown;
  keyv?: unknown;
}

/** Throw unless exactly one of `url`, `adapter` and `keyv` is given. */
export function assertOneSource(options: KeyvInputOptions): void {
  const given = [options.url, options.adapter, options.keyv].filter((v) => v !== undefined).length;
  if (given !== 1) throw new TypeError('Expected exactly one of `url`, `adapter` or `keyv`');
}

/**
 * The driver's Keyv adapter from `adapter`, or from the store of a `keyv` instance; a
 * TypeError naming the package and how to build one otherwise.
 */
export function adapterFrom<T>(
  options: KeyvInputOptions,
  isAdapter: (value: unknown) => value is T,
  pkg: string,
  construct: string,
): T {
  const candidate = options.adapter ?? (options.keyv as { store?: unknown } | undefined)?.store;
  if (isAdapter(candidate)) return candidate;
  throw new TypeError(
    options.adapter === undefined
      ? `Expected \`keyv\` to be a Keyv instance over a ${pkg} adapter (new Keyv(${construct}))`
      : `Expected \`adapter\` to be a ${pkg} adapter (${construct})`,
  );
}
