/**
 * The HTTP conformance table (test/suites/http-conformance.suite.ts) with each scenario's app, the
 * fetch adapter's or Hono's, running inside workerd on a Workers store: the harness builds
 * the app from the scenario's options (its function options are compiled into the bundle,
 * as no code can be sent to a Worker at run time), serves it on the `app` socket, and
 * reports what its handlers, store and events saw after every reply.
 */
import { afterAll, beforeAll, describe } from 'vitest';
import { runScenarios, scenarios, type HostedApp, type ScenarioHost } from '../suites/http-conformance.suite.js';
import { Calls } from '../adapters/web-apps.js';
import type { AdapterName } from '../adapters/apps.js';
import type { IdempotencyEvent } from '../../src/events.js';
import { buildHarness, startHarness } from './harness-runtime.js';
import { scratchDir, workerdAvailable, type Workerd } from './workerd.js';
import { fromWire } from './wire.js';

/** Each scenario's options as JSON: a function becomes `{ $fn: i }`, its source the i-th of `functions`. */
function scenarioOptions(): { functions: string[]; options: Map<(typeof scenarios)[number], Record<string, unknown>> } {
  const functions: string[] = [];
  const options = new Map<(typeof scenarios)[number], Record<string, unknown>>();
  for (const scenario of scenarios) {
    const json: Record<string, unknown> = {};
    for (const [name, value] of Object.entries(scenario.options ?? {})) {
      if (typeof value === 'function') {
        json[name] = { $fn: functions.length };
        functions.push(String(value));
      } else json[name] = value;
    }
    options.set(scenario, json);
  }
  return { functions, options };
}

/**
 * Register the whole table for `adapter` inside workerd, on the Workers store of each
 * `kinds` ('do', 'd1'). A scenario whose store is unreachable gets the same driver over a
 * binding that fails (a namespace without SQLite storage, a D1 that refuses connections).
 */
export function conformanceOnWorkerd(adapter: Extract<AdapterName, 'fetch' | 'hono'>, kinds: Array<'do' | 'd1'>): void {
  const run = workerdAvailable();
  describe.skipIf(!run)(`${adapter} adapter conformance inside workerd`, () => {
    const scratch = scratchDir(`cf-conformance-${adapter}`);
    const { functions, options } = scenarioOptions();
    let workerd: Workerd;
    beforeAll(async () => {
      await buildHarness(scratch.dir, functions);
      workerd = await startHarness(scratch.dir);
    }, 60_000);
    afterAll(async () => {
      if (process.env.SHOW_WORKERD) console.log(workerd?.output()); // the runtime's own log, to debug a failure
      await workerd?.stop();
      scratch.remove();
    });

    for (const kind of kinds) {
      describe(`on the ${kind === 'do' ? 'Durable Objects' : 'D1'} store`, () => {
        const host = (): ScenarioHost => ({
          name: `workerd-${kind}`,
          async start(_adapter, scenario, observed): Promise<HostedApp> {
            const store = scenario.store === 'unreachable' ? `${kind}-broken` : scenario.store === 'hanging' ? 'hanging' : kind;
            const response = await fetch(`${workerd.url('control')}/apps`, {
              method: 'POST',
              body: JSON.stringify({ adapter, store, options: options.get(scenario) }),
            });
            if (!response.ok) throw new Error(`the harness refused the app: ${await response.text()}`);
            const { id } = (await response.json()) as { id: number };
            const calls = new Calls();
            return {
              app: { adapter, url: workerd.url('app'), port: workerd.ports.app!, calls, close: async () => {} },
              async sync() {
                const state = fromWire<{ calls: Record<string, number>; storeCalls: typeof observed.storeCalls; events: IdempotencyEvent[] }>(
                  await (await fetch(`${workerd.url('control')}/apps/${id}/state`)).text(),
                );
                calls.load(state.calls);
                Object.assign(observed.storeCalls, state.storeCalls);
                observed.events.splice(0, observed.events.length, ...state.events);
              },
              close: async () => {},
            };
          },
          close: async () => {},
        });
        // In workerd a request's promises end with it (a client that left ends the invocation,
        // and its lease timer with it): the scenario of a handler hanging after its client
        // left cannot be staged there.
        runScenarios(adapter, host, scenarios.filter((s) => !s.title.includes('renewal stops at the disconnect')));
      });
    }
  });
}
