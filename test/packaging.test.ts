/**
 * The tarball as users get it. A copy of the sources without dist/ (as a fresh clone has
 * them) is packed once: `prepack` builds dist/ first, so the tarball has every entry point,
 * the LICENSE and the docs, and none of the tests. That one tarball is then
 * - linted by publint and by Are the Types Wrong (attw), offline: clean for ESM and
 *   CommonJS consumers under node10, node16 and bundler resolution;
 * - installed into consumer projects (extracted into node_modules, the peers linked from this
 *   repository's node_modules) that import every entry point, and type-checked by `tsc`
 *   with `"module": "commonjs"` (node10 resolution, a NestJS project's default), node16,
 *   nodenext, and bundler resolution, from ESM and from CommonJS files; the CommonJS build
 *   is then run as such a project runs it.
 */
import { execFile, execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { entries, packageName, specifierOf, subpaths, workerdOnly } from '../entries.js';

const run = promisify(execFile);
const root = resolve('.');
const bin = (name: string) => join(root, 'node_modules', '.bin', name);

// The copy: dist/ here is in use by other suites while this one runs.
const work = mkdtempSync(join(tmpdir(), 'idempotency-pack-'));
const clone = join(work, 'clone');
afterAll(() => rmSync(work, { recursive: true, force: true }));

let tarball = '';
let packed: string[] = [];

beforeAll(async () => {
  mkdirSync(clone);
  for (const entry of ['package.json', 'entries.ts', 'tsup.config.ts', 'tsconfig.json', 'README.md', 'CHANGELOG.md', 'LICENSE', 'docs', 'cli', ...new Set(Object.values(entries).map((source) => source.split('/')[0]!))]) {
    if (existsSync(join(root, entry))) cpSync(join(root, entry), join(clone, entry), { recursive: true });
  }
  symlinkSync(join(root, 'node_modules'), join(clone, 'node_modules'));
  const { stdout } = await run('npm', ['pack', '--json', '--silent', '--pack-destination', work], { cwd: clone, encoding: 'utf8', maxBuffer: 16 * 1024 * 1024 });
  const [pack] = JSON.parse(stdout.slice(stdout.indexOf('['))) as Array<{ filename: string; files: Array<{ path: string }> }>;
  tarball = join(work, pack!.filename);
  packed = pack!.files.map((f) => f.path);
}, 180_000);

/** Each entry's runtime export names, from its source (vitest runs it from source). */
async function exportNames(): Promise<Record<string, string[]>> {
  const names: Record<string, string[]> = {};
  for (const subpath of subpaths) {
    if (workerdOnly.has(subpath)) {
      // Node cannot load it (it imports workerd's `cloudflare:workers`): its value exports, as written.
      const text = readFileSync(join(root, entries[subpath]), 'utf8');
      names[subpath] = [...text.matchAll(/^export \{([^}]*)\}/gm)].flatMap(([, list]) =>
        list!.split(',').map((name) => name.trim()).filter((name) => name && !name.startsWith('type ')),
      );
      continue;
    }
    const module = (await import(/* @vite-ignore */ join(root, entries[subpath]))) as Record<string, unknown>;
    names[subpath] = Object.keys(module).filter((name) => name !== 'default');
  }
  return names;
}

