/**
 * The idempotency key: the header's parsing (a bare value is the key as sent; an RFC 9651
 * sf-string names the same key, its parameters ignored; the key is otherwise opaque and
 * case-sensitive), the pattern of the values it accepts, and the storage key, the only
 * form of it a store ever sees.
 * @module
 */
import { KeyInvalidError, type KeyInvalidReason } from './errors.js';
import { sha256 } from './fingerprint.js';

/**
 * The entry point a key belongs to, when it is not an HTTP request: `'function'` for
 * `idempotent()`, `'webhook:<provider>'` for webhook deliveries, `'message:<source>'` for
 * message handlers. Each is a key space of its own that no HTTP key, principal or scope can
 * spell: see {@link storageKey}.
 */
export type KeySpace = `function` | `webhook:${string}` | `message:${string}`;

/**
 * The store sees a hash of (scope, key), never the client's text. HTTP keys hash the pair
 * `[scope, key]`; every other entry point hashes the triple `[space, scope, key]`. The JSON
 * of a pair is never the JSON of a triple, whatever the strings in them, so a client's key
 * and principal can never name a webhook delivery's, a message handler's or an
 * `idempotent()` caller's record, nor those entry points each other's.
 */
export function storageKey(scope: string | undefined, key: string, space?: KeySpace): string {
  return sha256(JSON.stringify(space === undefined ? [scope ?? null, key] : [space, scope ?? null, key]));
}

/** The last scope given to {@link scopePartition} and its partition (none yet: `lastPartition` empty). */
let lastScope: string | undefined;
let lastPartition = '';

/**
 * The store's view of a scope (ClaimContext.partition): a hash, never the scope's text.
 * The last one is kept: a shared scope, or one principal's requests in a row, hash once.
 */
export function scopePartition(scope: string | undefined): string {
  if (scope === lastScope && lastPartition !== '') return lastPartition;
  const partition = sha256(JSON.stringify(['partition', scope ?? null]));
  lastScope = scope;
  lastPartition = partition;
  return partition;
}

export type KeyParseResult = { key: string } | { key: undefined; error: KeyInvalidError | undefined };

const messages: Record<KeyInvalidReason, string> = {
  empty: 'The idempotency key is empty.',
  'too-long': 'The idempotency key is longer than the server accepts.',
  'non-printable': 'The idempotency key contains a control character.',
  'non-ascii': 'The idempotency key contains a non-ASCII character.',
  'malformed-quoting': 'The idempotency key is not a valid token or quoted string.',
  'several-values': 'The request carries more than one idempotency key.',
};

const invalid = (reason: KeyInvalidReason): KeyParseResult => ({
  key: undefined,
  error: new KeyInvalidError(reason, messages[reason]),
});

function charProblem(code: number): KeyInvalidReason | undefined {
  if (code < 0x20 || code === 0x7f) return 'non-printable';
  if (code > 0x7e) return 'non-ascii';
  return undefined;
}

/**
 * The text after an sf-string's closing quote: empty, or a parameter list (`;v=1;w="a,b"`),
 * printable ASCII, with no second list member. Quoted parameter values may hold commas.
 */
function paramsTail(rest: string): KeyInvalidReason | undefined {
  if (rest === '') return undefined;
  let quoted = false;
  for (let i = 0; i < rest.length; i++) {
    const code = rest.charCodeAt(i);
    const problem = charProblem(code);
    if (problem) return problem;
    if (quoted) {
      if (code === 0x5c) {
        // An escape takes the next character, which must be printable ASCII too.
        const next = rest.charCodeAt(++i);
        if (Number.isNaN(next)) return 'malformed-quoting';
        const escaped = charProblem(next);
        if (escaped) return escaped;
      } else if (code === 0x22) quoted = false;
    } else if (code === 0x22) quoted = true;
    else if (code === 0x2c) return 'several-values';
  }
  return quoted || !rest.startsWith(';') ? 'malformed-quoting' : undefined;
}

