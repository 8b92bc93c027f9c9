/**
 * The contract on `@hono/zod-openapi` routes (H21): `idempotentRoute()` adds the key header
 * and the refusals to a route the layer covers, and nothing to one it does not; the
 * document `app.getOpenAPI31Document()` writes validates, its client has the header on
 * exactly those routes, and the header is documentation only: the layer, not the route's
 * validation, answers a bad key (its own 400 problem).
 */
import { createRoute, OpenAPIHono, z } from '@hono/zod-openapi';
import { describe, expect, it } from 'vitest';
import { idempotency, idempotentRoute } from '../../adapters/hono/index.js';
import { memoryStore } from '../../drivers/memory.js';
import type { OpenApiDocument } from '../../src/openapi.js';
import { addedParts, clientTypesErrors, expectValidDocument } from '../helpers/openapi.js';

const options = { store: memoryStore(), scope: 'shared' as const, maxKeyLength: 64 };
const Order = z.object({ id: z.number().int() }).openapi('Order');

function app() {
  const app = new OpenAPIHono();
  app.use('/orders', idempotency(options));
  const create = idempotentRoute(
    createRoute({
      method: 'post',
      path: '/orders',
      request: { body: { content: { 'application/json': { schema: z.object({ amount: z.number() }) } } } },
      responses: { 201: { description: 'Created', content: { 'application/json': { schema: Order } } } },
    }),
    options,
  );
  const list = idempotentRoute(createRoute({ method: 'get', path: '/orders', responses: { 200: { description: 'The orders' } } }), options);
  let n = 0;
  app.openapi(create, (c) => c.json({ id: ++n }, 201));
  app.openapi(list, (c) => c.json([], 200));
  return app;
}

describe('idempotentRoute() on @hono/zod-openapi routes (H21)', () => {
  for (const version of ['3.0', '3.1'] as const) {
    it(`H21: OpenAPI ${version}: validates, and its client has the header on exactly the covered routes`, async () => {
      const info = { title: 'Orders', version: '1.0.0' };
      const document = (version === '3.1'
        ? app().getOpenAPI31Document({ openapi: '3.1.0', info })
        : app().getOpenAPIDocument({ openapi: '3.0.3', info })) as unknown as OpenApiDocument;
      await expectValidDocument(document);
      expect(await clientTypesErrors(document, ['POST /orders'])).toEqual([]);
      const post = document.paths!['/orders']!.post as { responses: Record<string, { headers?: object }> };
      expect(Object.keys(post.responses).sort()).toEqual(['201', '400', '409', '413', '422', '503']);
      expect(post.responses['201']!.headers).toHaveProperty('Idempotent-Replayed');
      if (version === '3.1') {
        await expect(JSON.stringify(addedParts(document, ['POST /orders']), null, 2)).toMatchFileSnapshot('./__snapshots__/openapi-hono.json');
      }
    });
  }

  it('H21 H4: the header is documentation only: the layer answers a missing or bad key, and replays a good one', async () => {
    const served = app();
    const post = (key?: string) =>
      served.request('/orders', {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(key === undefined ? {} : { 'idempotency-key': key }) },
        body: JSON.stringify({ amount: 1 }),
      });
    const missing = await post();
    expect([missing.status, missing.headers.get('content-type'), ((await missing.json()) as { code: string }).code]).toEqual([400, 'application/problem+json', 'key-missing']);
    const tooLong = await post('k'.repeat(65));
    expect(((await tooLong.json()) as { reason: string }).reason).toBe('too-long');
    const first = await post('hono-openapi-1');
    const again = await post('hono-openapi-1');
    expect(first.status).toBe(201);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(await again.json()).toEqual(await first.json());
  });

  it('a route that is not a route config is a TypeError', () => {
    expect(() => idempotentRoute(null as never, options)).toThrow(/Expected a route config of @hono\/zod-openapi/);
  });
});
