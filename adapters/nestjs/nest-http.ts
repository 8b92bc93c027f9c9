/**
 * The NestJS adapter's HTTP helpers shared by the interceptor and the transaction decorator:
 * the platform response (Express's `res` or Fastify's reply) and a refusal's headers on it.
 * @module
 */
import type { ServerResponse } from 'node:http';

/** The platform response: Express's `res` or Fastify's reply (with `.raw`). */
export type PlatformResponse = Record<string, unknown> & { raw?: ServerResponse; statusCode?: number };

/**
 * Put a refusal's headers on the response before the exception filters run (`body`: the
 * exception's `getResponse()`). On the Express
 * platform its `Content-Type` goes on when the refusal's own body is written (`res.json`
 * with it, as Nest's own filter does): NestJS 11's Express adapter replaces a `Content-Type`
 * set before with `application/json`, and logs a warning, when it does not start with
 * `application/json` (`application/problem+json` does not; NestJS 12 accepts any `+json`
 * type). An application's filter that writes a body of its own chooses its own type.
 */
export function setRejectionHeaders(res: PlatformResponse, headers: Record<string, string | string[]>, body: unknown): void {
  const setHeader = res.header as ((name: string, value: string | string[]) => unknown) | undefined;
  const rawRes = res.raw ?? (res as unknown as ServerResponse);
  const express = res.raw === undefined && typeof res.json === 'function';
  for (const [name, value] of Object.entries(headers)) {
    if (express && name.toLowerCase() === 'content-type') typeWithBody(res, rawRes, value, body);
    else if (typeof setHeader === 'function') setHeader.call(res, name, value);
    else rawRes.setHeader(name, value);
  }
}

/** Set `type` when `body` itself goes out through this response's `json` (once; the method is then Express's again). */
function typeWithBody(res: PlatformResponse, rawRes: ServerResponse, type: string | string[], body: unknown): void {
  const json = res.json as (this: unknown, body: unknown) => unknown;
  const own = Object.prototype.hasOwnProperty.call(res, 'json');
  res.json = function json_(this: unknown, sent: unknown) {
    if (own) res.json = json;
    else delete res.json;
    if (sent === body && !rawRes.headersSent) rawRes.setHeader('content-type', type);
    return json.call(this, sent);
  };
}
