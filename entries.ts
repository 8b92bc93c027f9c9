/**
 * The package's entry points: each public sub-path and the source file it is built from.
 * This list is the only place they are written. Adding an entry is one line here, then
 * `npm run sync-entries`, which rewrites package.json (`exports`, `typesVersions`, and
 * `main`/`module`/`types` for the root), tsconfig.json (`paths`) and the list of drivers in
 * drivers/registry.ts (for `createStore()`). tsup.config.ts and vitest.config.ts read the
 * list when they load, and test/entries.test.ts fails while package.json, tsconfig.json or
 * the registry disagree with it.
 * The `idempotency-kit` command (package.json `bin`) is not an entry: tsup.config.ts builds it.
 * @module
 */

export const packageName = 'idempotency-kit';

export const entries = {
  '.': 'src/index.ts',
  './node': 'adapters/node.ts',
  './express': 'adapters/express.ts',
  './fastify': 'adapters/fastify.ts',
  './koa': 'adapters/koa/index.ts',
  './fetch': 'adapters/fetch.ts',
  './hono': 'adapters/hono/index.ts',
  // Drivers: each also has drivers/<name>-definition.ts, and `npm run sync-entries` lists it
  // in drivers/registry.ts for `createStore()`, in this order (the order its messages use).
  './drivers/memory': 'drivers/memory.ts',
  './drivers/sqlite': 'drivers/sqlite.ts',
  './drivers/redis': 'drivers/redis.ts',
  './drivers/postgres': 'drivers/postgres.ts',
  './drivers/mysql': 'drivers/mysql.ts',
  './drivers/durable-objects': 'drivers/durable-objects.ts',
  './drivers/d1': 'drivers/d1.ts',
  './drivers/dynamodb': 'drivers/dynamodb.ts',
  // Transactions opened by an ORM, for the PostgreSQL and MySQL stores' `transactions` option.
  './transactions/drizzle': 'drivers/transactions/drizzle.ts',
  './transactions/kysely': 'drivers/transactions/kysely.ts',
  './transactions/knex': 'drivers/transactions/knex.ts',
  './transactions/typeorm': 'drivers/transactions/typeorm.ts',
  './transactions/prisma': 'drivers/transactions/prisma.ts',
  './transactions/mikro-orm': 'drivers/transactions/mikro-orm.ts',
  './transactions/mysql2': 'drivers/transactions/mysql2.ts',
  './testing': 'testing/store-contract.ts',
  './client': 'client/index.ts',
  './client/got': 'client/got.ts',
  './client/ky': 'client/ky.ts',
  './nats': 'consumers/nats.ts',
  './bullmq': 'consumers/bullmq.ts',
  './mqtt': 'consumers/mqtt.ts',
  './webhooks': 'consumers/webhooks.ts',
  './nestjs': 'adapters/nestjs/index.ts',
  './lambda': 'adapters/lambda/index.ts',
  './openapi': 'src/openapi.ts',
} as const satisfies Record<'.' | `./${string}`, `${string}.ts`>;

export type Subpath = keyof typeof entries;

/**
 * Entries whose modules load only inside workerd: they import its built-in
 * `cloudflare:workers` module, which Node does not have. Node-side tests skip loading them
 * (their types are still checked); test/cloudflare runs them in workerd.
 */
export const workerdOnly: ReadonlySet<Subpath> = new Set<Subpath>(['./drivers/durable-objects']);

export const subpaths = Object.keys(entries) as Subpath[];

/** `'./node'` -> `'idempotency-kit/node'`; `'.'` -> `'idempotency-kit'`. */
export function specifierOf(subpath: string): string {
  return subpath === '.' ? packageName : `${packageName}/${subpath.slice(2)}`;
}

/**
 * Where an entry's build lands, as dist/<name>.js, .cjs, .d.ts and .d.cts: its source path
 * without `.ts`, and without `src/` for the core (`src/index.ts` -> `index`). An adapter with
 * a folder of its own lands where a one-file adapter would (`adapters/nestjs/index.ts` ->
 * `adapters/nestjs`), so its dist files keep their names whichever layout its source has.
 */
export function distName(source: string): string {
  return source
    .replace(/^src\//, '')
    .replace(/^(adapters\/[^/]+)\/index\.ts$/, '$1')
    .replace(/\.ts$/, '');
}

/** The source file behind a specifier the package answers to (`idempotency-kit/koa`), if any. */
export function sourceOf(specifier: string): string | undefined {
  for (const [subpath, source] of Object.entries(entries)) if (specifierOf(subpath) === specifier) return source;
  return undefined;
}

/** tsup's `entry`: dist name -> source. */
export function tsupEntry(): Record<string, string> {
  return Object.fromEntries(Object.values(entries).map((source) => [distName(source), source]));
}

interface Conditions {
  types: string;
  default: string;
}

/**
 * package.json `exports`: for each sub-path, `import` (ESM, .d.ts) and `require` (CommonJS,
 * .d.cts), with `types` first in each, then `./package.json`.
 */
export function exportsField(): Record<string, { import: Conditions; require: Conditions } | string> {
  const field: Record<string, { import: Conditions; require: Conditions } | string> = {};
  for (const [subpath, source] of Object.entries(entries)) {
    const dist = `./dist/${distName(source)}`;
    field[subpath] = {
      import: { types: `${dist}.d.ts`, default: `${dist}.js` },
      require: { types: `${dist}.d.cts`, default: `${dist}.cjs` },
    };
  }
  field['./package.json'] = './package.json';
  return field;
}

/**
 * package.json `typesVersions`: the sub-paths' types for TypeScript's `node10` resolution
 * (`"module": "commonjs"` projects), which does not read `exports`. Those projects load the
 * CommonJS build, so they get its types. The root needs no line: `types` names it.
 */
export function typesVersionsField(): { '*': Record<string, string[]> } {
  const paths: Record<string, string[]> = {};
  for (const [subpath, source] of Object.entries(entries)) {
    if (subpath !== '.') paths[subpath.slice(2)] = [`./dist/${distName(source)}.d.cts`];
  }
  return { '*': paths };
}

/**
 * package.json `main`, `module` and `types`: the root for tools that read no `exports`.
 * Those that read `types` (TypeScript's node10 resolution) load `main`, the CommonJS build.
 */
export function legacyRootFields(): { main: string; module: string; types: string } {
  const dist = `./dist/${distName(entries['.'])}`;
  return { main: `${dist}.cjs`, module: `${dist}.js`, types: `${dist}.d.cts` };
}

/** tsconfig.json `paths`: the package's own specifiers, resolved to the sources. */
export function tsconfigPaths(): Record<string, string[]> {
  return Object.fromEntries(Object.entries(entries).map(([subpath, source]) => [specifierOf(subpath), [`./${source}`]]));
}

/** vitest's `resolve.alias`: each specifier, exactly, to its source under `root`. */
export function vitestAliases(root: string): Array<{ find: RegExp; replacement: string }> {
  const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
  const base = root.endsWith('/') ? root : `${root}/`;
  return Object.entries(entries).map(([subpath, source]) => ({ find: new RegExp(`^${escape(specifierOf(subpath))}$`), replacement: `${base}${source}` }));
}
