/**
 * The demo API on Fastify (routes and answers as in node.ts). The plugin covers every
 * route; the ones that need no key opt out with `config: { idempotency: false }`.
 */
import type http from 'node:http';
import Fastify, { type FastifyReply } from 'fastify';
import { idempotency } from 'idempotency-kit/fastify';
import type { DemoDeps } from './node.js';

interface AccountRoute {
  Params: { id: string };
  Body: { amount?: unknown } | undefined;
}

export async function createServer({ store, payments, onEvent }: DemoDeps): Promise<http.Server> {
  const app = Fastify();
  await app.register(idempotency, { store, onEvent, scope: (request) => (request.params as { id?: string }).id });

  const debit = async (request: { params: { id: string }; body: AccountRoute['Body'] }, reply: FastifyReply) => {
    const accountId = request.params.id;
    try {
      const result = await payments.debit(accountId, request.body?.amount);
      return reply.code(201).header('location', `/accounts/${accountId}/debits/${result.id}`).send(result);
    } catch (error) {
      return reply.code(422).send({ error: (error as Error).message });
    }
  };
  app.post<AccountRoute>('/accounts/:id/debits', debit);
  app.post<AccountRoute>('/unprotected/accounts/:id/debits', { config: { idempotency: false } }, debit);
  app.post<AccountRoute>('/accounts/:id/reset', { config: { idempotency: false } }, async (request) => {
    payments.reset(request.params.id);
    return { id: request.params.id, balance: payments.balance(request.params.id) };
  });
  app.get<AccountRoute>('/accounts/:id', async (request) => ({
    id: request.params.id,
    balance: payments.balance(request.params.id),
  }));
  app.setNotFoundHandler(async (_request, reply) => reply.code(404).send({ error: 'not found' }));
  await app.ready();
  // The demo listens on the server itself, as it does for every adapter.
  return app.server;
}
