/**
 * One list of entry points (entries.ts): package.json `exports` and `typesVersions`, tsconfig
 * `paths`, tsup's entries, vitest's aliases and the drivers `createStore()` knows
 * (drivers/registry.ts) all say what it says. The JSON files and the registry's list are
 * rewritten by `npm run sync-entries`; this test fails while they disagree with the list.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { DRIVERS } from '../drivers/registry.js';
import { driverLines, registrySource } from '../scripts/driver-registry.js';
import tsupConfig from '../tsup.config.js';
import { distName, entries, exportsField, legacyRootFields, packageName, sourceOf, specifierOf, subpaths, tsconfigPaths, tsupEntry, typesVersionsField, workerdOnly } from '../entries.js';

const root = fileURLToPath(new URL('../', import.meta.url));
const json = (file: string) => JSON.parse(readFileSync(`${root}${file}`, 'utf8')) as Record<string, unknown>;
const fix = 'run `npm run sync-entries` after changing entries.ts';

describe('entry points: one list', () => {
  it('every entry is a source file that exists, and no two entries build to one dist file', () => {
    for (const [subpath, source] of Object.entries(entries)) {
      expect(subpath === '.' || /^\.\/[a-z0-9-]+(\/[a-z0-9-]+)*$/.test(subpath), subpath).toBe(true);
      expect(existsSync(`${root}${source}`), `${subpath} -> ${source}`).toBe(true);
    }
    const names = Object.values(entries).map(distName);
    expect(new Set(names).size).toBe(names.length);
    expect(names).not.toContain('cli'); // the command's build
  });

  it(`package.json: name, \`exports\` and \`typesVersions\` are the list's (${fix})`, () => {
    const pkg = json('package.json');
    expect(pkg.name).toBe(packageName);
    expect(pkg.exports, fix).toEqual(exportsField());
    // Same order too: the root first, package.json last.
    expect(Object.keys(pkg.exports as object)).toEqual([...subpaths, './package.json']);
    expect(pkg.typesVersions, fix).toEqual(typesVersionsField());
    // The root for tools that read no `exports` (TypeScript's node10, older bundlers): the
    // same files as the root's `require` (main, types) and `import` (module) conditions.
    expect({ main: pkg.main, module: pkg.module, types: pkg.types }, fix).toEqual(legacyRootFields());
    const root = exportsField()['.'] as { import: { default: string }; require: { types: string; default: string } };
    expect(legacyRootFields()).toEqual({ main: root.require.default, module: root.import.default, types: root.require.types });
  });

  it(`tsconfig.json: \`paths\` are the list's, each specifier to its source (${fix})`, () => {
    const tsconfig = json('tsconfig.json') as { compilerOptions: { paths: unknown } };
    expect(tsconfig.compilerOptions.paths, fix).toEqual(tsconfigPaths());
  });

  it('tsup builds every entry (and the command)', () => {
    const entry = (tsupConfig as { entry: Record<string, string> }).entry;
    expect(entry).toEqual({ ...tsupEntry(), cli: 'cli/index.ts' });
  });

  it('vitest resolves every specifier to its source module (the same instance a relative import gets)', async () => {
    for (const subpath of subpaths.filter((sub) => !workerdOnly.has(sub))) {
      const byName = await import(/* @vite-ignore */ specifierOf(subpath));
      const bySource = await import(/* @vite-ignore */ `${root}${entries[subpath]}`);
      expect(byName, subpath).toBe(bySource);
    }
  });

  it('sourceOf maps a specifier back to its source, and nothing else', () => {
    expect(sourceOf('idempotency-kit')).toBe('src/index.ts');
    expect(sourceOf('idempotency-kit/drivers/redis')).toBe('drivers/redis.ts');
    expect(sourceOf('idempotency-kit/drivers/utils')).toBeUndefined();
    expect(sourceOf('idempotency-kitten')).toBeUndefined();
  });

  it(`drivers/registry.ts lists every driver entry, in the entries' order, each with its definition and factory (${fix})`, async () => {
    const registry = readFileSync(`${root}drivers/registry.ts`, 'utf8');
    const lines = await driverLines(root);
    expect(registry, fix).toBe(registrySource(registry, lines));
    const driverEntries = subpaths.filter((sub) => sub.startsWith('./drivers/'));
    expect(lines.map((line) => `./drivers/${line.name}`)).toEqual(driverEntries);
    // No definition without its entry (createStore() would not know the driver).
    const definitions = readdirSync(`${root}drivers`).flatMap((file) => /^(.+)-definition\.ts$/.exec(file)?.[1] ?? []);
    expect(definitions.sort(), 'a drivers/<name>-definition.ts needs its line ./drivers/<name> in entries.ts').toEqual(lines.map((line) => line.name).sort());
    expect(DRIVERS.map((driver) => driver.name)).toEqual(lines.map((line) => line.name));
    // Each loader reaches a factory (the workerd-only one stays unloaded in Node).
    for (const driver of DRIVERS.filter((d) => d.name !== 'durable-objects')) expect(typeof (await driver.load()), driver.name).toBe('function');
  });

  it('the registry check can fail: a new driver entry, or one whose definition is missing, changes or stops the list', async () => {
    const registry = readFileSync(`${root}drivers/registry.ts`, 'utf8');
    const lines = await driverLines(root);
    // A driver entry without its definition module stops the generator; a stale list (one
    // driver fewer) differs from the file.
    await expect(driverLines(root, { ...entries, './drivers/nope': 'drivers/nope.ts' })).rejects.toThrow(
      './drivers/nope is a driver entry, but drivers/nope-definition.ts (the driver\'s definition) does not exist',
    );
    expect(registrySource(registry, lines.slice(1))).not.toBe(registry);
    expect(() => registrySource('no regions', lines)).toThrow('lost its generated region');
  });
});
