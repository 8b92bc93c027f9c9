/**
 * Internal: AWS Lambda HTTP events (API Gateway REST and HTTP APIs, Function URLs,
 * Application Load Balancers) as the HTTP layer reads them, and responses as each event
 * source expects them back. No policy here; no AWS package loaded (the shapes are written
 * out below). Not a package entry.
 * @module
 */
import { STATUS_CODES } from 'node:http';
import { BodyTooLargeError } from '../../src/errors.js';
import type { CapturedResponse, HttpRequestInfo } from '../../src/http.js';
import type { HttpResponse } from '../../src/problem.js';

type Headers = Record<string, string | undefined> | null | undefined;
type MultiHeaders = Record<string, string[] | undefined> | null | undefined;

/**
 * An HTTP event: API Gateway REST (payload 1.0), API Gateway HTTP API and Function URL
 * (payload 2.0), or an Application Load Balancer target. Only what the layer reads.
 */
export interface LambdaHttpEvent {
  /** 2.0 payloads (HTTP API, Function URL). */
  version?: string;
  /** REST API and ALB. */
  httpMethod?: string;
  path?: string;
  /** HTTP API and Function URL. */
  rawPath?: string;
  rawQueryString?: string;
  cookies?: string[];
  headers?: Headers;
  multiValueHeaders?: MultiHeaders;
  queryStringParameters?: Record<string, string | undefined> | null;
  multiValueQueryStringParameters?: Record<string, string[] | undefined> | null;
  body?: string | null;
  isBase64Encoded?: boolean;
  requestContext?: {
    http?: { method?: string; path?: string; [name: string]: unknown };
    elb?: { targetGroupArn?: string };
    authorizer?: Record<string, unknown> | null;
    identity?: { userArn?: string | null; cognitoIdentityId?: string | null; [name: string]: unknown } | null;
    [name: string]: unknown;
  };
  [name: string]: unknown;
}

/** A structured HTTP result, as a handler returns it for any of the event sources. */
export interface LambdaHttpResult {
  statusCode: number;
  statusDescription?: string;
  headers?: Record<string, string | number | boolean | undefined>;
  multiValueHeaders?: Record<string, Array<string | number | boolean> | undefined>;
  /** HTTP API and Function URL: the Set-Cookie values. */
  cookies?: string[];
  body?: string;
  isBase64Encoded?: boolean;
}

export type LambdaEventKind = 'rest' | 'http' | 'alb';

/** Which source an event came from, or undefined when it is not an HTTP event. */
export function httpEventKind(event: unknown): LambdaEventKind | undefined {
  if (typeof event !== 'object' || event === null) return undefined;
  const e = event as LambdaHttpEvent;
  if (e.version === '2.0' && typeof e.requestContext?.http?.method === 'string') return 'http';
  if (typeof e.httpMethod === 'string') return e.requestContext?.elb ? 'alb' : 'rest';
  return undefined;
}

export function eventMethod(event: LambdaHttpEvent, kind: LambdaEventKind): string {
  return (kind === 'http' ? event.requestContext!.http!.method! : event.httpMethod!).toUpperCase();
}

/** The event's headers with lower-case names; repeated ones (multi-value events) as arrays. */
function headersOf(event: LambdaHttpEvent): Record<string, string | string[]> {
  const headers: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(event.headers ?? {})) if (value !== undefined) headers[name.toLowerCase()] = value;
  // REST APIs send both maps; an ALB sends one of them (its target group's setting).
  for (const [name, values] of Object.entries(event.multiValueHeaders ?? {})) {
    if (values !== undefined) headers[name.toLowerCase()] = values.length === 1 ? values[0]! : [...values];
  }
  if (event.cookies && event.cookies.length > 0 && headers.cookie === undefined) headers.cookie = event.cookies.join('; ');
  return headers;
}

/** The request target: path and query as the client sent them (REST APIs give them decoded: encoded again). */
function targetOf(event: LambdaHttpEvent, kind: LambdaEventKind): string {
  if (kind === 'http') return `${event.rawPath ?? event.requestContext?.http?.path ?? '/'}${event.rawQueryString ? `?${event.rawQueryString}` : ''}`;
  const path = event.path ?? '/';
  const pairs: string[] = [];
  // ALB passes the query as received (still encoded); API Gateway REST decodes it.
  const encode = kind === 'rest' ? encodeURIComponent : (text: string) => text;
  const multi = event.multiValueQueryStringParameters;
  if (multi) {
    for (const [name, values] of Object.entries(multi)) for (const value of values ?? []) pairs.push(`${encode(name)}=${encode(value)}`);
  } else {
    for (const [name, value] of Object.entries(event.queryStringParameters ?? {})) if (value !== undefined) pairs.push(`${encode(name)}=${encode(value)}`);
  }
  return pairs.length > 0 ? `${path}?${pairs.join('&')}` : path;
}

/** The event's body bytes (base64 decoded when the event says so), refused past `maxBodyBytes`. */
function bodyOf(event: LambdaHttpEvent, maxBodyBytes: number): Uint8Array {
  const text = event.body ?? '';
  const bytes = event.isBase64Encoded ? Buffer.from(text, 'base64') : Buffer.from(text, 'utf8');
  if (bytes.byteLength > maxBodyBytes) throw new BodyTooLargeError(maxBodyBytes);
  return bytes;
}

