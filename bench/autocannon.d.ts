/** The part of autocannon's API the bench uses (the package ships no types). */
declare module 'autocannon' {
  interface Histogram {
    average: number;
    total: number;
    p50: number;
    p99: number;
    [percentile: string]: number;
  }
  interface Result {
    requests: Histogram;
    latency: Histogram;
    duration: number;
    errors: number;
    timeouts: number;
    non2xx: number;
    statusCodeStats?: Record<string, { count: number }>;
  }
  interface Options {
    url: string;
    method?: string;
    connections?: number;
    pipelining?: number;
    duration?: number;
    /** Stop after this many requests (instead of `duration`). */
    amount?: number;
    timeout?: number;
    headers?: Record<string, string>;
    body?: string | Buffer;
    requests?: unknown[];
  }
  function autocannon(options: Options): Promise<Result>;
  export default autocannon;
}
