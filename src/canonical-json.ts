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

/**
 * A JSON number's text written as `JSON.stringify` writes numbers (ECMAScript's
 * Number::toString), from the token's exact decimal digits rather than from the double it
 * parses to: `1.50` and `15e-1` give `1.5`, and `12345678901234567891` stays itself where
 * the double would write `12345678901234567000`. For every token whose value a double holds
 * exactly as written (`1`, `0.1`, `1e2`), this is `JSON.stringify(Number(token))`.
 */
export function numberText(token: string): string {
  const match = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(token);
  if (!match) throw new TypeError(`Not a JSON number: ${token}`);
  const [, sign, int, frac = '', exp = '0'] = match;
  const all = int! + frac;
  let start = 0;
  while (start < all.length && all.charCodeAt(start) === 0x30) start++;
  let end = all.length;
  while (end > start && all.charCodeAt(end - 1) === 0x30) end--;
  const digits = all.slice(start, end);
  if (digits === '') return '0';
  const k = digits.length;
  // The value is 0.<digits> × 10^n; the exponent may be larger than a double holds.
  const n = BigInt(k) + BigInt(exp) - BigInt(frac.length) + BigInt(all.length - end);
  let text: string;
  if (n >= k && n <= 21n) text = digits + '0'.repeat(Number(n) - k);
  else if (n > 0n && n <= 21n) text = `${digits.slice(0, Number(n))}.${digits.slice(Number(n))}`;
  else if (n > -6n && n <= 0n) text = `0.${'0'.repeat(-Number(n))}${digits}`;
  else {
    const e = n - 1n;
    const mantissa = k === 1 ? digits : `${digits[0]}.${digits.slice(1)}`;
    text = `${mantissa}e${e < 0n ? '-' : '+'}${e < 0n ? -e : e}`;
  }
  return sign === '-' ? `-${text}` : text;
}

/** A number token's text is the double's when it has at most 15 digits and no exponent (no double rounds it). */
const FAITHFUL_DIGITS = 15;

/** `[0-9.]`: a character of a number's digits. */
const isDigitOrDot = (c: number): boolean => (c >= 0x30 && c <= 0x39) || c === 0x2e;

/**
 * Whether the text may hold a number a double rounds: one of 16 digits or more (a dot among
 * them), or a negative exponent of 3 digits (below the doubles' full precision). A number of
 * at most 15 digits is a decimal a double holds (and one beyond the doubles' range is
 * refused before this, as a value JSON cannot hold). Strings are looked at too, so this is
 * a superset; the token walk decides.
 *
 * It runs on every JSON body, so it looks at one character in 16 (a run of 16 digits holds
 * one of them, and the run around a digit seen is measured whole), and finds exponents by
 * the runtime's own search for `-`.
 */
function mayRound(text: string): boolean {
  const length = text.length;
  for (let i = 15; i < length; i += 16) {
    if (!isDigitOrDot(text.charCodeAt(i))) continue;
    let start = i;
    while (start > 0 && isDigitOrDot(text.charCodeAt(start - 1))) start--;
    let end = i + 1;
    while (end < length && isDigitOrDot(text.charCodeAt(end))) end++;
    if (end - start >= 16) return true;
    // On to the first sample after this run (the loop adds 16 to the last one inside it).
    i = end - 1 - ((end - 1 - 15) & 15);
  }
  for (let at = text.indexOf('-'); at !== -1; at = text.indexOf('-', at + 1)) {
    const e = text.charCodeAt(at - 1);
    if ((e === 0x65 || e === 0x45) && isDigit(text.charCodeAt(at + 1)) && isDigit(text.charCodeAt(at + 2)) && isDigit(text.charCodeAt(at + 3))) return true;
  }
  return false;
}

const isDigit = (c: number): boolean => c >= 0x30 && c <= 0x39;

/**
 * Whether every number of a JSON text is the number its double writes: then the canonical
 * text of the parsed value tells every two texts apart that mean different numbers. False
 * when one is not (a snowflake id beyond 2^53, `0.10000000000000001`, `1e-400`). The text is
 * valid JSON (it parsed); a byte string read as latin1 scans alike (every byte outside the
 * strings is ASCII).
 */
