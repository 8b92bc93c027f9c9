/**
 * Side by side with @aws-lambda-powertools/idempotency on one dynalite (bench/lambda-powertools.ts):
 * the four double-execution bugs as scenarios, a concurrent duplicate through Middy, a
 * SIGKILLed invocation and its retry, 200 concurrent invocations over 20 keys, and the
 * capacity of a first execution and of a replay. Ours: no double anywhere, a duplicate
 * behind Middy is never an error, and no more capacity units per first execution and per
 * replay than Powertools. The table is printed (docs/adapters/lambda.md has a run of it).
 */
import { describe, expect, it } from 'vitest';
import { compare, table, type Row } from '../../bench/lambda-powertools.js';

describe('Lambda: side by side with Powertools', () => {
  it('H9: ours runs every key once in every scenario, and costs no more per first execution and per replay', async () => {
    const rows = await compare();
    console.log(table(rows));
    const ours = rows.filter((r) => r.lib === 'ours');
    const theirs = (scenario: string) => rows.find((r) => r.lib === 'powertools' && r.scenario === scenario)!;
    expect(ours).toHaveLength(9);
    for (const row of ours) expect(row.doubles, row.scenario).toBe(0);
    // A concurrent duplicate through Middy gets an HTTP answer (409 or the replay), never an error.
    for (const row of ours.filter((r) => r.scenario.includes('Middy'))) {
      expect(Object.keys(row.answers).filter((a) => a.startsWith('error')), row.scenario).toEqual([]);
    }
    // 200 invocations over 20 keys: at most one execution per key (on a loaded machine a
    // store call may time out, and that invocation fails closed instead of running).
    const storm = ours.find((r) => r.scenario.startsWith('7.'))!;
    expect(storm.executions).toBeLessThanOrEqual(20);
    expect(storm.executions).toBeGreaterThan(0);
    const units = (row: Row) => row.readUnits + row.writeUnits;
    for (const prefix of ['8.', '9.']) {
      const row = ours.find((r) => r.scenario.startsWith(prefix))!;
      expect(row.writeUnits, row.scenario).toBeLessThanOrEqual(theirs(row.scenario).writeUnits);
      expect(units(row), row.scenario).toBeLessThanOrEqual(units(theirs(row.scenario)));
    }
  }, 120_000);
});
