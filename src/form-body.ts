/**
 * Form bodies as the fingerprint reads them: `application/x-www-form-urlencoded` (and the
 * query string) as decoded name/value pairs, and `multipart/form-data` as its ordered parts,
 * each one's name, filename, content type and SHA-256 of its content. Strict: anything
 * that does not parse (a bad percent-escape, bytes that are not UTF-8, a multipart body
 * without its boundary, truncated, or with a part header that never ends) is `undefined`,
 * and the fingerprint then counts the raw bytes. Linear in the body's size, whatever the
 * input: the multipart scanner looks for the delimiter with `indexOf` and keeps at most a
 * delimiter's length of one chunk for the next.
 * @module
 */
import { createHash, type Hash } from 'node:crypto';

/** A name/value pair of a form or query, decoded. */
export type FormPair = [name: string, value: string];

const fatalUtf8 = new TextDecoder('utf-8', { fatal: true });

/** UTF-8 text of `bytes`, or `undefined` when they are not valid UTF-8. */
export function strictUtf8(bytes: Uint8Array): string | undefined {
  try {
    return fatalUtf8.decode(bytes);
  } catch {
    return undefined;
  }
}

function decodeComponent(text: string): string | undefined {
  const spaced = text.includes('+') ? text.replaceAll('+', ' ') : text;
  if (!spaced.includes('%')) return spaced;
  try {
    // Throws on a malformed escape and on escapes that are not UTF-8.
    return decodeURIComponent(spaced);
  } catch {
    return undefined;
  }
}

/**
 * The pairs of a urlencoded text (a form body or a query string) in their order, `+` as a
 * space; `undefined` when a percent-escape is malformed or not UTF-8. Empty segments
 * (`a=1&&b=2`) are no pairs; a name without `=` has the value `''`.
 */
export function formPairs(text: string): FormPair[] | undefined {
  const pairs: FormPair[] = [];
  if (text === '') return pairs;
  let start = 0;
  while (start <= text.length) {
    let end = text.indexOf('&', start);
    if (end === -1) end = text.length;
    if (end > start) {
      const eq = text.indexOf('=', start);
      const split = eq === -1 || eq > end ? end : eq;
      const name = decodeComponent(text.slice(start, split));
      const value = split === end ? '' : decodeComponent(text.slice(split + 1, end));
      if (name === undefined || value === undefined) return undefined;
      pairs.push([name, value]);
    }
    start = end + 1;
  }
  return pairs;
}

/** Sort pairs by name (UTF-16 code units), in place; the values of a repeated name keep their order (a stable sort). */
export function sortPairs<T extends { 0: string }>(pairs: T[]): T[] {
  return pairs.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
}

/** One part of a multipart body as the fingerprint counts it. */
export interface MultipartPart {
  name: string | null;
  filename: string | null;
  /** The part's Content-Type, lower-case, without spaces around `;` and `=`; `null` when it has none. */
  type: string | null;
  /** SHA-256 of the content (after its Content-Transfer-Encoding, if any), base64url. */
  sha256: string;
}

/**
 * A parameter of a header value (`name="a b"; filename*=UTF-8''x`) split out: quoted
 * strings unescaped (`\"`), names lower-case. `undefined` for an unterminated quote.
 */
function headerParams(value: string): { first: string; params: Map<string, string> } | undefined {
  const params = new Map<string, string>();
  let i = value.indexOf(';');
  const first = (i === -1 ? value : value.slice(0, i)).trim().toLowerCase();
  while (i !== -1 && i < value.length) {
    i++;
    const eq = value.indexOf('=', i);
    const semi = value.indexOf(';', i);
    if (eq === -1 || (semi !== -1 && semi < eq)) {
      i = semi; // a parameter without a value: ignored
      continue;
    }
    const name = value.slice(i, eq).trim().toLowerCase();
    let j = eq + 1;
    while (value[j] === ' ' || value[j] === '\t') j++;
    let parsed: string;
    if (value[j] === '"') {
      let out = '';
      j++;
      for (;;) {
        if (j >= value.length) return undefined;
        const c = value[j]!;
        if (c === '"') break;
        if (c === '\\' && j + 1 < value.length) {
          out += value[j + 1];
          j += 2;
          continue;
        }
        out += c;
        j++;
      }
      parsed = out;
      i = value.indexOf(';', j + 1);
    } else {
      const end = value.indexOf(';', j);
      parsed = (end === -1 ? value.slice(j) : value.slice(j, end)).trim();
      i = end;
    }
    if (!params.has(name)) params.set(name, parsed);
  }
  return { first, params };
}

