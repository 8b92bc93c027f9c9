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

/**
 * Counters and the process's peak RSS, for GET /__stats[?prefix=…]. With a prefix, the
 * per-key figures cover only the keys that start with it (one burst), so requests of an
 * earlier load run still in flight cannot count as its double executions.
 */
export function statsSnapshot(extra: Record<string, unknown> = {}, prefix = ''): Record<string, unknown> {
  let doubles = 0;
  let keys = 0;
  let keyedExecutions = 0;
  for (const [key, n] of counters.perKey) {
    if (!key.startsWith(prefix)) continue;
    keys++;
    keyedExecutions += n;
    if (n > 1) doubles += n - 1;
  }
  return {
    executions: counters.executions,
    keys,
    keyedExecutions,
    doubleExecutions: doubles,
    // resourceUsage().maxRSS is in KiB: the peak resident set of this process so far.
    maxRssBytes: process.resourceUsage().maxRSS * 1024,
    rssBytes: process.memoryUsage.rss(),
    // CPU time of this process so far (user + system), µs: per request it is the server's
    // cost whatever the load generator manages to send.
    ...(() => {
      const u = process.cpuUsage();
      return { cpuMicros: u.user + u.system, cpuSystemMicros: u.system };
    })(),
    ...extra,
  };
}
