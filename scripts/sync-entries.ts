/**
 * `npm run sync-entries`: writes the entry list (entries.ts) into the static files that
 * cannot import it: package.json `exports`, `typesVersions` and the root's `main`, `module`
 * and `types`; tsconfig.json `paths`; the driver list of drivers/registry.ts (its two
 * marked regions, see ./driver-registry.ts).
 * Everything else in those files is kept as it is, key order included.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { driverLines, registrySource } from './driver-registry.js';
import { exportsField, legacyRootFields, tsconfigPaths, typesVersionsField } from '../entries.js';

const root = fileURLToPath(new URL('../', import.meta.url));

/** `object` with `key` set to `value`: in its place if present, else right after `after`. */
function withKey(object: Record<string, unknown>, key: string, value: unknown, after: string): Record<string, unknown> {
  if (key in object) return { ...object, [key]: value };
  const result: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(object)) {
    result[k] = v;
    if (k === after) result[key] = value;
  }
  if (!(key in result)) result[key] = value;
  return result;
}

function rewriteText(file: string, change: (text: string) => string): void {
  const path = `${root}${file}`;
  const before = readFileSync(path, 'utf8');
  const after = change(before);
  if (after === before) {
    console.log(`${file}: already in line with entries.ts`);
    return;
  }
  writeFileSync(path, after);
  console.log(`${file}: rewritten from entries.ts`);
}

function rewrite(file: string, change: (json: Record<string, unknown>) => Record<string, unknown>): void {
  rewriteText(file, (text) => `${JSON.stringify(change(JSON.parse(text) as Record<string, unknown>), null, 2)}\n`);
}

rewrite('package.json', (pkg) => {
  let result = pkg;
  for (const [key, value] of Object.entries(legacyRootFields())) result = withKey(result, key, value, 'files');
  return withKey(withKey(result, 'exports', exportsField(), 'bin'), 'typesVersions', typesVersionsField(), 'exports');
});
rewrite('tsconfig.json', (tsconfig) => {
  const compilerOptions = tsconfig.compilerOptions as Record<string, unknown>;
  return { ...tsconfig, compilerOptions: withKey(compilerOptions, 'paths', tsconfigPaths(), 'baseUrl') };
});
const drivers = await driverLines(root);
rewriteText('drivers/registry.ts', (text) => registrySource(text, drivers));
