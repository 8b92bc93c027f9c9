import { describe, expect, it } from 'vitest';
import { withTimeout } from '../../src/timers.js';

const later = <T>(ms: number, value: T) => new Promise<T>((resolve) => setTimeout(() => resolve(value), ms));

describe('withTimeout (one timer per duration over a queue of deadlines)', () => {
  it('S6: settles with the promise when it is in time, rejects with the message when it is not', async () => {
    await expect(withTimeout(later(5, 'ok'), 1000, 'too slow')).resolves.toBe('ok');
    await expect(withTimeout(Promise.reject(new Error('boom')), 1000, 'too slow')).rejects.toThrow('boom');
    const started = Date.now();
    await expect(withTimeout(new Promise(() => undefined), 60, 'too slow')).rejects.toThrow('too slow');
    expect(Date.now() - started).toBeGreaterThanOrEqual(55);
  });

  it('S6: many calls of one duration, settling in any order: each keeps its own deadline', async () => {
    const calls: Array<Promise<string>> = [];
    for (let i = 0; i < 200; i++) {
      // Even ones settle in time, in reverse order; odd ones never settle.
      const inner = i % 2 === 0 ? later(50 - i / 5, `v${i}`) : new Promise<string>(() => undefined);
      calls.push(withTimeout(inner, 120, `timeout ${i}`));
    }
    const results = await Promise.allSettled(calls);
    results.forEach((result, i) => {
      if (i % 2 === 0) expect(result).toEqual({ status: 'fulfilled', value: `v${i}` });
      else expect(result).toMatchObject({ status: 'rejected', reason: { message: `timeout ${i}` } });
    });
  });

  it('a deadline set after earlier ones settled still fires on time, and other durations do not wait on it', async () => {
    await withTimeout(later(1, 'a'), 80, 'x');
    const started = Date.now();
    const slow = withTimeout(new Promise(() => undefined), 300, 'slow').catch((e: Error) => [e.message, Date.now() - started]);
    const fast = withTimeout(new Promise(() => undefined), 40, 'fast').catch((e: Error) => [e.message, Date.now() - started]);
    const [fastResult, slowResult] = (await Promise.all([fast, slow])) as [[string, number], [string, number]];
    expect(fastResult[0]).toBe('fast');
    expect(fastResult[1]).toBeLessThan(300);
    expect(slowResult[0]).toBe('slow');
    expect(slowResult[1]).toBeGreaterThanOrEqual(295);
  });

  it('a settled call leaves no timer behind: a process whose calls all settled exits at once', async () => {
    const { execFile } = await import('node:child_process');
    const script = `
      const { withTimeout } = await import(${JSON.stringify(new URL('../../src/timers.ts', import.meta.url).pathname)});
      for (let i = 0; i < 100; i++) await withTimeout(Promise.resolve(i), 60_000, 'never');
    `;
    const started = Date.now();
    await new Promise<void>((resolve, reject) => {
      execFile(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], (error) => (error ? reject(error) : resolve()));
    });
    // Far below the 60 s deadline: nothing kept the event loop alive.
    expect(Date.now() - started).toBeLessThan(30_000);
  });

  it('a settled call keeps nothing of what it settled with while an earlier call of its duration still pends', async () => {
    const { setFlagsFromString } = await import('node:v8');
    const { runInNewContext } = await import('node:vm');
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    // A duration no other test uses, so this queue is this test's alone. The first call
    // never settles: the queue stays busy, as it does under steady load on a remote store.
    const ms = 1_237;
    const stuck = withTimeout(new Promise(() => undefined), ms, 'stuck').catch((error: Error) => error.message);
    const settle = async (): Promise<WeakRef<object>[]> => {
      const refs: WeakRef<object>[] = [];
      for (let i = 0; i < 50; i++) {
        const value = { payload: new Uint8Array(1024) };
        refs.push(new WeakRef(value));
        await withTimeout(Promise.resolve(value), ms, 'late');
      }
      const failure = new Error('store down');
      refs.push(new WeakRef(failure));
      await withTimeout(Promise.reject(failure), ms, 'late').catch(() => undefined);
      return refs;
    };
    const refs = await settle();
    for (let i = 0; i < 3; i++) {
      gc();
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect(refs.filter((ref) => ref.deref() !== undefined)).toHaveLength(0);
    expect(await stuck).toBe('stuck');
  });
});
