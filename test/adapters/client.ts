/**
 * A raw HTTP client for the conformance suite: `http.request` with a flat header array, so
 * that a test can send repeated header lines, exact bytes, and abort mid-request.
 */
import http from 'node:http';
import { expect } from 'vitest';

export interface SendOptions {
  method?: string;
  path: string;
  /** One key, several keys (one header line each), or none. Sent as is, no quoting. */
  key?: string | string[];
  /** An object is sent as JSON, a string as text/plain, a Buffer as is. */
  body?: unknown;
  contentType?: string;
  headers?: Record<string, string>;
}

export interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
  text: string;
  json<T = Record<string, unknown>>(): T;
}

function encode(options: SendOptions): { body: Buffer | undefined; type: string | undefined } {
  const { body } = options;
  if (body === undefined) return { body: undefined, type: options.contentType };
  if (Buffer.isBuffer(body)) return { body, type: options.contentType ?? 'application/octet-stream' };
  if (typeof body === 'string') return { body: Buffer.from(body), type: options.contentType ?? 'text/plain' };
  return { body: Buffer.from(JSON.stringify(body)), type: options.contentType ?? 'application/json' };
}

function open(baseUrl: string, options: SendOptions): { request: http.ClientRequest; done: Promise<Reply> } {
  const url = new URL(options.path, baseUrl);
  const { body, type } = encode(options);
  const raw: string[] = ['Host', url.host, 'Connection', 'close'];
  if (type !== undefined) raw.push('Content-Type', type);
  // As fetch and curl do; without it Node's client would send a chunked empty body.
  raw.push('Content-Length', String(body?.length ?? 0));
  const keys = options.key === undefined ? [] : Array.isArray(options.key) ? options.key : [options.key];
  for (const key of keys) raw.push('Idempotency-Key', key);
  for (const [name, value] of Object.entries(options.headers ?? {})) raw.push(name, value);
  const request = http.request({
    host: url.hostname,
    port: url.port,
    path: url.pathname + url.search,
    method: options.method ?? 'POST',
    headers: raw,
    agent: false,
  });
  const done = new Promise<Reply>((resolve, reject) => {
    request.on('error', reject);
    request.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('error', reject);
      res.on('end', () => {
        const data = Buffer.concat(chunks);
        resolve({
          status: res.statusCode ?? 0,
          headers: res.headers,
          body: data,
          text: data.toString('utf8'),
          json: <T>() => JSON.parse(data.toString('utf8')) as T,
        });
      });
    });
  });
  request.end(body);
  return { request, done };
}

export function send(baseUrl: string, options: SendOptions): Promise<Reply> {
  return open(baseUrl, options).done;
}

/** Send a request and close the connection after `afterMs`, before the answer (H13). */
export function sendAndAbort(baseUrl: string, options: SendOptions, afterMs: number): Promise<void> {
  return sendAndAbortWhen(baseUrl, options, () => new Promise((resolve) => setTimeout(resolve, afterMs)));
}

/** Send a request and close the connection once `ready()` resolves (the handler started, say), before the answer. */
export async function sendAndAbortWhen(baseUrl: string, options: SendOptions, ready: () => Promise<unknown>): Promise<void> {
  const { request, done } = open(baseUrl, options);
  done.catch(() => {});
  await ready();
  request.destroy();
}

/** H19: an RFC 9457 problem the layer produced: never replayed, never cached. */
export function expectProblem(reply: Reply, status: number, code: string, reason?: string): Record<string, unknown> {
  expect(reply.status, reply.text).toBe(status);
  expect(reply.headers['content-type']).toMatch(/^application\/problem\+json\b/);
  expect(reply.headers['cache-control']).toBe('no-store');
  expect(reply.headers['idempotent-replayed']).toBeUndefined();
  const problem = reply.json();
  expect(() => new URL(problem.type as string), 'type is a URI reference').not.toThrow();
  expect(problem).toMatchObject({ status, code, title: expect.any(String), detail: expect.any(String) });
  if (reason !== undefined) expect(problem.reason).toBe(reason);
  if (code === 'request-in-progress' || code === 'store-unavailable') {
    expect(Number(reply.headers['retry-after'])).toBeGreaterThan(0);
  }
  return problem;
}
