/**
 * What `npm pack` ships from a clone: `prepack` builds dist/ first, so the tarball always
 * has every entry point, the LICENSE and the docs, and none of the tests or sources' tooling.
 */
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

// A copy of the sources without dist/, as a fresh clone has them (dist/ here is in use by
// other suites while this one runs).
const clone = mkdtempSync(join(tmpdir(), 'idempotency-pack-'));
afterAll(() => rmSync(clone, { recursive: true, force: true }));

describe('npm pack', () => {
  it('ships dist (built by prepack), LICENSE, README and docs; no tests', () => {
    const root = resolve('.');
    for (const entry of ['package.json', 'tsup.config.ts', 'tsconfig.json', 'README.md', 'LICENSE', 'src', 'adapters', 'drivers', 'docs', 'client', 'cli', 'testing', 'consumers']) {
      if (existsSync(join(root, entry))) cpSync(join(root, entry), join(clone, entry), { recursive: true });
    }
    symlinkSync(join(root, 'node_modules'), join(clone, 'node_modules'));
    const out = execFileSync('npm', ['pack', '--dry-run', '--json', '--silent'], { cwd: clone, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
    const [pack] = JSON.parse(out.slice(out.indexOf('['))) as Array<{ files: Array<{ path: string }> }>;
    const files = pack!.files.map((f) => f.path);
    const pkg = JSON.parse(readFileSync(join(clone, 'package.json'), 'utf8')) as { exports: Record<string, unknown>; license: string };
    expect(pkg.license).toBe('MIT');
    expect(files).toContain('LICENSE');
    expect(files).toContain('README.md');
    expect(files.some((f) => f.startsWith('docs/'))).toBe(true);
    expect(files.some((f) => f.startsWith('test/'))).toBe(false);
    // Every file an export points at is in the tarball.
    const targets = JSON.stringify(pkg.exports).match(/\.\/dist\/[^"]+/g) ?? [];
    expect(targets.length).toBeGreaterThan(10);
    for (const target of targets) expect(files, target).toContain(target.slice(2));
    // So is the command line (package.json `bin`).
    for (const bin of Object.values((pkg as { bin?: Record<string, string> }).bin ?? {})) expect(files, bin).toContain(bin.replace(/^\.\//, ''));
  }, 120_000);
});