/**
 * Parse the header value(s). `undefined` means the header is absent (the caller decides
 * whether that is an error). Several header lines arrive as an array.
 *
 * A value that opens with a quote is an RFC 9651 sf-string: its unescaped text is the key,
 * and parameters after it are ignored. Any other value is the key exactly as sent, `;`
 * and all: reading it as a token with parameters would make `order-7;a` and `order-7;b`
 * one key, and the second operation would get the first one's response. A bare value may
 * not hold `"`, `\` (quoting that is not an sf-string) or `,` (a list of keys).
 */
export function parseIdempotencyKey(value: string | readonly string[] | undefined, maxKeyLength: number): KeyParseResult {
  if (value === undefined) return { key: undefined, error: undefined };
  if (typeof value !== 'string') {
    if (value.length === 0) return { key: undefined, error: undefined };
    if (value.length > 1) return invalid('several-values');
    value = value[0]!;
  }
  if (value === '') return invalid('empty');
  let key: string;
  if (value.startsWith('"')) {
    let out = '';
    let i = 1;
    for (; i < value.length; i++) {
      const c = value[i]!;
      const problem = charProblem(c.charCodeAt(0));
      if (problem) return invalid(problem);
      if (c === '\\') {
        const next = value[i + 1];
        if (next !== '"' && next !== '\\') return invalid('malformed-quoting');
        out += next;
        i++;
      } else if (c === '"') break;
      else out += c;
    }
    if (i >= value.length) return invalid('malformed-quoting');
    const tail = paramsTail(value.slice(i + 1));
    if (tail) return invalid(tail);
    key = out;
  } else {
    let several = false;
    let quoting = false;
    for (let i = 0; i < value.length; i++) {
      const code = value.charCodeAt(i);
      const problem = charProblem(code);
      if (problem) return invalid(problem);
      if (code === 0x2c) several = true;
      else if (code === 0x22 || code === 0x5c) quoting = true;
    }
    if (several) return invalid('several-values');
    if (quoting) return invalid('malformed-quoting');
    key = value;
  }
  if (key === '') return invalid('empty');
  if (key.length > maxKeyLength) return invalid('too-long');
  return { key };
}

const BARE_EDGE = '\\x21\\x23-\\x2b\\x2d-\\x5b\\x5d-\\x7e';
const QUOTED_CHAR = '\\x20\\x21\\x23-\\x5b\\x5d-\\x7e';
const PARAM_CHAR = '\\x20\\x21\\x23-\\x2b\\x2d-\\x7e';

/**
 * The header values {@link parseIdempotencyKey} accepts, as an ECMA-262 regular expression
 * (what an OpenAPI `pattern` is): a bare key of 1 to `maxKeyLength` printable ASCII
 * characters without `"`, `\` or `,` (and no space at either end, where HTTP would trim
 * it), or an sf-string of 1 to `maxKeyLength` characters after unescaping, with optional
 * parameters.
 */
export function keyHeaderPattern(maxKeyLength: number): string {
  const bare = maxKeyLength < 2 ? `[${BARE_EDGE}]` : `[${BARE_EDGE}](?:[\\x20${BARE_EDGE}]{0,${maxKeyLength - 2}}[${BARE_EDGE}])?`;
  const quoted = `"(?:[${QUOTED_CHAR}]|\\\\["\\\\]){1,${maxKeyLength}}"`;
  const params = `(?:;(?:[${PARAM_CHAR}]|"(?:[${QUOTED_CHAR}]|\\\\[\\x20-\\x7e])*")*)?`;
  return `^(?:${bare}|${quoted}${params})$`;
}

/**
 * A key given as a value rather than a header (a GraphQL argument), taken as it is: no
 * quoting or parameters, the header's other rules (not empty, at most `maxKeyLength`
 * characters, printable ASCII).
 */
export function checkKey(key: string, maxKeyLength: number): KeyParseResult {
  if (key === '') return invalid('empty');
  for (let i = 0; i < key.length; i++) {
    const problem = charProblem(key.charCodeAt(i));
    if (problem) return invalid(problem);
  }
  if (key.length > maxKeyLength) return invalid('too-long');
  return { key };
}
