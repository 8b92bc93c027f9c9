/**
 * The harness Worker (./harness.ts) on workerd, seen from the tests: build it, write its
 * config, start it, and call its stores. One config for every Cloudflare test file:
 *
 *   harness        the harness, with the IdempotencyObject namespace on disk (SQLite)
 *   edge-b         the same bundle in a second isolate, on the same namespace and database
 *   broken-objects IdempotencyObject without SQLite storage (a `new_classes` migration)
 *   d1 / kv        workerd's own D1 and KV services (`/workerd/d1.js`, `/workerd/kv.js`),
 *                  each database a SQLite-backed Durable Object on the same disk
 *   nowhere        an address that refuses connections (a D1 that cannot be reached)
 */
import { existsSync, mkdirSync } from 'node:fs';
import type {
  ClaimRequest,
  ClaimResult,
  IdempotencyRecord,
  IdempotencyStore,
  MaintenanceOptions,
  ScanOptions,
  ScanPage,
  StoreStats,
  StoredResponse,
} from '../../src/store.js';
import { COMPATIBILITY_DATE, bundleWorker, root, startWorkerd, writeText, type Workerd } from './workerd.js';
import { fromWire, toWire, type Outcome } from './wire.js';

export const SOCKETS = ['control', 'app', 'edge-a', 'edge-b'] as const;

/**
 * The Worker services' compatibility date: this workerd's own, whose defaults include what
 * the package needs (nodejs_compat, Node's timers). The example Worker (./example.test.ts)
 * also runs at an older date with the two flags that stand for them.
 */
const COMPAT = `compatibilityDate = "${COMPATIBILITY_DATE}"`;

const string = (text: string) => JSON.stringify(text);

function config(dir: string): string {
  const bindings = `[
    (name = "IDEMPOTENCY", durableObjectNamespace = (className = "IdempotencyObject", serviceName = "harness")),
    (name = "QUICK", durableObjectNamespace = (className = "QuickSweepObject", serviceName = "harness")),
    (name = "MANUAL", durableObjectNamespace = (className = "ManualSweepObject", serviceName = "harness")),
    (name = "BROKEN", durableObjectNamespace = (className = "IdempotencyObject", serviceName = "broken-objects")),
    (name = "DB", wrapped = (moduleName = "cloudflare-internal:d1-api", innerBindings = [
      (name = "fetcher", service = (name = "d1", props = (json = ${string(JSON.stringify({ database: 'test' }))}))) ])),
    (name = "BROKEN_DB", wrapped = (moduleName = "cloudflare-internal:d1-api", innerBindings = [
      (name = "fetcher", service = "nowhere") ])),
    (name = "KV", kvNamespace = (name = "kv", props = (json = ${string(JSON.stringify({ namespace: 'test' }))}))),
  ]`;
  const role = (name: string) => `props = (json = ${string(JSON.stringify({ role: name }))})`;
  return `using Workerd = import "/workerd/workerd.capnp";

const config :Workerd.Config = (
  services = [
    (name = "harness", worker = (
      modules = [(name = "harness.js", esModule = embed "harness.js")],
      ${COMPAT},
      bindings = ${bindings},
      durableObjectNamespaces = [
        (className = "IdempotencyObject", uniqueKey = "idempotency-kit-test", enableSql = true),
        (className = "ManualSweepObject", uniqueKey = "idempotency-kit-manual", enableSql = true),
        (className = "QuickSweepObject", uniqueKey = "idempotency-kit-quick", enableSql = true),
      ],
      durableObjectStorage = (localDisk = "disk"),
    )),
    (name = "edge-b", worker = (
      modules = [(name = "harness.js", esModule = embed "harness.js")],
      ${COMPAT},
      bindings = ${bindings},
    )),
    (name = "broken-objects", worker = (
      modules = [(name = "harness.js", esModule = embed "harness.js")],
      ${COMPAT},
      durableObjectNamespaces = [(className = "IdempotencyObject", uniqueKey = "idempotency-kit-broken", enableSql = false)],
      durableObjectStorage = (localDisk = "disk"),
    )),
    (name = "d1", worker = (
      modules = [(name = "d1", bundled = "/workerd/d1.js")],
      ${COMPAT},
      bindings = [(name = "DATABASE", durableObjectNamespace = "D1Database")],
      durableObjectNamespaces = [(className = "D1Database", uniqueKey = "idempotency-kit-d1", enableSql = true)],
      durableObjectStorage = (localDisk = "disk"),
    )),
    (name = "kv", worker = (
      modules = [(name = "kv", bundled = "/workerd/kv.js")],
      ${COMPAT},
      bindings = [(name = "SHARD", durableObjectNamespace = "KVNamespace"), (name = "BLOBS", service = "disk")],
      durableObjectNamespaces = [(className = "KVNamespace", uniqueKey = "idempotency-kit-kv", enableSql = true)],
      durableObjectStorage = (localDisk = "disk"),
    )),
    (name = "nowhere", external = (address = "127.0.0.1:1", http = ())),
    (name = "disk", disk = (path = ${string(dir)}, writable = true)),
  ],
  sockets = [
    (name = "control", address = "127.0.0.1:0", http = (), service = (name = "harness", ${role('control')})),
    (name = "app", address = "127.0.0.1:0", http = (), service = (name = "harness", ${role('app')})),
    (name = "edge-a", address = "127.0.0.1:0", http = (), service = (name = "harness", ${role('edge')})),
    (name = "edge-b", address = "127.0.0.1:0", http = (), service = (name = "edge-b", ${role('edge')})),
  ],
);
`;
}

