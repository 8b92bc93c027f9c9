/**
 * What the README promises a newcomer: the quick start is real code (examples/quick-start.ts)
 * and protects a Node http handler in under 10 lines.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

const readme = readFileSync('README.md', 'utf8');

function codeBlockAfter(heading: string): string[] {
  const section = readme.slice(readme.indexOf(heading));
  const block = /```ts\n([\s\S]*?)```/.exec(section);
  if (!block) throw new Error(`no ts block after ${heading}`);
  return block[1]!.trimEnd().split('\n');
}

describe('README', () => {
  it('shows the two set-up commands: the demo on an embedded store, and the tests', () => {
    expect(readme).toMatch(/npm ci && npm start/);
    expect(readme).toMatch(/^npm test/m);
  });

  it('quick start: the README block is examples/quick-start.ts, and it is under 10 lines of setup', () => {
    const lines = codeBlockAfter('## Quick start');
    const example = readFileSync('examples/quick-start.ts', 'utf8').split('\n');
    const start = example.indexOf(lines[0]!);
    expect(start, 'the README block starts where the example does').toBeGreaterThan(-1);
    expect(example.slice(start, start + lines.length)).toEqual(lines);
    // Lines a user writes to protect the handler: imports, store, wrap, listen (the
    // handler body is theirs anyway).
    const setup = lines.filter((l) => l.trim() && !/^\s{2,}/.test(l) && !l.startsWith('}'));
    expect(setup.length).toBeLessThan(10);
  });
});
