/**
 * The fetch-style benchmark handler, in web standards only (Request, Response, streams),
 * so that the same code runs on @hono/node-server (bench/apps.ts) and on Bun and Deno
 * (bench/runtime-server.ts). Each STYLE reads the request and answers as users write
 * them: `text` (request.text(), new Response(string)), `json` (request.json(),
 * Response.json), `bytes` (request.arrayBuffer(), new Response(bytes)), `stream` (new
 * Response(stream)), `redirect` (Response.redirect 303), `empty` (an empty 204).
 * @module
 */
import { placeOrder } from './handler.js';

export const FETCH_STYLES = ['text', 'json', 'bytes', 'stream', 'redirect', 'empty'] as const;

export const JSON_TYPE = { 'content-type': 'application/json; charset=utf-8' };

const encoder = new TextEncoder();

/** The answer as a one-chunk stream (a body the server cannot know the length of). */
function streamOf(text: string): ReadableStream<Uint8Array> {
  const bytes = encoder.encode(text);
  return new ReadableStream<Uint8Array>({
    start(controller) {
      controller.enqueue(bytes);
      controller.close();
    },
  });
}

type WebResult = { status: number; body: string };

/** The answer of a fetch-style handler in `style` (the same for Hono's raw styles). */
export function webAnswer(style: string, r: WebResult): Response {
  switch (style) {
    case 'json':
    case 'raw-json':
      return Response.json(JSON.parse(r.body), { status: r.status });
    case 'bytes':
      return new Response(encoder.encode(r.body), { status: r.status, headers: JSON_TYPE });
    case 'stream':
      return new Response(streamOf(r.body), { status: r.status, headers: JSON_TYPE });
    case 'redirect':
      return Response.redirect('http://127.0.0.1/orders/1', 303);
    case 'empty':
      return new Response(null, { status: 204 });
    default:
      return new Response(r.body, { status: r.status, headers: JSON_TYPE });
  }
}

/** `POST /orders` as a fetch handler in `style` (one of FETCH_STYLES). */
export function fetchHandler(style: string): (request: Request) => Promise<Response> {
  if (!(FETCH_STYLES as readonly string[]).includes(style)) throw new Error(`unknown fetch style ${style}`);
  return async (request) => {
    const headers = { 'idempotency-key': request.headers.get('idempotency-key') ?? undefined, 'x-delay-ms': request.headers.get('x-delay-ms') ?? undefined };
    const body =
      style === 'json' ? await request.json() : style === 'bytes' ? JSON.parse(new TextDecoder().decode(await request.arrayBuffer())) : JSON.parse(await request.text());
    return webAnswer(style, await placeOrder(headers, body));
  };
}

/**
 * The server's fetch function: `POST /orders` to `orders` (with the server's second
 * argument passed on), `GET /__stats[?prefix=…]` to `stats`, anything else 404.
 */
export function ordersRoute<Env>(
  orders: (request: Request, env: Env) => Promise<Response>,
  stats: (path: string) => string,
): (request: Request, env: Env) => Promise<Response> | Response {
  return (request, env) => {
    const url = request.url;
    const path = url.slice(url.indexOf('/', url.indexOf('//') + 2));
    if (request.method === 'POST' && path === '/orders') return orders(request, env);
    if (path.startsWith('/__stats')) return new Response(stats(path), { headers: JSON_TYPE });
    return new Response(null, { status: 404 });
  };
}
