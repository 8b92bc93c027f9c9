/**
 * The published shape: every entry point (entries.ts) resolves with `import` and `require`
 * (from dist/, built by `npm test`'s pretest), exports what its source exports, has types,
 * and loads no client it does not need.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { entries, specifierOf, subpaths, type Subpath } from '../entries.js';

const pkg = JSON.parse(readFileSync('package.json', 'utf8')) as {
  name: string;
  exports: Record<string, string | { import: { types: string; default: string }; require: { types: string; default: string } }>;
};

const node = (args: string[]) => execFileSync(process.execPath, args, { encoding: 'utf8', cwd: process.cwd() }).trim();
const esmKeys = (sub: string) =>
  (JSON.parse(node(['--input-type=module', '-e', `const m = await import(${JSON.stringify(specifierOf(sub))}); console.log(JSON.stringify(Object.keys(m)))`])) as string[]).sort();
const cjsKeys = (sub: string) => (JSON.parse(node(['-e', `console.log(JSON.stringify(Object.keys(require(${JSON.stringify(specifierOf(sub))}))))`])) as string[]).sort();
/** What the entry's source exports (vitest runs it from source): the built entry must export the same. */
const sourceKeys = async (sub: Subpath) => Object.keys(await import(/* @vite-ignore */ fileURLToPath(new URL(`../${entries[sub]}`, import.meta.url)))).sort();

describe('package exports', () => {
  it('every entry (entries.ts) is declared, with types first, and its files are built', () => {
    for (const sub of subpaths) {
      const entry = pkg.exports[sub];
      expect(entry, sub).toBeTypeOf('object');
      if (typeof entry !== 'object') continue;
      for (const condition of [entry.import, entry.require]) {
        expect(Object.keys(condition)[0]).toBe('types');
        expect(existsSync(condition.types), condition.types).toBe(true);
        expect(existsSync(condition.default), condition.default).toBe(true);
      }
    }
  });

  it('the root and ./node export only the public surface (internals stay behind the package boundary)', () => {
    expect(esmKeys('.')).toEqual(
      [
        'BodyTooLargeError', 'Idempotency', 'RequestInProgressError', 'IdempotencyError', 'IdempotencyKeyError',
        'KeyReusedError', 'KeyMissingError', 'KeyInvalidError', 'MemoryStoreInProductionError',
        // Deprecated names, kept for one minor release (each warns once).
        'IdempotencyMismatchError', 'IdempotencyConflictError',
        'RecordUnreadableError', 'ResponseNotReplayableError', 'ResultNotStorableError', 'ScopeRequiredError',
        'StoreUnavailableError', 'createIdempotency', 'createStore', 'defaultStoreResponse', 'idempotent', 'idempotentBatch', 'isIdempotencyError',
        'inTransaction', 'LeaseLostError', 'TransactionConflictError', 'withLocalCache',
      ].sort(),
    );
    expect(esmKeys('./node')).toEqual(['withIdempotency']);
  });

  // The Durable Object class extends workerd's own `cloudflare:workers` module, which only
  // workerd has: that entry is loaded there instead (test/cloudflare/example.test.ts bundles
  // the example Worker against dist/ and runs it).
  const WORKERD_ONLY = new Set(['./drivers/durable-objects']);
  it('the Workers entries import, besides their own files, only cloudflare:workers and what nodejs_compat provides', () => {
    const outside = new Set<string>();
    const seen = new Set<string>();
    const visit = (file: string) => {
      if (seen.has(file)) return;
      seen.add(file);
      for (const [, specifier] of readFileSync(file, 'utf8').matchAll(/(?:from|import)\s*['"]([^'"]+)['"]/g)) {
        if (specifier!.startsWith('.')) visit(join(file, '..', specifier!));
        else outside.add(specifier!);
      }
    };
    visit('dist/drivers/durable-objects.js');
    expect(outside.has('cloudflare:workers')).toBe(true);
    visit('dist/drivers/d1.js');
    expect([...outside].filter((s) => !['cloudflare:workers', 'node:crypto', 'node:module'].includes(s))).toEqual([]);
  });

  for (const sub of subpaths.filter((sub) => !WORKERD_ONLY.has(sub))) {
    it(`${sub} resolves with import and with require, each exporting what its source exports`, async () => {
      const names = await sourceKeys(sub);
      expect(names.length, `${sub} exports nothing`).toBeGreaterThan(0);
      expect(esmKeys(sub), `import ${sub}`).toEqual(names);
      expect(cjsKeys(sub), `require ${sub}`).toEqual(names);
    });
  }

  it('C4: an error from the ESM copy is recognised by the CommonJS copy, and back', () => {
    const out = node([
      '--input-type=module',
      '-e',
      `import { createRequire } from 'node:module';
       const require = createRequire(process.cwd() + '/');
       const cjs = require('${pkg.name}');
       const esm = await import('${pkg.name}');
       console.log(JSON.stringify([
         cjs.isIdempotencyError(new esm.KeyReusedError()),
         esm.isIdempotencyError(new cjs.RequestInProgressError()),
         new esm.KeyReusedError() instanceof cjs.KeyReusedError,
       ]));`,
    ]);
    expect(JSON.parse(out)).toEqual([true, true, false]);
  });

  it('one driver or adapter never loads another driver\'s database client', () => {
    const loaded = (sub: string) =>
      JSON.parse(
        node(['-e', `require(${JSON.stringify(specifierOf(sub))}); console.log(JSON.stringify(Object.keys(require.cache)))`]),
      ) as string[];
    const clients = {
      redis: '/node_modules/@redis/',
      postgres: '/node_modules/pg/',
      sqlite: '/node_modules/sqlite3/',
      mysql: '/node_modules/mysql2/',
      // the store contract takes the test runner as an argument: it never loads one itself
      vitest: '/node_modules/vitest/',
    };
    const uses = (files: string[], client: string) => files.some((f) => f.includes(client));
    // Every entry but a driver of that database (a driver may load its own client, now or lazily).
    for (const sub of subpaths.filter((sub) => !WORKERD_ONLY.has(sub))) {
      const files = loaded(sub);
      for (const [name, client] of Object.entries(clients)) {
        if (sub !== `./drivers/${name}`) expect(uses(files, client), `${sub} loads ${client}`).toBe(false);
      }
    }
    // The client entries import got and ky as types only: the user's own copy is passed in.
    expect(uses(loaded('./client/got'), '/node_modules/got/')).toBe(false);
    expect(uses(loaded('./client/ky'), '/node_modules/ky/')).toBe(false);
    // The check can fail: a driver does load its own client.
    expect(uses(loaded('./drivers/redis'), clients.redis)).toBe(true);
    expect(uses(loaded('./drivers/redis'), clients.postgres)).toBe(false);
    expect(uses(loaded('./drivers/redis'), clients.sqlite)).toBe(false);
    expect(uses(loaded('./drivers/postgres'), clients.redis)).toBe(false);
    expect(uses(loaded('./drivers/sqlite'), clients.postgres)).toBe(false);
    expect(uses(loaded('./drivers/postgres'), clients.mysql)).toBe(false);
  });
});
