/**
 * The one handler every benchmark app runs, whatever the framework or the idempotency
 * layer: it counts its executions (per key when asked, to find double executions) and
 * answers 201 with a small JSON order. An `x-delay-ms` request header makes it wait, so a
 * duplicate storm can overlap a running execution (headers are not in any fingerprint).
 * @module
 */
import { setTimeout as sleep } from 'node:timers/promises';

export const counters = {
  executions: 0,
  /** Executions per idempotency key (only with COUNT_KEYS=1, to keep RSS comparable). */
  perKey: new Map<string, number>(),
};

const countKeys = process.env.COUNT_KEYS === '1';

export interface HandlerResult {
  status: number;
  body: string;
}

function headerValue(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

/** Run the business logic once. `headers` are the request's (lower-case names). */
export async function placeOrder(
  headers: Record<string, string | string[] | undefined>,
  body: unknown,
): Promise<HandlerResult> {
  counters.executions++;
  const n = counters.executions;
  if (countKeys) {
    const key = headerValue(headers['idempotency-key']) ?? '';
    counters.perKey.set(key, (counters.perKey.get(key) ?? 0) + 1);
  }
  const delay = Number(headerValue(headers['x-delay-ms']) ?? 0);
  if (delay > 0) await sleep(delay);
  const amount = typeof body === 'object' && body !== null ? (body as { amount?: unknown }).amount : undefined;
  return { status: 201, body: JSON.stringify({ id: `ord_${n}`, amount: amount ?? null, status: 'created' }) };
}

/** Counters and the process's peak RSS, for GET /__stats. */
export function statsSnapshot(extra: Record<string, unknown> = {}): Record<string, unknown> {
  let doubles = 0;
  for (const n of counters.perKey.values()) if (n > 1) doubles += n - 1;
  return {
    executions: counters.executions,
    keys: counters.perKey.size,
    doubleExecutions: doubles,
    // resourceUsage().maxRSS is in KiB: the peak resident set of this process so far.
    maxRssBytes: process.resourceUsage().maxRSS * 1024,
    rssBytes: process.memoryUsage.rss(),
    ...extra,
  };
}
