/**
 * The demo API on plain Node `http`. Every adapter's app (express.ts, fastify.ts, koa.ts)
 * serves the same routes with the same answers:
 *
 *   POST /accounts/:id/debits          {"amount": 1000}  protected by Idempotency-Key
 *   POST /unprotected/accounts/:id/debits                 the same without protection
 *   GET  /accounts/:id                                    {"id", "balance"}
 *   POST /accounts/:id/reset                              back to 10 000 (no key needed)
 */
import http from 'node:http';
import type { IdempotencyEvent, IdempotencyStore } from 'idempotency-kit';
import { withIdempotency } from 'idempotency-kit/node';
import type { Payments } from '../payments.js';

export interface DemoDeps {
  store: IdempotencyStore;
  payments: Payments;
  /** Where the layer's events go (the demo logs store errors). */
  onEvent?: (event: IdempotencyEvent) => void;
}

const json = (res: http.ServerResponse, status: number, body: unknown, headers: http.OutgoingHttpHeaders = {}) => {
  res.writeHead(status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(body));
};

async function readJson(req: http.IncomingMessage & { body?: unknown }): Promise<unknown> {
  if (req.body !== undefined) return req.body; // parsed by the idempotency layer
  let text = '';
  for await (const chunk of req) text += chunk;
  try {
    return text ? JSON.parse(text) : undefined;
  } catch {
    return undefined;
  }
}

export async function createServer({ store, payments, onEvent }: DemoDeps): Promise<http.Server> {
  const debit = async (req: http.IncomingMessage, res: http.ServerResponse, accountId: string) => {
    const body = (await readJson(req)) as { amount?: unknown } | undefined;
    try {
      const result = await payments.debit(accountId, body?.amount);
      json(res, 201, result, { location: `/accounts/${accountId}/debits/${result.id}` });
    } catch (error) {
      json(res, 422, { error: (error as Error).message });
    }
  };
  const protectedDebit = withIdempotency<http.IncomingMessage & { accountId?: string }>(
    (req, res) => debit(req, res, req.accountId!),
    // Keys are per account: the same key on two accounts is two debits.
    { store, onEvent, scope: (req) => req.accountId },
  );

  return http.createServer(async (req, res) => {
    const { pathname } = new URL(req.url ?? '/', 'http://localhost');
    const parts = pathname.split('/').filter(Boolean);
    if (req.method === 'POST' && parts.length === 3 && parts[0] === 'accounts' && parts[2] === 'debits') {
      return protectedDebit(Object.assign(req, { accountId: parts[1] }), res);
    }
    if (req.method === 'POST' && parts.length === 4 && parts[0] === 'unprotected' && parts[3] === 'debits') {
      return debit(req, res, parts[2]!);
    }
    if (req.method === 'POST' && parts.length === 3 && parts[0] === 'accounts' && parts[2] === 'reset') {
      payments.reset(parts[1]!);
      return json(res, 200, { id: parts[1], balance: payments.balance(parts[1]!) });
    }
    if (req.method === 'GET' && parts.length === 2 && parts[0] === 'accounts') {
      return json(res, 200, { id: parts[1], balance: payments.balance(parts[1]!) });
    }
    json(res, 404, { error: 'not found' });
  });
}
