/**
 * Option checks shared by the core, the drivers and the adapters: a bad option is a
 * precise TypeError at creation, never a surprise at request time.
 * @module
 */

const show = (value: unknown): string =>
  typeof value === 'string' ? JSON.stringify(value) : typeof value === 'function' ? 'a function' : String(value);

export function assertInteger(name: string, value: unknown, min: number): asserts value is number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min) {
    const what = min === 0 ? 'a non-negative integer' : min === 1 ? 'a positive integer' : `an integer >= ${min}`;
    throw new TypeError(`Expected \`${name}\` to be ${what}, got ${show(value)}`);
  }
}

export function assertFunction(name: string, value: unknown): asserts value is (...args: never[]) => unknown {
  if (typeof value !== 'function') throw new TypeError(`Expected \`${name}\` to be a function, got ${show(value)}`);
}

export function assertOneOf<T extends string>(name: string, value: unknown, allowed: readonly T[]): asserts value is T {
  if (!allowed.includes(value as T)) {
    throw new TypeError(`Expected \`${name}\` to be one of ${allowed.map((a) => `'${a}'`).join(', ')}, got ${show(value)}`);
  }
}

export function assertStringArray(name: string, value: unknown): asserts value is string[] {
  if (!Array.isArray(value) || value.some((v) => typeof v !== 'string' || v === '')) {
    throw new TypeError(`Expected \`${name}\` to be an array of non-empty strings, got ${show(value)}`);
  }
}
