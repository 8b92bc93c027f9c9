/**
 * The contract in OpenAPI (H21), by the transform: a document as Express users write it
 * (swagger-jsdoc, tsoa, a file), in OpenAPI 3.0 and 3.1, gets the key header on exactly the
 * covered operations, validates, generates client types with the header on exactly those,
 * follows the options, and its examples are the bodies the Express app really sends.
 */
import type { AddressInfo } from 'node:net';
import express from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { memoryStore } from '../../drivers/memory.js';
import { idempotency } from '../../adapters/express.js';
import { createIdempotency } from '../../src/http.js';
import { addIdempotencyContract, idempotencyContract, type OpenApiDocument } from '../../src/openapi.js';
import { addedParts, clientTypesErrors, expectValidDocument } from '../helpers/openapi.js';
import { send } from './client.js';

const ok = { description: 'Created', content: { 'application/json': { schema: { type: 'object', properties: { id: { type: 'integer' } } } } } };

/** A document as swagger-jsdoc writes one for an orders API. */
const document = (openapi: string): OpenApiDocument => ({
  openapi,
  info: { title: 'Orders', version: '1.0.0' },
  paths: {
    '/orders': {
      get: { operationId: 'listOrders', responses: { 200: { description: 'The orders' } } },
      post: {
        operationId: 'createOrder',
        requestBody: { content: { 'application/json': { schema: { type: 'object', properties: { amount: { type: 'integer' } } } } } },
        responses: { 201: ok, 400: { description: 'Invalid order' } },
      },
    },
    '/orders/{id}': {
      parameters: [{ name: 'id', in: 'path', required: true, schema: { type: 'string' } }],
      patch: { operationId: 'updateOrder', responses: { 200: { description: 'Updated' } } },
      delete: { operationId: 'deleteOrder', responses: { 204: { description: 'Deleted' } } },
    },
    '/pings': { post: { operationId: 'ping', responses: { 200: { description: 'pong' } } } },
  },
});

const covered = ['POST /orders', 'PATCH /orders/{id}'];
const notPings = ({ path }: { path: string }) => path !== '/pings';

describe('addIdempotencyContract on a document (H21)', () => {
  for (const version of ['3.0.3', '3.1.0']) {
    it(`H21: OpenAPI ${version}: validates, and the generated client has the header on exactly the covered operations`, async () => {
      const documented = addIdempotencyContract(document(version), { scope: 'shared' }, { select: notPings });
      await expectValidDocument(documented);
      expect(await clientTypesErrors(documented, covered)).toEqual([]);
      await expect(JSON.stringify(addedParts(documented, covered), null, 2)).toMatchFileSnapshot(`./__snapshots__/openapi-express-${version}.json`);
    });
  }

  it('H21: the input document is not changed; an operation keeps its own responses and gets the replay header on them', () => {
    const input = document('3.1.0');
    const before = JSON.stringify(input);
    const documented = addIdempotencyContract(input, { scope: 'shared' });
    expect(JSON.stringify(input)).toBe(before);
    const post = documented.paths!['/orders']!.post as { responses: Record<string, Record<string, unknown>> };
    expect(post.responses['400']).toEqual({ description: 'Invalid order', headers: { 'Idempotent-Replayed': { $ref: '#/components/headers/IdempotentReplayed' } } });
    expect(post.responses['201']!.headers).toEqual({ 'Idempotent-Replayed': { $ref: '#/components/headers/IdempotentReplayed' } });
    for (const status of ['409', '413', '422', '503']) expect(post.responses[status]).toHaveProperty('$ref');
    // scope 'shared': no request can be refused for want of a user.
    expect(post.responses['500']).toBeUndefined();
    // `/pings` without select: POST, covered.
    expect((documented.paths!['/pings']!.post as { parameters: unknown[] }).parameters).toHaveLength(1);
  });

  it('H21: the options decide what is promised: required, methods, limits, onStoreError, scope, encryption, formatError', async () => {
    const base = { scope: 'shared' as const };
    const optional = idempotencyContract({ ...base, required: false });
    expect(optional.components.parameters.IdempotencyKey!.required).toBe(false);
    const refused = (c: ReturnType<typeof idempotencyContract>) =>
      Object.keys(((c.components.responses.IdempotencyKeyRefused!.content as Record<string, { examples: object }>)['application/problem+json']!.examples));
    expect(refused(optional)).toEqual(['key-invalid']);
    expect(refused(idempotencyContract(base))).toEqual(['key-missing', 'key-invalid']);
    expect(idempotencyContract({ ...base, onStoreError: 'continue' }).responses['503']).toBeUndefined();
    expect(idempotencyContract(base).responses['503']).toBeDefined();
    expect(idempotencyContract({}).responses['500']).toBeDefined();
    const encrypted = idempotencyContract({ ...base, encryption: { keys: [{ id: 'k1', key: Buffer.alloc(32).toString('base64') }] } });
    expect(Object.keys((encrypted.components.responses.IdempotencyServerError!.content as Record<string, { examples: object }>)['application/problem+json']!.examples)).toEqual(['record-unreadable']);
    const schema = idempotencyContract({ ...base, maxKeyLength: 12 }).components.parameters.IdempotencyKey!.schema as { pattern: string };
    expect(new RegExp(schema.pattern).test('k'.repeat(12))).toBe(true);
    expect(new RegExp(schema.pattern).test('k'.repeat(13))).toBe(false);
    expect(JSON.stringify(idempotencyContract({ ...base, maxBodyBytes: 2048 }).components.responses.IdempotencyBodyTooLarge)).toContain('2048 bytes');
    const formatted = idempotencyContract({ ...base, formatError: (p) => ({ error: p }) });
    expect(formatted.components.schemas).toEqual({});
    expect(Object.keys(formatted.components.responses.IdempotencyConflict!.content as object)).toEqual(['application/json']);
    // methods: PUT covered, POST not.
    const put = addIdempotencyContract(document('3.1.0'), { ...base, methods: ['PUT', 'DELETE'] });
    expect(await clientTypesErrors(put, ['DELETE /orders/{id}'])).toEqual([]);
    // a layer made by an adapter: its own values.
    const layer = createIdempotency({ store: memoryStore(), scope: 'shared', header: 'X-Request-Key', maxKeyLength: 64 });
    const fromLayer = addIdempotencyContract(document('3.0.3'), layer, { select: notPings });
    await expectValidDocument(fromLayer);
    expect(await clientTypesErrors(fromLayer, covered, 'X-Request-Key')).toEqual([]);
  });

  it('H21: another layer with other limits on the same document gets its own components, never a changed one', async () => {
    const first = addIdempotencyContract(document('3.1.0'), { scope: 'shared' }, { select: ({ path }) => path === '/orders' });
    const both = addIdempotencyContract(first, { scope: 'shared', maxKeyLength: 40, required: false }, { select: ({ path }) => path === '/orders/{id}' });
    await expectValidDocument(both);
    expect(Object.keys(both.components!.parameters!)).toEqual(['IdempotencyKey', 'IdempotencyKey2']);
    expect((both.paths!['/orders/{id}']!.patch as { parameters: unknown[] }).parameters).toEqual([{ $ref: '#/components/parameters/IdempotencyKey2' }]);
    expect(await clientTypesErrors(both, { 'POST /orders': true, 'PATCH /orders/{id}': false })).toEqual([]);
  });

  it('bad input is a TypeError that says what was expected', () => {
    expect(() => addIdempotencyContract({ openapi: '2.0' } as OpenApiDocument, {})).toThrow(/Expected `openapi` to be an OpenAPI version 3.0.x or 3.1.x, got "2.0"/);
    expect(() => addIdempotencyContract(document('3.1.0'), {}, { select: 'x' as never })).toThrow(/Expected `select` to be a function/);
  });
});

