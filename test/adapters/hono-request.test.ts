/**
 * What the Hono adapter reads of Hono's private state (adapters/hono/hono-request.ts): its
 * request's body cache and class. Pinned to the installed Hono, and the fallback on Hono's
 * public API (`c.req.raw` replaced by a request with the same bytes) run beside the fast
 * path: a handler reads the same thing either way.
 */
import { readFileSync } from 'node:fs';
import { Hono, type Context } from 'hono';
import { HonoRequest } from 'hono/request';
import { describe, expect, it } from 'vitest';
import { lendable, lendBody } from '../../adapters/hono/hono-request.js';

const installed = (JSON.parse(readFileSync(new URL('../../node_modules/hono/package.json', import.meta.url), 'utf8')) as { version: string }).version;

/** An app whose middleware reads the body (as the layer does) and lends it, then a handler that reads it in every way Hono offers. */
function app(mode: 'fast' | 'public' | 'none') {
  const seen: { prototypeChanged?: boolean } = {};
  const hono = new Hono();
  hono.use(async (c, next) => {
    const request = c.req.raw;
    const bytes = new Uint8Array(await request.arrayBuffer());
    const before = Object.getPrototypeOf(c.req);
    if (mode !== 'none') lendBody(c.req, request, bytes, false, mode === 'public');
    seen.prototypeChanged = Object.getPrototypeOf(c.req) !== before;
    await next();
  });
  const read = async (c: Context) => ({
    json: await c.req.json(),
    text: await c.req.text(),
    bytes: [...new Uint8Array(await c.req.arrayBuffer())].length,
    header: c.req.header('x-tag'),
    method: c.req.method,
    url: new URL(c.req.url).pathname,
  });
  hono.post('/read', async (c) => c.json(await read(c)));
  hono.post('/form', async (c) => c.json(await c.req.parseBody()));
  // Passed on to another fetch handler: the raw request still has the bytes (as in Hono
  // without the layer, only until one of c.req's body methods read it).
  hono.post('/raw', async (c) => c.text(await c.req.raw.text()));
  return { hono, seen };
}

const post = (hono: Hono, path: string, body: string, type: string) =>
  hono.request(path, { method: 'POST', body, headers: { 'content-type': type, 'x-tag': 'seen' } });

describe("Hono's private state, pinned to the installed version", () => {
  it(`hono ${installed}: its request keeps a body cache its body methods answer from, and its class can be extended on the request`, async () => {
    // Checked against 4.x. Another major may keep its body elsewhere: the layer then lends
    // through `c.req.raw` (correct, one more Request per request) and this test says where to look.
    expect(installed, 'review adapters/hono/hono-request.ts against this Hono release').toMatch(/^4\./);
    const raw = new Request('http://x/', { method: 'POST', body: 'from the wire' });
    await raw.text(); // used up, as after the layer read it
    const req = new HonoRequest(raw);
    expect(lendable(req)).toBe(true);
    (req.bodyCache as { arrayBuffer?: Promise<ArrayBuffer> }).arrayBuffer = Promise.resolve(new TextEncoder().encode('{"from":"the cache"}').buffer as ArrayBuffer);
    // Hono's own methods (no subclass yet): the cached bytes answer json() and text().
    expect(await req.json()).toEqual({ from: 'the cache' });
    expect(await req.text()).toBe('{"from":"the cache"}');
  });

  it('a request without the shape (no body cache, or not extensible) is lent through the public path', () => {
    const req = new HonoRequest(new Request('http://x/'));
    expect(lendable(Object.preventExtensions(new HonoRequest(new Request('http://x/'))))).toBe(false);
    (req as unknown as { bodyCache?: unknown }).bodyCache = undefined;
    expect(lendable(req)).toBe(false);
    const request = new Request('http://x/', { method: 'POST', body: 'abc' });
    lendBody(req, request, new TextEncoder().encode('abc'));
    expect(req.raw).not.toBe(request);
    expect(req.raw.bodyUsed).toBe(false);
  });
});

describe('lending the body the middleware read', () => {
  const body = JSON.stringify({ a: 1, b: 'é' });

  it('without lending, the handler cannot read it (what the lending is for)', async () => {
    const { hono } = app('none');
    expect((await post(hono, '/read', body, 'application/json')).status).toBe(500);
  });

  it('the fast path (Hono\'s cache) and the fallback (c.req.raw) give the handler the same reads', async () => {
    const results: unknown[] = [];
    for (const mode of ['fast', 'public'] as const) {
      const { hono, seen } = app(mode);
      const reply = await post(hono, '/read', body, 'application/json');
      expect(reply.status, mode).toBe(200);
      results.push(await reply.json());
      expect(seen.prototypeChanged, mode).toBe(mode === 'fast');
      const form = await post(hono, '/form', 'x=1&y=two', 'application/x-www-form-urlencoded');
      expect(await form.json(), mode).toEqual({ x: '1', y: 'two' });
      expect(await (await post(hono, '/raw', body, 'application/json')).text(), mode).toBe(body);
    }
    expect(results[0]).toEqual({ json: { a: 1, b: 'é' }, text: body, bytes: Buffer.byteLength(body), header: 'seen', method: 'POST', url: '/read' });
    expect(results[1]).toEqual(results[0]);
  });
});
