/**
 * The shape of the shipped code, as docs/architecture.md draws it: no import circles,
 * and data flows one way (adapter -> HTTP layer -> engine -> store). Imports are read
 * from the sources with TypeScript's own scanner (comments and strings are not imports;
 * `import type` and dynamic `import()` are), so this needs no tool of its own.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { join, posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { entries } from '../entries.js';

const root = fileURLToPath(new URL('../', import.meta.url));
/** What the build starts from: every entry of entries.ts, and the command (tsup.config.ts builds it). */
const BUILD_ROOTS = [...Object.values(entries), 'cli/index.ts'];

interface Module {
  /** Repository-relative path, e.g. `src/engine.ts`. */
  path: string;
  /** Relative imports, resolved to repository-relative paths (undefined when they resolve to no file). */
  local: { specifier: string; target: string | undefined }[];
  /** Package and built-in imports, e.g. `node:crypto`, `object-hash`. */
  external: string[];
}

function sourceFiles(dir: string): string[] {
  const found: string[] = [];
  for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory()) found.push(...sourceFiles(path));
    else if (/\.[cm]?ts$/.test(entry.name) && !entry.name.endsWith('.d.ts')) found.push(path);
  }
  return found;
}

/** `./x.js` from `src/a.ts` -> `src/x.ts` (TypeScript's NodeNext spelling), or a folder's index. */
function resolveLocal(from: string, specifier: string): string | undefined {
  const base = posix.normalize(posix.join(posix.dirname(from), specifier));
  const candidates = [base.replace(/\.([cm]?)js$/, '.$1ts'), base, `${base}.ts`, `${base}/index.ts`];
  return candidates.find((path) => existsSync(join(root, path)) && statSync(join(root, path)).isFile());
}

function readModule(path: string): Module {
  const { importedFiles } = ts.preProcessFile(readFileSync(join(root, path), 'utf8'), true, true);
  const module: Module = { path, local: [], external: [] };
  for (const { fileName: specifier } of importedFiles) {
    if (specifier.startsWith('.')) module.local.push({ specifier, target: resolveLocal(path, specifier) });
    else module.external.push(specifier);
  }
  return module;
}

function readModules(dirs: readonly string[]): Map<string, Module> {
  const modules = new Map<string, Module>();
  for (const dir of dirs) for (const path of sourceFiles(dir)) modules.set(path, readModule(path));
  return modules;
}

/** Every file the build roots reach through their imports: what ships. */
function reachable(roots: readonly string[]): Map<string, Module> {
  const modules = new Map<string, Module>();
  const visit = (path: string) => {
    if (modules.has(path)) return;
    const module = readModule(path);
    modules.set(path, module);
    for (const { target } of module.local) if (target !== undefined) visit(target);
  };
  for (const path of roots) visit(path);
  return modules;
}

/** The folders whose files ship: the top folder of every file the entries reach (derived, never written by hand). */
const SHIPPED = [...new Set([...reachable(BUILD_ROOTS).keys()].map((path) => path.split('/')[0]!))].sort();

/** Every import circle among `modules`, each as the path that closes it (`a -> b -> a`). */
function circles(modules: Map<string, Module>): string[] {
  const found: string[] = [];
  const state = new Map<string, 'open' | 'done'>();
  const stack: string[] = [];
  const visit = (path: string) => {
    state.set(path, 'open');
    stack.push(path);
    for (const { target } of modules.get(path)?.local ?? []) {
      if (target === undefined || !modules.has(target)) continue;
      if (state.get(target) === 'open') found.push([...stack.slice(stack.indexOf(target)), target].join(' -> '));
      else if (state.get(target) === undefined) visit(target);
    }
    stack.pop();
    state.set(path, 'done');
  };
  for (const path of [...modules.keys()].sort()) if (!state.has(path)) visit(path);
  return found;
}

/** The layer a shipped file belongs to: `adapters/internal` apart from the adapters themselves. */
function layerOf(path: string): string {
  if (path.startsWith('adapters/internal/')) return 'adapters/internal';
  return path.split('/')[0]!;
}

/** The adapter a file of `adapters/` belongs to: `adapters/koa.ts` and `adapters/nestjs/nest-rpc.ts` -> `koa`, `nestjs`. */
const adapterOf = (path: string) => path.split('/')[1]!.replace(/\.ts$/, '');

