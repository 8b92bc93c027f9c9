/**
 * idempotency-kit/fetch on Bun and Deno: the built package (dist/) serves through the
 * runtime's own server (Bun.serve, Deno.serve) with its own Request, Response and streams
 * (./runtime-smoke.mjs); this side sends the requests over real sockets. Both runtimes
 * come from the npm registry as dev dependencies (`bun`, `deno`; the binary is in their
 * platform package). A runtime that is not installed here is skipped loudly; with CI set
 * it fails, since `npm ci` installs both.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runtimeArgs, runtimeBinary } from '../../bench/runtimes.js';
import { importsFromDist } from '../helpers/package-imports.js';
import { assertFreshBuild } from '../helpers/fresh-build.js';
import { freePort, untilListening } from '../helpers/ports.js';
import { expectProblem, send } from './client.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const SMOKE = fileURLToPath(new URL('./runtime-smoke.mjs', import.meta.url));
const runtimes = {
  bun: { binary: runtimeBinary(root, 'bun'), args: runtimeArgs('bun', SMOKE) },
  deno: { binary: runtimeBinary(root, 'deno'), args: runtimeArgs('deno', SMOKE) },
};

function available(name: string, binary: string | undefined): boolean {
  if (binary) return true;
  const message = `${name} is not installed under node_modules (dev dependency \`${name}\`) or does not run here`;
  if (process.env.CI) throw new Error(`${message} (CI is set: the runtime tests must run)`);
  console.warn(`\n!!!!!!!! SKIPPING ${name.toUpperCase()} RUNTIME TESTS: ${message} !!!!!!!!\n`);
  return false;
}

/** The ts block under `heading` in docs/adapters/fetch.md, importing the package from dist/ (as installed). */
function docsBlock(heading: string): string {
  const page = readFileSync(join(root, 'docs/adapters/fetch.md'), 'utf8');
  const code = /```ts\n([\s\S]*?)```/.exec(page.slice(page.indexOf(`${heading}\n`)))?.[1];
  if (!code) throw new Error(`docs/adapters/fetch.md has no ts block under "${heading}"`);
  return importsFromDist(code);
}
const docsDir = join(root, 'node_modules', '.cache', `idempotency-runtimes-${randomUUID().slice(0, 8)}`);
afterAll(() => rmSync(docsDir, { recursive: true, force: true }));

