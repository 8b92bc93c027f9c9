/**
 * Timer helpers shared by the engine and the drivers.
 * @module
 */

/** Settle with `promise`, or reject with `message` after `ms` (nothing hangs). */
export function withTimeout<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(message)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/**
 * Run `sweep` every `intervalMs` on an unref'd timer, one run at a time; a failed run is
 * retried on the next tick (store calls report outages, not the sweeper). `stop()` clears
 * the timer and waits for a run in progress. `intervalMs` 0 disables it.
 */
export function startSweeper(
  intervalMs: number,
  sweep: () => Promise<void>,
  ready: () => boolean = () => true,
): { stop: () => Promise<void> } {
  let running: Promise<void> | undefined;
  const timer =
    intervalMs > 0
      ? setInterval(() => {
          if (!ready()) return;
          running ??= sweep()
            .catch(() => undefined)
            .finally(() => {
              running = undefined;
            });
        }, intervalMs)
      : undefined;
  timer?.unref();
  return {
    stop: async () => {
      if (timer) clearInterval(timer);
      await running;
    },
  };
}
