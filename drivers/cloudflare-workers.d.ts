/**
 * The part of workerd's built-in `cloudflare:workers` module that the Durable Object class
 * and the example Worker use, for compiling this package without `@cloudflare/workers-types`
 * (whose globals clash with Node's). In a Worker project the real declarations take its place.
 */
declare module 'cloudflare:workers' {
  /** The Worker's bindings, as the module loads (the example Worker uses it). */
  export const env: Record<string, unknown>;
  export abstract class DurableObject<Env = unknown> {
    protected ctx: unknown;
    protected env: Env;
    constructor(ctx: unknown, env: Env);
  }
}
