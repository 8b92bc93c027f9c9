/**
 * H16/S6 follow-up found by the Redis pause test: a claim the engine gave up on (timeout,
 * 503) can still reach the store when it resumes. The engine then releases it with the
 * claim's own token, so the client's retry runs at once instead of getting 409 for a
 * whole lease. In process, over a store whose calls are held back like a paused server's.
 */
import { describe, expect, it } from 'vitest';
import { memoryStore } from '../../drivers/memory.js';
import { Engine } from '../../src/engine.js';
import { StoreUnavailableError } from '../../src/errors.js';
import type { IdempotencyStore } from '../../src/store.js';

/** A store whose commands queue while paused and then run in order, as Redis's do. */
function pausableStore(): { store: IdempotencyStore; pause(): void; resume(): Promise<void> } {
  const inner = memoryStore();
  let queue: (() => void)[] | undefined;
  const gate = <T>(run: () => Promise<T>): Promise<T> =>
    queue ? new Promise<T>((resolve, reject) => queue!.push(() => void run().then(resolve, reject))) : run();
  const store: IdempotencyStore = {
    name: 'pausable',
    claim: (...a) => gate(() => inner.claim(...a)),
    get: (...a) => gate(() => inner.get(...a)),
    complete: (...a) => gate(() => inner.complete(...a)),
    release: (...a) => gate(() => inner.release(...a)),
    extend: (...a) => gate(() => inner.extend(...a)),
    close: () => inner.close(),
  };
  return {
    store,
    pause: () => {
      queue = [];
    },
    resume: async () => {
      const waiting = queue ?? [];
      queue = undefined;
      for (const run of waiting) run();
      await new Promise((resolve) => setTimeout(resolve, 10));
    },
  };
}

describe('orphan claims after a store timeout', () => {
  it('H16/S6: a claim that lands after the 503 is released, so the retry executes at once', async () => {
    const { store, pause, resume } = pausableStore();
    const engine = new Engine({ store, storeTimeoutMs: 50, leaseMs: 60_000, waitMs: 0 });
    pause();
    await expect(engine.acquire('k', 'tenant', 'fp')).rejects.toBeInstanceOf(StoreUnavailableError);
    await resume(); // the queued claim runs now, then the engine's release of it
    const retry = await engine.acquire('k', 'tenant', 'fp');
    expect(retry.type).toBe('execute');
    if (retry.type === 'execute') await retry.lease.release();
  });

  it("H18: the clean-up is fenced by the claim's token: it never frees someone else's claim", async () => {
    const { store, pause, resume } = pausableStore();
    const engine = new Engine({ store, storeTimeoutMs: 50, leaseMs: 60_000, waitMs: 0 });
    // The owner runs in another process (another store object on the same data): a
    // duplicate in the owner's own process would wait on it in memory, never asking the store.
    const owner = await new Engine({ store: { ...store }, leaseMs: 60_000 }).acquire('k', undefined, 'fp');
    expect(owner.type).toBe('execute');
    pause();
    await expect(engine.acquire('k', undefined, 'fp')).rejects.toBeInstanceOf(StoreUnavailableError);
    await resume();
    // The owner's claim is intact: a duplicate still waits for it.
    await expect(engine.acquire('k', undefined, 'fp')).rejects.toMatchObject({ code: 'request-in-progress' });
    if (owner.type === 'execute') expect(await owner.lease.complete({ status: 200, headers: {}, body: new Uint8Array() })).toBe(true);
  });
});
