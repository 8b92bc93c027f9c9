/**
 * `fingerprint: { include: [...] }` and `fingerprint: { exclude: [...] }`: which fields of
 * a JSON or form body count. A path is dotted (`metadata.sent_at`); it walks through
 * arrays (`items.price` is the price of every element of `items`), so it never names an
 * index. In form bodies (urlencoded and multipart) a field's name is read as the path it
 * stands for: `metadata[sent_at]` and `metadata.sent_at` are both `metadata.sent_at`, and a
 * bracketed number or `[]` is an array index (`items[0][sku]`, `tags[]`). The query and
 * `fingerprintHeaders` always count whole.
 * @module
 */
import { describeValue } from './validate.js';

/** The field-level form of the `fingerprint` option. */
export type FingerprintFields = { include: readonly string[]; exclude?: never } | { exclude: readonly string[]; include?: never };

/** A node of the paths' tree: `end` when a path stops here (the whole value below counts, or is left out). */
interface PathNode {
  end: boolean;
  next: Map<string, PathNode>;
}

const newNode = (): PathNode => ({ end: false, next: new Map() });


/** The segments of one option path, or a TypeError that says what is wrong with it. */
function segmentsOf(path: unknown, where: string): string[] {
  if (typeof path !== 'string') throw new TypeError(`Expected \`${where}\` to be a dotted path such as 'metadata.sent_at', got ${describeValue(path)}`);
  if (path === '') throw new TypeError(`Expected \`${where}\` to be a dotted path such as 'metadata.sent_at', got an empty string`);
  if (/[[\]]/.test(path)) {
    throw new TypeError(
      `Expected \`${where}\` to be a dotted path such as 'metadata.sent_at', got ${describeValue(path)}: write form fields' brackets as dots ('metadata[sent_at]' is 'metadata.sent_at'); paths never name an array index`,
    );
  }
  const segments = path.split('.');
  if (segments.some((s) => s === '')) {
    throw new TypeError(`Expected \`${where}\` to be a dotted path such as 'metadata.sent_at', got ${describeValue(path)} (an empty segment: a leading, trailing or double dot)`);
  }
  return segments;
}

/** A compiled `{ include }` or `{ exclude }`: applies the paths to a parsed body or to form field names. */
export class FieldSelection {
  readonly #root: PathNode;

  private constructor(
    readonly mode: 'include' | 'exclude',
    root: PathNode,
    /** The paths as given, for messages and the digest's text. */
    readonly paths: readonly string[],
  ) {
    this.#root = root;
  }

  /**
   * Check and compile the option; a bad one is a TypeError that names the option and the
   * value ("Expected `fingerprint.exclude[1]` to be a dotted path ..., got 'a..b'").
   */
  static from(option: unknown): FieldSelection {
    if (typeof option !== 'object' || option === null || Array.isArray(option)) {
      throw new TypeError(`Expected \`fingerprint\` to be a function or { include: [...paths] } or { exclude: [...paths] }, got ${describeValue(option)}`);
    }
    const keys = Object.keys(option);
    const unknown = keys.filter((k) => k !== 'include' && k !== 'exclude');
    if (unknown.length > 0) {
      throw new TypeError(`Expected \`fingerprint\` to have \`include\` or \`exclude\` (a list of dotted paths), got ${unknown.map((k) => `\`${k}\``).join(', ')}`);
    }
    const { include, exclude } = option as { include?: unknown; exclude?: unknown };
    if (include !== undefined && exclude !== undefined) {
      throw new TypeError('Expected `fingerprint` to have either `include` or `exclude`, not both: list the paths that count, or the paths to leave out');
    }
    const mode = include !== undefined ? 'include' : 'exclude';
    const list = include !== undefined ? include : exclude;
    if (list === undefined) throw new TypeError('Expected `fingerprint` to have `include` or `exclude` (a list of dotted paths), got neither');
    if (!Array.isArray(list)) throw new TypeError(`Expected \`fingerprint.${mode}\` to be an array of dotted paths, got ${describeValue(list)}`);
    if (mode === 'include' && list.length === 0) {
      throw new TypeError('Expected `fingerprint.include` to list at least one path (with none, no field of the body would count)');
    }
    const root = newNode();
    list.forEach((path: unknown, i: number) => {
      let node = root;
      for (const segment of segmentsOf(path, `fingerprint.${mode}[${i}]`)) {
        let child = node.next.get(segment);
        if (!child) node.next.set(segment, (child = newNode()));
        node = child;
      }
      node.end = true;
    });
    return new FieldSelection(mode, root, [...(list as string[])]);
  }

  /** A parsed body (JSON data, or a form parser's object) with only the fields that count; `undefined` when none does. */
  apply(value: unknown): unknown {
    return this.mode === 'exclude' ? excluded(value, this.#root) : included(value, this.#root);
  }

  /** Whether a form field counts, by its name (read as a path: brackets and dots, indices skipped). */
  counts(name: string | null): boolean {
    const segments = name === null ? [] : nameSegments(name);
    let node: PathNode | undefined = this.#root;
    for (const segment of segments) {
      node = node.next.get(segment);
      if (!node) return this.mode === 'exclude';
      if (node.end) return this.mode === 'include';
    }
    // The field's name stops above every path (a field `metadata` when `metadata.sent_at`
    // is listed): it holds no listed field, so it is not one to keep, nor one to leave out.
    return this.mode === 'exclude';
  }
}

function isPlainRecord(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** A copy without the paths below `node`; arrays are walked through, other values kept as they are. */
function excluded(value: unknown, node: PathNode): unknown {
  if (Array.isArray(value)) return value.map((element) => excluded(element, node));
  if (!isPlainRecord(value)) return value;
  const out: Record<string, unknown> = Object.create(null);
  for (const key of Object.keys(value)) {
    const child = node.next.get(key);
    if (child?.end) continue;
    out[key] = child ? excluded(value[key], child) : value[key];
  }
  return out;
}

/** Only the paths below `node` (the whole value where a path ends); `undefined` where nothing is kept. */
function included(value: unknown, node: PathNode): unknown {
  if (node.end) return value;
  if (Array.isArray(value)) return value.map((element) => included(element, node));
  if (!isPlainRecord(value)) return undefined;
  const out: Record<string, unknown> = Object.create(null);
  for (const [key, child] of node.next) {
    if (!Object.prototype.hasOwnProperty.call(value, key)) continue;
    const kept = included(value[key], child);
    if (kept !== undefined) out[key] = kept;
  }
  return out;
}

/** A form field's name as path segments: `a[b][0][c]`, `a.b[]` → a, b, c; bracketed numbers and `[]` are indices (skipped). */
export function nameSegments(name: string): string[] {
  const open = name.indexOf('[');
  const head = open === -1 || !name.endsWith(']') ? name : name.slice(0, open);
  const segments = head.split('.');
  if (head === name) return segments;
  for (const inner of name.slice(open + 1, -1).split('][')) {
    if (inner === '' || /^\d+$/.test(inner)) continue;
    segments.push(...inner.split('.'));
  }
  return segments;
}
