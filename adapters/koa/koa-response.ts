/**
 * The one place the Koa adapter reads Koa's private state: whether the handler set
 * `ctx.body = null` itself (`response._explicitNullBody`, Koa 2 and 3), after which Koa
 * answers with no body whatever the status. Without that field (another Koa), the answer
 * is read from Koa's public API only: a null body with a status that has no body (204, 205,
 * 304) is empty, any other is Koa's status text. test/adapters/koa-response.test.ts pins the
 * field to the installed Koa 2 and 3 and runs the fallback.
 * @module
 */
import type { Context } from 'koa';

/** Whether the handler set `ctx.body = null` itself; undefined when Koa keeps no such mark. */
export function explicitNullBody(response: Context['response']): boolean | undefined {
  const mark = (response as { _explicitNullBody?: unknown })._explicitNullBody;
  return typeof mark === 'boolean' ? mark : undefined;
}
