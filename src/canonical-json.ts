/**
 * Canonical JSON and the hashes built on it: the text of plain JSON data with object keys in
 * canonical order (key order and whitespace never matter), SHA-256 of it, and `object-hash`
 * for values that are not plain JSON data. Both fingerprint schemes and `idempotent()` hash
 * through these; their output is pinned by tests (records in stores hold it).
 *
 * Plain JSON values are canonicalised in two steps: a walk that checks the value and
 * copies only the objects whose keys are out of canonical order, then a plain
 * `JSON.stringify` of the result, which writes the text natively; a value nested too
 * deeply for that takes an iterative walk that writes the same text. Anything else (Dates,
 * Maps, class instances, shared references, cycles, NaN) goes through `object-hash`.
 *
 * Canonical key order is the order in which JavaScript enumerates an object built by
 * inserting the keys sorted: array-index keys ("0", "7", "10") in numeric order first,
 * then the other keys sorted by UTF-16 code units. It depends on the set of keys only.
 * @module
 */
import * as crypto from 'node:crypto';
import { createHash } from 'node:crypto';
import objectHash from 'object-hash';

type OneShotHash = (algorithm: string, data: string, encoding: 'base64url') => string;
/** `crypto.hash` (Node ≥ 20.12): a one-shot digest without a Hash object, ~3× faster for small inputs. */
const oneShot = (crypto as unknown as { hash?: OneShotHash }).hash;

/** SHA-256 of a string, base64url. */
export const sha256 = (text: string): string =>
  oneShot ? oneShot('sha256', text, 'base64url') : createHash('sha256').update(text).digest('base64url');

/** Thrown by the canonical walk at the first value that is not plain JSON data. */
const NOT_PLAIN: unique symbol = Symbol('not plain JSON data');