/** `filename*=UTF-8''a%20b.pdf` (RFC 8187): the decoded name, or the raw value when it is not of that form. */
function extendedValue(value: string): string {
  const match = /^([\w!#$%&+^`{}~-]+)'[^']*'(.*)$/.exec(value);
  if (!match) return value;
  if (match[1]!.toLowerCase() !== 'utf-8') return match[2]!;
  try {
    return decodeURIComponent(match[2]!);
  } catch {
    return match[2]!;
  }
}

/** The boundary of a multipart content type, or `undefined` when it has none usable (empty, over 200 chars, or with CR/LF). */
export function multipartBoundary(contentType: string): string | undefined {
  const boundary = headerParams(contentType)?.params.get('boundary');
  if (boundary === undefined || boundary.length === 0 || boundary.length > 200 || /[\r\n]/.test(boundary)) return undefined;
  return boundary;
}

/** Largest header block of one part: past it the body is not one we read as multipart. */
const MAX_PART_HEADER_BYTES = 16 * 1024;
const CR = 13;
/** How many content bytes the scanner searches before hashing them (see `#scan`). */
const SCAN_WINDOW = 32 * 1024;
const LF = 10;
const CRLFCRLF = Buffer.from('\r\n\r\n');

type State = 'preamble' | 'delimiter' | 'dash' | 'padding' | 'cr' | 'headers' | 'content' | 'done' | 'failed';

/** The part being read: its headers as parsed, and its content's hash (or encoded bytes to decode at its end). */
interface OpenPart {
  name: string | null;
  filename: string | null;
  type: string | null;
  encoding: 'identity' | 'base64' | 'quoted-printable';
  hash: Hash;
  encoded: Uint8Array[] | undefined;
}

/**
 * A streaming multipart reader: `write` each chunk as it comes, then `end()` gives the
 * parts, or `undefined` when the body is not a well-formed multipart body of this
 * boundary. It copies no content: each part's bytes go to its hash as slices of the
 * chunks. The preamble and the epilogue (bytes before the first delimiter and after the
 * last) are not part of the form, and count for nothing.
 */
export class MultipartScanner {
  readonly #needle: Buffer;
  #state: State = 'preamble';
  /** How many bytes of the needle the previous chunk ended with (held back: maybe a delimiter). */
  #carry: number;
  #headerBytes: Uint8Array[] = [];
  #headerLength = 0;
  /** The last bytes of the header block so far (to find its end across chunks). */
  #headerTail: number[] = [CR, LF];
  #part: OpenPart | undefined;
  readonly #parts: MultipartPart[] = [];

  constructor(boundary: string) {
    this.#needle = Buffer.from(`\r\n--${boundary}`, 'latin1');
    // The first delimiter may open the body without a line break before it: as if there were one.
    this.#carry = 2;
  }

  write(chunk: Uint8Array): void {
    const bytes = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    let pos = 0;
    while (pos < bytes.length) {
      switch (this.#state) {
        case 'preamble':
        case 'content':
          pos = this.#scan(bytes, pos);
          break;
        case 'headers':
          pos = this.#headers(bytes, pos);
          break;
        case 'done':
        case 'failed':
          return;
        default:
          this.#afterDelimiter(bytes[pos]!);
          pos++;
      }
    }
  }

  end(): MultipartPart[] | undefined {
    return this.#state === 'done' ? this.#parts : undefined;
  }

  /** Content (or preamble) up to the next delimiter; returns where to go on. */
  #scan(bytes: Buffer, pos: number): number {
    const needle = this.#needle;
    if (this.#carry > 0) {
      const need = needle.length - this.#carry;
      const n = Math.min(need, bytes.length - pos);
      if (bytes.compare(needle, this.#carry, this.#carry + n, pos, pos + n) === 0) {
        if (n < need) {
          this.#carry += n;
          return bytes.length;
        }
        this.#carry = 0;
        this.#delimiter();
        return pos + n;
      }
      // Not a delimiter after all: the held-back bytes were content. (No later byte of them
      // can start one: the needle has its only CR first, and a boundary has none.)
      this.#content(needle.subarray(0, this.#carry));
      this.#carry = 0;
    }
    // Search a window at a time and hash each window's content right after: the hash then
    // reads bytes the search just brought into the cache (on a large file the search
    // alone is bound by memory, about a sixth of SHA-256's time).
    const reach = needle.length - 1;
    while (bytes.length - pos > SCAN_WINDOW + reach) {
      const at = bytes.subarray(0, pos + SCAN_WINDOW + reach).indexOf(needle, pos);
      if (at !== -1) {
        this.#content(bytes.subarray(pos, at));
        this.#delimiter();
        return at + needle.length;
      }
      this.#content(bytes.subarray(pos, pos + SCAN_WINDOW));
      pos += SCAN_WINDOW;
    }
    const at = bytes.indexOf(needle, pos);
    if (at !== -1) {
      this.#content(bytes.subarray(pos, at));
      this.#delimiter();
      return at + needle.length;
    }
    // Hold back an end of the chunk that could be the start of a delimiter.
    let hold = bytes.length;
    for (let i = Math.max(pos, bytes.length - needle.length + 1); i < bytes.length; i++) {
      if (bytes[i] === CR && bytes.compare(needle, 0, bytes.length - i, i) === 0) {
        hold = i;
        break;
      }
    }
    this.#content(bytes.subarray(pos, hold));
    this.#carry = bytes.length - hold;
    return bytes.length;
  }

  #content(bytes: Uint8Array): void {
    const part = this.#part;
    if (!part || bytes.length === 0) return; // the preamble counts for nothing
    if (part.encoded) part.encoded.push(Buffer.from(bytes)); // decoded at the part's end
    else part.hash.update(bytes);
  }

  #delimiter(): void {
    if (this.#part) this.#closePart();
    this.#state = 'delimiter';
  }

  /** The bytes after a delimiter: `--` closes the body; else optional spaces, then CRLF and the next part's headers. */
  #afterDelimiter(byte: number): void {
    switch (this.#state) {
      case 'delimiter':
        this.#state = byte === 0x2d ? 'dash' : byte === 0x20 || byte === 0x09 ? 'padding' : byte === CR ? 'cr' : 'failed';
        return;
      case 'dash':
        this.#state = byte === 0x2d ? 'done' : 'failed';
        return;
      case 'padding':
        this.#state = byte === 0x20 || byte === 0x09 ? 'padding' : byte === CR ? 'cr' : 'failed';
        return;
      case 'cr':
        if (byte !== LF) {
          this.#state = 'failed';
          return;
        }
        this.#state = 'headers';
        this.#headerBytes = [];
        this.#headerLength = 0;
        this.#headerTail = [CR, LF]; // the delimiter line's end: an empty line next ends the headers at once
        return;
    }
  }

  /** A part's header block, up to the empty line that ends it. */
  #headers(bytes: Buffer, pos: number): number {
    const tail = this.#headerTail;
    let end = -1;
    // The end may span the previous chunk and this one.
    for (let k = 1; k <= 3 && end === -1; k++) {
      if (tail.length < 4 - k || bytes.length - pos < k) continue;
      let match = true;
      for (let i = 0; i < 4 && match; i++) {
        const b = i < 4 - k ? tail[tail.length - (4 - k) + i]! : bytes[pos + i - (4 - k)]!;
        if (b !== CRLFCRLF[i]) match = false;
      }
      if (match) end = pos + k;
    }
    if (end === -1) {
      const at = bytes.indexOf(CRLFCRLF, pos);
      if (at !== -1) end = at + 4;
    }
    const upTo = end === -1 ? bytes.length : end;
    this.#headerLength += upTo - pos;
    if (this.#headerLength > MAX_PART_HEADER_BYTES) {
      this.#state = 'failed';
      return bytes.length;
    }
    this.#headerBytes.push(bytes.subarray(pos, upTo));
    if (end === -1) {
      const seen = [...tail, ...bytes.subarray(Math.max(pos, bytes.length - 3))];
      this.#headerTail = seen.slice(-3);
      return bytes.length;
    }
    const block = Buffer.concat(this.#headerBytes, this.#headerLength);
    // Shorter than CRLFCRLF: the empty line came right after the delimiter line (no headers).
    const text = block.length < 4 ? '' : (strictUtf8(block.subarray(0, block.length - 4)) ?? block.subarray(0, block.length - 4).toString('latin1'));
    if (!this.#openPart(text)) {
      this.#state = 'failed';
      return bytes.length;
    }
    this.#headerBytes = [];
    this.#state = 'content';
    return end;
  }

  /** Start a part from its header block; false when a header is malformed. */
  #openPart(block: string): boolean {
    const headers = new Map<string, string>();
    let last: string | undefined;
    for (const line of block === '' ? [] : block.split('\r\n')) {
      if ((line[0] === ' ' || line[0] === '\t') && last !== undefined) {
        headers.set(last, `${headers.get(last)} ${line.trim()}`); // a folded line continues the previous header
        continue;
      }
      const colon = line.indexOf(':');
      if (colon <= 0) return false;
      last = line.slice(0, colon).trim().toLowerCase();
      if (!headers.has(last)) headers.set(last, line.slice(colon + 1).trim());
    }
    let name: string | null = null;
    let filename: string | null = null;
    const disposition = headers.get('content-disposition');
    if (disposition !== undefined) {
      const parsed = headerParams(disposition);
      if (!parsed) return false;
      name = parsed.params.get('name') ?? null;
      const extended = parsed.params.get('filename*');
      filename = extended !== undefined ? extendedValue(extended) : (parsed.params.get('filename') ?? null);
    }
    const rawType = headers.get('content-type');
    const type = rawType === undefined || rawType === '' ? null : rawType.toLowerCase().replace(/\s*([;=])\s*/g, '$1');
    const transfer = headers.get('content-transfer-encoding')?.toLowerCase();
    const encoding = transfer === 'base64' ? 'base64' : transfer === 'quoted-printable' ? 'quoted-printable' : 'identity';
    this.#part = { name, filename, type, encoding, hash: createHash('sha256'), encoded: encoding === 'identity' ? undefined : [] };
    return true;
  }

  #closePart(): void {
    const part = this.#part!;
    this.#part = undefined;
    if (part.encoded) {
      const encoded = Buffer.concat(part.encoded);
      part.hash.update(part.encoding === 'base64' ? Buffer.from(encoded.toString('latin1'), 'base64') : decodeQuotedPrintable(encoded));
    }
    this.#parts.push({ name: part.name, filename: part.filename, type: part.type, sha256: part.hash.digest('base64url') });
  }
}

const hexValue = (b: number): number => (b >= 0x30 && b <= 0x39 ? b - 0x30 : b >= 0x41 && b <= 0x46 ? b - 0x37 : b >= 0x61 && b <= 0x66 ? b - 0x57 : -1);

/** Quoted-printable (RFC 2045): `=XX` is a byte, `=` at a line's end is a soft line break; anything else as it is. */
function decodeQuotedPrintable(bytes: Buffer): Buffer {
  const out = Buffer.allocUnsafe(bytes.length);
  let n = 0;
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i]!;
    if (b === 0x3d) {
      if (bytes[i + 1] === CR && bytes[i + 2] === LF) {
        i += 2;
        continue;
      }
      const hi = hexValue(bytes[i + 1] ?? -1);
      const lo = hexValue(bytes[i + 2] ?? -1);
      if (hi !== -1 && lo !== -1) {
        out[n++] = hi * 16 + lo;
        i += 2;
        continue;
      }
    }
    out[n++] = b;
  }
  return out.subarray(0, n);
}
