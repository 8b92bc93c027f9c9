/**
 * The demo API on Koa (routes and answers as in node.ts). The debit route is protected per
 * route with @koa/router; `@koa/bodyparser` runs first.
 */
import http from 'node:http';
import { bodyParser } from '@koa/bodyparser';
import Router, { type RouterMiddleware } from '@koa/router';
import Koa from 'koa';
import { idempotency } from 'idempotency-kit/koa';
import type { DemoDeps } from './node.js';

export async function createServer({ store, payments, onEvent }: DemoDeps): Promise<http.Server> {
  const app = new Koa();
  const router = new Router();

  const debit: RouterMiddleware = async (ctx) => {
    const accountId = ctx.params.id!;
    try {
      const result = await payments.debit(accountId, (ctx.request.body as { amount?: unknown } | undefined)?.amount);
      ctx.status = 201;
      ctx.set('location', `/accounts/${accountId}/debits/${result.id}`);
      ctx.body = result;
    } catch (error) {
      ctx.status = 422;
      ctx.body = { error: (error as Error).message };
    }
  };
  router.post('/accounts/:id/debits', idempotency({ store, onEvent, scope: (ctx) => ctx.params.id }), debit);
  router.post('/unprotected/accounts/:id/debits', debit);
  router.post('/accounts/:id/reset', (ctx) => {
    payments.reset(ctx.params.id!);
    ctx.body = { id: ctx.params.id, balance: payments.balance(ctx.params.id!) };
  });
  router.get('/accounts/:id', (ctx) => {
    ctx.body = { id: ctx.params.id, balance: payments.balance(ctx.params.id!) };
  });

  app.use(bodyParser());
  app.use(router.routes());
  app.use((ctx) => {
    ctx.status = 404;
    ctx.body = { error: 'not found' };
  });
  return http.createServer(app.callback());
}
