/**
 * Opt-in compression of stored responses (`compress`, docs/semantics.md#compression):
 * bodies of at least `minBytes` are stored compressed, before they are sealed (compressed
 * ciphertext would not shrink). The stored form is a response whose status is 1 (never an
 * HTTP status) and whose body is `IKz2`, the algorithm's letter, then the compressed
 * response in the compact form of response-bytes.ts (`IKz1`, from builds before the
 * compact form, holds the plain form and is still read). A record that fails to inflate is unreadable and fails closed,
 * as a record that fails to open. Records are read whatever `compress` says now.
 * @module
 */
import * as zlib from 'node:zlib';
import { RecordUnreadableError } from './errors.js';
import { decodeCompact, decodePlain, encodeCompact } from './response-bytes.js';
import type { StoredResponse } from './store.js';
import { assertInteger, assertOneOf } from './validate.js';

export interface CompressOptions {
  /**
   * Bodies shorter than this, in bytes, are stored as they are.
   * @default 1024
   */
  minBytes?: number;
  /**
   * `brotli` (at quality 5: about 8 % smaller than gzip on JSON, at about twice gzip's CPU
   * for a 1 KiB body) and `gzip` everywhere; `zstd` where the runtime's `node:zlib` has it
   * (Node 22.15 and later).
   * @default 'brotli'
   */
  algorithm?: 'gzip' | 'brotli' | 'zstd';
}

export const COMPRESSED_STATUS = 1;
const MAGIC = Buffer.from('IKz2', 'latin1');
/** The version byte of the first form, whose payload was the plain form (encodePlain). */
const PLAIN_VERSION = 0x31;
const HEAD_BYTES = MAGIC.length + 1;

type Algorithm = NonNullable<CompressOptions['algorithm']>;
interface Codec {
  letter: number;
  pack(input: Buffer): Buffer;
  unpack(input: Buffer): Buffer;
}

// zstd arrived in node:zlib with Node 22.15 / 23.8: looked up, never imported by name.
const zstd = zlib as unknown as { zstdCompressSync?: (input: Buffer) => Buffer; zstdDecompressSync?: (input: Buffer) => Buffer };

const CODECS: Record<Algorithm, Codec | undefined> = {
  gzip: { letter: 0x67, pack: (input) => zlib.gzipSync(input), unpack: (input) => zlib.gunzipSync(input) },
  brotli: {
    letter: 0x62,
    pack: (input) =>
      zlib.brotliCompressSync(input, {
        params: { [zlib.constants.BROTLI_PARAM_QUALITY]: 5, [zlib.constants.BROTLI_PARAM_SIZE_HINT]: input.length },
      }),
    unpack: (input) => zlib.brotliDecompressSync(input),
  },
  zstd:
    typeof zstd.zstdCompressSync === 'function' && typeof zstd.zstdDecompressSync === 'function'
      ? { letter: 0x7a, pack: (input) => zstd.zstdCompressSync!(input), unpack: (input) => zstd.zstdDecompressSync!(input) }
      : undefined,
};
const byLetter = new Map<number, Codec>();
for (const codec of Object.values(CODECS)) if (codec) byLetter.set(codec.letter, codec);

/** The checked `compress` option: compresses responses whose body is large enough. */
export class Compressor {
  constructor(
    readonly minBytes: number,
    readonly algorithm: Algorithm,
    readonly codec: Codec,
  ) {}

  /** `response` compressed, or as it is when its body is short or does not shrink. */
  compress(response: StoredResponse): StoredResponse {
    const body = response.body;
    if (body === null || body.byteLength < this.minBytes) return response;
    const packed = this.codec.pack(encodeCompact(response as StoredResponse & { body: Uint8Array }));
    if (packed.length + HEAD_BYTES >= body.byteLength) return response; // already compressed data
    const out = Buffer.allocUnsafe(HEAD_BYTES + packed.length);
    MAGIC.copy(out, 0);
    out[MAGIC.length] = this.codec.letter;
    packed.copy(out, HEAD_BYTES);
    return { status: COMPRESSED_STATUS, headers: {}, body: new Uint8Array(out.buffer, out.byteOffset, out.byteLength) };
  }
}

/** `true`, or an options object; undefined / false: stored as they are. */
export function resolveCompression(option: boolean | CompressOptions | undefined): Compressor | undefined {
  if (option === undefined || option === false) return undefined;
  if (option !== true && (typeof option !== 'object' || option === null)) {
    throw new TypeError(`Expected \`compress\` to be true, false or an object like { minBytes: 1024 }, got ${String(option)}`);
  }
  const { minBytes = 1024, algorithm = 'brotli' } = option === true ? {} : option;
  assertInteger('compress.minBytes', minBytes, 0);
  assertOneOf('compress.algorithm', algorithm, ['gzip', 'brotli', 'zstd'] as const);
  const codec = CODECS[algorithm];
  if (!codec) throw new TypeError(`Expected \`compress.algorithm\` to be one this runtime's node:zlib has, got 'zstd' (Node ${process.versions.node} has no zstd; use 'gzip' or 'brotli')`);
  return new Compressor(minBytes, algorithm, codec);
}

/** Whether a stored response is a compressed one. */
export function isCompressed(response: StoredResponse): boolean {
  const body = response.body;
  return (
    response.status === COMPRESSED_STATUS &&
    body !== null &&
    body.byteLength > HEAD_BYTES &&
    body[0] === MAGIC[0] &&
    body[1] === MAGIC[1] &&
    body[2] === MAGIC[2] &&
    (body[3] === MAGIC[3] || body[3] === PLAIN_VERSION)
  );
}

/** The response a compressed one holds; a response that is not compressed as it is. Throws RecordUnreadableError when it does not inflate. */
export function inflateResponse(response: StoredResponse): StoredResponse {
  if (!isCompressed(response)) return response;
  const body = response.body!;
  const codec = byLetter.get(body[MAGIC.length]!);
  if (!codec) throw new RecordUnreadableError(undefined, 'malformed', 'it is compressed with an algorithm this runtime does not have');
  try {
    const inflated = codec.unpack(Buffer.from(body.buffer, body.byteOffset + HEAD_BYTES, body.byteLength - HEAD_BYTES));
    return body[3] === PLAIN_VERSION ? decodePlain(inflated) : decodeCompact(inflated);
  } catch {
    throw new RecordUnreadableError(undefined, 'malformed', 'its compressed body does not inflate');
  }
}

/**
 * For a store's own layout: what follows the magic (the algorithm's letter and the
 * compressed bytes) when `response` is a compressed one of the current form, so that the
 * store can keep just that behind a marker of its own; undefined otherwise.
 */
export function compressedPayload(response: StoredResponse): Uint8Array | undefined {
  const body = response.body;
  if (!isCompressed(response) || body![3] !== MAGIC[3]) return undefined;
  for (const _ in response.headers) return undefined;
  return body!.subarray(MAGIC.length);
}

/** Inverse of {@link compressedPayload}: the compressed response whose payload it is. */
export function fromCompressedPayload(payload: Uint8Array): StoredResponse {
  const body = new Uint8Array(MAGIC.length + payload.byteLength);
  body.set(MAGIC, 0);
  body.set(payload, MAGIC.length);
  return { status: COMPRESSED_STATUS, headers: {}, body };
}
