/**
 * The client policy for got: hooks that send one Idempotency-Key per call and got's own retry
 * loop steered by the same decisions as `createIdempotentFetch`.
 * @module
 * @example
 * import got from 'got';
 * import { idempotentGot } from 'idempotency-kit/client/got';
 *
 * const client = idempotentGot(got, { maxAttempts: 5 });
 * const order = await client.post('https://api.example.com/orders', { json: { sku: 'A1' } }).json();
 */
import type { Got, Method, RequestError, Response } from 'got';
import {
  IdempotentRequestError,
  assertExtendable,
  decide,
  isCovered,
  keyFor,
  reasonForStatus,
  resolvePolicy,
  type AttemptReason,
  type Decision,
  type ExtendableClient,
  type RetryPolicy,
  type RetryPolicyOptions,
  type StopCode,
} from './policy.js';

export type { RetryPolicyOptions as IdempotentGotOptions } from './policy.js';

/** What one call keeps across its attempts (in got's per-request `context`, which retries copy). */
interface CallState {
  key: string;
  started: number;
  /** Set when the policy gave up, so beforeError can say why. */
  stopped?: { code: StopCode; attempts: number; reason: AttemptReason; status?: number };
}

const state = Symbol('idempotency-kit.got');

/** Error codes of a connection that failed or was cut: the request may or may not have arrived. */
const networkCodes = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'ECONNABORTED',
  'EPIPE',
  'ENOTFOUND',
  'ENETUNREACH',
  'EHOSTUNREACH',
  'EAI_AGAIN',
  'ETIMEDOUT',
]);

/** On a body this module made replayable: the promise of its bytes. */
const BYTES = Symbol('idempotency-kit.got.bytes');

function isOneShot(body: unknown): boolean {
  if (typeof body !== 'object' || body === null) return false;
  if (BYTES in body) return false;
  return typeof (body as { pipe?: unknown }).pipe === 'function' || Symbol.asyncIterator in body;
}

const isFormData = (body: unknown): body is FormData => typeof FormData !== 'undefined' && body instanceof FormData;

/**
 * A FormData body serialised once: got would encode it into a one-shot generator with a new
 * boundary, so a retry could not send it again. This is a generator of the one
 * serialisation's bytes (the boundary is in `type`), which a retry swaps for those bytes.
 */
function replayableForm(form: FormData): { body: AsyncGenerator<Uint8Array> & { [BYTES]: Promise<Uint8Array> }; type: string } {
  const response = new Response(form);
  const type = response.headers.get('content-type')!;
  let bytes: Promise<Uint8Array> | undefined;
  const whole = () => (bytes ??= response.arrayBuffer().then((b) => new Uint8Array(b)));
  const body = (async function* serialised() {
    yield await whole();
  })();
  Object.defineProperty(body, BYTES, { get: whole });
  return { body: body as typeof body & { [BYTES]: Promise<Uint8Array> }, type };
}

function reasonFor(policy: RetryPolicy, error: RequestError): AttemptReason {
  if (error.name === 'HTTPError' && error.response) {
    return reasonForStatus(policy, error.response.statusCode, error.response.headers['retry-after']);
  }
  if (error.name === 'TimeoutError') return 'timeout';
  // Parse, redirect, cache and cancel errors are final; so is anything without a network code.
  if ((error.name === 'RequestError' || error.name === 'ReadError') && error.code && networkCodes.has(error.code)) return 'network-error';
  return 'response';
}

/**
 * Extend a got instance so that covered requests (POST and PATCH by default) carry one
 * Idempotency-Key per call, kept on every retry, and are retried as `createIdempotentFetch`
 * retries them. Answers that are not retried throw got's own errors (HTTPError for a 422);
 * when the policy gives up, the call rejects with {@link IdempotentRequestError} (its `cause`
 * is got's error). Other methods keep got's usual retry behaviour.
 */
