/**
 * docs/client.md: every ts block on the page is a program a user copies; each runs as
 * written, in its own process, against this package's server behind a proxy that drops the
 * first answer, and the order still exists once.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scripted } from '../helpers/faulty-proxy.js';
import { importsFromSources } from '../helpers/package-imports.js';
import { useOrderServer } from './server.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
// Under the project's node_modules, so that `got` and `ky` resolve as in a user's project.
const dir = join(root, 'node_modules', '.cache', `idempotency-client-docs-${randomUUID().slice(0, 8)}`);

const page = readFileSync(join(root, 'docs', 'client.md'), 'utf8');
const blocks = [...page.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!);

/** The package is not installed under its own name here: its sources stand in for it. */
const fromSources = importsFromSources;

function run(file: string, env: Record<string, string>): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', file], { cwd: root, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    child.on('close', (code) => resolve({ code, output }));
  });
}

const bed = useOrderServer();
beforeAll(() => mkdirSync(dir, { recursive: true }));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('docs/client.md: the examples run as written', () => {
  it('the page has the fetch, got and ky examples', () => {
    expect(blocks).toHaveLength(3);
    expect(blocks.map((b) => /from 'idempotency-kit\/client(\/\w+)?'/.exec(b)?.[0])).toEqual([
      "from 'idempotency-kit/client'",
      "from 'idempotency-kit/client/got'",
      "from 'idempotency-kit/client/ky'",
    ]);
  });

  blocks.forEach((code, i) => {
    it(`example ${i + 1}: the first answer is lost, the retry gets it, the order runs once`, async () => {
      const { server } = bed;
      const proxy = await bed.proxy(scripted(['drop']));
      const file = join(dir, `example-${i}.mts`);
      writeFileSync(file, fromSources(code));
      const before = server.totalExecutions();
      const { code: exit, output } = await run(file, { API_URL: proxy.url });
      expect(exit, output).toBe(0);
      expect(proxy.log).toEqual(['drop', 'pass']);
      expect(server.totalExecutions() - before).toBe(1);
      // The program printed the order the server made (its answer, replayed).
      const order = /\{"id":\d+,"key":"[^"]+","sku":"A1"\}/.exec(output)?.[0];
      expect(order, output).toBeDefined();
      expect(server.firstAnswer((JSON.parse(order!) as { key: string }).key)).toBe(order);
    });
  });
});
