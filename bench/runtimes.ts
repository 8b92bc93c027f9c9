/**
 * Bun and Deno from node_modules: both come from the npm registry as dev dependencies
 * (`bun`, `deno`), with the binary in their platform package. Used by the bench (fetch
 * adapter on Bun.serve and Deno.serve) and by test/adapters/runtimes.test.ts.
 * @module
 */
import { spawnSync } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';

export type RuntimeName = 'bun' | 'deno';

/** The first candidate that runs `--version`: the npm bin (real once its postinstall ran), else the platform package's binary. */
function findBinary(candidates: string[]): string | undefined {
  for (const file of candidates) {
    if (!existsSync(file) || statSync(file).size < 1_000_000) continue; // a placeholder, not the binary
    if (spawnSync(file, ['--version'], { encoding: 'utf8' }).status === 0) return file;
  }
  return undefined;
}

const found = new Map<string, string | undefined>();

/**
 * The runtime's binary under `root`/node_modules, or undefined when it is not installed or
 * does not run here; looked for once per process (the bench asks at every server start).
 */
export function runtimeBinary(root: string, name: RuntimeName): string | undefined {
  const where = `${root}\u0000${name}`;
  if (!found.has(where)) found.set(where, lookFor(root, name));
  return found.get(where);
}

function lookFor(root: string, name: RuntimeName): string | undefined {
  if (name === 'bun') {
    const arch = process.arch === 'arm64' ? 'aarch64' : process.arch;
    return findBinary([
      join(root, 'node_modules/bun/bin/bun.exe'),
      join(root, `node_modules/@oven/bun-${process.platform}-${arch}/bin/bun`),
      join(root, `node_modules/@oven/bun-${process.platform}-${arch}-baseline/bin/bun`),
    ]);
  }
  return findBinary([
    join(root, 'node_modules/deno/deno'),
    join(root, `node_modules/@deno/${process.platform}-${process.arch === 'arm64' ? 'arm64' : 'x64'}-glibc/deno`),
  ]);
}

/** The arguments that run `script` on the runtime (Deno with the permissions a server needs). */
export function runtimeArgs(name: RuntimeName, script: string): string[] {
  return name === 'bun' ? [script] : ['run', '--allow-net', '--allow-env', '--allow-read', '--allow-sys', script];
}
