/**
 * The optional peer dependency as users meet it, on the built package (dist/, built by
 * `npm test`'s pretest), in ESM and CommonJS: without @opentelemetry/api installed the
 * layer works and reports on diagnostics_channel only; with it, spans reach the
 * application's globally registered provider.
 */
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const repo = process.cwd();
if (!existsSync(path.join(repo, 'dist/index.js'))) throw new Error('dist/ is missing: build first (npx tsup; npm test does it)');

/** A package copy whose node_modules has everything but (optionally) @opentelemetry. */
function install(withOtel: boolean): string {
  const root = mkdtempSync(path.join(tmpdir(), `idempotency-kit-otel-${withOtel ? 'with' : 'without'}-`));
  cpSync(path.join(repo, 'dist'), path.join(root, 'dist'), { recursive: true });
  cpSync(path.join(repo, 'package.json'), path.join(root, 'package.json'));
  mkdirSync(path.join(root, 'node_modules'));
  for (const entry of readdirSync(path.join(repo, 'node_modules'))) {
    if (entry.startsWith('.') || (entry === '@opentelemetry' && !withOtel)) continue;
    symlinkSync(path.join(repo, 'node_modules', entry), path.join(root, 'node_modules', entry));
  }
  return root;
}

const roots: string[] = [];
afterAll(() => {
  for (const root of roots) rmSync(root, { recursive: true, force: true });
});

// The same program in both module systems: subscribe to the channel, optionally register
// an SDK tracer provider, call an idempotent function twice, print what was seen.
const program = (load: (what: string) => string, withOtel: boolean) => `
${load('dc')} 
const { idempotent } = ${load('./dist/index')};
const { memoryStore } = ${load('./dist/drivers/memory')};
let spans;
${
  withOtel
    ? `const api = ${load('@opentelemetry/api')};
const { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } = ${load('@opentelemetry/sdk-trace-base')};
spans = new InMemorySpanExporter();
api.trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] }));`
    : ''
}
const events = [];
dc.subscribe('idempotency-kit:event', (m) => events.push(m.type));
const handle = idempotent(async (n) => n * 2, { store: memoryStore(), key: (n) => String(n) });
const run = async () => {
  const results = [await handle(21), await handle(21)];
  let resolvable = true;
  try { ${load('@opentelemetry/api')}; } catch { resolvable = false; }
  console.log(JSON.stringify({ results, events, resolvable, spans: spans ? spans.getFinishedSpans().map((s) => s.name) : null }));
};
run();
`;

const esmLoad = (what: string) =>
  what === 'dc' ? '' : `(await import(${JSON.stringify(what.startsWith('.') ? `${what}.js` : what)}))`;
const cjsLoad = (what: string) =>
  what === 'dc' ? `const dc = require('node:diagnostics_channel');` : `require(${JSON.stringify(what.startsWith('.') ? `${what}.cjs` : what)})`;

function runIn(root: string, file: string, source: string) {
  writeFileSync(path.join(root, file), source);
  return JSON.parse(execFileSync(process.execPath, [file], { cwd: root, encoding: 'utf8' })) as {
    results: number[];
    events: string[];
    resolvable: boolean;
    spans: string[] | null;
  };
}

describe('@opentelemetry/api is an optional peer', () => {
  it.each(['esm', 'cjs'] as const)('without it (%s): the layer works and reports on diagnostics_channel', (kind) => {
    const root = install(false);
    roots.push(root);
    const source =
      kind === 'esm'
        ? `import dc from 'node:diagnostics_channel';\n${program(esmLoad, false)}`
        : program(cjsLoad, false);
    const seen = runIn(root, kind === 'esm' ? 'check.mjs' : 'check.cjs', source);
    expect(seen.resolvable).toBe(false);
    expect(seen.results).toEqual([42, 42]);
    expect(seen.events).toEqual(['claimed', 'completed', 'replayed']);
  });

  it.each(['esm', 'cjs'] as const)("with it (%s): spans reach the application's registered provider", (kind) => {
    const root = install(true);
    roots.push(root);
    const source =
      kind === 'esm' ? `import dc from 'node:diagnostics_channel';\n${program(esmLoad, true)}` : program(cjsLoad, true);
    const seen = runIn(root, kind === 'esm' ? 'check.mjs' : 'check.cjs', source);
    expect(seen.resolvable).toBe(true);
    expect(seen.results).toEqual([42, 42]);
    expect(seen.spans).toEqual([
      'idempotency.store claim',
      'idempotency.acquire',
      'idempotency.store complete',
      'idempotency.store claim',
      'idempotency.acquire',
    ]);
  });
});
