/**
 * A TCP proxy in front of a test server that loses answers on purpose, per request:
 *   pass   forward the request and the response
 *   drop   forward the request, read the server's whole response, then reset the client's
 *          connection without sending a byte of it (the server ran; the client never knows)
 *   reset  reset the client's connection as the request arrives (the server never sees it)
 *   cut    send the head and half of the response body, then reset (the answer breaks off)
 * The plan is scripted (a list) or seeded random, by request number (0, 1, 2, ...) in the
 * order requests reach the proxy. It reads just enough HTTP/1.1 to tell where a response
 * ends (Content-Length or chunked); clients do not pipeline, so a connection carries one
 * request at a time.
 */
import net from 'node:net';
import { seededRandom } from './random.js';

export type Action = 'pass' | 'drop' | 'reset' | 'cut';

export interface FaultyProxy {
  url: string;
  /** What was done to each request so far, in arrival order. */
  readonly log: Action[];
  close(): Promise<void>;
}

/** Fixed actions for requests 0, 1, 2, ...; every later request passes. */
export const scripted =
  (actions: Action[]) =>
  (index: number): Action =>
    actions[index] ?? 'pass';

export { seededRandom } from './random.js';

/** Each request is dropped with probability `drop`, reset with `reset`, else passed. */
export function seeded(seed: number, odds: { drop: number; reset: number }): (index: number) => Action {
  const random = seededRandom(seed);
  return () => {
    const r = random();
    return r < odds.drop ? 'drop' : r < odds.drop + odds.reset ? 'reset' : 'pass';
  };
}

/** Length of a complete HTTP/1.1 response at the start of `data`, or undefined if it is not all there yet. */
function completeResponseLength(data: Buffer): number | undefined {
  const headEnd = data.indexOf('\r\n\r\n');
  if (headEnd === -1) return undefined;
  const head = data.subarray(0, headEnd).toString('latin1');
  const bodyStart = headEnd + 4;
  const status = Number(head.slice(9, 12));
  if (status === 204 || status === 304 || (status >= 100 && status < 200)) return bodyStart;
  const length = /\r\ncontent-length:\s*(\d+)/i.exec(head);
  if (length) {
    const end = bodyStart + Number(length[1]);
    return data.length >= end ? end : undefined;
  }
  if (/\r\ntransfer-encoding:[^\r]*chunked/i.test(head)) {
    let pos = bodyStart;
    for (;;) {
      const lineEnd = data.indexOf('\r\n', pos);
      if (lineEnd === -1) return undefined;
      const size = parseInt(data.subarray(pos, lineEnd).toString('latin1'), 16);
      if (size === 0) {
        // No trailers from our servers: the last chunk is followed by an empty line.
        return data.length >= lineEnd + 4 ? lineEnd + 4 : undefined;
      }
      pos = lineEnd + 2 + size + 2;
      if (pos > data.length) return undefined;
    }
  }
  // Neither: the body ends when the server closes (handled by the caller).
  return undefined;
}

/** `target` may list several servers: connections go to them in turn (several processes on one store). */
export async function startFaultyProxy(target: string | string[], plan: (index: number) => Action): Promise<FaultyProxy> {
  const targets = (Array.isArray(target) ? target : [target]).map((t) => new URL(t));
  let connections = 0;
  const log: Action[] = [];
  const sockets = new Set<net.Socket>();

  const server = net.createServer((client) => {
    sockets.add(client);
    let upstream: net.Socket | undefined;
    let action: Action | undefined; // the current request's, while it is outstanding
    let pending = Buffer.alloc(0);

    const closeBoth = () => {
      client.destroy();
      upstream?.destroy();
    };
    const reset = () => {
      client.resetAndDestroy();
      upstream?.destroy();
    };

    const { hostname, port } = targets[connections++ % targets.length]!;
    const openUpstream = () => {
      const socket = net.connect(Number(port), hostname);
      sockets.add(socket);
      socket.on('data', (chunk: Buffer) => {
        pending = Buffer.concat([pending, chunk]);
        const length = completeResponseLength(pending);
        if (length === undefined) return;
        const response = pending.subarray(0, length);
        pending = pending.subarray(length);
        const done = action;
        action = undefined;
        if (done === 'drop') reset();
        else if (done === 'cut') {
          const headEnd = response.indexOf('\r\n\r\n') + 4;
          client.write(response.subarray(0, headEnd + Math.floor((response.length - headEnd) / 2)), reset);
        } else client.write(response);
      });
      socket.on('end', () => {
        // A response delimited by the close: pass it whole (or drop it), then close.
        if (pending.length > 0 && action === 'pass') client.end(pending);
        else if (action === 'drop') reset();
        else client.end();
      });
      socket.on('error', closeBoth);
      socket.on('close', () => sockets.delete(socket));
      return socket;
    };

    client.on('data', (chunk: Buffer) => {
      if (action === undefined) {
        // The first bytes of a new request.
        action = plan(log.length);
        log.push(action);
        if (action === 'reset') {
          reset();
          return;
        }
      }
      upstream ??= openUpstream();
      upstream.write(chunk);
    });
    client.on('error', () => upstream?.destroy());
    client.on('close', () => {
      sockets.delete(client);
      upstream?.destroy();
    });
  });

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address() as net.AddressInfo;
  return {
    url: `http://127.0.0.1:${address.port}`,
    log,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
