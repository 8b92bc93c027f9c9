/**
 * The contract in the document of `@fastify/swagger` (H21): every route the plugin covers
 * carries the key header and the refusals of its own layer (route overrides included);
 * routes it does not cover (another method, `config.idempotency: false`) carry nothing.
 * The document validates (3.0 and 3.1), its client has the header on exactly the covered
 * operations, and the YAML form says the same.
 */
import swagger from '@fastify/swagger';
import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { idempotency } from '../../adapters/fastify.js';
import { memoryStore } from '../../drivers/memory.js';
import type { OpenApiDocument } from '../../src/openapi.js';
import { addedParts, clientTypesErrors, expectValidDocument } from '../helpers/openapi.js';

async function appWith(openapi: string) {
  const app = Fastify({ logger: false });
  await app.register(swagger, { openapi: { openapi, info: { title: 'Orders', version: '1.0.0' } } });
  await app.register(idempotency, { store: memoryStore(), scope: 'shared' });
  const created = { 201: { type: 'object', properties: { id: { type: 'integer' } } } };
  app.post('/orders', { schema: { response: created } }, async (_request, reply) => reply.code(201).send({ id: 1 }));
  app.get('/orders', async () => []);
  app.post('/pings', { config: { idempotency: false } }, async () => ({ pong: true }));
  app.patch('/orders/:id', { config: { idempotency: { maxKeyLength: 40, required: false } }, schema: { params: { type: 'object', properties: { id: { type: 'string' } } } } }, async () => ({}));
  await app.ready();
  return app;
}

describe('@fastify/swagger documents the covered routes (H21)', () => {
  for (const version of ['3.0.3', '3.1.0']) {
    it(`H21: OpenAPI ${version}: validates, and its client has the header on exactly the covered routes, with each route's own limits`, async () => {
      const app = await appWith(version);
      try {
        const document = app.swagger() as unknown as OpenApiDocument;
        await expectValidDocument(document);
        expect(await clientTypesErrors(document, { 'POST /orders': true, 'PATCH /orders/{id}': false })).toEqual([]);
        expect(Object.keys(document.components!.parameters!)).toEqual(['IdempotencyKey', 'IdempotencyKey2']);
        const patch = document.paths!['/orders/{id}']!.patch as { parameters: { $ref?: string }[] };
        expect(patch.parameters.at(-1)).toEqual({ $ref: '#/components/parameters/IdempotencyKey2' });
        const pattern = (document.components!.parameters!.IdempotencyKey2 as { schema: { pattern: string } }).schema.pattern;
        expect(new RegExp(pattern).test('k'.repeat(40))).toBe(true);
        expect(new RegExp(pattern).test('k'.repeat(41))).toBe(false);
        // Made once: the same document on every call, as @fastify/swagger's own.
        expect(app.swagger()).toBe(document);
        const yaml = app.swagger({ yaml: true }) as unknown as string;
        expect(yaml).toContain('IdempotencyKey2:');
        expect(yaml).toContain('Idempotent-Replayed');
        if (version === '3.1.0') {
          await expect(JSON.stringify(addedParts(document, ['POST /orders', 'PATCH /orders/{id}']), null, 2)).toMatchFileSnapshot('./__snapshots__/openapi-fastify.json');
        }
      } finally {
        await app.close();
      }
    });
  }

  it('H21: without @fastify/swagger the plugin adds nothing (no swagger decorator appears)', async () => {
    const app = Fastify({ logger: false });
    await app.register(idempotency, { store: memoryStore(), scope: 'shared' });
    app.post('/orders', async () => ({}));
    await app.ready();
    expect(app.hasDecorator('swagger')).toBe(false);
    await app.close();
  });
});
