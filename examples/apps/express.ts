/**
 * The demo API on Express (routes and answers as in node.ts). The debit route is protected
 * per route; `express.json()` runs first, so the layer fingerprints `req.body`.
 */
import http from 'node:http';
import express from 'express';
import { idempotency } from 'idempotency-kit/express';
import type { DemoDeps } from './node.js';

export async function createServer({ store, payments, onEvent }: DemoDeps): Promise<http.Server> {
  const app = express();
  app.use(express.json());

  const debit: express.RequestHandler = async (req, res) => {
    const accountId = String(req.params.id);
    try {
      const result = await payments.debit(accountId, req.body?.amount);
      res.status(201).location(`/accounts/${accountId}/debits/${result.id}`).json(result);
    } catch (error) {
      res.status(422).json({ error: (error as Error).message });
    }
  };
  app.post('/accounts/:id/debits', idempotency({ store, onEvent, scope: (req) => String(req.params.id) }), debit);
  app.post('/unprotected/accounts/:id/debits', debit);
  app.post('/accounts/:id/reset', (req, res) => {
    payments.reset(req.params.id);
    res.json({ id: req.params.id, balance: payments.balance(req.params.id) });
  });
  app.get('/accounts/:id', (req, res) => {
    res.json({ id: req.params.id, balance: payments.balance(req.params.id) });
  });
  app.use((_req, res) => {
    res.status(404).json({ error: 'not found' });
  });
  return http.createServer(app);
}
