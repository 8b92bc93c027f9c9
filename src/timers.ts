/**
 * Timer helpers shared by the engine and the drivers.
 * @module
 */

/** The resolving functions of the promise being made: set by {@link takeResolvers} (no closure per call). */
let nextResolve: ((value: never) => void) | undefined;
let nextReject: ((error: unknown) => void) | undefined;
function takeResolvers(resolve: (value: never) => void, reject: (error: unknown) => void): void {
  nextResolve = resolve;
  nextReject = reject;
}

/** What the queue knows of a call: when its deadline is, whether it still pends, how it expires. */
interface Deadline {
  readonly at: number;
  pending: boolean;
  expire(): void;
}

/**
 * One bounded call: its deadline in its duration's queue, and how to settle the promise its
 * caller got. Whichever comes first, the call's own outcome or the deadline, settles that
 * promise; from then on the call holds neither the promise nor its resolving functions, so a
 * settled call still in the queue keeps nothing of what it settled with.
 */
class BoundedCall<T> implements Deadline {
  readonly at: number;
  /** True until the call settles or its deadline fires. */
  pending = true;
  #resolve: ((value: T) => void) | undefined;
  #reject: ((error: unknown) => void) | undefined;

  constructor(
    readonly queue: DeadlineQueue,
    readonly message: string,
    readonly mapError: ((error: unknown) => unknown) | undefined,
  ) {
    this.at = Date.now() + queue.ms;
    // The resolving functions of the promise just made (see withTimeout), taken from where
    // takeResolvers left them, not as parameters: the arrow fields below are created in
    // this constructor's scope, and would keep any parameter (so the promise and what it
    // settled with) alive for as long as the call is queued.
    this.#resolve = nextResolve as (value: T) => void;
    this.#reject = nextReject;
    nextResolve = nextReject = undefined;
  }

  readonly onValue = (value: T): void => {
    if (!this.queue.settle(this)) return;
    const resolve = this.#resolve!;
    this.#resolve = this.#reject = undefined;
    resolve(value);
  };

  readonly onError = (error: unknown): void => {
    if (this.queue.settle(this)) this.fail(error);
  };

  /** The deadline passed first. */
  expire(): void {
    this.fail(new Error(this.message));
  }

  fail(error: unknown): void {
    const reject = this.#reject!;
    this.#resolve = this.#reject = undefined;
    reject(this.mapError === undefined ? error : this.mapError(error));
  }
}

/**
 * The pending calls of one duration, in the order they were made (so earliest deadline
 * first), under one timer armed for the head: a call costs a slot in an array, not a
 * setTimeout and a clearTimeout. When no call is pending the timer is not cleared but
 * unref'd (so a settled call never keeps the process alive) and left to fire once,
 * harmlessly: a fast store settles every call before the next one starts, and re-arming a
 * timer per call would cost what this queue saves. The array keeps its capacity between
 * busy spells, so a call does not grow a new one.
 */
class DeadlineQueue {
  readonly #items: Array<Deadline | undefined> = [];
  #head = 0;
  #tail = 0;
  #pending = 0;
  #timer: NodeJS.Timeout | undefined;
  /** Whether the timer keeps the process alive: only while a call is pending. */
  #refed = false;
  /** The setTimeout that armed the timer: a test that swaps in fake timers gets a timer of its own. */
  #armedWith: typeof setTimeout | undefined;
  #armedFor: Deadline | undefined;

  constructor(readonly ms: number) {}

  add(call: Deadline): void {
    this.#items[this.#tail++] = call;
    this.#pending++;
    if (this.#timer === undefined || this.#armedWith !== setTimeout) this.#arm();
    else if (!this.#refed) {
      this.#timer.ref();
      this.#refed = true;
    }
  }

  /** Whether `call` was still pending (it is not any more): the first to settle it wins. */
  settle(call: Deadline): boolean {
    if (!call.pending) return false;
    call.pending = false;
    if (--this.#pending === 0) this.#idle();
    else {
      // Calls mostly settle in the order they were made: let the settled ones at the head go
      // now, not at the next deadline. Under steady load (a store with calls always in
      // flight) the queue would otherwise hold every call of the last `ms` with what it
      // settled with, long enough for the collector to promote them all.
      const items = this.#items;
      while (this.#head < this.#tail && !items[this.#head]!.pending) items[this.#head++] = undefined;
    }
    return true;
  }

  /** Nothing pending: forget the settled calls and let the armed timer run out unref'd. */
  #idle(): void {
    this.#items.fill(undefined, this.#head, this.#tail);
    this.#head = this.#tail = 0;
    if (this.#timer !== undefined && this.#refed) {
      this.#timer.unref();
      this.#refed = false;
    }
  }

  #arm(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    const items = this.#items;
    while (this.#head < this.#tail && !items[this.#head]!.pending) items[this.#head++] = undefined;
    if (this.#head > 1024 && this.#head * 2 > this.#tail) {
      items.copyWithin(0, this.#head, this.#tail);
      items.fill(undefined, this.#tail - this.#head, this.#tail);
      this.#tail -= this.#head;
      this.#head = 0;
    }
    const next = this.#head < this.#tail ? items[this.#head] : undefined;
    if (next === undefined) return;
    this.#armedFor = next;
    this.#armedWith = setTimeout;
    this.#timer = setTimeout(() => this.#fire(), Math.max(0, next.at - Date.now()));
    this.#refed = true;
  }

  #fire(): void {
    this.#timer = undefined;
    // The call this timer was armed for has passed its deadline, whatever the wall clock says now.
    const due = this.#armedFor;
    this.#armedFor = undefined;
    const now = Date.now();
    const items = this.#items;
    while (this.#head < this.#tail) {
      const call = items[this.#head]!;
      if (call !== due && call.pending && call.at > now) break;
      items[this.#head++] = undefined;
      if (!call.pending) continue;
      call.pending = false;
      this.#pending--;
      call.expire();
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
  const bounded = new Promise<T>(takeResolvers);
  const call = new BoundedCall<T>(queue, message, mapError);
  queue.add(call);
  promise.then(call.onValue, call.onError);
  return bounded;
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
