/**
 * The built-in drivers' list in drivers/registry.ts, written from entries.ts: every entry
 * `./drivers/<name>` is a driver, and its definition is the one `DriverDefinition` that
 * `drivers/<name>-definition.ts` exports. `npm run sync-entries` writes the list;
 * test/entries.test.ts fails while the file says something else.
 *
 * The list's order is the entries' order (the order `createStore()`'s messages list the
 * drivers in). Each line loads the definition now (it loads no client) and the driver
 * module only through a dynamic import, when a target needs it.
 * @module
 */
import { existsSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import type { DriverDefinition } from '../drivers/definition.js';
import { entries } from '../entries.js';

/** One driver as the registry lists it. */
export interface DriverLine {
  /** `redis` (from the entry `./drivers/redis`). */
  name: string;
  /** `./redis-definition.js`, from drivers/. */
  definitionModule: string;
  /** The definition's export name, e.g. `redisDriver`. */
  definitionExport: string;
  /** The module `load()` imports, from drivers/: the entry's source, or the definition's `factoryModule`. */
  factoryModule: string;
  /** The export of that module that makes the store, e.g. `redisStore`. */
  factory: string;
}

const isDefinition = (value: unknown): value is DriverDefinition => {
  const candidate = value as Partial<DriverDefinition> | null;
  return typeof candidate === 'object' && candidate !== null && typeof candidate.name === 'string' && Array.isArray(candidate.schemes);
};

/** The drivers, in the entries' order, read from their definition modules under `root`. */
export async function driverLines(root: string, list: Record<string, string> = entries): Promise<DriverLine[]> {
  const lines: DriverLine[] = [];
  for (const [subpath, source] of Object.entries(list)) {
    const name = /^\.\/drivers\/([a-z0-9-]+)$/.exec(subpath)?.[1];
    if (name === undefined) continue;
    const file = `drivers/${name}-definition.ts`;
    if (!existsSync(`${root}${file}`)) {
      throw new Error(`${subpath} is a driver entry, but ${file} (the driver's definition) does not exist`);
    }
    const module = (await import(pathToFileURL(`${root}${file}`).href)) as Record<string, unknown>;
    const found = Object.entries(module).filter(([, value]) => isDefinition(value));
    if (found.length !== 1) throw new Error(`${file} must export exactly one DriverDefinition, found ${found.length}`);
    const [definitionExport, definition] = found[0] as [string, DriverDefinition];
    if (definition.name !== name) throw new Error(`${file}: the definition's name is ${JSON.stringify(definition.name)}, its entry says ${JSON.stringify(name)}`);
    const factoryModule = definition.factoryModule ?? `./${source.replace(/^drivers\//, '').replace(/\.ts$/, '.js')}`;
    lines.push({ name, definitionModule: `./${name}-definition.js`, definitionExport, factoryModule, factory: definition.factory });
  }
  return lines;
}

const IMPORTS = ['// <drivers: imports> written by `npm run sync-entries` from entries.ts', '// </drivers: imports>'] as const;
const LIST = ['// <drivers: list> written by `npm run sync-entries` from entries.ts', '// </drivers: list>'] as const;

function replaceRegion(text: string, [open, close]: readonly [string, string], body: string[]): string {
  const start = text.indexOf(open);
  const end = text.indexOf(close);
  if (start < 0 || end < start) throw new Error(`drivers/registry.ts has lost its generated region (${open})`);
  // From the end of the opening line to the start of the closing one (its indent kept).
  const bodyEnd = text.lastIndexOf('\n', end) + 1;
  return `${text.slice(0, start + open.length)}\n${body.map((line) => `${line}\n`).join('')}${text.slice(bodyEnd)}`;
}

/** drivers/registry.ts (`current`) with its generated regions written from `lines`. */
export function registrySource(current: string, lines: DriverLine[]): string {
  const imports = [...lines]
    .sort((a, b) => a.definitionModule.localeCompare(b.definitionModule))
    .map((line) => `import { ${line.definitionExport} } from '${line.definitionModule}';`);
  const list = lines.map((line) => `  registered(${line.definitionExport}, async () => (await import('${line.factoryModule}')).${line.factory}),`);
  return replaceRegion(replaceRegion(current, IMPORTS, imports), LIST, list);
}
