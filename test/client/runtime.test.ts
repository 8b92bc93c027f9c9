/**
 * The fetch client runs on any fetch runtime: its import graph reaches no Node built-in, no
 * adapter, driver or store module, and no HTTP library (got and ky are type-only imports).
 */
import { readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../', import.meta.url));

/** Every module `entry` loads at run time (type-only imports do not load). */
function runtimeGraph(entry: string): { files: string[]; packages: string[] } {
  const files = new Set<string>();
  const packages = new Set<string>();
  const visit = (file: string) => {
    if (files.has(file)) return;
    files.add(file);
    const source = readFileSync(file, 'utf8');
    for (const [, typeOnly, spec] of source.matchAll(/^(?:import|export)\s+(type\s+)?[^'"]*?from\s+'([^']+)'/gm)) {
      if (typeOnly) continue;
      if (spec!.startsWith('.')) visit(resolve(dirname(file), spec!.replace(/\.js$/, '.ts')));
      else packages.add(spec!);
    }
  };
  visit(join(root, entry));
  return { files: [...files].map((f) => relative(root, f)).sort(), packages: [...packages].sort() };
}

describe('client runtime', () => {
  it('client/index.ts loads only the client and the option checks: no package at all (the retry loop is its own)', () => {
    expect(runtimeGraph('client/index.ts')).toEqual({
      files: ['client/index.ts', 'client/policy.ts', 'src/validate.ts'],
      packages: [],
    });
  });

  it('the got and ky entries add no runtime import of got or ky', () => {
    expect(runtimeGraph('client/got.ts').packages).toEqual([]);
    expect(runtimeGraph('client/ky.ts').packages).toEqual([]);
  });
});
