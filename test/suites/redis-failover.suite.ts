/**
 * Failover under load for a replicated Redis topology (Cluster, Sentinel): 4 worker
 * processes race on the same keys while a primary is SIGKILLed and its replica promoted
 * (test/helpers/failover-race.ts plays the round). Two tests: async replication (claims
 * recover once the replica is promoted) and `waitForReplicas` (no double execution),
 * `rounds` failovers each; each round lets the race settle `minKeys` keys before the kill and
 * again once all is healthy.
 * Run by test/stores/redis-cluster.test.ts and redis-sentinel.test.ts.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { failoverRound, type FailoverFigures, type FailoverTopology } from '../helpers/failover-race.js';

export interface RedisFailoverSuiteOptions {
  rounds: number;
  minKeys: number;
  /** Own cases, inside the suite's describe, after its two races. */
  extra?: (context: { topology: () => FailoverTopology }) => void;
}

export function redisFailoverSuite(name: string, topology: () => FailoverTopology, { rounds, minKeys, extra }: RedisFailoverSuiteOptions): void {
  describe(`${name} failover: SIGKILL a primary in the middle of a 4-process race`, () => {
    const figures: FailoverFigures[] = [];
    afterAll(() => {
      if (figures.length > 0) console.log(`${name} failover figures:\n${figures.map((f) => JSON.stringify(f)).join('\n')}`);
    });

    it(`async replication: ${rounds} failover(s); claims work again once the replica is promoted`, async () => {
      for (let round = 0; round < rounds; round++) {
        const result = await failoverRound(topology(), round, { minKeys });
        figures.push(result);
        expect(result.keys, JSON.stringify(result)).toBeGreaterThan(minKeys);
        // Claims recover after the promotion, not after the dead node comes back.
        expect(result.claimsSucceedAgainAfterMs, JSON.stringify(result)).toBeLessThan(result.promotedAfterMs + 5000);
      }
    }, 200_000 * rounds);

    it(`waitForReplicas { replicas: 1 }: ${rounds} failover(s) with no double execution`, async () => {
      for (let round = 0; round < rounds; round++) {
        const result = await failoverRound(topology(), round, { minKeys, waitForReplicas: { replicas: 1, timeoutMs: 100 } });
        figures.push(result);
        expect(result.keys, JSON.stringify(result)).toBeGreaterThan(minKeys);
        expect(result.doubleExecutions, JSON.stringify(result)).toBe(0);
      }
    }, 200_000 * rounds);

    extra?.({ topology });
  });
}
