/**
 * Timer helpers shared by the engine and the drivers.
 * @module
 */

interface Deadline {
  at: number;
  message: string;
  reject: ((error: Error) => void) | undefined;
}

/**
 * The pending deadlines of one duration, in the order they were set (so earliest first),
 * under one timer armed for the head: a call costs an array push, not a setTimeout and a
 * clearTimeout. When no deadline is pending the timer is not cleared but unref'd (so a
 * settled call never keeps the process alive) and left to fire once, harmlessly: a fast
 * store settles every call before the next one starts, and re-arming a timer per call
 * would cost what this queue saves.
 */
class DeadlineQueue {
  readonly #items: Array<Deadline | undefined> = [];
  #head = 0;
  #pending = 0;
  #timer: NodeJS.Timeout | undefined;
  /** Whether the timer keeps the process alive: only while a deadline is pending. */
  #refed = false;
  /** The setTimeout that armed the timer: a test that swaps in fake timers gets a timer of its own. */
  #armedWith: typeof setTimeout | undefined;
  #armedFor: Deadline | undefined;

  constructor(readonly ms: number) {}

  add(message: string, reject: (error: Error) => void): Deadline {
    const deadline: Deadline = { at: Date.now() + this.ms, message, reject };
    this.#items.push(deadline);
    this.#pending++;
    if (this.#timer === undefined || this.#armedWith !== setTimeout) this.#arm();
    else if (!this.#refed) {
      this.#timer.ref();
      this.#refed = true;
    }
    return deadline;
  }

  settle(deadline: Deadline): void {
    if (deadline.reject === undefined) return;
    deadline.reject = undefined;
    if (--this.#pending === 0) this.#idle();
  }

  /** Nothing pending: forget the settled deadlines and let the armed timer run out unref'd. */
  #idle(): void {
    this.#items.length = 0;
    this.#head = 0;
    if (this.#timer !== undefined && this.#refed) {
      this.#timer.unref();
      this.#refed = false;
    }
  }

  #arm(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    const items = this.#items;
    while (this.#head < items.length && items[this.#head]!.reject === undefined) items[this.#head++] = undefined;
    if (this.#head > 1024 && this.#head * 2 > items.length) {
      items.splice(0, this.#head);
      this.#head = 0;
    }
    const next = items[this.#head];
    if (next === undefined) return;
    this.#armedFor = next;
    this.#armedWith = setTimeout;
    this.#timer = setTimeout(() => this.#fire(), Math.max(0, next.at - Date.now()));
    this.#refed = true;
  }

  #fire(): void {
    this.#timer = undefined;
    // The deadline this timer was armed for has passed, whatever the wall clock says now.
    const due = this.#armedFor;
    this.#armedFor = undefined;
    const now = Date.now();
    const items = this.#items;
    while (this.#head < items.length) {
      const deadline = items[this.#head]!;
      if (deadline !== due && deadline.reject !== undefined && deadline.at > now) break;
      items[this.#head++] = undefined;
      const reject = deadline.reject;
      if (reject === undefined) continue;
      deadline.reject = undefined;
      this.#pending--;
      reject(new Error(deadline.message));
    }
    if (this.#pending === 0) this.#idle();
    else this.#arm();
  }
}

const queues = new Map<number, DeadlineQueue>();

/**
 * On Cloudflare Workers (workerd) a timer belongs to the request that set it and ends with
 * it: a queue's timer armed by one request would be gone once that request answered, and
 * the calls of later requests would have no bound (a hanging store hung the request until
 * the runtime cancelled it). There each call has a timer of its own.
 */
const timerPerCall = (globalThis as { navigator?: { userAgent?: unknown } }).navigator?.userAgent === 'Cloudflare-Workers';

function withOwnTimer<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(message)), ms);
  });
  return Promise.race([promise, expired]).finally(() => clearTimeout(timer));
}

/**
 * Settle with `promise`, or reject with `message` after `ms` (nothing hangs). `mapError`,
 * when given, turns either failure into the error rejected with.
 */
export function withTimeout<T>(promise: Promise<T>, ms: number, message: string, mapError?: (error: unknown) => unknown): Promise<T> {
  if (timerPerCall) {
    const bounded = withOwnTimer(promise, ms, message);
    return mapError === undefined ? bounded : bounded.catch((error: unknown) => Promise.reject(mapError(error)));
  }
  let queue = queues.get(ms);
  if (queue === undefined) {
    queue = new DeadlineQueue(ms);
    queues.set(ms, queue);
  }
  const q = queue;
  return new Promise<T>((resolve, reject) => {
    const fail = mapError === undefined ? reject : (error: unknown) => reject(mapError(error));
    const deadline = q.add(message, fail);
    promise.then(
      (value) => {
        q.settle(deadline);
        resolve(value);
      },
      (error: unknown) => {
        q.settle(deadline);
        fail(error);
      },
    );
  });
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