export function jsonNumbersExact(text: string): boolean {
  // Most texts hold no run of 16 digits and no 3-digit negative exponent anywhere (strings
  // included): no number in them can be one a double rounds, and a look at one character
  // in 8 says so faster than a walk through its tokens.
  if (!mayRound(text)) return true;
  const length = text.length;
  let i = 0;
  while (i < length) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      // A string: to its closing quote, one not escaped by an odd run of backslashes.
      let close = text.indexOf('"', i + 1);
      for (;;) {
        let slashes = 0;
        while (text.charCodeAt(close - 1 - slashes) === 0x5c) slashes++;
        if ((slashes & 1) === 0) break;
        close = text.indexOf('"', close + 1);
      }
      i = close + 1;
    } else if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
      const start = i;
      let digits = 0;
      let plain = true;
      for (; i < length; i++) {
        const d = text.charCodeAt(i);
        if (d >= 0x30 && d <= 0x39) digits++;
        else if (d === 0x65 || d === 0x45) plain = false;
        else if (d !== 0x2e && d !== 0x2d && d !== 0x2b) break;
      }
      if (!plain || digits > FAITHFUL_DIGITS) {
        const token = text.slice(start, i);
        if (numberText(token) !== JSON.stringify(Number(token))) return false;
      }
    } else i++;
  }
  return true;
}

/** A number whose text a double does not hold, as {@link numberText} writes it. */
class ExactNumber {
  constructor(readonly text: string) {}
}

/**
 * A JSON text (one that JSON.parse accepted) read as JSON.parse reads it, except that a
 * number a double would round stays an {@link ExactNumber}.
 */
class ExactReader {
  #i = 0;
  constructor(readonly text: string) {}

  read(): unknown {
    const value = this.#value();
    return value;
  }

  #skip(): void {
    const t = this.text;
    for (;;) {
      const c = t.charCodeAt(this.#i);
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) this.#i++;
      else return;
    }
  }

  #string(): string {
    const t = this.text;
    let close = t.indexOf('"', this.#i + 1);
    for (;;) {
      let slashes = 0;
      while (t.charCodeAt(close - 1 - slashes) === 0x5c) slashes++;
      if ((slashes & 1) === 0) break;
      close = t.indexOf('"', close + 1);
    }
    const s = JSON.parse(t.slice(this.#i, close + 1)) as string;
    this.#i = close + 1;
    return s;
  }

  #value(): unknown {
    this.#skip();
    const t = this.text;
    const c = t.charCodeAt(this.#i);
    if (c === 0x22) return this.#string();
    if (c === 0x7b) {
      this.#i++;
      // No prototype: a `__proto__` member is an own member, as JSON.parse makes it.
      const o: Record<string, unknown> = Object.create(null);
      this.#skip();
      if (t.charCodeAt(this.#i) === 0x7d) {
        this.#i++;
        return o;
      }
      for (;;) {
        this.#skip();
        const name = this.#string();
        this.#skip();
        this.#i++; // ':'
        o[name] = this.#value();
        this.#skip();
        if (t.charCodeAt(this.#i++) === 0x7d) return o; // else ','
      }
    }
    if (c === 0x5b) {
      this.#i++;
      const a: unknown[] = [];
      this.#skip();
      if (t.charCodeAt(this.#i) === 0x5d) {
        this.#i++;
        return a;
      }
      for (;;) {
        a.push(this.#value());
        this.#skip();
        if (t.charCodeAt(this.#i++) === 0x5d) return a; // else ','
      }
    }
    if (c === 0x74) return (this.#i += 4), true;
    if (c === 0x66) return (this.#i += 5), false;
    if (c === 0x6e) return (this.#i += 4), null;
    const match = /-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/y;
    match.lastIndex = this.#i;
    const token = match.exec(t)![0];
    this.#i += token.length;
    const number = Number(token);
    const text = numberText(token);
    return text === JSON.stringify(number) ? number : new ExactNumber(text);
  }
}

/** The canonical text of a value read by {@link ExactReader} (and perhaps filtered): keys in canonical order. */
function writeExact(value: unknown): string {
  if (value instanceof ExactNumber) return value.text;
  if (typeof value !== 'object' || value === null) return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map((v) => (v === undefined ? 'null' : writeExact(v))).join(',')}]`;
  const o = value as Record<string, unknown>;
  const members: string[] = [];
  for (const key of canonicalKeys(o)) if (o[key] !== undefined) members.push(`${JSON.stringify(key)}:${writeExact(o[key])}`);
  return `{${members.join(',')}}`;
}

/**
 * A JSON text parsed with its numbers exact: every number a double would round is kept as
 * its text. Call it for a text {@link jsonNumbersExact} refused; `undefined` when it nests
 * too deeply to read (the caller then counts the bytes).
 */
export function parseJsonExact(text: string): { value: unknown } | undefined {
  try {
    return { value: new ExactReader(text).read() };
  } catch (error) {
    if (error instanceof RangeError) return undefined;
    throw error;
  }
}

/**
 * The canonical text of a value from {@link parseJsonExact} (perhaps filtered): the text
 * {@link canonicalJsonOf} writes, with each rounded number written from its own digits.
 * `undefined` when it nests too deeply to write.
 */
export function canonicalJsonExact(value: unknown): string | undefined {
  try {
    return writeExact(value);
  } catch (error) {
    if (error instanceof RangeError) return undefined;
    throw error;
  }
}
