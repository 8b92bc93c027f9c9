/**
 * The README's quick start, runnable: `npx tsx examples/quick-start.ts`.
 * test/docs.test.ts checks that the README shows these lines.
 */
import { randomUUID } from 'node:crypto';

async function createOrder(body: unknown) {
  await new Promise((resolve) => setTimeout(resolve, 50)); // the expensive part
  return { id: randomUUID(), ...(body as object) };
}

// --- README quick start ---
import http from 'node:http';
import { createStore } from 'idempotency-kit';
import { withIdempotency } from 'idempotency-kit/node';

const store = createStore('sqlite://./idempotency.sqlite'); // or redis://…, postgres://…, memory://
const handler = withIdempotency(async (req, res) => {
  const order = await createOrder(req.body);               // runs once per key
  res.writeHead(201, { 'content-type': 'application/json', location: `/orders/${order.id}` });
  res.end(JSON.stringify(order));
}, { store });
http.createServer(handler).listen(process.env.PORT ?? 3000);