/** The layers of the shipped folders: each must have its rule below. */
const layersOf = (dirs: readonly string[]) => [...new Set(dirs.flatMap((dir) => sourceFiles(dir).map(layerOf)))].sort();

/** Which layers each layer may import (docs/architecture.md#layers). */
const ALLOWED: Record<string, readonly string[]> = {
  // The core knows no driver, adapter, framework or database client.
  src: ['src'],
  // A driver knows the core's types and helpers, and the other driver modules.
  drivers: ['src', 'drivers'],
  // An adapter is a translation over the core and the shared I/O modules, never over a
  // sibling adapter (what two adapters need goes to adapters/internal or the core) and
  // never a driver (the user picks the store). `adapters` here is the adapter's own folder
  // (adapters/nestjs/, adapters/hono/): a file of another adapter is a sibling, refused below.
  adapters: ['src', 'adapters/internal', 'adapters'],
  'adapters/internal': ['src', 'adapters/internal'],
  client: ['src', 'client'],
  cli: ['src', 'drivers', 'cli'],
  testing: ['src', 'testing'],
  // The broker recipes and the webhook receivers: the core's run-once flow. The webhook
  // receivers answer HTTP as the adapters do, so they read bodies and write answers through
  // the shared I/O modules; never through an adapter, and never a driver.
  consumers: ['src', 'consumers', 'adapters/internal'],
};

/**
 * The one import across a boundary that is allowed: the package's root entry also offers
 * the URL resolver (`import { createStore } from 'idempotency-kit'`). It is the package's
 * front door, not core code: no core module imports it (checked below), so the core itself
 * stays free of drivers.
 */
const EXCEPTIONS = new Set(['src/index.ts -> drivers/create-store.ts']);

/** Layering breaks among `modules`: `from -> to (why)`. */
function layeringBreaks(modules: Map<string, Module>): string[] {
  const breaks: string[] = [];
  for (const module of modules.values()) {
    const from = layerOf(module.path);
    for (const { specifier, target } of module.local) {
      if (target === undefined) {
        breaks.push(`${module.path} -> ${specifier} (resolves to no file)`);
        continue;
      }
      const edge = `${module.path} -> ${target}`;
      if (EXCEPTIONS.has(edge)) continue;
      const to = layerOf(target);
      if (!ALLOWED[from]?.includes(to)) breaks.push(`${edge} (${from} may import only ${ALLOWED[from]?.join(', ') ?? 'nothing'})`);
      else if (from === 'adapters' && to === 'adapters' && adapterOf(module.path) !== adapterOf(target)) breaks.push(`${edge} (an adapter never imports a sibling adapter)`);
      if (target === 'src/index.ts') breaks.push(`${edge} (the package entry is not imported: import the module itself)`);
    }
  }
  return breaks;
}

const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { dependencies?: Record<string, string> };
const packageName = (specifier: string) => (specifier.startsWith('@') ? specifier.split('/').slice(0, 2).join('/') : specifier.split('/')[0]!);
const builtins = new Set(builtinModules);

/** Bare imports of the core that are neither Node built-ins nor dependencies every user installs. */
function coreExternals(modules: Map<string, Module>): string[] {
  const found: string[] = [];
  for (const module of modules.values()) {
    if (layerOf(module.path) !== 'src') continue;
    for (const specifier of module.external) {
      const builtin = specifier.startsWith('node:') || builtins.has(specifier);
      if (!builtin && pkg.dependencies?.[packageName(specifier)] === undefined) found.push(`${module.path} imports ${specifier}`);
    }
  }
  return found;
}

