/**
 * docs/adapters/*.md: the example a user copies runs as written, in its own process, and
 * does what the page says (201, replay, 400 key-missing, tenants apart).
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { entries } from '../../entries.js';
import { importsFromSources } from '../helpers/package-imports.js';
import { startTsServer } from '../helpers/ts-process.js';
import { expectProblem, send } from './client.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
// Inside the project, so that the example's framework imports resolve as they would in a
// user's project; under node_modules, so that git never sees it.
const dir = join(root, 'node_modules', '.cache', `idempotency-docs-${randomUUID().slice(0, 8)}`);
// A page with decorators (NestJS) is copied where the project's tsconfig
// (experimentalDecorators) applies: tsx applies it only to the files it covers (not under
// node_modules, not in a dot-folder).
const decoratedDir = join(root, 'test', `docs-copy-${randomUUID().slice(0, 8)}`);
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
  rmSync(decoratedDir, { recursive: true, force: true });
});

/** The page's first ts block under `heading`, with the package imports pointed at the sources. */
function example(adapter: string, heading = '## Example'): string {
  const page = readFileSync(join(root, 'docs', 'adapters', `${adapter}.md`), 'utf8');
  const at = page.indexOf(`${heading}\n`);
  if (at === -1) throw new Error(`docs/adapters/${adapter}.md has no "${heading}" section`);
  const code = /```ts\n([\s\S]*?)```/.exec(page.slice(at))?.[1];
  if (!code) throw new Error(`docs/adapters/${adapter}.md has no ts block under "${heading}"`);
  // The package is not installed under its own name here: its sources stand in for it.
  return importsFromSources(code);
}

const { IDEMPOTENCY_STORE: _ignored, ...inheritedEnv } = process.env;

describe('docs/adapters: the example on each page runs as written', () => {
  // Every adapter entry of entries.ts (`adapters/<name>.ts`, or `adapters/<name>/index.ts` for
  // an adapter with a folder): a new adapter's page is run too.
  const adapters = Object.values(entries).flatMap((source) => /^adapters\/([a-z0-9-]+)(?:\/index)?\.ts$/.exec(source)?.[1] ?? []);
  it('the adapters are read from entries.ts (the built-in ones among them)', () => {
    expect(adapters).toEqual(expect.arrayContaining(['node', 'express', 'fastify', 'koa', 'fetch', 'hono', 'nestjs', 'lambda']));
  });
  for (const adapter of adapters) {
    it(`docs/adapters/${adapter}.md: H6 H7 H2 H15 in a copied server`, async () => {
      const home = adapter === 'nestjs' ? decoratedDir : dir;
      mkdirSync(home, { recursive: true });
      // .mts: outside a "type": "module" package scope a .ts file would load as CommonJS.
      const file = join(home, `${adapter}.mts`);
      writeFileSync(file, example(adapter));
      // The page's default store (memory://), as a user who copies it gets it.
      const server = await startTsServer(file, { cwd: root, env: inheritedEnv });
      try {
        const url = server.url;
        const order = { path: '/orders', key: '8e03978e', body: { sku: 'A1' }, headers: { 'x-account-id': 'acct_1' } };
        const first = await send(url, order);
        expect(first.status, server.output()).toBe(201);
        expect(first.json()).toEqual({ id: 1, sku: 'A1' });
        expect(first.headers.location).toBe('/orders/1');
        const again = await send(url, order);
        expect(again.status).toBe(201);
        expect(again.headers['idempotent-replayed']).toBe('true');
        expect(again.body.equals(first.body)).toBe(true);
        expectProblem(await send(url, { path: '/orders', body: { sku: 'A1' } }), 400, 'key-missing');
        // Another account's request with the same key is its own order.
        const other = await send(url, { ...order, headers: { 'x-account-id': 'acct_2' } });
        expect(other.json()).toEqual({ id: 2, sku: 'A1' });
      } finally {
        server.stop();
      }
    });
  }

  it('docs/adapters/fetch.md: the Next.js route handler, called as Next.js calls it (request, { params })', async () => {
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'route.mts'), example('fetch', '## Next.js route handler'));
    // What Next.js does with app/orders/route.ts: import it and call its POST per request.
    writeFileSync(
      join(dir, 'next-runner.mts'),
      `import { POST } from './route.mts';
      const order = (key?: string, account?: string) => new Request('http://localhost/orders', {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}), ...(account ? { 'x-account-id': account } : {}) },
        body: JSON.stringify({ sku: 'A1' }),
      });
      const context = { params: Promise.resolve({}) };
      const out = [];
      for (const [key, account] of [['8e03978e', 'acct_1'], ['8e03978e', 'acct_1'], [undefined, 'acct_1'], ['8e03978e', 'acct_2']]) {
        const response = await POST(order(key, account), context);
        out.push({ status: response.status, replayed: response.headers.get('idempotent-replayed'), location: response.headers.get('location'), body: await response.json() });
      }
      console.log(JSON.stringify(out));`,
    );
    const child = spawn(process.execPath, ['--import', 'tsx', join(dir, 'next-runner.mts')], { cwd: root, env: inheritedEnv });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => (stdout += chunk));
    child.stderr.on('data', (chunk) => (stderr += chunk));
    const code = await new Promise((resolve) => child.once('exit', resolve));
    expect(code, stderr).toBe(0);
    const [first, again, keyless, other] = JSON.parse(stdout.trim().split('\n').at(-1)!);
    expect(first).toEqual({ status: 201, replayed: null, location: '/orders/1', body: { id: 1, sku: 'A1' } });
    expect(again).toEqual({ ...first, replayed: 'true' });
    expect(keyless).toMatchObject({ status: 400, body: { code: 'key-missing' } });
    expect(other).toMatchObject({ status: 201, replayed: null, body: { id: 2, sku: 'A1' } });
  });
});
