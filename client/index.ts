/**
 * The client side of Idempotency-Key: a fetch that sends one key per call and retries it
 * safely. Runs on any runtime with `fetch` (Node 20+, Deno, Bun, browsers, workers).
 * @module
 * @example
 * import { createIdempotentFetch } from 'idempotency-kit/client';
 *
 * const fetch = createIdempotentFetch({ maxAttempts: 5 });
 * // One key for this call, the same on every retry; a dropped response is retried and the
 * // server replays the first answer instead of charging twice.
 * const res = await fetch('https://api.example.com/payments', { method: 'POST', body: JSON.stringify({ amount: 100 }) });
 */
import { assertFunction } from '../src/validate.js';
import {
  IdempotentRequestError,
  assertOptions,
  decide,
  isCovered,
  isIdempotentRequestError,
  keyFor,
  reasonForStatus,
  resolvePolicy,
  type AttemptReason,
  type Decision,
  type RetryPolicy,
  type RetryPolicyOptions,
} from './policy.js';

export {
  IdempotentRequestError,
  isIdempotentRequestError,
  type AttemptEvent,
  type AttemptReason,
  type Decision,
  type RetryPolicyOptions,
  type StopCode,
} from './policy.js';

export interface IdempotentFetchOptions extends RetryPolicyOptions {
  /**
   * The fetch that sends each attempt.
   * @default globalThis.fetch
   */
  fetch?: (input: Request, init?: RequestInit) => Promise<Response>;
}

export type IdempotentFetch = (input: string | URL | Request, init?: RequestInit) => Promise<Response>;

interface AttemptResult {
  reason: AttemptReason;
  response?: Response;
  error?: unknown;
}

/** Bodies without content by definition: a Response with a body and one of these throws. */
const nullBodyStatus = new Set([101, 103, 204, 205, 304]);

/** A body that can be read once only: a ReadableStream, a Node stream or another async iterable. */
function isOneShot(body: unknown): boolean {
  if (typeof body !== 'object' || body === null) return false;
  return typeof (body as ReadableStream).getReader === 'function' || Symbol.asyncIterator in body;
}

function sleep(ms: number, signal: AbortSignal | null): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * One attempt: the request with its key, cut at `timeoutMs` or the caller's abort. The whole
 * body is read inside the attempt, so a connection reset halfway through the answer is a
 * network error that is retried, not a broken stream handed to the caller.
 */
async function attemptOnce(send: IdempotentFetchOptions['fetch'] & {}, request: Request, userSignal: AbortSignal | null, timeoutMs: number): Promise<AttemptResult> {
  const controller = new AbortController();
  const onAbort = () => controller.abort(userSignal!.reason);
  userSignal?.addEventListener('abort', onAbort, { once: true });
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    controller.abort(new Error(`The attempt took longer than ${timeoutMs} ms`));
  }, timeoutMs);
  try {
    const response = await send(request, { signal: controller.signal });
    const body = nullBodyStatus.has(response.status) ? null : await response.arrayBuffer();
    const whole = new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
    // A constructed Response has no url; keep the one the caller would have seen.
    Object.defineProperty(whole, 'url', { value: response.url });
    return { reason: 'response', response: whole };
  } catch (error) {
    return { reason: userSignal?.aborted ? 'aborted' : timedOut ? 'timeout' : 'network-error', error };
  } finally {
    clearTimeout(timer);
    userSignal?.removeEventListener('abort', onAbort);
  }
}

/**
 * A fetch for requests that must not run twice. For covered methods (POST and PATCH by
 * default) each call gets one Idempotency-Key (a random UUID, your `key` function's, or the
 * header you set yourself) and keeps it on every retry. It retries network errors and
 * timeouts, 409 with Retry-After, 429 and 503 (waiting as Retry-After says), and other 5xx
 * with `retryServerErrors`; other answers (2xx, 400, 422, ...) come back as they are. When it
 * gives up it throws {@link IdempotentRequestError} with the attempts made and why.
 * Other methods are passed to fetch unchanged.
 */
export function createIdempotentFetch(options: IdempotentFetchOptions = {}): IdempotentFetch {
  assertOptions(options);
  const { fetch: send = globalThis.fetch, ...policyOptions } = options;
  assertFunction('fetch', send);
  const policy = resolvePolicy(policyOptions);
  return function idempotentFetch(input, init) {
    return run(policy, send, input, init);
  };
}

async function run(
  policy: RetryPolicy,
  send: NonNullable<IdempotentFetchOptions['fetch']>,
  input: string | URL | Request,
  init: RequestInit | undefined,
): Promise<Response> {
  // Built first, as fetch would: a bad URL or method is fetch's own TypeError, never retried.
  const template = new Request(input, init);
  if (!isCovered(policy, template.method)) return send(template);

  const key = keyFor(policy, { method: template.method, url: template.url }, template.headers.get(policy.header));
  template.headers.set(policy.header, key);
  const oneShot = isOneShot(init?.body);
  const userSignal = template.signal;
  const started = policy.now();
  let attempts = 0;
  let last: AttemptResult | undefined;

  const stop = (code: IdempotentRequestError['code'], cause?: unknown) =>
    new IdempotentRequestError({
      code,
      attempts,
      reason: last?.reason ?? 'aborted', // no attempt yet: aborted before the first
      key,
      status: last?.response?.status,
      response: last?.response,
      cause: cause ?? last?.error,
    });

  try {
    // The policy bounds the loop: it stops at `maxAttempts` and before a wait past `maxTimeMs`.
    for (let attempt = 1; ; attempt++) {
      if (userSignal.aborted) throw stop('aborted', userSignal.reason);
      attempts = attempt;
      const remaining = policy.maxTimeMs - (policy.now() - started);
      // A one-shot body is sent as it is, once; everything else goes out as a fresh copy.
      const request = oneShot ? template : template.clone();
      last = await attemptOnce(send, request, userSignal, Math.max(1, Math.min(policy.timeoutMs, remaining)));
      const { response } = last;
      const retryAfter = response?.headers.get('retry-after');
      if (response) last.reason = reasonForStatus(policy, response.status, retryAfter);
      const decision: Decision = decide(
        policy,
        { reason: last.reason, status: response?.status, retryAfter },
        { attempt, elapsedMs: policy.now() - started, replayable: !oneShot },
      );
      policy.onAttempt?.({
        attempt,
        key,
        method: template.method,
        url: template.url,
        reason: last.reason,
        ...(response ? { status: response.status } : { error: last.error }),
        decision,
        elapsedMs: policy.now() - started,
      });
      if (decision.retry) {
        await sleep(decision.delayMs, userSignal);
        continue;
      }
      if (decision.stop) throw stop(decision.stop, decision.stop === 'aborted' ? userSignal.reason : undefined);
      return response!;
    }
  } catch (error) {
    if (isIdempotentRequestError(error)) throw error;
    // An abort during the wait between attempts (or an onAttempt that threw after it).
    if (userSignal.aborted) throw stop('aborted', userSignal.reason);
    throw error;
  }
}
