/**
 * The forms in which adapters hand a request body to the fingerprint: raw bytes (one
 * buffer, or the chunks as they arrived), a JSON body parsed once for the fingerprint and
 * the handler, a value a framework's parser made, or the parts an upload middleware left
 * on the request. Internal: adapters build these, the fingerprint schemes read them.
 * @module
 */

/** A content type's media type, lower-case, without parameters; of a repeated header, the first. */
export function mediaType(contentType: string | readonly string[] | undefined): string {
  const value = Array.isArray(contentType) ? contentType[0] : contentType;
  if (typeof value !== 'string') return '';
  // The header as most clients send it: nothing to cut, trim or lower.
  if (value === 'application/json') return value;
  const semicolon = value.indexOf(';');
  return (semicolon === -1 ? value : value.slice(0, semicolon)).trim().toLowerCase();
}

/** Whether a content type is JSON (`application/json` or `…+json`); of a repeated header, the first. */
export function isJsonType(contentType: string | readonly string[] | undefined): boolean {
  const type = mediaType(contentType);
  return type === 'application/json' || type.endsWith('+json');
}

const PARSED_JSON: unique symbol = Symbol.for('idempotency-kit.parsed-json-body') as never;

/**
 * A JSON body parsed already (by the adapter, to hand the value to the handler, or by a
 * body parser that kept the text it parsed): the fingerprint uses the value instead of
 * parsing the same bytes again. Same digest as the bytes would give: bytes that are not
 * UTF-8 count by themselves, and a number a double rounds counts by its text, as they would.
 */
export class ParsedJsonBody {
  /** Recognised by this brand, not `instanceof`: the CommonJS and ESM builds each have a copy of this class. */
  readonly [PARSED_JSON] = true;
  /**
   * @param value what `JSON.parse` made of the body
   * @param bytes the body: its bytes, or the text a parser decoded them to
   * @param checked the value comes from code other than ours (a framework's parser, and
   *   whatever ran after it): it is checked to be plain JSON data, and counts by `bytes` if not
   * @param text `bytes` decoded as UTF-8, when the adapter decoded them already (to parse)
   */
  constructor(
    readonly value: unknown,
    readonly bytes: Uint8Array | string,
    readonly checked = false,
    readonly text?: string,
  ) {}
}

export function isParsedJsonBody(body: object): body is ParsedJsonBody {
  return (body as { [PARSED_JSON]?: unknown })[PARSED_JSON] === true;
}

const RAW_BODY: unique symbol = Symbol.for('idempotency-kit.raw-body') as never;

/**
 * A body's bytes as they arrived, in chunks: a large upload is fingerprinted and handed on
 * chunk by chunk, never copied into one buffer unless something asks for `bytes()`.
 */
export class RawBody {
  readonly [RAW_BODY] = true;
  #whole: Uint8Array | undefined;
  #chunks: readonly Uint8Array[];

  constructor(
    chunks: readonly Uint8Array[],
    readonly byteLength: number,
  ) {
    this.#chunks = chunks;
    if (chunks.length === 1) this.#whole = chunks[0];
  }

  /** The chunks as they came; once joined by `bytes()`, the one buffer (the chunks are let go). */
  get chunks(): readonly Uint8Array[] {
    return this.#chunks;
  }

  /** The whole body in one buffer (made on first use when it came in several chunks). */
  bytes(): Uint8Array {
    if (this.#whole === undefined) {
      // Its own memory (not a slice of the pool): a web adapter lends its ArrayBuffer on.
      const out = Buffer.allocUnsafeSlow(this.byteLength);
      let offset = 0;
      for (const chunk of this.chunks) {
        out.set(chunk, offset);
        offset += chunk.byteLength;
      }
      this.#whole = out;
      this.#chunks = [out];
    }
    return this.#whole;
  }
}

export function isRawBody(body: object): body is RawBody {
  return (body as { [RAW_BODY]?: unknown })[RAW_BODY] === true;
}

/** A file an upload middleware left on the request, its content already hashed. */
export interface UploadedFile {
  /** The form field's name. */
  name: string;
  filename: string | null;
  type: string | null;
  /** SHA-256 of the content, base64url. */
  sha256: string;
}

const UPLOAD_BODY: unique symbol = Symbol.for('idempotency-kit.upload-body') as never;

/**
 * A multipart body an upload middleware (multer, formidable, @fastify/multipart, a
 * FormData) parsed before the layer: its text fields as the middleware left them, and its
 * files in order, hashed.
 */
export class UploadBody {
  readonly [UPLOAD_BODY] = true;
  constructor(
    /** The text fields: as the middleware parsed them (an object), or as ordered pairs (`URLSearchParams`). */
    readonly fields: unknown,
    readonly files: readonly UploadedFile[],
  ) {}
}

export function isUploadBody(body: object): body is UploadBody {
  return (body as { [UPLOAD_BODY]?: unknown })[UPLOAD_BODY] === true;
}