describe('architecture: the import graph of the shipped code', () => {
  const modules = readModules(SHIPPED);

  it('reads every shipped folder: the folders the entries reach, each with its layering rule', () => {
    for (const root of BUILD_ROOTS) expect(modules.has(root), root).toBe(true);
    expect(SHIPPED).toEqual(expect.arrayContaining(['src', 'drivers', 'adapters', 'consumers', 'client', 'cli', 'testing']));
    // A folder that ships but has no rule would go unchecked.
    expect(layersOf(SHIPPED).filter((layer) => ALLOWED[layer] === undefined)).toEqual([]);
    expect(modules.get('src/engine.ts')?.local.map((l) => l.target)).toContain('src/acquire.ts');
  });

  it('docs/architecture.md names every shipped file (the one map of the code)', () => {
    const map = readFileSync(join(root, 'docs/architecture.md'), 'utf8');
    const named = (path: string) => map.includes(`\`${path}\``) || map.includes(`\`${posix.basename(path)}\``);
    expect([...modules.keys()].filter((path) => !named(path)).sort()).toEqual([]);
  });

  it('has no import circle (type-only and dynamic imports count)', () => {
    expect(circles(modules)).toEqual([]);
  });

  it('flows one way: the core imports no driver, adapter, client or CLI; drivers only the core; adapters never a driver or a sibling', () => {
    expect(layeringBreaks(modules)).toEqual([]);
  });

  it('the one allowed crossing is still needed (else drop the exception)', () => {
    const edges = [...modules.values()].flatMap((m) => m.local.map((l) => `${m.path} -> ${l.target}`));
    for (const exception of EXCEPTIONS) expect(edges, exception).toContain(exception);
  });

  it('the core loads no framework or database client: only Node built-ins and the package dependencies', () => {
    expect(coreExternals(modules)).toEqual([]);
  });

  it('the checks catch what they are meant to catch', () => {
    const graph = (edges: Record<string, string[]>, external: Record<string, string[]> = {}) =>
      new Map(
        Object.entries(edges).map(([path, targets]) => [
          path,
          { path, local: targets.map((target) => ({ specifier: target, target: target === '?' ? undefined : target })), external: external[path] ?? [] },
        ]),
      );
    expect(circles(graph({ 'src/a.ts': ['src/b.ts'], 'src/b.ts': ['src/c.ts'], 'src/c.ts': ['src/a.ts'] }))).toEqual([
      'src/a.ts -> src/b.ts -> src/c.ts -> src/a.ts',
    ]);
    expect(circles(graph({ 'src/a.ts': ['src/b.ts'], 'src/b.ts': [], 'src/c.ts': ['src/a.ts', 'src/b.ts'] }))).toEqual([]);
    expect(layeringBreaks(graph({ 'src/http.ts': ['drivers/redis.ts'], 'drivers/redis.ts': [] }))).toHaveLength(1);
    expect(layeringBreaks(graph({ 'drivers/redis.ts': ['adapters/internal/web-io.ts'], 'adapters/internal/web-io.ts': [] }))).toHaveLength(1);
    expect(layeringBreaks(graph({ 'adapters/koa.ts': ['adapters/node.ts'], 'adapters/node.ts': [] }))).toHaveLength(1);
    expect(layeringBreaks(graph({ 'adapters/koa.ts': ['drivers/memory.ts'], 'drivers/memory.ts': [] }))).toHaveLength(1);
    expect(layeringBreaks(graph({ 'adapters/hono/index.ts': ['src/index.ts'], 'src/index.ts': [] }))).toHaveLength(1);
    // An adapter's folder is the adapter: its files import each other, never another adapter's.
    expect(layeringBreaks(graph({ 'adapters/nestjs/index.ts': ['adapters/nestjs/nest-rpc.ts'], 'adapters/nestjs/nest-rpc.ts': [] }))).toEqual([]);
    expect(layeringBreaks(graph({ 'adapters/nestjs/nest-rpc.ts': ['adapters/hono/index.ts'], 'adapters/hono/index.ts': [] }))).toHaveLength(1);
    expect(layeringBreaks(graph({ 'adapters/koa.ts': ['adapters/hono/hono-request.ts'], 'adapters/hono/hono-request.ts': [] }))).toHaveLength(1);
    expect(layeringBreaks(graph({ 'adapters/internal/web-io.ts': ['adapters/hono/hono-request.ts'], 'adapters/hono/hono-request.ts': [] }))).toHaveLength(1);
    expect(layeringBreaks(graph({ 'src/a.ts': ['?'] }))).toHaveLength(1);
    expect(layeringBreaks(graph({ 'src/index.ts': ['drivers/create-store.ts'], 'adapters/koa.ts': ['adapters/internal/node-io.ts', 'src/http.ts'] }))).toEqual([]);
    expect(coreExternals(graph({ 'src/a.ts': [] }, { 'src/a.ts': ['node:crypto', 'crypto', 'object-hash', 'pg'] }))).toEqual(['src/a.ts imports pg']);
  });
});

