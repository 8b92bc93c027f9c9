/**
 * Faithful result encoding for `idempotent()`: JSON values plus `undefined`,
 * `Date`, `Buffer` / `Uint8Array`, `Map`, `Set`, `bigint` and non-finite numbers come
 * back as they went in. Anything else (functions, symbols, class instances, cycles) is
 * refused with a ResultNotStorableError naming where it was found.
 * @module
 */
import { ResultNotStorableError } from './errors.js';

// A tag key no plain JSON producer emits; objects that carry it anyway are escaped.
const TAG = '\u0000t';

type Encoded = null | boolean | number | string | Encoded[] | { [key: string]: Encoded };

// `out[k] = v` with k === '__proto__' would replace the prototype instead of storing a
// member (JSON.parse creates such members as own properties, so results can carry them).
function setOwn(target: Record<string, unknown>, key: string, value: unknown): void {
  if (key === '__proto__') Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
  else target[key] = value;
}

function encode(value: unknown, path: string, stack: Set<object>): Encoded {
  if (value === null || typeof value === 'boolean' || typeof value === 'string') return value;
  if (value === undefined) return { [TAG]: 'u' };
  if (typeof value === 'number') {
    if (Number.isFinite(value) && !Object.is(value, -0)) return value;
    return { [TAG]: 'n', v: Object.is(value, -0) ? '-0' : String(value) };
  }
  if (typeof value === 'bigint') return { [TAG]: 'b', v: value.toString() };
  if (typeof value !== 'object') {
    throw new ResultNotStorableError(`Cannot store a ${typeof value} at ${path}`);
  }
  if (stack.has(value)) throw new ResultNotStorableError(`Cannot store a circular reference at ${path}`);
  stack.add(value);
  try {
    if (value instanceof Date) return { [TAG]: 'd', v: Number.isNaN(value.getTime()) ? null : value.toISOString() };
    if (value instanceof Uint8Array) {
      return { [TAG]: Buffer.isBuffer(value) ? 'B' : 'U', v: Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('base64') };
    }
    // Array.from visits holes (as undefined), which map() would skip and JSON turn into null.
    if (Array.isArray(value)) return Array.from(value, (v, i) => encode(v, `${path}[${i}]`, stack));
    if (value instanceof Map) {
      return { [TAG]: 'm', v: [...value].map(([k, v], i) => [encode(k, `${path}<key ${i}>`, stack), encode(v, `${path}<value ${i}>`, stack)]) };
    }
    if (value instanceof Set) return { [TAG]: 's', v: [...value].map((v, i) => encode(v, `${path}<${i}>`, stack)) };
    const proto = Object.getPrototypeOf(value);
    if (proto !== Object.prototype && proto !== null) {
      const name = (proto?.constructor as { name?: string } | undefined)?.name ?? 'object';
      throw new ResultNotStorableError(`Cannot store an instance of ${name} at ${path}; return plain data`);
    }
    const out: Record<string, Encoded> = {};
    for (const [k, v] of Object.entries(value)) setOwn(out, k, encode(v, `${path}.${k}`, stack));
    return TAG in out ? { [TAG]: 'o', v: out } : out;
  } finally {
    stack.delete(value);
  }
}

function decode(value: Encoded): unknown {
  if (value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map(decode);
  const tag = value[TAG];
  if (tag === undefined) {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) setOwn(out, k, decode(v));
    return out;
  }
  const v = value.v;
  switch (tag) {
    case 'u':
      return undefined;
    case 'n':
      return Number(v);
    case 'b':
      return BigInt(v as string);
    case 'd':
      return new Date(v === null ? Number.NaN : (v as string));
    case 'B':
      return Buffer.from(v as string, 'base64');
    case 'U':
      return new Uint8Array(Buffer.from(v as string, 'base64'));
    case 'm':
      return new Map((v as Encoded[][]).map(([k, x]) => [decode(k!), decode(x!)]));
    case 's':
      return new Set((v as Encoded[]).map(decode));
    case 'o': {
      const out: Record<string, unknown> = {};
      for (const [k, x] of Object.entries(v as Record<string, Encoded>)) setOwn(out, k, decode(x));
      return out;
    }
    default:
      throw new TypeError(`idempotency-kit: unknown stored value tag ${JSON.stringify(tag)}`);
  }
}

/** Encode a value to bytes; throws ResultNotStorableError for what cannot round-trip. */
export function serializeResult(value: unknown): Uint8Array {
  let encoded: Encoded;
  try {
    encoded = encode(value, 'result', new Set());
  } catch (error) {
    if (error instanceof RangeError) throw new ResultNotStorableError('Cannot store a result nested this deeply');
    throw error;
  }
  return new Uint8Array(Buffer.from(JSON.stringify(encoded)));
}

export function deserializeResult(bytes: Uint8Array): unknown {
  return decode(JSON.parse(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8')) as Encoded);
}
