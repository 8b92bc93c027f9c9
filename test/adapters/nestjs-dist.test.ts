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

it('dist/adapters/nestjs.cjs runs in a CommonJS Nest app: one run, a replay, a problem+json 400', async () => {
  assertFreshBuild('dist/adapters/nestjs.cjs');
  const { stdout } = await promisify(execFile)(process.execPath, [APP], { encoding: 'utf8' });
  const out = JSON.parse(stdout.trim().split('\n').at(-1)!);
  expect(out.first).toEqual([201, '{"id":1,"amount":5}']);
  expect(out.second).toEqual([201, '{"id":1,"amount":5}', 'true']);
  expect(out.missing[0]).toBe(400);
  expect(out.missing[1]).toMatch(/^application\/problem\+json/);
  expect(out.runs).toBe(1);
}, 60_000);