describe('the examples are what the Express app sends (H21)', () => {
  let url: string;
  let server: ReturnType<express.Express['listen']>;
  const store = memoryStore();
  const options = { store, scope: 'shared' as const, maxBodyBytes: 64, maxKeyLength: 20, waitMs: 0 };
  const examples = new Map<string, unknown>();
  // The slow request holds its key until the test lets it go (no sleeps).
  let started!: () => void;
  const running = new Promise<void>((resolve) => (started = resolve));
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));

  beforeAll(async () => {
    const app = express();
    app.use(idempotency(options));
    app.use(express.json());
    app.post('/orders', async (req, res) => {
      if (req.query.slow) {
        started();
        await held;
      }
      res.status(201).json({ id: 1 });
    });
    server = app.listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const contract = idempotencyContract(options);
    for (const response of Object.values(contract.components.responses)) {
      const media = (response.content as Record<string, { examples: Record<string, { value: unknown }> }>)['application/problem+json']!;
      for (const [code, example] of Object.entries(media.examples)) examples.set(code, example.value);
    }
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
    await store.close();
  });

  it('H21: 400 key-missing, 400 key-invalid, 413, 422 and 409 bodies are the documented examples', async () => {
    const body = async (reply: Awaited<ReturnType<typeof send>>) => ({ status: reply.status, type: reply.headers['content-type'], body: reply.json() });
    const expected = (code: string) => ({ status: (examples.get(code) as { status: number }).status, type: 'application/problem+json', body: examples.get(code) });
    expect(await body(await send(url, { path: '/orders', body: { a: 1 } }))).toEqual(expected('key-missing'));
    expect(await body(await send(url, { path: '/orders', key: 'k'.repeat(21), body: { a: 1 } }))).toEqual(expected('key-invalid'));
    expect(await body(await send(url, { path: '/orders', key: 'big', body: { a: 'x'.repeat(100) } }))).toEqual(expected('body-too-large'));
    await send(url, { path: '/orders', key: 'used', body: { a: 1 } });
    expect(await body(await send(url, { path: '/orders', key: 'used', body: { a: 2 } }))).toEqual(expected('key-reused'));
    const slow = send(url, { path: '/orders?slow=1', key: 'slow', body: { a: 1 } });
    await running;
    const conflict = await send(url, { path: '/orders?slow=1', key: 'slow', body: { a: 1 } });
    release();
    expect(await body(conflict)).toEqual(expected('request-in-progress'));
    expect(conflict.headers['retry-after']).toBe('1');
    expect((await slow).status).toBe(201);
  });
});
