/**
 * The bounded drain after an early answer, for every adapter that runs on Node's `http`
 * (the Node, Express, Koa and Fastify adapters, and Hono and fetch handlers served by
 * @hono/node-server). Only type imports: the web adapters load it on every runtime.
 * @module
 */
import type { IncomingMessage, ServerResponse } from 'node:http';

/**
 * After an early answer (a 413, or a 400 sent before the body was read), the rest of the
 * request body is still read and thrown away, up to this many bytes, before the connection
 * closes. Closing a socket with unread data makes the kernel send a reset, and a client
 * that is still writing its body (most HTTP clients do not read until they have sent it
 * all) then sees `EPIPE` or `ECONNRESET` instead of the answer. Past this bound, or
 * {@link DRAIN_MAX_MS}, the connection is closed anyway. Documented in docs/semantics.md#body-limits.
 */
export const DRAIN_MAX_BYTES = 16 * 1024 * 1024;
/** The time bound of the drain described at {@link DRAIN_MAX_BYTES}. */
export const DRAIN_MAX_MS = 10_000;

/**
 * Hold back the end of `res` until the rest of `req`'s body has been read and discarded
 * (bounded by {@link DRAIN_MAX_BYTES} and {@link DRAIN_MAX_MS}). Whatever `end` would send
 * is written at once, so the client gets the whole answer while it is still sending; only
 * the close waits. Does nothing when the request body was read to its end already.
 */
export function endAfterDrain(req: IncomingMessage, res: ServerResponse): void {
  if (req.complete || req.readableEnded || req.destroyed) return;
  const originalEnd = res.end;
  let drained = false;
  let endArgs: unknown[] | undefined;
  let timer: NodeJS.Timeout | undefined;
  let bytes = 0;
  const finish = (cut?: boolean) => {
    if (drained) return;
    drained = true;
    if (timer) clearTimeout(timer);
    req.off('data', onData);
    req.off('end', onEnd);
    req.off('close', onEnd);
    req.off('error', onEnd);
    res.end = originalEnd;
    // Cut off past the bound: the connection cannot carry another request.
    if (cut) res.once('finish', () => req.socket?.destroy());
    if (endArgs) (originalEnd as (...a: unknown[]) => ServerResponse).apply(res, endArgs);
  };
  const onEnd = () => finish();
  const onData = (chunk: Buffer) => {
    bytes += chunk.length;
    if (bytes > DRAIN_MAX_BYTES) finish(true);
    // A web stream made of the message (Readable.toWeb, as @hono/node-server's request
    // body is) pauses it whenever its queue is full and nothing reads it any more.
    else if (req.isPaused()) req.resume();
  };
  res.end = function end(this: ServerResponse, ...args: unknown[]) {
    if (drained || endArgs) return (originalEnd as (...a: unknown[]) => ServerResponse).apply(this, args);
    const callback = args.find((a) => typeof a === 'function');
    const chunk = typeof args[0] === 'function' ? undefined : args[0];
    const encoding = typeof args[1] === 'string' ? (args[1] as BufferEncoding) : undefined;
    if (chunk !== undefined && chunk !== null) {
      const bytes = typeof chunk === 'string' ? Buffer.from(chunk, encoding) : (chunk as Uint8Array);
      // `end(body)` would have set the length; with a plain write Node would chunk instead.
      if (!this.headersSent && !this.hasHeader('content-length') && !this.hasHeader('transfer-encoding')) {
        this.setHeader('content-length', bytes.byteLength);
      }
      this.write(bytes);
    } else this.flushHeaders();
    endArgs = callback ? [callback] : [];
    return this;
  } as ServerResponse['end'];
  timer = setTimeout(() => finish(true), DRAIN_MAX_MS);
  timer.unref();
  req.on('data', onData);
  req.once('end', onEnd);
  req.once('close', onEnd);
  req.once('error', onEnd);
  // Whoever read part of the body may have paused it or left it piped into a parser.
  req.unpipe();
  req.resume();
}