/** Bundle the harness into `dir` (once per directory) with `functions` as the scenarios' function options. */
export async function buildHarness(dir: string, functions: readonly string[] = []): Promise<void> {
  const bundle = `${dir}/harness.js`;
  if (!existsSync(bundle)) {
    await bundleWorker(`${root}/test/cloudflare/harness.ts`, bundle, {
      'virtual:scenario-functions': `export default [${functions.join(',\n')}];`,
    });
  }
  mkdirSync(`${dir}/storage`, { recursive: true });
  writeText(`${dir}/config.capnp`, config(`${dir}/storage`));
}

/** Start workerd on the harness built in `dir` (its storage in `dir/storage`, kept across restarts). */
export const startHarness = (dir: string): Promise<Workerd> => startWorkerd(`${dir}/config.capnp`, SOCKETS, dir);

/** POST `args` to the harness's control socket at `path` and return the outcome's value (or throw its error). */
export async function callHarness<T>(workerd: Workerd, path: string, args: unknown, onProgress?: (n: number) => void): Promise<T> {
  const response = await fetch(`${workerd.url('control')}${path}`, { method: 'POST', body: toWire(args) });
  const text = await response.text();
  if (!response.ok) throw new Error(`harness answered ${response.status}: ${text}`);
  const outcome = fromWire<Outcome<T>>(text);
  if ('error' in outcome) throw Object.assign(new Error(outcome.error.message), { name: outcome.error.name });
  for (const n of outcome.progress ?? []) onProgress?.(n);
  return outcome.value;
}

/**
 * A store in this process whose every call is one call of the store of `kind` inside
 * workerd (its `name` is that store's): the contract runs here against the real driver there.
 */
export function storeInWorkerd(workerd: () => Workerd, kind: string, name: string): IdempotencyStore {
  const call = <T>(method: string, ...args: unknown[]) => callHarness<T>(workerd(), `/store/${kind}/${method}`, args);
  const maintain = <T>(method: string, options?: MaintenanceOptions) =>
    callHarness<T>(workerd(), `/store/${kind}/${method}`, [], options?.onProgress);
  return {
    name,
    claim: (key: string, request: ClaimRequest, leaseMs: number) => call<ClaimResult>('claim', key, request, leaseMs),
    get: (key: string) => call<IdempotencyRecord | undefined>('get', key),
    complete: (key: string, token: string, response: StoredResponse, ttlMs: number) => call<boolean>('complete', key, token, response, ttlMs),
    release: (key: string, token: string) => call<boolean>('release', key, token),
    extend: (key: string, token: string, leaseMs: number) => call<boolean>('extend', key, token, leaseMs),
    delete: (key: string) => call<boolean>('delete', key),
    stats: (options?: MaintenanceOptions) => maintain<StoreStats>('stats', options),
    sweep: (options?: MaintenanceOptions) => maintain<number>('sweep', options),
    scan: (options: ScanOptions) => call<ScanPage>('scan', options),
    replaceResponse: (key: string, token: string, response: StoredResponse) => call<boolean>('replaceResponse', key, token, response),
    // The store in workerd stays: other tests of the file use it.
    close: async () => {},
  };
}
