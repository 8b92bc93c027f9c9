/**
 * A Cloudflare Worker with Hono whose POST /orders runs once per Idempotency-Key, on the
 * Durable Objects store (the records live in IdempotencyObject instances, bound in
 * wrangler.jsonc). Run it with `npx wrangler dev` (Wrangler 4, Node 22), or on workerd
 * itself as the tests do; see docs/drivers/cloudflare.md.
 *
 *   curl -X POST localhost:8787/orders -H 'Idempotency-Key: 8e03978e' -H 'X-Account-Id: acct_1' \
 *        -H 'Content-Type: application/json' -d '{"sku":"A1"}'
 */
import { env } from 'cloudflare:workers';
import { Hono } from 'hono';
import { durableObjectStore, type DurableObjectNamespaceLike } from 'idempotency-kit/drivers/durable-objects';
import { idempotency } from 'idempotency-kit/hono';

// The class the IDEMPOTENCY namespace is bound to: the Worker must export it.
export { IdempotencyObject } from 'idempotency-kit/drivers/durable-objects';

// `env` from cloudflare:workers is there when the module loads: the store is made once per
// isolate. With D1 instead: d1Store({ database: env.DB }) from 'idempotency-kit/drivers/d1'.
const store = durableObjectStore({ namespace: (env as { IDEMPOTENCY: DurableObjectNamespaceLike }).IDEMPOTENCY });

const app = new Hono();
app.use(
  '/orders',
  idempotency({
    store,
    // Each account's keys are its own; behind hono/jwt the default is jwtPayload.sub.
    scope: (c) => c.req.header('x-account-id') ?? undefined,
  }),
);

let orders = 0;
app.post('/orders', async (c) => {
  const body = await c.req.json<{ sku: string }>();
  const id = `ord_${++orders}_${crypto.randomUUID().slice(0, 8)}`;
  c.header('location', `/orders/${id}`);
  return c.json({ id, sku: body.sku }, 201);
});

export default app;