/** The event as the HTTP layer reads it. */
export function eventRequestInfo<Raw>(event: LambdaHttpEvent, kind: LambdaEventKind, headerName: string, maxBodyBytes: number, raw: Raw): HttpRequestInfo<Raw> {
  const headers = headersOf(event);
  // Repeated key header lines: REST and ALB list each line; HTTP APIs join them with a
  // comma, which the layer refuses as a list as well.
  const lines = headers[headerName];
  return { method: eventMethod(event, kind), url: targetOf(event, kind), headers, keyHeaderLines: lines, body: () => bodyOf(event, maxBodyBytes), raw };
}

/**
 * The authenticated principal API Gateway's authorizer left on the event: an HTTP API's JWT
 * `sub`, its Lambda authorizer's context (`sub`, `principalId`, `userId`), its IAM caller;
 * a REST API's Cognito `sub`, its Lambda authorizer's `principalId`, its IAM caller or
 * Cognito identity. An ALB event has none.
 */
export function eventPrincipal(event: LambdaHttpEvent): unknown {
  const context = event.requestContext;
  const authorizer = (context?.authorizer ?? {}) as {
    jwt?: { claims?: { sub?: unknown } };
    lambda?: { sub?: unknown; principalId?: unknown; userId?: unknown } | null;
    iam?: { userArn?: unknown; userId?: unknown } | null;
    claims?: { sub?: unknown } | null;
    principalId?: unknown;
  };
  const lambda = authorizer.lambda ?? undefined;
  return (
    authorizer.jwt?.claims?.sub ??
    lambda?.sub ??
    lambda?.principalId ??
    lambda?.userId ??
    authorizer.iam?.userArn ??
    authorizer.claims?.sub ??
    authorizer.principalId ??
    context?.identity?.userArn ??
    context?.identity?.cognitoIdentityId ??
    undefined
  );
}

export const PRINCIPAL_SOURCE =
  'requestContext.authorizer: jwt.claims.sub, lambda.sub / principalId / userId, iam.userArn (HTTP API, Function URL); claims.sub, principalId (REST API); requestContext.identity.userArn (REST API with IAM)';

/** Whether a handler's value is a structured HTTP result (`statusCode`). */
export function isHttpResult(value: unknown): value is LambdaHttpResult {
  return typeof value === 'object' && value !== null && typeof (value as { statusCode?: unknown }).statusCode === 'number';
}

/**
 * What the handler answered, as the layer stores it: status, headers (both maps, lower
 * case) and body bytes. An HTTP API or Function URL handler may return any other value,
 * which the service sends as a 200 JSON response: so is it captured. Undefined: nothing
 * that can be stored (a REST or ALB handler that returned no `statusCode`).
 */
export function capturedResult(result: unknown, kind: LambdaEventKind): CapturedResponse | undefined {
  if (!isHttpResult(result)) {
    if (kind !== 'http' || result === undefined) return undefined;
    const text = typeof result === 'string' ? result : JSON.stringify(result);
    return { status: 200, headers: { 'content-type': 'application/json' }, body: Buffer.from(text, 'utf8') };
  }
  const headers: CapturedResponse['headers'] = {};
  for (const [name, value] of Object.entries(result.headers ?? {})) if (value !== undefined) headers[name.toLowerCase()] = String(value);
  for (const [name, values] of Object.entries(result.multiValueHeaders ?? {})) {
    if (values !== undefined) headers[name.toLowerCase()] = values.map(String);
  }
  if (result.cookies && result.cookies.length > 0) headers['set-cookie'] = [...result.cookies]; // never replayed
  const body = result.body === undefined ? new Uint8Array() : Buffer.from(result.body, result.isBase64Encoded ? 'base64' : 'utf8');
  return { status: result.statusCode, headers, body };
}

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });
const BINARY = /^(image|audio|video|font)\/|^application\/(octet-stream|pdf|zip|gzip|x-protobuf|vnd\.)/i;

/**
 * A response the layer answers (a replay or its own problem) in the event source's
 * shape: headers repeated as arrays go to `multiValueHeaders` where the source has them;
 * a text body as it is, anything else in base64 with `isBase64Encoded`.
 */
export function lambdaResult(response: HttpResponse, kind: LambdaEventKind, event: LambdaHttpEvent): LambdaHttpResult {
  const contentType = String([response.headers['content-type'] ?? ''].flat()[0]);
  let body: string;
  let isBase64Encoded = false;
  try {
    if (BINARY.test(contentType)) throw new TypeError('binary');
    body = strictUtf8.decode(response.body);
  } catch {
    body = Buffer.from(response.body.buffer, response.body.byteOffset, response.body.byteLength).toString('base64');
    isBase64Encoded = true;
  }
  const result: LambdaHttpResult = { statusCode: response.status, body, isBase64Encoded };
  // An ALB answers a multi-value event with multi-value headers only.
  const multi = kind === 'rest' || (kind === 'alb' && event.multiValueHeaders != null);
  for (const [name, value] of Object.entries(response.headers)) {
    if (Array.isArray(value) && multi) (result.multiValueHeaders ??= {})[name] = value;
    else if (kind === 'alb' && multi) (result.multiValueHeaders ??= {})[name] = [value as string];
    else (result.headers ??= {})[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  if (kind === 'alb') result.statusDescription = `${response.status} ${STATUS_CODES[response.status] ?? ''}`.trim();
  return result;
}
