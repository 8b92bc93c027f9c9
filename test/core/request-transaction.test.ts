/**
 * Where the HTTP layer keeps a request's `inTransaction` hook: on the request under a
 * symbol when that is cheap for the engine, else in a WeakMap (found the same way).
 */
import { IncomingMessage } from 'node:http';
import { Socket } from 'node:net';
import express from 'express';
import Koa from 'koa';
import { describe, expect, it } from 'vitest';
import { hasRequestTransaction, registerRequestTransaction, type RequestTransaction } from '../../src/transaction.js';

const run: RequestTransaction = async () => ({ status: 200, headers: {}, body: new Uint8Array() });
const ownSymbols = (o: object) => Object.getOwnPropertySymbols(o).length;

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

  it("on Express's re-prototyped request, a frozen object and a null-prototype one: no property, found all the same", () => {
    const app = express();
    const req = new IncomingMessage(new Socket());
    Object.setPrototypeOf(req, app.request);
    for (const raw of [req, Object.freeze({}), Object.create(null) as object]) {
      const before = ownSymbols(raw);
      registerRequestTransaction(raw, run);
      expect(ownSymbols(raw)).toBe(before);
      expect(hasRequestTransaction(raw)).toBe(true);
    }
  });
});
