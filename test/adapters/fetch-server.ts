/**
 * A small Node `http` bridge for fetch-style handlers, as a platform (Next.js, Remix,
 * SvelteKit's Node adapter) runs them: the request's body is a web stream of the socket,
 * its `signal` aborts when the client leaves before the answer is complete, and the
 * response body is written as it is read (a client that leaves cancels it).
 */
import http from 'node:http';

export type FetchLike = (request: Request) => Response | Promise<Response>;

function toRequest(req: http.IncomingMessage, signal: AbortSignal): Request {
  const headers = new Headers();
  for (let i = 0; i < req.rawHeaders.length; i += 2) headers.append(req.rawHeaders[i]!, req.rawHeaders[i + 1]!);
  const method = req.method ?? 'GET';
  const body = method === 'GET' || method === 'HEAD' ? undefined : bodyStream(req);
  return new Request(`http://${req.headers.host ?? '127.0.0.1'}${req.url ?? '/'}`, {
    method,
    headers,
    body,
    signal,
    ...(body ? { duplex: 'half' } : {}),
  } as RequestInit);
}

/**
 * The request body as a web stream. Cancelled (a handler that stops reading, a layer that
 * answers 413), the rest is read and thrown away, as a server does with a body nobody
 * reads: destroying the message would reset the connection under a client still sending.
 */
const discards = new WeakMap<http.IncomingMessage, () => void>();

function bodyStream(req: http.IncomingMessage): ReadableStream<Uint8Array> {
  let open = true;
  discards.set(req, () => (open = false));
  const settle = (fn: () => void) => {
    if (!open) return;
    open = false;
    fn();
  };
  return new ReadableStream<Uint8Array>(
    {
      start(controller) {
        req.on('data', (chunk: Buffer) => {
          if (!open) return;
          controller.enqueue(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength));
          if ((controller.desiredSize ?? 0) <= 0) req.pause();
        });
        req.once('end', () => settle(() => controller.close()));
        req.once('error', (error) => settle(() => controller.error(error)));
      },
      pull() {
        req.resume();
      },
      cancel() {
        open = false;
        req.resume();
      },
    },
    { highWaterMark: 64 * 1024, size: (chunk) => chunk.byteLength },
  );
}

/** The response ends once the request body is read to its end (bounded), so that an early answer reaches a client still sending. */
function requestDrained(req: http.IncomingMessage): Promise<void> {
  if (req.complete || req.destroyed) return Promise.resolve();
  discards.get(req)?.();
  req.resume();
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, 10_000);
    const done = () => {
      clearTimeout(timer);
      resolve();
    };
    req.once('end', done);
    req.once('close', done);
  });
}

async function write(res: http.ServerResponse, response: Response): Promise<void> {
  res.statusCode = response.status;
  response.headers.forEach((value, name) => {
    if (name !== 'set-cookie') res.setHeader(name, value);
  });
  const cookies = response.headers.getSetCookie();
  if (cookies.length > 0) res.setHeader('set-cookie', cookies);
  if (response.body === null) {
    await requestDrained(res.req);
    res.end();
    return;
  }
  const reader = response.body.getReader();
  res.once('close', () => {
    if (!res.writableFinished) reader.cancel().catch(() => undefined);
  });
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    if (res.destroyed) return;
    if (!res.write(value)) {
      await new Promise((resolve) => {
        res.once('drain', resolve);
        res.once('close', resolve);
      });
    }
  }
  await requestDrained(res.req);
  res.end();
}

export function fetchServer(handler: FetchLike): http.Server {
  return http.createServer((req, res) => {
    const controller = new AbortController();
    res.once('close', () => {
      if (!res.writableFinished) controller.abort(new Error('client connection closed'));
    });
    void (async () => {
      let response: Response;
      try {
        response = await handler(toRequest(req, controller.signal));
      } catch (error) {
        if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' }).end(`Internal Server Error: ${String(error)}`);
        return;
      }
      await write(res, response).catch(() => res.destroy());
    })();
  });
}
