/**
 * examples/cloudflare as a user deploys it: its Worker bundled against the built package
 * (`idempotency-kit/...` resolved through package.json `exports` to dist/, as installed),
 * run on workerd with the bindings, migration and compatibility date of its wrangler.jsonc;
 * and again at an older date with the two flags docs/drivers/cloudflare.md names.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, send } from '../adapters/client.js';
import { assertFreshBuild } from '../helpers/fresh-build.js';
import { bundleWorker, root, scratchDir, startWorkerd, workerdAvailable, writeText, type Workerd } from './workerd.js';

interface WranglerConfig {
  main: string;
  compatibility_date: string;
  compatibility_flags?: string[];
  durable_objects: { bindings: Array<{ name: string; class_name: string }> };
  migrations: Array<{ new_sqlite_classes?: string[] }>;
}

const exampleDir = join(root, 'examples/cloudflare');
/** wrangler.jsonc: JSON with comments (none inside its strings). */
const wrangler = JSON.parse(readFileSync(join(exampleDir, 'wrangler.jsonc'), 'utf8').replace(/^\s*\/\/.*$/gm, '')) as WranglerConfig;

/** A workerd config with what wrangler.jsonc declares: the Durable Object bindings and their SQLite classes. */
function config(storage: string, date: string, flags: readonly string[]): string {
  const sqlite = new Set(wrangler.migrations.flatMap((m) => m.new_sqlite_classes ?? []));
  const bindings = wrangler.durable_objects.bindings;
  return `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "example", worker = (
      modules = [(name = "worker.js", esModule = embed "worker.js")],
      compatibilityDate = ${JSON.stringify(date)},
      compatibilityFlags = ${JSON.stringify(flags)},
      bindings = [${bindings.map((b) => `(name = ${JSON.stringify(b.name)}, durableObjectNamespace = ${JSON.stringify(b.class_name)})`).join(', ')}],
      durableObjectNamespaces = [${bindings
        .map((b) => `(className = ${JSON.stringify(b.class_name)}, uniqueKey = ${JSON.stringify(`example-${b.class_name}`)}, enableSql = ${sqlite.has(b.class_name)})`)
        .join(', ')}],
      durableObjectStorage = (localDisk = "disk"),
    )),
    (name = "disk", disk = (path = ${JSON.stringify(storage)}, writable = true)),
  ],
  sockets = [(name = "http", address = "127.0.0.1:0", http = (), service = "example")],
);
`;
}

const run = workerdAvailable();
const scratch = scratchDir('cf-example');
beforeAll(async () => {
  if (!run) return;
  assertFreshBuild('dist/drivers/durable-objects.js');
  // Bundled from inside the repository, so that `idempotency-kit` is the package itself (dist/).
  await bundleWorker(join(exampleDir, wrangler.main), scratch.path('worker.js'));
}, 60_000);
afterAll(() => scratch.remove());

const variants = [
  { name: `as its wrangler.jsonc says (${wrangler.compatibility_date})`, date: wrangler.compatibility_date, flags: wrangler.compatibility_flags ?? [] },
  { name: 'at 2024-09-23 with nodejs_compat and enable_nodejs_global_timers', date: '2024-09-23', flags: ['nodejs_compat', 'enable_nodejs_global_timers'] },
];

for (const [n, variant] of variants.entries()) {
  describe.skipIf(!run)(`examples/cloudflare on workerd, ${variant.name}`, () => {
    let workerd: Workerd;
    beforeAll(async () => {
      const dir = scratch.path(`run-${n}`);
      writeText(join(dir, 'storage', '.keep'), '');
      writeText(join(dir, 'config.capnp'), config(join(dir, 'storage'), variant.date, variant.flags));
      writeText(join(dir, 'worker.js'), readFileSync(scratch.path('worker.js'), 'utf8'));
      workerd = await startWorkerd(join(dir, 'config.capnp'), ['http'], dir);
    }, 30_000);
    afterAll(async () => {
      await workerd?.stop();
    });

    it('H6 H7 H2 H14 H15: one order per key and account, replayed byte for byte; 400 without a key, 422 for another body', async () => {
      const url = workerd.url('http');
      const order = { path: '/orders', key: '8e03978e', body: { sku: 'A1' }, headers: { 'x-account-id': 'acct_1' } };
      const first = await send(url, order);
      expect(first.status, first.text).toBe(201);
      expect(first.json()).toMatchObject({ sku: 'A1' });
      expect(first.headers.location).toBe(`/orders/${first.json().id as string}`);
      const again = await send(url, order);
      expect(again.headers['idempotent-replayed']).toBe('true');
      expect(again.body.equals(first.body)).toBe(true);
      expect(again.headers.location).toBe(first.headers.location);
      expectProblem(await send(url, { ...order, key: undefined }), 400, 'key-missing');
      expectProblem(await send(url, { ...order, body: { sku: 'B2' } }), 422, 'key-reused');
      const other = await send(url, { ...order, headers: { 'x-account-id': 'acct_2' } });
      expect(other.status).toBe(201);
      expect(other.headers['idempotent-replayed']).toBeUndefined();
      expect(other.json().id).not.toBe(first.json().id);
    });
  });
}
