/**
 * Option checks shared by the core, the drivers and the adapters: a bad option is a
 * precise TypeError at creation, never a surprise at request time.
 * @module
 */

/**
 * A value as an error message shows it: a string quoted, a bigint with its `n`, a function,
 * an array or an object by its kind (never its source or `[object Object]`).
 */
export function describeValue(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'function') return 'a function';
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object') return 'an object';
  return String(value);
}

export function assertInteger(name: string, value: unknown, min: number): asserts value is number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min) {
    const what = min === 0 ? 'a non-negative integer' : min === 1 ? 'a positive integer' : `an integer >= ${min}`;
    throw new TypeError(`Expected \`${name}\` to be ${what}, got ${describeValue(value)}`);
  }
}

export function assertFunction(name: string, value: unknown): asserts value is (...args: never[]) => unknown {
  if (typeof value !== 'function') throw new TypeError(`Expected \`${name}\` to be a function, got ${describeValue(value)}`);
}

export function assertOneOf<T extends string>(name: string, value: unknown, allowed: readonly T[]): asserts value is T {
  if (!allowed.includes(value as T)) {
    throw new TypeError(`Expected \`${name}\` to be one of ${allowed.map((a) => `'${a}'`).join(', ')}, got ${describeValue(value)}`);
  }
}

export function assertStringArray(name: string, value: unknown): asserts value is string[] {
  if (!Array.isArray(value) || value.some((v) => typeof v !== 'string' || v === '')) {
    throw new TypeError(`Expected \`${name}\` to be an array of non-empty strings, got ${describeValue(value)}`);
  }
}
