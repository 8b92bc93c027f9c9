/**
 * A small Node `http` bridge for fetch-style handlers, as a platform (Next.js, Remix,
 * SvelteKit's Node adapter) runs them: the request's body is a web stream of the socket,
 * its `signal` aborts when the client leaves before the answer is complete, and the
 * response body is written as it is read (a client that leaves cancels it).
 */
import http from 'node:http';
import { Readable } from 'node:stream';

export type FetchLike = (request: Request) => Response | Promise<Response>;

function toRequest(req: http.IncomingMessage, signal: AbortSignal): Request {
  const headers = new Headers();
  for (let i = 0; i < req.rawHeaders.length; i += 2) headers.append(req.rawHeaders[i]!, req.rawHeaders[i + 1]!);
  const method = req.method ?? 'GET';
  const body = method === 'GET' || method === 'HEAD' ? undefined : (Readable.toWeb(req) as ReadableStream<Uint8Array>);
  return new Request(`http://${req.headers.host ?? '127.0.0.1'}${req.url ?? '/'}`, {
    method,
    headers,
    body,
    signal,
    ...(body ? { duplex: 'half' } : {}),
  } as RequestInit);
}

async function write(res: http.ServerResponse, response: Response): Promise<void> {
  res.statusCode = response.status;
  response.headers.forEach((value, name) => {
    if (name !== 'set-cookie') res.setHeader(name, value);
  });
  const cookies = response.headers.getSetCookie();
  if (cookies.length > 0) res.setHeader('set-cookie', cookies);
  if (response.body === null) {
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
