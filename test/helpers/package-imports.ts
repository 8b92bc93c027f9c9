/**
 * Docs snippets import the package by name; a child process that runs one here has no
 * alias for it (the package is not installed under its own name in its own repository).
 * This points each `from 'idempotency-kit…'` at the file that entry is built from or to.
 */
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { distName, sourceOf } from '../../entries.js';

const root = fileURLToPath(new URL('../../', import.meta.url));

/** Every `from 'idempotency-kit…'` in `code` pointed at the entry's source file (or at `to(source)`). */
export function importsFromSources(code: string, to: (source: string) => string = (source) => join(root, source)): string {
  return code.replace(/from (['"])(idempotency-kit(?:\/[\w/-]+)?)\1/g, (_, _quote: string, specifier: string) => {
    const source = sourceOf(specifier);
    if (!source) throw new Error(`${specifier} is not an entry point of the package (entries.ts)`);
    return `from ${JSON.stringify(to(source))}`;
  });
}

/** Every `from 'idempotency-kit…'` in `code` pointed at the entry's ESM build in dist/. */
export function importsFromDist(code: string): string {
  return importsFromSources(code, (source) => join(root, 'dist', `${distName(source)}.js`));
}