function isPlainObject(value: object): value is Record<string, unknown> {
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** Sort in place by UTF-16 code units: an insertion sort for the few keys of most objects (no allocation). */
function sortKeys(keys: string[]): void {
  if (keys.length > 24) {
    keys.sort();
    return;
  }
  for (let i = 1; i < keys.length; i++) {
    const key = keys[i]!;
    let j = i - 1;
    while (j >= 0 && keys[j]! > key) {
      keys[j + 1] = keys[j]!;
      j--;
    }
    keys[j + 1] = key;
  }
}

/** Whether an object's keys (as `Object.keys` lists them) are in canonical order already. */
function inOrder(keys: string[]): boolean {
  for (let i = 1; i < keys.length; i++) if (keys[i - 1]! > keys[i]!) return false;
  return true;
}

/**
 * An empty object to insert canonically ordered keys into. A `__proto__` key (JSON.parse
 * makes it an own property) would set the prototype of `{}`, so then it has none.
 */
function emptyFor(keys: string[]): Record<string, unknown> {
  for (let i = 0; i < keys.length; i++) if (keys[i] === '__proto__') return Object.create(null) as Record<string, unknown>;
  return {};
}

/**
 * `o` itself when its keys already enumerate in canonical order (no copy), else a copy with
 * the keys inserted sorted.
 */
function canonicalObject(o: Record<string, unknown>): Record<string, unknown> {
  const keys = Object.keys(o);
  if (inOrder(keys)) return o;
  sortKeys(keys);
  const copy = emptyFor(keys);
  for (let i = 0; i < keys.length; i++) copy[keys[i]!] = o[keys[i]!];
  return copy;
}

/** Objects up to which a walk keeps in an array: a request body has a handful, and a scan of them is cheaper than a Set. */
const FEW = 32;

/**
 * The objects a checked walk has entered, to find a repeat (a cycle or a shared
 * reference). The first {@link FEW} are scanned in an array, which costs no hash (a Set
 * gives every object it holds an identity hash); past them a Set takes over.
 */
class Visited {
  #few: object[] = [];
  #many: Set<object> | undefined;

  /** Notes `value`; throws NOT_PLAIN when it was noted before. */
  visit(value: object): void {
    const many = this.#many;
    if (many !== undefined) {
      if (many.has(value)) throw NOT_PLAIN;
      many.add(value);
      return;
    }
    const few = this.#few;
    for (let i = 0; i < few.length; i++) if (few[i] === value) throw NOT_PLAIN;
    if (few.length < FEW) few.push(value);
    else (this.#many = new Set(few)).add(value);
  }
}

/**
 * What `JSON.stringify` turns into the canonical text: `value` where it is canonical
 * already, else a copy of the objects (and the arrays holding them) whose keys were out of
 * order. Throws NOT_PLAIN at the first value that is not plain JSON data; `seen` (values
 * from code) makes a repeated object (a cycle or a shared reference) one of those. Values
 * from JSON.parse are plain by construction, and are never shared: they pass no `seen`.
 */
function canonicalCopy(value: unknown, seen: Visited | undefined): unknown {
  switch (typeof value) {
    case 'string':
    case 'boolean':
    case 'undefined': // dropped from objects, null in arrays: as JSON does
      return value;
    case 'number':
      // A number too large for a double parses to Infinity, which JSON would write as null.
      if (Number.isFinite(value)) return value;
      throw NOT_PLAIN;
    case 'object':
      break;
    default: // functions, symbols, bigints
      throw NOT_PLAIN;
  }
  if (value === null) return null;
  if (seen) seen.visit(value);
  if (Array.isArray(value)) {
    let copy: unknown[] | undefined;
    // An own toJSON would make JSON.stringify write something else: its elements count.
    if (seen && typeof (value as { toJSON?: unknown }).toJSON === 'function') copy = Array.from(value);
    for (let i = 0; i < value.length; i++) {
      const element: unknown = value[i];
      const canonical = canonicalCopy(element, seen);
      if (canonical !== element) (copy ??= value.slice())[i] = canonical;
    }
    return copy ?? value;
  }
  const o = value as Record<string, unknown>;
  if (seen && (!isPlainObject(o) || typeof o.toJSON === 'function')) throw NOT_PLAIN;
  const keys = Object.keys(o);
  if (inOrder(keys)) {
    let copy: Record<string, unknown> | undefined;
    for (let i = 0; i < keys.length; i++) {
      const member = o[keys[i]!];
      const canonical = canonicalCopy(member, seen);
      if (canonical === member) continue;
      if (copy === undefined) {
        copy = emptyFor(keys);
        for (let j = 0; j < keys.length; j++) copy[keys[j]!] = o[keys[j]!];
      }
      copy[keys[i]!] = canonical;
    }
    return copy ?? o;
  }
  sortKeys(keys);
  const copy = emptyFor(keys);
  for (let i = 0; i < keys.length; i++) copy[keys[i]!] = canonicalCopy(o[keys[i]!], seen);
  return copy;
}

/** The canonical order of an object's keys (see the module comment). */
function canonicalKeys(o: Record<string, unknown>): string[] {
  return Object.keys(canonicalObject(o));
}

class Literal {
  constructor(readonly text: string) {}
}

/**
 * The same text as the canonical walk and `JSON.stringify`, by an explicit stack: for
 * values nested deeper than either can recurse.
 */
function canonicalJsonIterative(value: unknown): string | undefined {
  const out: string[] = [];
  const stack: unknown[] = [value];
  const seen = new Set<object>();
  while (stack.length > 0) {
    const v = stack.pop();
    if (v instanceof Literal) {
      out.push(v.text);
      continue;
    }
    if (v === null) {
      out.push('null');
      continue;
    }
    switch (typeof v) {
      case 'string':
        out.push(JSON.stringify(v));
        break;
      case 'number':
        if (!Number.isFinite(v)) return undefined;
        out.push(JSON.stringify(v));
        break;
      case 'boolean':
        out.push(v ? 'true' : 'false');
        break;
      case 'object': {
        if (seen.has(v)) return undefined;
        seen.add(v);
        if (Array.isArray(v)) {
          out.push('[');
          stack.push(new Literal(']'));
          for (let i = v.length - 1; i >= 0; i--) {
            stack.push(v[i] === undefined ? null : v[i]);
            if (i > 0) stack.push(new Literal(','));
          }
        } else if (isPlainObject(v) && typeof v.toJSON !== 'function') {
          const keys = canonicalKeys(v).filter((k) => v[k] !== undefined);
          out.push('{');
          stack.push(new Literal('}'));
          for (let i = keys.length - 1; i >= 0; i--) {
            const k = keys[i]!;
            stack.push(v[k]);
            stack.push(new Literal(`${i > 0 ? ',' : ''}${JSON.stringify(k)}:`));
          }
        } else return undefined;
        break;
      }
      default:
        return undefined;
    }
  }
  return out.join('');
}

/**
 * The canonical text of `value`, or `undefined` when it is not plain JSON data. `checked`:
 * a value from code (checked for prototypes, toJSON and repeats), else from JSON.parse.
 */
export function canonicalJsonOf(value: unknown, checked: boolean): string | undefined {
  try {
    return JSON.stringify(canonicalCopy(value, checked ? new Visited() : undefined));
  } catch (error) {
    if (error === NOT_PLAIN) return undefined;
    // Nested deeper than the native recursion goes: same text, by the explicit stack.
    if (error instanceof RangeError) return canonicalJsonIterative(value);
    throw error;
  }
}

/**
 * A canonical JSON text for plain JSON data (keys in canonical order, `undefined` members
 * dropped as JSON does), or `undefined` when the value is not plain JSON data.
 */
export function canonicalJson(value: unknown): string | undefined {
  if (value === undefined) return undefined;
  return canonicalJsonOf(value, true);
}

/** Canonical text of a JSON document's text, or undefined when it is not JSON. */
export function canonicalJsonText(text: string): string | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return undefined;
  }
  return canonicalJsonOf(parsed, false);
}

/** Hash any value canonically: plain JSON by the fast path, the rest by object-hash. */
export function hashValue(value: unknown): string {
  const canonical = canonicalJson(value);
  if (canonical !== undefined) return sha256(`j${canonical}`);
  return objectHashValue(value);
}

export function objectHashValue(value: unknown): string {
  return sha256(`o${objectHash(value as object, { algorithm: 'sha256', unorderedObjects: true })}`);
}

/**
 * `objectHashValue`, or for a value object-hash refuses (a type it does not know): an
 * iterable one (URLSearchParams, a Headers) by its class and its entries in order; anything
 * else is a TypeError that names the type (no hash of it would tell two values apart).
 */
export function anyValueHash(value: unknown): string {
  try {
    return objectHashValue(value);
  } catch (error) {
    const tag = Object.prototype.toString.call(value);
    if (typeof value === 'object' && value !== null && typeof (value as Iterable<unknown>)[Symbol.iterator] === 'function') {
      return sha256(`i${tag}${anyValueHash(Array.from(value as Iterable<unknown>))}`);
    }
    throw new TypeError(`Cannot fingerprint a request body of type ${tag}: give the layer the raw body, or a \`fingerprint\` function that returns plain data`, { cause: error });
  }
}
