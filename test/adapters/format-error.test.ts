/**
 * `formatError`: the layer's own error bodies in the shape an API's SDK understands. Proven
 * with the real `stripe` SDK against a local server that uses this package: the SDK treats
 * any body without an `error` field as success, so without the option a 422 comes back to
 * the caller as if it were the created object; with a Stripe-shaped envelope it raises.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import Stripe from 'stripe';
import { afterAll, describe, expect, it } from 'vitest';
import { idempotency } from '../../adapters/express.js';
import { memoryStore } from '../../drivers/memory.js';
import type { FormatError } from '../../src/problem.js';
import { send } from './client.js';

/** The envelope Stripe's API answers errors with. */
const stripeShaped: FormatError = (problem) => ({
  error: {
    type: problem.status >= 500 ? 'api_error' : problem.code.startsWith('key-') || problem.status === 409 ? 'idempotency_error' : 'invalid_request_error',
    code: problem.code,
    message: problem.detail,
  },
});

const servers: http.Server[] = [];
afterAll(async () => {
  for (const s of servers) await new Promise((resolve) => s.close(resolve));
});

async function stripeLikeApi(formatError?: FormatError): Promise<{ stripe: Stripe; created: () => number }> {
  let n = 0;
  const app = express();
  app.use(express.urlencoded({ extended: true }));
  app.use(idempotency({ store: memoryStore(), scope: 'shared', formatError }));
  app.post('/v1/customers', (req, res) => {
    n++;
    res.json({ id: `cus_${n}`, object: 'customer', name: (req.body as { name?: string }).name ?? null });
  });
  const server = http.createServer(app);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const stripe = new Stripe('sk_test_local', { host: '127.0.0.1', port, protocol: 'http', maxNetworkRetries: 0, telemetry: false });
  return { stripe, created: () => n };
}

describe('formatError with the real Stripe SDK', () => {
  it('H14: without it, the SDK takes a 422 problem document for the created customer (the problem)', async () => {
    const { stripe, created } = await stripeLikeApi();
    const first = await stripe.customers.create({ name: 'Alice' }, { idempotencyKey: 'cust-1' });
    expect(first.id).toBe('cus_1');
    const misuse = (await stripe.customers.create({ name: 'Mallory' }, { idempotencyKey: 'cust-1' })) as unknown as Record<string, unknown>;
    expect(misuse.code).toBe('key-reused'); // "success", holding a problem document
    expect(created()).toBe(1);
  });

  it('H14: with a Stripe-shaped envelope the SDK raises a StripeError; a retry still replays', async () => {
    const { stripe, created } = await stripeLikeApi(stripeShaped);
    const first = await stripe.customers.create({ name: 'Alice' }, { idempotencyKey: 'cust-2' });
    const again = await stripe.customers.create({ name: 'Alice' }, { idempotencyKey: 'cust-2' });
    expect(again.id).toBe(first.id);
    const error = await stripe.customers.create({ name: 'Mallory' }, { idempotencyKey: 'cust-2' }).then(
      () => undefined,
      (e: unknown) => e,
    );
    // (Stripe's v1 client maps a 422 to StripeAPIError; the envelope's type travels in `raw`.)
    expect(error).toBeInstanceOf(Stripe.errors.StripeError);
    expect((error as { raw?: { type?: string } }).raw?.type).toBe('idempotency_error');
    expect((error as { statusCode?: number }).statusCode).toBe(422);
    expect((error as { code?: string }).code).toBe('key-reused');
    expect(created()).toBe(1);
  });

  it('H19: status, Retry-After and Cache-Control stay; the body is application/json; a failing formatter falls back to the problem', async () => {
    const app = express();
    app.use(express.json());
    app.use(idempotency({ store: memoryStore(), scope: 'shared', waitMs: 0, formatError: stripeShaped }));
    app.post('/slow', async (_req, res) => {
      await new Promise((resolve) => setTimeout(resolve, 300));
      res.status(201).json({ ok: true });
    });
    const broken = express();
    broken.use(
      idempotency({
        store: memoryStore(),
        scope: 'shared',
        formatError: () => {
          throw new Error('formatter bug');
        },
      }),
    );
    const urls: string[] = [];
    for (const a of [app, broken]) {
      const server = http.createServer(a);
      servers.push(server);
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      urls.push(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    }
    const first = send(urls[0]!, { path: '/slow', key: 'slow-1', body: { a: 1 } });
    await new Promise((resolve) => setTimeout(resolve, 50));
    const conflict = await send(urls[0]!, { path: '/slow', key: 'slow-1', body: { a: 1 } });
    expect(conflict.status).toBe(409);
    expect(conflict.headers['retry-after']).toBe('1');
    expect(conflict.headers['cache-control']).toBe('no-store');
    expect(conflict.headers['content-type']).toMatch(/^application\/json/);
    expect(conflict.json()).toEqual({ error: { type: 'idempotency_error', code: 'request-in-progress', message: expect.any(String) } });
    expect((await first).status).toBe(201);
    const fallback = await send(urls[1]!, { path: '/x', body: { a: 1 } });
    expect(fallback.status).toBe(400);
    expect(fallback.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(fallback.json().code).toBe('key-missing');
  });

  it('a formatError that is not a function is a TypeError', () => {
    expect(() => idempotency({ store: memoryStore(), scope: 'shared', formatError: 'stripe' as never })).toThrow(
      'Expected `formatError` to be a function',
    );
  });
});
