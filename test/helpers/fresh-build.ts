/** dist/ is what a user's runtime loads: tests that run it check it was built from the current sources. */
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../../', import.meta.url));

/** Throw unless `file` (under dist/) exists and is newer than every source file of src/, adapters/ and drivers/. */
export function assertFreshBuild(file = 'dist/adapters/fetch.js'): void {
  const built = join(root, file);
  if (!existsSync(built)) throw new Error('dist/ is missing: run `npx tsup` (npm test builds it first)');
  const builtAt = statSync(built).mtimeMs;
  for (const dir of ['src', 'adapters', 'drivers']) {
    for (const name of readdirSync(join(root, dir))) {
      if (name.endsWith('.ts') && statSync(join(root, dir, name)).mtimeMs > builtAt) {
        throw new Error(`dist/ is older than ${dir}/${name}: run \`npx tsup\` (npm test builds it first)`);
      }
    }
  }
}
