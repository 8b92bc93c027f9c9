/**
 * JSON between the tests (Node) and the harness Worker (workerd): byte arrays travel as
 * `{ "$bytes": base64 }`, errors as `{ error: { name, message } }`. Both sides import it.
 */

export function toWire(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    v instanceof Uint8Array ? { $bytes: Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('base64') } : v,
  );
}

export function fromWire<T = unknown>(text: string): T {
  return JSON.parse(text, (_key, v: unknown) =>
    typeof v === 'object' && v !== null && typeof (v as { $bytes?: unknown }).$bytes === 'string'
      ? new Uint8Array(Buffer.from((v as { $bytes: string }).$bytes, 'base64'))
      : v,
  ) as T;
}

/** What the harness answers for a call: its value, or the error it threw. */
export type Outcome<T = unknown> = { value: T; progress?: number[] } | { error: { name: string; message: string } };
