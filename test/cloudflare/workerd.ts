/**
 * Runs Workers on the real workerd runtime for the Cloudflare tests: the npm `workerd`
 * package ships the runtime's binary in its platform package (@cloudflare/workerd-linux-64),
 * driven here with a Cap'n Proto config of our own (Miniflare and Wrangler 4 need Node 22;
 * workerd needs neither). Workers are bundled with esbuild as Wrangler bundles them: ES
 * modules, `workerd`/`worker`/`browser` conditions, Node built-ins left to workerd's
 * nodejs_compat (a CommonJS `require('crypto')` becomes an import of `node:crypto`).
 *
 * A runtime that cannot start is skipped loudly, and fails the run when CI is set.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { builtinModules, createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build, type Plugin } from 'esbuild';

export const root = fileURLToPath(new URL('../../', import.meta.url));
const require = createRequire(import.meta.url);

/** The compatibility date the tests' Workers run at: the one this workerd release ships with. */
export const COMPATIBILITY_DATE: string = (require('workerd') as { compatibilityDate: string }).compatibilityDate;
export const WORKERD_VERSION: string = (require('workerd/package.json') as { version: string }).version;

/** The runtime binary, if it is installed and runs here. */
function findWorkerd(): string | undefined {
  const arch = process.arch === 'arm64' ? 'arm64' : '64';
  for (const file of [
    join(root, `node_modules/@cloudflare/workerd-${process.platform}-${arch}/bin/workerd`),
    join(root, 'node_modules/workerd/bin/workerd'),
  ]) {
    if (!existsSync(file) || statSync(file).size < 1_000_000) continue; // the JavaScript launcher, not the binary
    if (spawnSync(file, ['--version'], { encoding: 'utf8' }).status === 0) return file;
  }
  return undefined;
}

export const WORKERD = findWorkerd();

/** Whether the workerd tests can run: a loud skip line locally, an error when CI is set. */
export function workerdAvailable(): boolean {
  if (WORKERD) return true;
  const message = 'workerd is not installed under node_modules (dev dependency `workerd`) or does not run here';
  if (process.env.CI) throw new Error(`${message} (CI is set: the Cloudflare tests must run)`);
  console.warn(`\n!!!!!!!! SKIPPING CLOUDFLARE WORKERD TESTS: ${message} !!!!!!!!\n`);
  return false;
}

/** A CommonJS `require()` of a Node built-in becomes an ES import of it, as Wrangler does under nodejs_compat. */
const nodeBuiltins: Plugin = {
  name: 'node-builtins',
  setup(context) {
    const names = new Set(builtinModules.filter((name) => !name.startsWith('_')));
    context.onResolve({ filter: /^[a-z_/]+$/ }, (args) => {
      if (!names.has(args.path)) return undefined;
      if (args.kind === 'require-call') return { path: args.path, namespace: 'node-builtin' };
      return { path: `node:${args.path}`, external: true };
    });
    context.onLoad({ filter: /.*/, namespace: 'node-builtin' }, (args) => ({
      contents: `export * from 'node:${args.path}'; export { default } from 'node:${args.path}';`,
      loader: 'js',
    }));
  },
};

/**
 * Bundle `entry` (TypeScript or JavaScript) into one ES module at `outfile`. `modules`:
 * extra modules by import specifier, given as source text (generated for a test).
 */
export async function bundleWorker(entry: string, outfile: string, modules: Record<string, string> = {}): Promise<void> {
  const generated: Plugin = {
    name: 'generated-modules',
    setup(context) {
      const filter = new RegExp(`^(${Object.keys(modules).map((m) => m.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('|')})$`);
      context.onResolve({ filter }, (args) => ({ path: args.path, namespace: 'generated' }));
      context.onLoad({ filter: /.*/, namespace: 'generated' }, (args) => ({ contents: modules[args.path], loader: 'js' }));
    },
  };
  await build({
    entryPoints: [entry],
    outfile,
    bundle: true,
    format: 'esm',
    platform: 'neutral',
    target: 'es2022',
    conditions: ['workerd', 'worker', 'browser'],
    mainFields: ['browser', 'module', 'main'],
    external: ['cloudflare:*', 'node:*'],
    plugins: Object.keys(modules).length > 0 ? [generated, nodeBuiltins] : [nodeBuiltins],
    logLevel: 'error',
  });
}

/** A running workerd: the port of each socket of its config. */
export interface Workerd {
  ports: Record<string, number>;
  url(socket: string): string;
  output(): string;
  /** Stop it (SIGTERM, or SIGKILL as a crash would) and wait for it to exit. */
  stop(signal?: NodeJS.Signals): Promise<void>;
  readonly process: ChildProcess;
}

/** Start `workerd serve` on the config at `configFile`; resolves once every socket listens. */
export async function startWorkerd(configFile: string, sockets: readonly string[], cwd: string): Promise<Workerd> {
  if (!WORKERD) throw new Error('workerd is not available');
  const child = spawn(WORKERD, ['serve', configFile, '--experimental', '--control-fd=3'], {
    cwd,
    stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (chunk) => (output += chunk));
  child.stderr!.on('data', (chunk) => (output += chunk));
  const ports: Record<string, number> = {};
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await new Promise<void>((resolve, reject) => {
    let control = '';
    const timer = setTimeout(() => reject(new Error(`workerd did not listen within 20 s:\n${output}`)), 20_000);
    (child.stdio[3] as NodeJS.ReadableStream).on('data', (chunk) => {
      control += chunk;
      for (const line of control.split('\n').slice(0, -1)) {
        const message = JSON.parse(line) as { event?: string; socket?: string; port?: number };
        if (message.event === 'listen' && message.socket) ports[message.socket] = message.port!;
      }
      control = control.slice(control.lastIndexOf('\n') + 1);
      if (sockets.every((socket) => ports[socket] !== undefined)) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`workerd exited (${code ?? signal}) before listening:\n${output}`));
    });
  });
  return {
    ports,
    url: (socket) => `http://127.0.0.1:${ports[socket]}`,
    output: () => output,
    process: child,
    async stop(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      await exited;
    },
  };
}

/** A fresh directory for one test file's bundles, configs and storage; removed by `remove()`. */
export function scratchDir(name: string): { dir: string; path(...parts: string[]): string; remove(): void } {
  const dir = mkdtempSync(join(tmpdir(), `idempotency-${name}-`));
  return {
    dir,
    path: (...parts) => join(dir, ...parts),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

export function writeText(file: string, text: string): void {
  mkdirSync(join(file, '..'), { recursive: true });
  writeFileSync(file, text);
}
