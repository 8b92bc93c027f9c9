/**
 * Where the layer keeps what it holds per request or response (the `inTransaction` hook,
 * the Express capture, Nest's handled mark): on the object under a symbol, unless an
 * adapter declared the object's prototype as set after construction (Express), or the
 * object cannot take a property; found the same way either way.
 */
import { IncomingMessage, ServerResponse, request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Socket } from 'node:net';
import express from 'express';
import Koa from 'koa';
import { describe, expect, it } from 'vitest';
import { idempotency } from '../../adapters/express.js';
import { memoryStore } from '../../drivers/memory.js';
import { declareReprototyped, ObjectSlot } from '../../src/object-slot.js';
import { hasRequestTransaction, registerRequestTransaction, type RequestTransaction } from '../../src/transaction.js';

const run: RequestTransaction = { transaction: async () => ({ status: 200, headers: {}, body: new Uint8Array() }) };
const ownSymbols = (o: object) => Object.getOwnPropertySymbols(o).length;
const ours = (o: object) => Object.getOwnPropertySymbols(o).filter((s) => s.description?.startsWith('idempotency-kit'));

describe('the inTransaction hook of a request', () => {
  it('goes on a class instance (Node message), a Koa context and an object made by Object.create as a symbol property', () => {
    const message = new IncomingMessage(new Socket());
    const ctx = new Koa().createContext(new IncomingMessage(new Socket()), {} as never);
    // As @hono/node-server makes its requests: Object.create of an object whose prototype is Request's.
    const lightRequest = Object.create(Object.setPrototypeOf({ light: true }, Request.prototype) as object) as object;
    for (const raw of [message, ctx, lightRequest, Object.create({ plain: true }) as object, {}]) {
      const before = ownSymbols(raw);
      expect(hasRequestTransaction(raw)).toBe(false);
      registerRequestTransaction(raw, run);
      expect(ownSymbols(raw), 'one symbol property more').toBe(before + 1);
      expect(hasRequestTransaction(raw)).toBe(true);
    }
  });

  it('on an object whose prototype an adapter declared, a frozen object and a null-prototype one: no property, found all the same', () => {
    const app = express();
    const req = new IncomingMessage(new Socket());
    Object.setPrototypeOf(req, app.request);
    declareReprototyped(req);
    for (const raw of [req, Object.freeze({}), Object.create(null) as object]) {
      const before = ownSymbols(raw);
      registerRequestTransaction(raw, run);
      expect(ownSymbols(raw)).toBe(before);
      expect(hasRequestTransaction(raw)).toBe(true);
    }
  });
});

describe('a value kept per object', () => {
  it('is read back, replaced and forgotten the same way on and beside an object', () => {
    const slot = new ObjectSlot<number>('test');
    const onIt = {};
    const beside = Object.create(Object.create({ declared: true }) as object) as object;
    declareReprototyped(beside);
    for (const object of [onIt, beside]) {
      expect(slot.get(object)).toBeUndefined();
      slot.set(object, 1);
      slot.set(object, 2);
      expect(slot.get(object)).toBe(2);
      slot.delete(object);
      expect(slot.get(object)).toBeUndefined();
    }
    expect(ours(onIt)).toHaveLength(1);
    expect(ours(beside)).toEqual([]);
  });

  it('set as a property, is still found once the object is re-prototyped to a declared prototype (the Node adapter around an Express app)', () => {
    const slot = new ObjectSlot<number>('moved');
    const req = new IncomingMessage(new Socket());
    slot.set(req, 7);
    expect(ours(req)).toHaveLength(1);
    Object.setPrototypeOf(req, express().request);
    declareReprototyped(req);
    expect(slot.get(req)).toBe(7);
    slot.delete(req);
    expect(slot.get(req)).toBeUndefined();
    slot.set(req, 8); // now beside it
    expect(ours(req).map((symbol) => (req as unknown as Record<symbol, unknown>)[symbol])).toEqual([undefined]);
    expect(slot.get(req)).toBe(8);
  });
});

describe('a declaration', () => {
  it("never covers a class's own prototype: a plain Node message keeps taking the property", () => {
    const declared = new IncomingMessage(new Socket());
    declareReprototyped(declared);
    const other = new IncomingMessage(new Socket());
    registerRequestTransaction(other, run);
    expect(ours(other)).toHaveLength(1);
    expect(hasRequestTransaction(other)).toBe(true);
  });
});

describe('the Express adapter', () => {
  it("adds no property to Express's request or response, and inTransaction still finds its request", async () => {
    const app = express();
    const seen: { req?: object; res?: object; found?: boolean } = {};
    app.use(idempotency({ store: memoryStore(), scope: 'shared' }));
    app.post('/orders', (req, res) => {
      Object.assign(seen, { req, res, found: hasRequestTransaction(req) });
      res.status(201).json({ ok: true });
    });
    const server = app.listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    try {
      const { port } = server.address() as AddressInfo;
      const status = await new Promise<number>((resolve, reject) => {
        const request = httpRequest({ port, host: '127.0.0.1', method: 'POST', path: '/orders', headers: { 'idempotency-key': 'k1', 'content-type': 'application/json' } }, (response) => {
          response.resume();
          response.on('end', () => resolve(response.statusCode ?? 0));
        });
        request.on('error', reject);
        request.end('{"sku":"a"}');
      });
      expect(status).toBe(201);
      expect(seen.found).toBe(true);
      expect(seen.req).toBeInstanceOf(IncomingMessage);
      expect(seen.res).toBeInstanceOf(ServerResponse);
      expect(ours(seen.req!)).toEqual([]);
      expect(ours(seen.res!)).toEqual([]);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });
});