/** docs/architecture.md's table of the files that read another package's private state. */
function privateStateFiles(page: string): { file: string; pkg: string; pinnedBy: string }[] {
  const start = page.indexOf("\n### Other packages' private state");
  const section = page.slice(start, page.indexOf('\n## ', start + 1));
  return [...section.matchAll(/^\| `([^`]+)` \| ([^|]+?) \| [^|]+ \| ([^|]+?) \|$/gm)].map(([, file, pkg, pinnedBy]) => ({ file: file!, pkg: pkg!, pinnedBy: pinnedBy! }));
}

/** The marks of a read of another package's private state, in code with its comments and types removed. */
const PRIVATE_MARKS: { mark: RegExp; what: string }[] = [
  { mark: /\b(?:Object|Reflect)\.setPrototypeOf\(/, what: 'changes the prototype of an object' },
  { mark: /\bObject\.getOwnPropertySymbols\(/, what: 'reads symbol-keyed fields' },
  { mark: /\bSymbol\.for\(\s*(['"`])(?!idempotency-kit\.)/, what: "reads another package's registered symbol" },
  // `_read` is Node's documented method for stream implementers, not a private member.
  { mark: /[\w)\]]\??\._(?!read\b)[A-Za-z]\w*/, what: 'reads an underscored (private) member' },
  { mark: /(['"`])__(?!proto__)[A-Za-z]+__\1/, what: "names a framework's private metadata key" },
  { mark: /\b(?:getMetadata|getOwnMetadataKeys|getMetadataKeys)\b/, what: "reads decorators' metadata directly" },
  { mark: /\bbodyCache\b/, what: "reads Hono's body cache" },
  { mark: /(['"`])microservices:/, what: "names @nestjs/microservices' metadata key" },
];

/**
 * Registered symbols of other packages that those packages document for users to write:
 * Fastify's plugin metadata (what fastify-plugin sets) and drizzle-orm's `entityKind`
 * (exported by drizzle-orm).
 */
const PUBLIC_SYMBOLS = new Set(["Symbol.for('skip-override')", "Symbol.for('fastify.display-name')", "Symbol.for('plugin-meta')", "Symbol.for('drizzle:entityKind')"]);

/** Code as it runs: no comments, no types (a type naming a private field reads nothing). */
const codeOf = (source: string) =>
  ts.transpileModule(source, { compilerOptions: { removeComments: true, target: ts.ScriptTarget.ESNext, module: ts.ModuleKind.ESNext } }).outputText;

/** Reads of another package's private state outside the files allowed to: `path:line: code (what)`. */
function privateReads(files: Map<string, string>, allowed: ReadonlySet<string>): string[] {
  const found: string[] = [];
  for (const [path, source] of files) {
    if (allowed.has(path)) continue;
    codeOf(source)
      .split('\n')
      .forEach((line, i) => {
        const visible = [...PUBLIC_SYMBOLS].reduce((text, symbol) => text.replaceAll(symbol, ''), line.replaceAll('"', "'"));
        for (const { mark, what } of PRIVATE_MARKS) if (mark.test(visible)) found.push(`${path}:${i + 1}: ${line.trim()} (${what})`);
      });
  }
  return found;
}

/** Whether a file's name says the package it reads: a word of three letters or more in common (`nestjs` counts as `nest`). */
function namedFor(file: string, pkg: string): boolean {
  const words = (text: string) => new Set(text.toLowerCase().split(/[^a-z]+/).map((w) => w.replace(/js$/, '')).filter((w) => w.length >= 3));
  const ofPackage = words(pkg);
  return [...words(posix.basename(file, '.ts'))].some((word) => ofPackage.has(word));
}

describe("architecture: another package's private state is read only in a file named for it", () => {
  const page = readFileSync(join(root, 'docs/architecture.md'), 'utf8');
  const listed = privateStateFiles(page);
  const shipped = readModules(SHIPPED);

  it('docs/architecture.md lists the files, each shipped, named for its package, and pinned by a test that imports it', () => {
    expect(listed.length).toBeGreaterThanOrEqual(5);
    for (const { file, pkg, pinnedBy } of listed) {
      expect(shipped.has(file), `${file} ships`).toBe(true);
      expect(namedFor(file, pkg), `${file} is named for ${pkg}`).toBe(true);
      expect(existsSync(join(root, pinnedBy)), `${pinnedBy} exists`).toBe(true);
      const test = readFileSync(join(root, pinnedBy), 'utf8');
      expect(test.includes(posix.basename(file, '.ts')), `${pinnedBy} tests ${file}`).toBe(true);
    }
  });

  it('no other shipped file reads another package\'s private state', () => {
    const files = new Map([...shipped.keys()].map((path) => [path, readFileSync(join(root, path), 'utf8')]));
    expect(privateReads(files, new Set(listed.map(({ file }) => file)))).toEqual([]);
  });

  it('the check catches what it is meant to catch', () => {
    const reads = (source: string) => privateReads(new Map([['adapters/koa.ts', source]]), new Set());
    expect(reads("Object.setPrototypeOf(res, proto);")).toHaveLength(1);
    expect(reads('const slots = client._slots;')).toHaveLength(1);
    expect(reads('const slots = client?._slots;')).toHaveLength(1);
    expect(reads("const k = Symbol.for('nodejs.stream.destroyed');")).toHaveLength(1);
    expect(reads("for (const s of Object.getOwnPropertySymbols(req)) {}")).toHaveLength(1);
    expect(reads("const sse = Reflect.getMetadata('__sse__', handler);")).toHaveLength(2);
    expect(reads('const cache = c.req.bodyCache;')).toHaveLength(1);
    expect(reads("const key = 'microservices:pattern';")).toHaveLength(1);
    // Ours, documented, or words in a comment or a type: not reads.
    expect(reads("const brand = Symbol.for('idempotency-kit.error');")).toEqual([]);
    expect(reads("const plugin = { [Symbol.for('skip-override')]: true };")).toEqual([]);
    expect(reads('// client._slots is read elsewhere\ninterface X { _slots?: unknown }\nconst y = 1;')).toEqual([]);
    expect(reads('const snake_case = a_b;')).toEqual([]);
    expect(reads("req._read = () => {}; if (key === '__proto__') {}")).toEqual([]);
    expect(reads('const bytes = file._buf;')).toHaveLength(1);
    // A listed file may.
    expect(privateReads(new Map([['drivers/node-redis-cluster.ts', 'client._slots.rediscover();']]), new Set(['drivers/node-redis-cluster.ts']))).toEqual([]);
    expect(namedFor('adapters/nestjs/nest-private.ts', '@nestjs/common')).toBe(true);
    expect(namedFor('adapters/internal/web-io.ts', '@hono/node-server')).toBe(false);
  });
});

// Rule ids (H1..H21, S1..S12, C1..C6) tag test names; users read the rules in words.
const RULE_ID = /\b[HSC]\d{1,2}\b/g;

describe('architecture: rule ids stay in the tests', () => {
  const worded = SHIPPED;

  it('shipped source files say the rule in words, never its id', () => {
    const found: string[] = [];
    for (const dir of worded) {
      for (const path of sourceFiles(dir)) {
        readFileSync(join(root, path), 'utf8')
          .split('\n')
          .forEach((line, i) => {
            for (const [id] of line.matchAll(RULE_ID)) found.push(`${path}:${i + 1}: ${id}`);
          });
      }
    }
    expect(found).toEqual([]);
  });

  const legend = (() => {
    const page = readFileSync(join(root, 'docs/architecture.md'), 'utf8');
    const start = page.indexOf('\n## Rule ids in test names');
    const end = page.indexOf('\n## ', start + 1);
    return page.slice(start, end === -1 ? undefined : end);
  })();

  it('docs/architecture.md has a legend line for each rule id, once', () => {
    const all = [
      ...Array.from({ length: 21 }, (_, i) => `H${i + 1}`),
      ...Array.from({ length: 12 }, (_, i) => `S${i + 1}`),
      ...Array.from({ length: 6 }, (_, i) => `C${i + 1}`),
    ];
    const defined = [...legend.matchAll(/^- \*\*([HSC]\d{1,2})\*\*/gm)].map((m) => m[1]);
    expect(defined).toEqual(all);
  });

  it('every rule id a test name carries is in the legend', () => {
    const defined = new Set([...legend.matchAll(/^- \*\*([HSC]\d{1,2})\*\*/gm)].map((m) => m[1]));
    const unknown: string[] = [];
    for (const path of sourceFiles('test')) {
      const source = readFileSync(join(root, path), 'utf8');
      for (const [, , title] of source.matchAll(/\b(?:it|test|describe)(?:\.\w+)*\(\s*(['"`])((?:(?!\1).)*)\1/g)) {
        for (const [id] of (title as string).matchAll(RULE_ID)) if (!defined.has(id)) unknown.push(`${path}: ${id}`);
      }
    }
    expect(unknown).toEqual([]);
  });
});
