/**
 * What the Redis store reads of node-redis' private state (drivers/node-redis-cluster.ts):
 * the cluster client's slot map and seed nodes, pinned to the installed node-redis, and the
 * fallback (no refresh: node-redis follows MOVED replies) when the shape is not there. The
 * refresh itself, after a primary is killed, is proven by test/stores/redis-cluster.test.ts.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { createCluster } from '@keyv/redis';
import { describe, expect, it } from 'vitest';
import { hasSlotInternals, slotRefresher } from '../../drivers/node-redis-cluster.js';

const require = createRequire(import.meta.url);
const installed = (JSON.parse(readFileSync(require.resolve('@redis/client/package.json'), 'utf8')) as { version: string }).version;

/** A cluster client as the store gets it (not connected: the shape is there from construction). */
const clusterClient = () => createCluster({ rootNodes: [{ url: 'redis://127.0.0.1:7000' }, { url: 'redis://127.0.0.1:7001' }] });

describe("node-redis' private state, pinned to the installed version", () => {
  it(`@redis/client ${installed}: a cluster client keeps its slot map (_slots.rediscover) and seed nodes (_options.rootNodes)`, () => {
    // Checked against 5.x. Another major may keep them elsewhere: then the store stops
    // refreshing the slot map after a failure (routing recovers at the next MOVED) and this test says where to look.
    expect(installed, 'review drivers/node-redis-cluster.ts against this node-redis release').toMatch(/^5\./);
    const client = clusterClient();
    expect(hasSlotInternals(client)).toBe(true);
    expect(slotRefresher(client, () => false).internal).toBe(true);
  });

  it('a refresh starts from one of the seed nodes, one at a time, at most every interval, never once the store is closed', async () => {
    const client = clusterClient() as unknown as { _slots: { rediscover(start: { options: unknown }): Promise<void> } };
    const starts: unknown[] = [];
    let finish!: () => void;
    client._slots.rediscover = (start) => {
      starts.push(start.options);
      return new Promise<void>((resolve) => (finish = resolve));
    };
    let closed = false;
    const slots = slotRefresher(client, () => closed, 50);
    slots.refresh();
    slots.refresh(); // one at a time
    expect(starts).toHaveLength(1);
    expect([{ url: 'redis://127.0.0.1:7000' }, { url: 'redis://127.0.0.1:7001' }]).toContainEqual(starts[0]);
    finish();
    await new Promise((resolve) => setImmediate(resolve));
    slots.refresh(); // within the interval
    expect(starts).toHaveLength(1);
    await new Promise((resolve) => setTimeout(resolve, 60));
    slots.refresh();
    expect(starts).toHaveLength(2);
    finish();
    await new Promise((resolve) => setTimeout(resolve, 60));
    closed = true;
    slots.refresh();
    expect(starts).toHaveLength(2);
  });

  it('fallback: a client without the shape (another node-redis, a plain client) gets a refresher that does nothing, and throws nothing', () => {
    for (const client of [{}, null, { _slots: {} }, { _slots: { rediscover: () => Promise.resolve() }, _options: { rootNodes: [] } }]) {
      expect(hasSlotInternals(client)).toBe(false);
      const slots = slotRefresher(client, () => false);
      expect(slots.internal).toBe(false);
      expect(() => slots.refresh()).not.toThrow();
    }
  });
});
