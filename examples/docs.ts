/**
 * The demo's OpenAPI document and Swagger UI: `GET /openapi.json` is the payments API's
 * document with the idempotency contract added (`addIdempotencyContract`), and `/docs`
 * is Swagger UI served from the installed `swagger-ui-dist` package (no CDN), so that
 * "Try it out" sends the same debit twice with one key and shows the replay.
 */
import { readFile } from 'node:fs/promises';
import type http from 'node:http';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { addIdempotencyContract, type OpenApiDocument } from 'idempotency-kit/openapi';

const account = { name: 'id', in: 'path', required: true, schema: { type: 'string', example: 'acc_1' } };
const balance = { type: 'object', properties: { id: { type: 'string' }, balance: { type: 'integer' } } };
const debitBody = {
  required: true,
  content: { 'application/json': { schema: { type: 'object', required: ['amount'], properties: { amount: { type: 'integer', minimum: 1, example: 1000 } } } } },
};
const debit = {
  201: {
    description: 'Debited',
    content: { 'application/json': { schema: { type: 'object', properties: { id: { type: 'string' }, accountId: { type: 'string' }, amount: { type: 'integer' }, balance: { type: 'integer' } } } } },
  },
  422: { description: 'Not debited (a bad amount, insufficient funds)', content: { 'application/json': { schema: { type: 'object', properties: { error: { type: 'string' } } } } } },
};

/** The payments API as the demo serves it, before the contract is added. */
export const paymentsDocument: OpenApiDocument = {
  openapi: '3.1.0',
  info: { title: 'idempotency-kit demo: payments', version: '1.0.0', description: 'Debits run once per Idempotency-Key; a retry gets the stored answer.' },
  paths: {
    '/accounts/{id}': { get: { operationId: 'getAccount', parameters: [account], responses: { 200: { description: 'The balance', content: { 'application/json': { schema: balance } } } } } },
    '/accounts/{id}/debits': { post: { operationId: 'debit', summary: 'Debit an account, once per key', parameters: [account], requestBody: debitBody, responses: debit } },
    '/unprotected/accounts/{id}/debits': { post: { operationId: 'debitUnprotected', summary: 'The same debit without protection', parameters: [account], requestBody: debitBody, responses: debit } },
    '/accounts/{id}/reset': { post: { operationId: 'reset', summary: 'Back to 10 000', parameters: [account], responses: { 200: { description: 'Reset', content: { 'application/json': { schema: balance } } } } } },
  },
};

/** The demo's document: the debit route carries the contract of its layer (keys scoped per account). */
export const demoDocument = addIdempotencyContract(
  paymentsDocument,
  { scope: () => 'per account' },
  { select: ({ path }) => path === '/accounts/{id}/debits' },
);

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.png': 'image/png',
  '.map': 'application/json',
};

const page = `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>idempotency-kit demo: API</title><link rel="stylesheet" href="/docs/swagger-ui.css"></head>
<body><div id="swagger-ui"></div>
<script src="/docs/swagger-ui-bundle.js"></script>
<script>window.ui = SwaggerUIBundle({ url: '/openapi.json', dom_id: '#swagger-ui', deepLinking: true, presets: [SwaggerUIBundle.presets.apis] });</script>
</body>
</html>
`;

/**
 * Answer `/openapi.json` and `/docs` on `server` before its application does; every other
 * request goes to the application as before.
 */
export function serveDocs(server: http.Server): void {
  const here = typeof __filename === 'string' ? __filename : import.meta.url;
  const dist = (createRequire(here)('swagger-ui-dist') as { getAbsoluteFSPath(): string }).getAbsoluteFSPath();
  const app = server.listeners('request') as ((req: http.IncomingMessage, res: http.ServerResponse) => void)[];
  server.removeAllListeners('request');
  const json = JSON.stringify(demoDocument);
  server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
    const { pathname } = new URL(req.url ?? '/', 'http://localhost');
    if (req.method === 'GET' && pathname === '/openapi.json') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(json);
      return;
    }
    if (req.method === 'GET' && (pathname === '/docs' || pathname === '/docs/')) {
      res.writeHead(200, { 'content-type': TYPES['.html']! }).end(page);
      return;
    }
    const asset = /^\/docs\/([\w.-]+)$/.exec(pathname)?.[1];
    if (req.method === 'GET' && asset !== undefined && !asset.startsWith('.')) {
      const type = TYPES[asset.slice(asset.lastIndexOf('.'))];
      if (type !== undefined) {
        readFile(join(dist, asset)).then(
          (bytes) => res.writeHead(200, { 'content-type': type }).end(bytes),
          () => res.writeHead(404, { 'content-type': 'text/plain' }).end('not found'),
        );
        return;
      }
    }
    for (const listener of app) listener.call(server, req, res);
  });
}
