/**
 * The conformance suite's test API (./apps.ts) as a Lambda function behind a small local
 * stand-in for API Gateway's HTTP API: each HTTP request becomes a payload 2.0 event (as
 * API Gateway builds it: lower-case headers, repeated ones joined with commas, cookies
 * apart, the body in base64), the handler's result becomes the HTTP response (a thrown
 * error: 500, as API Gateway answers a failed invocation with a 5xx). Lambda handlers
 * return whole bodies: the streamed route answers its whole body at once.
 */
import http from 'node:http';
import { withIdempotency, type LambdaHttpEvent, type LambdaHttpResult } from '../../adapters/lambda/index.js';
import type { AppBuilder } from './apps.js';
import { readAll } from './apps.js';
import { answers, HttpError, query, sleep, type Calls } from './web-apps.js';

/** An HTTP request as API Gateway's HTTP API hands it to a function (payload 2.0). */
export function httpApiEvent(req: http.IncomingMessage, body: Buffer, extra: Partial<LambdaHttpEvent> = {}): LambdaHttpEvent {
  const url = new URL(req.url ?? '/', 'http://x');
  const headers: Record<string, string> = {};
  let cookies: string[] | undefined;
  for (const [name, values] of Object.entries(req.headersDistinct)) {
    if (!values) continue;
    if (name === 'cookie') cookies = values.flatMap((v) => v.split(/;\s*/));
    else headers[name] = values.join(',');
  }
  return {
    version: '2.0',
    routeKey: '$default',
    rawPath: url.pathname,
    rawQueryString: url.search.slice(1),
    ...(cookies ? { cookies } : {}),
    headers,
    requestContext: { http: { method: req.method ?? 'GET', path: url.pathname }, requestId: 'local' },
    ...(body.length > 0 ? { body: body.toString('base64'), isBase64Encoded: true } : { isBase64Encoded: false }),
    ...extra,
  };
}

/** Write a function's result as API Gateway would. */
export function writeResult(res: http.ServerResponse, result: LambdaHttpResult): void {
  const headers: http.OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(result.headers ?? {})) if (value !== undefined) headers[name] = String(value);
  for (const [name, values] of Object.entries(result.multiValueHeaders ?? {})) if (values) headers[name] = values.map(String);
  if (result.cookies?.length) headers['set-cookie'] = result.cookies;
  const body = result.body === undefined ? Buffer.alloc(0) : Buffer.from(result.body, result.isBase64Encoded ? 'base64' : 'utf8');
  res.writeHead(result.statusCode, headers).end(body);
}

const json = (statusCode: number, body: unknown, headers: Record<string, string> = {}): LambdaHttpResult => ({
  statusCode,
  headers: { 'content-type': 'application/json', ...headers },
  body: JSON.stringify(body),
});

/** The test API as one Lambda handler of HTTP API events. */
export function lambdaRoutes(calls: Calls) {
  return async (event: LambdaHttpEvent): Promise<LambdaHttpResult> => {
    const method = event.requestContext!.http!.method!;
    const path = event.rawPath ?? '/';
    const url = `${path}?${event.rawQueryString ?? ''}`;
    const text = event.body ? Buffer.from(event.body, event.isBase64Encoded ? 'base64' : 'utf8').toString('utf8') : '';
    const parsed = () => (text === '' ? undefined : JSON.parse(text));
    const route = `${method} ${path}`;
    if (route === 'POST /payments') {
      const n = calls.hit('payments');
      const { 'set-cookie': cookie, ...headers } = answers.paymentHeaders(n);
      return { ...json(201, answers.payment(n, parsed()), headers), cookies: [cookie] };
    }
    if (route === 'PATCH /payments') return json(200, answers.payment(calls.hit('payments'), parsed()));
    if (path === '/payments') return json(200, { n: calls.hit('list') });
    if (route === 'POST /slow') {
      const n = calls.hit('slow');
      await sleep(query(url, 'ms', 100));
      return json(query(url, 'status', 201), { n });
    }
    if (path.startsWith('/status/')) return json(Number(path.slice(8)), { n: calls.hit('status') });
    if (route === 'POST /fail-500') return json(500, { n: calls.hit('fail-500') });
    if (route === 'POST /throw') {
      calls.hit('throw');
      throw new Error('boom');
    }
    if (route === 'POST /throw-400') {
      calls.hit('throw-400');
      throw new HttpError(400, 'bad request');
    }
    if (route === 'POST /big') return { statusCode: 200, headers: { 'content-type': 'text/plain' }, body: answers.big(query(url, 'bytes', 4096), calls.hit('big')) };
    if (route === 'POST /stream') return { statusCode: 201, headers: { 'content-type': 'text/plain' }, body: answers.stream(calls.hit('stream')).join('') };
    if (route === 'POST /echo-body') {
      calls.hit('echo-body');
      return json(200, { body: parsed() });
    }
    if (route === 'POST /off') return json(201, { n: calls.hit('off') });
    return json(404, { error: 'not found' });
  };
}

/** The conformance app: the handler wrapped with `withIdempotency` (but /off), behind the local HTTP API. */
export const lambdaApp: AppBuilder = (options, calls) => {
  const routes = lambdaRoutes(calls);
  const wrapped = withIdempotency(routes, options as never);
  return http.createServer(async (req, res) => {
    const event = httpApiEvent(req, await readAll(req));
    try {
      // No Lambda context here: the options' own lease, renewed (the deadline lease has its own tests).
      const result = event.rawPath === '/off' ? await routes(event) : await wrapped(event, undefined as never);
      writeResult(res, result as LambdaHttpResult);
    } catch (error) {
      writeResult(res, json(error instanceof HttpError ? error.status : 500, { error: String(error) }));
    }
  });
};
