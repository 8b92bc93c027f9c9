/**
 * The built adapter (dist/) in a CommonJS Nest app, as a `"module": "commonjs"` project
 * runs it: the module starts (no decorator metadata needed), the interceptor replays, a
 * missing key is problem+json.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';
import { assertFreshBuild } from '../helpers/fresh-build.js';

const APP = fileURLToPath(new URL('../fixtures/nest-cjs/app.cjs', import.meta.url));

const PRELOAD_NEST11 = fileURLToPath(new URL('../fixtures/nest-cjs/nest11.cjs', import.meta.url));

for (const [nest, preload] of [
  ['NestJS 12', []],
  ['NestJS 11', ['--require', PRELOAD_NEST11]],
] as const) {
  it(`dist/adapters/nestjs.cjs runs in a CommonJS Nest app on ${nest}: one run, a replay, a problem+json 400`, async () => {
    assertFreshBuild('dist/adapters/nestjs.cjs');
    const { stdout } = await promisify(execFile)(process.execPath, [...preload, APP], { encoding: 'utf8' });
    const out = JSON.parse(stdout.trim().split('\n').at(-1)!);
    expect(out.nest).toBe(nest === 'NestJS 12' ? '12' : '11');
    expect(out.first).toEqual([201, '{"id":1,"amount":5}']);
    expect(out.second).toEqual([201, '{"id":1,"amount":5}', 'true']);
    expect(out.missing[0]).toBe(400);
    expect(out.missing[1]).toMatch(/^application\/problem\+json/);
    expect(out.runs).toBe(1);
  }, 60_000);
}
