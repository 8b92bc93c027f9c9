/**
 * docs/adapters/koa.md: the page's main example runs as written and follows the page's own
 * advice (the layer before `@koa/bodyparser`): an oversized chunked body gets the layer's
 * 413, drained, for every client, never a reset or EPIPE from the parser answering first.
 */
import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { send } from './client.js';
import { importsFromSources } from '../helpers/package-imports.js';
import { startTsServer } from '../helpers/ts-process.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const dir = join(root, 'node_modules', '.cache', `idempotency-koa-docs-${randomUUID().slice(0, 8)}`);
const page = readFileSync(join(root, 'docs', 'adapters', 'koa.md'), 'utf8');
const example = /```ts\n([\s\S]*?)```/.exec(page)?.[1];

/** Send `bytes` of body chunked (no Content-Length); resolve with the status and problem code, or the client's error code. */
function sendChunked(url: string, bytes: number): Promise<string> {
  return new Promise((resolve) => {
    const req = request(`${url}/orders`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': randomUUID(), 'x-account-id': 'acct-1' },
    });
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => {
        const type = String(res.headers['content-type']);
        resolve(type.startsWith('application/problem+json') ? `${res.statusCode} ${(JSON.parse(text) as { code: string }).code}` : `${res.statusCode} ${type}`);
      });
      res.on('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? 'error'));
    });
    req.on('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? 'error'));
    const chunk = Buffer.alloc(64 * 1024, 0x20);
    let sent = 0;
    const pump = () => {
      while (sent < bytes) {
        sent += chunk.length;
        if (!req.write(chunk)) return void req.once('drain', pump);
      }
      req.end();
    };
    pump();
  });
}

describe('docs/adapters/koa.md: the main example', () => {
  beforeAll(() => mkdirSync(dir, { recursive: true }));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('puts the layer before @koa/bodyparser, as the page recommends', () => {
    expect(example).toBeDefined();
    const layer = example!.indexOf('app.use(idempotency(');
    const parser = example!.indexOf('app.use(bodyParser(');
    expect(layer).toBeGreaterThan(-1);
    expect(parser).toBeGreaterThan(layer);
  });

  it('runs as written: one order per key, the replay, 400 without a key, and 413 for 20 of 20 oversized chunked bodies', async () => {
    const file = join(dir, 'server.mts');
    writeFileSync(file, importsFromSources(example!));
    const server = await startTsServer(file, { cwd: root, env: { ...process.env, NODE_ENV: 'development' } });
    try {
      const first = await send(server.url, { path: '/orders', key: 'docs-1', body: { sku: 'A1' }, headers: { 'x-account-id': 'acct-1' } });
      expect(first.status, first.text).toBe(201);
      const again = await send(server.url, { path: '/orders', key: 'docs-1', body: { sku: 'A1' }, headers: { 'x-account-id': 'acct-1' } });
      expect(again.status).toBe(201);
      expect(again.headers['idempotent-replayed']).toBe('true');
      expect(again.json()).toEqual(first.json());
      const missing = await send(server.url, { path: '/orders', body: { sku: 'A1' }, headers: { 'x-account-id': 'acct-1' } });
      expect(missing.status).toBe(400);
      const answers = await Promise.all(Array.from({ length: 20 }, () => sendChunked(server.url, 8 * 1024 * 1024)));
      expect(answers).toEqual(Array.from({ length: 20 }, () => '413 body-too-large'));
    } finally {
      server.stop();
      await server.exited;
    }
  }, 60_000);
});