/** Start `args` on the runtime and wait until it accepts connections on `port`. */
async function startOn(binary: string, args: string[], port: number) {
  const child = spawn(binary, args, { cwd: root, env: { ...process.env, NO_COLOR: '1', PORT: String(port) }, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  await untilListening(port, () => (child.exitCode === null ? undefined : output));
  return { child, output: () => output };
}

const json = (body: unknown, key?: string, path = '/orders', headers?: Record<string, string>) => ({ path, key, body, headers });

describe('the fetch and Hono entries load web standards only', () => {
  // node:crypto (hashes, UUIDs), node:diagnostics_channel and node:module (telemetry's
  // optional OpenTelemetry lookup), node:zlib (the `compress` option): all four are provided
  // by Bun and Deno (and by workerd with nodejs_compat), where the smoke tests below and
  // test/cloudflare run the built entries. Nothing else, and no http, stream or buffer.
  const PROVIDED = ['node:crypto', 'node:diagnostics_channel', 'node:module', 'node:zlib'];
  it('their module graph in dist/ imports no Node built-in but those Bun and Deno provide', () => {
    assertFreshBuild();
    for (const entry of ['dist/adapters/fetch.js', 'dist/adapters/hono.js']) {
      const builtins = new Set<string>();
      const seen = new Set<string>();
      const visit = (file: string) => {
        if (seen.has(file)) return;
        seen.add(file);
        const text = readFileSync(file, 'utf8');
        for (const [, specifier] of text.matchAll(/(?:from|import)\s*['"]([^'"]+)['"]/g)) {
          if (specifier!.startsWith('.')) visit(join(file, '..', specifier!));
          else if (specifier!.startsWith('node:') || ['crypto', 'stream', 'http', 'buffer', 'events'].includes(specifier!)) builtins.add(specifier!);
        }
      };
      visit(join(root, entry));
      expect(seen.size, entry).toBeGreaterThan(2);
      expect([...builtins].filter((b) => !PROVIDED.includes(b)), entry).toEqual([]);
      expect(builtins.has('node:crypto'), entry).toBe(true);
    }
  });
});

for (const [name, runtime] of Object.entries(runtimes)) {
  describe.skipIf(!available(name, runtime.binary))(`idempotency-kit/fetch on ${name} (${name === 'bun' ? 'Bun.serve' : 'Deno.serve'})`, () => {
    let url = '';
    let output = '';
    beforeAll(async () => {
      assertFreshBuild();
      const port = await freePort();
      const child = spawn(runtime.binary!, [...runtime.args, String(port)], {
        cwd: root,
        env: { ...process.env, NO_COLOR: '1' },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      child.stderr.on('data', (chunk) => (output += chunk));
      await new Promise<void>((resolve, reject) => {
        child.stdout.on('data', (chunk) => {
          output += chunk;
          if (output.includes(`listening ${name}`)) resolve();
        });
        child.once('exit', (code) => reject(new Error(`${name} exited with ${code}:\n${output}`)));
      });
      url = `http://127.0.0.1:${port}`;
      return () => {
        child.kill('SIGTERM');
      };
    });

    it('H6 H7 H11: runs once, replays byte for byte with Idempotent-Replayed and Location, never Set-Cookie', async () => {
      const first = await send(url, json({ sku: 'A1' }, `${name}-1`));
      expect(first.status, output).toBe(201);
      expect(first.json()).toEqual({ id: 1, sku: 'A1', runtime: name });
      expect(first.headers['set-cookie']).toEqual(['s=1']);
      const again = await send(url, json({ sku: 'A1' }, `${name}-1`));
      expect(again.status).toBe(201);
      expect(again.body.equals(first.body)).toBe(true);
      expect(again.headers['idempotent-replayed']).toBe('true');
      expect(again.headers.location).toBe('/orders/1');
      expect(again.headers['set-cookie']).toBeUndefined();
    });

    it('H2 H14 body-too-large: 400 without a key, 422 for another body, 413 over maxBodyBytes', async () => {
      expectProblem(await send(url, json({ sku: 'A1' })), 400, 'key-missing');
      await send(url, json({ sku: 'B1' }, `${name}-2`));
      expectProblem(await send(url, json({ sku: 'B2' }, `${name}-2`)), 422, 'key-reused');
      expectProblem(await send(url, json({ sku: 'x'.repeat(2000) }, `${name}-3`)), 413, 'body-too-large');
    });

    it('H9: 10 simultaneous identical requests run the handler once', async () => {
      const replies = await Promise.all(Array.from({ length: 10 }, () => send(url, json({ sku: 'C1' }, `${name}-4`, '/slow'))));
      expect(new Set(replies.map((r) => r.text)).size).toBe(1);
      expect(replies.filter((r) => r.headers['idempotent-replayed'] === undefined)).toHaveLength(1);
    });

    it('H12: a ReadableStream body is recorded on its way out and replayed', async () => {
      const first = await send(url, json({}, `${name}-5`, '/stream'));
      expect(first.status).toBe(201);
      expect(first.text).toMatch(/^chunk-1;chunk-2;id=\d+$/);
      const replay = await send(url, json({}, `${name}-5`, '/stream'));
      expect(replay.text).toBe(first.text);
      expect(replay.headers['idempotent-replayed']).toBe('true');
    });

    if (name === 'bun') it('docs/adapters/fetch.md: the Bun.serve example runs as written (H6 H7 H2 H15)', async () => {
      mkdirSync(docsDir, { recursive: true });
      const file = join(docsDir, 'bun-server.ts');
      writeFileSync(file, docsBlock('## Bun.serve and Deno.serve'));
      const port = await freePort();
      const { child, output } = await startOn(runtime.binary!, [file], port);
      try {
        const server = `http://127.0.0.1:${port}`;
        const order = { path: '/orders', key: '8e03978e', body: { sku: 'A1' }, headers: { 'x-account-id': 'acct_1' } };
        const first = await send(server, order);
        expect(first.status, output()).toBe(201);
        expect(first.json()).toEqual({ id: 1, sku: 'A1' });
        expect(first.headers.location).toBe('/orders/1');
        const again = await send(server, order);
        expect(again.headers['idempotent-replayed']).toBe('true');
        expect(again.body.equals(first.body)).toBe(true);
        expectProblem(await send(server, { path: '/orders', body: { sku: 'A1' } }), 400, 'key-missing');
        expect((await send(server, { ...order, headers: { 'x-account-id': 'acct_2' } })).json()).toEqual({ id: 2, sku: 'A1' });
      } finally {
        child.kill('SIGTERM');
      }
    });

    it('H10: a thrown error releases the key: the retry runs again', async () => {
      const replies = [await send(url, json({}, `${name}-6`, '/throw')), await send(url, json({}, `${name}-6`, '/throw'))];
      expect(replies.map((r) => r.status)).toEqual([500, 500]);
      expect(replies.map((r) => r.headers['idempotent-replayed'])).toEqual([undefined, undefined]);
    });
  });
}