export function idempotentGot<T extends ExtendableClient>(got: T, options: RetryPolicyOptions = {}): T {
  assertExtendable('got', got);
  const instance = got as unknown as Got;
  const policy = resolvePolicy(options);
  // Other methods keep the instance's own retry settings.
  const baseLimit = instance.defaults.options.retry.limit ?? 0;
  const baseMethods: string[] = instance.defaults.options.retry.methods ?? [];
  const callOf = (context: Record<PropertyKey, unknown>) => context[state] as CallState | undefined;

  const report = (call: CallState, event: { attempt: number; method: string; url: string; reason: AttemptReason; status?: number; error?: unknown; decision: Decision }) =>
    policy.onAttempt?.({ ...event, key: call.key, elapsedMs: policy.now() - call.started });

  return instance.extend({
    // One attempt's limit; got's TimeoutError is then retried like a network error.
    timeout: { request: policy.timeoutMs },
    retry: {
      // The policy decides for covered methods; got's limit and methods only have to let it.
      limit: Math.max(baseLimit, policy.maxAttempts - 1),
      methods: [...new Set([...baseMethods, ...policy.methods])] as Method[],
      calculateDelay: ({ attemptCount, error, computedValue }) => {
        const call = callOf(error.options.context);
        if (!call || !isCovered(policy, error.options.method)) {
          return attemptCount > baseLimit || !baseMethods.includes(error.options.method) ? 0 : computedValue;
        }
        const reason = reasonFor(policy, error);
        const status = error.name === 'HTTPError' ? error.response?.statusCode : undefined;
        const decision = decide(
          policy,
          { reason, status, retryAfter: error.response?.headers['retry-after'] },
          { attempt: attemptCount, elapsedMs: policy.now() - call.started, replayable: !isOneShot(error.options.body) },
        );
        report(call, {
          attempt: attemptCount,
          method: error.options.method,
          url: String(error.options.url),
          reason,
          ...(status === undefined ? { error } : { status }),
          decision,
        });
        if (decision.retry) return Math.max(1, decision.delayMs); // 0 means "do not retry" to got
        if (decision.stop) call.stopped = { code: decision.stop, attempts: attemptCount, reason, status };
        return 0;
      },
    },
    hooks: {
      init: [
        (raw) => {
          const method = typeof raw.method === 'string' ? raw.method : 'GET';
          if (!isCovered(policy, method) || !isFormData(raw.body)) return;
          const { body, type } = replayableForm(raw.body);
          raw.body = body;
          const headers = { ...(raw.headers as Record<string, string | undefined>) };
          if (!Object.keys(headers).some((h) => h.toLowerCase() === 'content-type')) headers['content-type'] = type;
          raw.headers = headers;
        },
      ],
      beforeRetry: [
        async (error) => {
          const body = error.options.body as { [BYTES]?: Promise<Uint8Array> } | undefined;
          // The same bytes as the attempt before, now as a buffer got sends as it is.
          if (body && typeof body === 'object' && BYTES in body) error.options.body = Buffer.from(await body[BYTES]!);
        },
      ],
      beforeRequest: [
        (options) => {
          if (!isCovered(policy, options.method)) return;
          const context = options.context as Record<PropertyKey, unknown>;
          let call = callOf(context);
          if (!call) {
            const header = policy.header.toLowerCase();
            const existing = options.headers[header];
            const key = keyFor(policy, { method: options.method, url: String(options.url) }, typeof existing === 'string' ? existing : undefined);
            options.headers[header] = key;
            call = { key, started: policy.now() };
            context[state] = call;
          }
        },
      ],
      afterResponse: [
        (response: Response) => {
          const { options } = response.request;
          const call = callOf(options.context);
          // Other answers reach calculateDelay as errors and are reported there.
          if (call && response.statusCode >= 200 && response.statusCode <= 299) {
            report(call, {
              attempt: response.retryCount + 1,
              method: options.method,
              url: String(options.url),
              reason: 'response',
              status: response.statusCode,
              decision: { retry: false },
            });
          }
          return response;
        },
      ],
      beforeError: [
        (error) => {
          const call = error.options ? callOf(error.options.context) : undefined;
          if (!call?.stopped) return error;
          return new IdempotentRequestError({ ...call.stopped, key: call.key, cause: error });
        },
      ],
    },
  }) as unknown as T;
}
