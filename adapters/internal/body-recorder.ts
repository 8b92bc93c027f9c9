/**
 * The response body as a record keeps it, for every adapter (Node streams and web
 * streams alike): at most `maxResponseBytes`, then only counted, and stored without a body.
 * Web standards only, so the fetch and Hono adapters can use it on Bun and Deno.
 * @module
 */

/** Join chunks into one array (the chunk itself when there is one). */
export function concatBytes(chunks: readonly Uint8Array[], size: number): Uint8Array {
  if (chunks.length === 1) return chunks[0]!;
  const out = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    out.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return out;
}

export class BodyRecorder {
  #chunks: Uint8Array[] = [];
  #size = 0;
  #overflow = false;
  constructor(private readonly limit: number) {}

  /** Keep a chunk; `copy` when the caller may reuse its buffer after writing it. */
  add(chunk: Uint8Array, copy = false): void {
    if (this.#overflow) return;
    this.#size += chunk.byteLength;
    if (this.#size > this.limit) {
      this.#overflow = true;
      this.#chunks = [];
      return;
    }
    // `new Uint8Array(view)` copies; `Buffer#slice` would not.
    this.#chunks.push(copy ? new Uint8Array(chunk) : chunk);
  }

  /** Whether the body went over the limit (it will be stored without a body). */
  get overflow(): boolean {
    return this.#overflow;
  }

  /** The whole body, or `null` when it was over the limit. */
  bytes(): Uint8Array | null {
    return this.#overflow ? null : concatBytes(this.#chunks, this.#size);
  }
}