describe('npm pack', () => {
  it('ships dist (built by prepack), LICENSE, README, CHANGELOG and docs; no tests', () => {
    const pkg = JSON.parse(readFileSync(join(clone, 'package.json'), 'utf8')) as { exports: Record<string, unknown>; license: string; bin?: Record<string, string> };
    expect(pkg.license).toBe('MIT');
    for (const file of ['LICENSE', 'README.md', 'CHANGELOG.md', 'package.json']) expect(packed).toContain(file);
    expect(packed.some((f) => f.startsWith('docs/'))).toBe(true);
    expect(packed.some((f) => f.startsWith('test/'))).toBe(false);
    // Every file an export or a typesVersions line points at is in the tarball.
    const targets = JSON.stringify([pkg.exports, (pkg as { typesVersions?: unknown }).typesVersions]).match(/\.\/dist\/[^"]+/g) ?? [];
    expect(targets.length).toBeGreaterThan(subpaths.length * 4);
    for (const target of targets) expect(packed, target).toContain(target.slice(2));
    // So is the command line (package.json `bin`).
    for (const command of Object.values(pkg.bin ?? {})) expect(packed, command).toContain(command.replace(/^\.\//, ''));
  });

  it('publint finds nothing to say about the tarball (errors, warnings and suggestions alike)', async () => {
    const { stdout } = await run(bin('publint'), ['run', tarball, '--strict', '--level', 'suggestion'], { encoding: 'utf8' });
    expect(stdout).toContain('All good!');
  }, 60_000);

  it('Are the Types Wrong: every entry resolves with types under node10, node16 (from CommonJS and from ESM) and bundler, with no problem', async () => {
    // A local tarball and no DefinitelyTyped look-up: nothing is fetched.
    const result = await run(bin('attw'), [tarball, '--format', 'json', '--no-definitely-typed', '--profile', 'strict'], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 }).catch(
      (error: { stdout?: string }) => ({ stdout: error.stdout ?? '' }),
    );
    const report = JSON.parse(result.stdout) as {
      analysis: {
        problems: Array<{ kind: string; entrypoint?: string; resolutionKind?: string }>;
        entrypoints: Record<string, { resolutions: Record<string, { resolution?: { fileName: string; isTypeScript: boolean } }> }>;
      };
    };
    expect(report.analysis.problems).toEqual([]);
    for (const subpath of subpaths) {
      const entry = report.analysis.entrypoints[subpath];
      expect(entry, `attw did not look at ${subpath}`).toBeDefined();
      for (const kind of ['node10', 'node16-cjs', 'node16-esm', 'bundler']) {
        const resolution = entry!.resolutions[kind]?.resolution;
        expect(resolution?.isTypeScript, `${subpath} under ${kind}`).toBe(true);
        // CommonJS consumers get the CommonJS build's types, ESM consumers the ESM build's.
        expect(resolution!.fileName, `${subpath} under ${kind}`).toMatch(kind === 'node10' || kind === 'node16-cjs' ? /\.d\.cts$/ : /\.d\.ts$/);
      }
    }
  }, 60_000);
});

/**
 * The consumer projects: each a `tsc` run over files that import every entry point. One
 * module flavour per project, as projects are built: a program that loads both the ESM and
 * the CommonJS types of one package sees two copies of every declaration. `libCheck`: the
 * package's declaration files are type-checked too (`skipLibCheck` off), in the strictest
 * project of each resolution and flavour; the others load the same files in a mode that
 * only adds leniency (nodenext allows what node16 refuses), and skip that cost.
 */
const projects: Record<
  string,
  { compilerOptions: Record<string, unknown>; files: Record<string, 'import' | 'require'>; libCheck: boolean; usage?: string; esmOnlyPeers?: RegExp }
> = {
  // A NestJS project's tsconfig: CommonJS output, node10 resolution (no `exports`).
  'node10-cjs': { compilerOptions: { module: 'commonjs', moduleResolution: 'node10', noEmit: false, outDir: 'out' }, files: { 'index.ts': 'import' }, libCheck: true },
  // ES modules with node10 resolution (older bundler set-ups): the same declaration files.
  'node10-esm': { compilerOptions: { module: 'ES2022', moduleResolution: 'node10' }, files: { 'index.ts': 'import' }, libCheck: false },
  // Nest 12 is ESM only: under node16 a CommonJS file cannot import it at all (TS1479, for the
  // project's own `import '@nestjs/common'` as for ours), so that one error is Nest's; Nest 11
  // (CommonJS) and nodenext (require of ESM) have no such error.
  'node16-cjs': {
    compilerOptions: { module: 'node16', moduleResolution: 'node16' },
    files: { 'index.cts': 'import', 'require.cts': 'require' },
    libCheck: true,
    esmOnlyPeers: /error TS1479: [^\n]*'import\("@nestjs\/(common|core)"\)'/,
  },
  'node16-esm': { compilerOptions: { module: 'node16', moduleResolution: 'node16' }, files: { 'index.mts': 'import' }, libCheck: true, usage: 'usage.mts' },
  'nodenext-cjs': { compilerOptions: { module: 'nodenext', moduleResolution: 'nodenext' }, files: { 'index.cts': 'import' }, libCheck: false },
  'nodenext-esm': { compilerOptions: { module: 'nodenext', moduleResolution: 'nodenext' }, files: { 'index.mts': 'import' }, libCheck: false },
  'bundler-esm': { compilerOptions: { module: 'ESNext', moduleResolution: 'bundler' }, files: { 'index.ts': 'import' }, libCheck: true, usage: 'usage.ts' },
  // `import x = require()` under "module": "preserve": the bundler's `require` condition.
  'bundler-cjs': { compilerOptions: { module: 'preserve', moduleResolution: 'bundler' }, files: { 'index.cts': 'require' }, libCheck: true },
};

/**
 * A few typed uses, beside the imports: the client wrappers hand back the caller's own
 * instance type, the Fastify plugin takes typed options, and wrong input is refused.
 */
const usage = `import got, { type Got } from 'got';
import ky, { type KyInstance } from 'ky';
import Fastify from 'fastify';
import { idempotentGot } from '${packageName}/client/got';
import { idempotentKy } from '${packageName}/client/ky';
import { idempotency } from '${packageName}/fastify';
import { memoryStore } from '${packageName}/drivers/memory';

export const typedGot: Got = idempotentGot(got, { maxAttempts: 3 });
export const typedKy: KyInstance = idempotentKy(ky);
// @ts-expect-error not an HTTP client instance
idempotentGot({ get: 1 });
const app = Fastify();
await app.register(idempotency, { store: memoryStore(), scope: 'shared', waitMs: 0 });
// @ts-expect-error wait is a number of milliseconds
await app.register(idempotency, { store: memoryStore(), waitMs: 'soon' });
app.post('/off', { config: { idempotency: false } }, async () => ({}));
`;

describe('a consumer project type-checks every entry point', () => {
  const consumer = join(work, 'consumer');
  let names: Record<string, string[]> = {};
  const results = new Map<string, Promise<string>>();

  /**
   * A file that imports every entry point and uses each runtime export at a type that must
   * not be `any` (an entry whose types did not resolve, or resolved to nothing, fails).
   * `style`: ES import statements, or `import x = require()`.
   */
  const importsAll = (style: 'import' | 'require', only: readonly string[] = subpaths) => {
    const lines = ['type Typed<T> = 0 extends 1 & T ? never : T;', 'export const checks: unknown[] = [];'];
    subpaths.forEach((subpath, i) => {
      if (!only.includes(subpath)) return;
      const specifier = specifierOf(subpath);
      lines.push(style === 'import' ? `import * as entry${i} from '${specifier}';` : `import entry${i} = require('${specifier}');`);
      for (const name of names[subpath]!) lines.push(`checks.push(entry${i}.${name} satisfies Typed<typeof entry${i}.${name}>);`);
    });
    return `${lines.join('\n')}\n`;
  };

  /**
   * Writes a project into its own folder and runs tsc on it. Errors reported in this
   * package's files or the project's own are returned; those inside other packages'
   * declarations (with `skipLibCheck` off, @types/koa disagrees with content-disposition's
   * own types) are not this package's to fix.
   */
  async function typecheck(name: string, compilerOptions: Record<string, unknown>, files: Record<string, string>, esmOnlyPeers?: RegExp): Promise<string> {
    const dir = join(consumer, name);
    mkdirSync(dir, { recursive: true });
    for (const [file, text] of Object.entries(files)) writeFileSync(join(dir, file), text);
    writeFileSync(
      join(dir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: { target: 'ES2022', lib: ['ES2023', 'DOM'], strict: true, esModuleInterop: true, skipLibCheck: false, types: ['node'], noEmit: true, ...compilerOptions },
        files: Object.keys(files),
      }),
    );
    const { stdout } = await run(process.execPath, [join(root, 'node_modules/typescript/bin/tsc'), '-p', dir, '--pretty', 'false'], { encoding: 'utf8' }).catch(
      (error: { stdout?: string; stderr?: string }) => ({ stdout: `${error.stdout ?? ''}${error.stderr ?? ''}` || 'tsc failed' }),
    );
    const ours = (line: string) => !/^\S*node_modules\//.test(line) || line.includes(`node_modules/${packageName}/`);
    // An error's continuation lines (indented) go with it.
    const errors = stdout.split(/\n(?=\S)/).filter((error) => error.trim() && ours(error) && !esmOnlyPeers?.test(error));
    return errors.join('\n').trim();
  }

  beforeAll(async () => {
    names = await exportNames();
    const modules = join(consumer, 'node_modules');
    mkdirSync(modules, { recursive: true });
    // Installed as npm installs it: the tarball's contents under node_modules/<name>.
    execFileSync('tar', ['xzf', tarball, '-C', consumer]);
    renameSync(join(consumer, 'package'), join(modules, packageName));
    // The peers (frameworks, database clients, their types) from this repository's install.
    for (const name of readdirSync(join(root, 'node_modules'))) {
      if (name.startsWith('.') || name === packageName) continue;
      symlinkSync(join(root, 'node_modules', name), join(modules, name));
    }
    writeFileSync(join(consumer, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'commonjs' }));
    // Two tsc processes at a time (one per core), all queued now; each test awaits its own.
    const lanes = [Promise.resolve(), Promise.resolve()];
    Object.entries(projects).forEach(([name, project], i) => {
      // node10-cjs runs its output in Node: there the workerd-only entries are left out.
      const only = name === 'node10-cjs' ? subpaths.filter((sub) => !workerdOnly.has(sub)) : subpaths;
      const files = Object.fromEntries(Object.entries(project.files).map(([file, style]) => [file, importsAll(style, only)]));
      // A Worker project has workerd's module declarations (@cloudflare/workers-types or wrangler's).
      files['cloudflare-workers.d.ts'] = readFileSync(join(root, 'drivers/cloudflare-workers.d.ts'), 'utf8');
      if (project.usage) files[project.usage] = usage;
      const result = lanes[i % 2]!.then(() => typecheck(name, { ...project.compilerOptions, skipLibCheck: !project.libCheck }, files, project.esmOnlyPeers));
      lanes[i % 2] = result.then(() => undefined);
      results.set(name, result);
    });
  }, 60_000);

  for (const [name, project] of Object.entries(projects)) {
    const flavour = Object.keys(project.files).join(' + ');
    it(`${name}: ${JSON.stringify(project.compilerOptions.module)} with ${JSON.stringify(project.compilerOptions.moduleResolution)} resolution, every entry from ${flavour}${project.usage ? ', typed uses' : ''}${project.libCheck ? ', declarations checked' : ''}`, async () => {
      expect(await results.get(name)).toBe('');
      if (name === 'node10-cjs') {
        // The emitted CommonJS runs, as such a project runs it: every entry loads with require().
        const { stdout } = await run(process.execPath, ['-e', 'console.log(require("./node10-cjs/out/index.js").checks.length)'], { cwd: consumer, encoding: 'utf8' });
        expect(Number(stdout)).toBe(Object.entries(names).filter(([sub]) => !workerdOnly.has(sub as never)).flatMap(([, list]) => list).length);
      }
    }, 120_000);
  }

  it("node16-cjs's tolerated TS1479 is Nest 12's own: a CommonJS file there cannot import @nestjs/common either", async () => {
    const out = await typecheck('nest-esm-only', { module: 'node16', moduleResolution: 'node16', skipLibCheck: true }, {
      'index.cts': `import { Module } from '@nestjs/common';\nexport const checks = [Module];\n`,
    });
    expect(out).toMatch(projects['node16-cjs']!.esmOnlyPeers!);
  }, 120_000);

  it('the check can fail: an entry that does not exist is TS2307, an untyped value is refused', async () => {
    const out = await typecheck('control', { module: 'commonjs', moduleResolution: 'node10', skipLibCheck: true }, {
      'index.ts': `type Typed<T> = 0 extends 1 & T ? never : T;\nimport * as missing from '${packageName}/no-such-entry';\nconst loose: any = 1;\nexport const checks = [missing, loose satisfies Typed<typeof loose>];\n`,
    });
    expect(out).toContain('TS2307');
    expect(out).toContain(`'${packageName}/no-such-entry'`);
    expect(out).toMatch(/TS1360|TS2322/); // `any` does not satisfy Typed<any> (never)
  }, 120_000);
});
