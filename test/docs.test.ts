/**
 * What the README promises a newcomer: the two set-up commands, and every code snippet is
 * a complete program that runs as pasted (saved as .mjs, run with node). A snippet that
 * listens on PORT is started and sent a keyed request twice; the others must exit 0.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { send } from './adapters/client.js';

const root = fileURLToPath(new URL('../', import.meta.url));
const readme = readFileSync(join(root, 'README.md'), 'utf8');
// Under node_modules so that git never sees it; inside the project so that imports resolve.
const dir = join(root, 'node_modules', '.cache', `idempotency-readme-${randomUUID().slice(0, 8)}`);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Every ```js / ```ts block with the heading it sits under. */
function snippets(): Array<{ heading: string; code: string }> {
  const found: Array<{ heading: string; code: string }> = [];
  let heading = '';
  const lines = readme.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    if (line.startsWith('#')) heading = line.replace(/^#+\s*/, '');
    const open = /^```(js|ts|mjs)\s*$/.exec(line);
    if (!open) continue;
    const body: string[] = [];
    for (i++; i < lines.length && !lines[i]!.startsWith('```'); i++) body.push(lines[i]!);
    found.push({ heading, code: body.join('\n') });
  }
  return found;
}

/** The package is not installed under its own name here: its sources stand in for it. */
function runnable(code: string): string {
  return code
    .replace(/from 'idempotency-kit'/g, `from ${JSON.stringify(join(root, 'src', 'index.ts'))}`)
    .replace(/from 'idempotency-kit\/drivers\/([\w-]+)'/g, (_, name: string) => `from ${JSON.stringify(join(root, 'drivers', `${name}.ts`))}`)
    .replace(/from 'idempotency-kit\/client'/g, `from ${JSON.stringify(join(root, 'client', 'index.ts'))}`)
    .replace(/from 'idempotency-kit\/client\/([\w-]+)'/g, (_, name: string) => `from ${JSON.stringify(join(root, 'client', `${name}.ts`))}`)
    .replace(/from 'idempotency-kit\/([\w-]+)'/g, (_, name: string) => `from ${JSON.stringify(join(root, 'adapters', `${name}.ts`))}`);
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

async function untilListening(port: number, failed: () => string | undefined): Promise<void> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const failure = failed();
    if (failure !== undefined) throw new Error(`the snippet exited:\n${failure}`);
    const open = await new Promise<boolean>((resolve) => {
      const socket = net.connect(port, '127.0.0.1');
      socket.once('connect', () => (socket.destroy(), resolve(true)));
      socket.once('error', () => resolve(false));
    });
    if (open) return;
    if (Date.now() > deadline) throw new Error('the snippet did not start listening');
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

describe('README', () => {
  it('shows the two set-up commands: the demo on an embedded store, and the tests', () => {
    expect(readme).toMatch(/npm ci && npm start/);
    expect(readme).toMatch(/^npm test/m);
  });

  it('has an Install section naming the package and the store packages', () => {
    expect(readme).toMatch(/## Install[\s\S]*npm install idempotency-kit/);
    expect(readme).toMatch(/ES modules/);
  });

  const blocks = snippets();
  it('has runnable snippets', () => expect(blocks.length).toBeGreaterThanOrEqual(2));

  blocks.forEach(({ heading, code }, n) => {
    it(`snippet ${n + 1} (under "${heading}") runs as pasted`, async () => {
      mkdirSync(dir, { recursive: true });
      const cwd = join(dir, `snippet-${n + 1}`);
      mkdirSync(cwd, { recursive: true });
      const file = join(cwd, 'snippet.mjs');
      writeFileSync(file, runnable(code));
      const port = await freePort();
      const { IDEMPOTENCY_STORE: _ignored, ...env } = process.env;
      const child = spawn(process.execPath, ['--import', 'tsx', file], {
        cwd,
        env: { ...env, PORT: String(port) },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let output = '';
      child.stdout.on('data', (chunk) => (output += chunk));
      child.stderr.on('data', (chunk) => (output += chunk));
      const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
      try {
        if (/\.listen\(process\.env\.PORT/.test(code)) {
          await untilListening(port, () => (child.exitCode === null ? undefined : output));
          const url = `http://127.0.0.1:${port}`;
          const request = { path: '/orders', key: `readme-${randomUUID()}`, body: { sku: 'A1' } };
          const first = await send(url, request);
          expect(first.status, output + first.text).toBe(201);
          const again = await send(url, request);
          expect(again.status).toBe(201);
          expect(again.headers['idempotent-replayed']).toBe('true');
          expect(again.body.equals(first.body)).toBe(true);
          const other = await send(url, { ...request, key: `readme-${randomUUID()}` });
          expect(other.json().id).not.toBe(first.json().id);
        } else {
          const code = await Promise.race([exited, new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), 20_000))]);
          expect(code, output).toBe(0);
        }
      } finally {
        if (child.exitCode === null) {
          child.kill('SIGTERM');
          await exited;
        }
      }
    });
  });
});
