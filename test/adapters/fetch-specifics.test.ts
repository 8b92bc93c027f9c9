/**
 * What the conformance table cannot show for the fetch and Hono adapters: what the handler
 * receives, the platform's extra arguments, a body read before the Hono middleware, scope
 * from Hono's context, per-route use, and a handler that returns no Response. In process:
 * the wrapped function and `app.request()` are called directly, as a platform calls them.
 */
import { randomUUID } from 'node:crypto';
import { Hono, type Context } from 'hono';
import { cloneRawRequest } from 'hono/request';
import { validator } from 'hono/validator';
import { describe, expect, it } from 'vitest';
import { memoryStore } from '../../drivers/memory.js';
import { withIdempotency } from '../../adapters/fetch.js';
import { idempotency } from '../../adapters/hono/index.js';
import { headersView, requestTarget } from '../../adapters/internal/web-io.js';
import type { IdempotencyEvent } from '../../src/events.js';

const post = (path: string, key: string | undefined, body: unknown, headers: Record<string, string> = {}) =>
  new Request(`http://localhost${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}), ...headers },
    body: JSON.stringify(body),
  });

class PlatformRequest extends Request {
  readonly nextUrl = new URL(this.url);
}

describe('fetch adapter specifics', () => {
  it('H6: the handler gets the very request object, unread, and the platform\'s other arguments', async () => {
    const seen: unknown[] = [];
    const handler = withIdempotency(
      async (request: PlatformRequest, context: { params: { id: string } }) => {
        seen.push(request, context, request.nextUrl.pathname, await request.json());
        return Response.json({ ok: true }, { status: 201 });
      },
      { store: memoryStore(), scope: 'shared' },
    );
    const request = new PlatformRequest(post('/orders/7', randomUUID(), { sku: 'A1' }));
    const context = { params: { id: '7' } };
    const response = await handler(request, context);
    expect(response.status).toBe(201);
    expect(seen).toEqual([request, context, '/orders/7', { sku: 'A1' }]);
    expect(seen[0]).toBe(request);
  });

  it('H10: a handler that returns no Response releases the key and throws a TypeError', async () => {
    const events: IdempotencyEvent[] = [];
    const handler = withIdempotency(async () => ({ status: 'not a response' }) as unknown as Response, {
      store: memoryStore(),
      scope: 'shared',
      onEvent: (e) => events.push(e),
    });
    await expect(handler(post('/x', 'k1', {}))).rejects.toThrow(/Expected the handler to return a Response, got object/);
    expect(events.map((e) => e.type)).toEqual(['claimed', 'released']);
  });

  it('H13: a client gone before the answer: the body is read here and stored, so the retry replays', async () => {
    let runs = 0;
    const store = memoryStore();
    const handler = withIdempotency(
      async () => {
        runs++;
        return new Response(new Blob(['created']).stream(), { status: 201, headers: { 'content-type': 'text/plain' } });
      },
      { store, scope: 'shared' },
    );
    const controller = new AbortController();
    controller.abort();
    const key = randomUUID();
    const first = await handler(new Request(post('/x', key, {}), { signal: controller.signal }));
    expect(await first.text()).toBe('created');
    const retry = await handler(post('/x', key, {}));
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(await retry.text()).toBe('created');
    expect(runs).toBe(1);
  });

  it('H12: a reader that cancels mid-stream completes the record without a body: 409, never a second run', async () => {
    let runs = 0;
    const handler = withIdempotency(
      async () => {
        runs++;
        const stream = new ReadableStream<Uint8Array>({
          pull: (controller) => controller.enqueue(new TextEncoder().encode('tick;')), // endless
        });
        return new Response(stream, { status: 200 });
      },
      { store: memoryStore(), scope: 'shared' },
    );
    const key = randomUUID();
    const reader = (await handler(post('/ticks', key, {}))).body!.getReader();
    await reader.read();
    await reader.cancel();
    await new Promise((resolve) => setTimeout(resolve, 10));
    const retry = await handler(post('/ticks', key, {}));
    expect(retry.status).toBe(409);
    expect(((await retry.json()) as { code: string }).code).toBe('response-not-replayable');
    expect(runs).toBe(1);
  });

  it('body-too-large: a chunked body (no Content-Length) is counted: 413 over the limit, the same bytes under it', async () => {
    const handler = withIdempotency(async (request: Request) => new Response(await request.text(), { status: 201 }), {
      store: memoryStore(),
      scope: 'shared',
      maxBodyBytes: 64,
    });
    const chunked = (text: string) =>
      new Request('http://localhost/echo', {
        method: 'POST',
        headers: { 'idempotency-key': randomUUID() },
        body: new Blob([text]).stream(),
        duplex: 'half',
      } as RequestInit);
    expect(await (await handler(chunked('y'.repeat(64)))).text()).toBe('y'.repeat(64));
    expect((await handler(chunked('y'.repeat(65)))).status).toBe(413);
  });

  it('body-too-large: a body read whole by its declared length is bounded by its bytes: a Request that declares less than it holds gets 413', async () => {
    let runs = 0;
    const handler = withIdempotency(
      async (request: Request) => {
        runs++;
        return new Response(await request.text(), { status: 201 });
      },
      { store: memoryStore(), scope: 'shared', maxBodyBytes: 64 },
    );
    // A Request made in code may declare any length; an HTTP/1.1 server's never lies.
    const declaring = (text: string, length: number) =>
      new Request('http://localhost/echo', {
        method: 'POST',
        headers: { 'idempotency-key': randomUUID(), 'content-length': String(length) },
        body: text,
      });
    const small = await handler(declaring('y'.repeat(64), 64));
    expect(small.status).toBe(201);
    expect(await small.text()).toBe('y'.repeat(64)); // the handler still reads the whole body
    const lying = await handler(declaring('y'.repeat(65), 10));
    expect(lying.status).toBe(413);
    expect(((await lying.json()) as { code: string }).code).toBe('body-too-large');
    expect(runs).toBe(1);
  });

  it('H10: a stream that fails before anyone reads it releases the key when read, without an unhandled rejection', async () => {
    let runs = 0;
    const handler = withIdempotency(
      async () => {
        runs++;
        const stream = new ReadableStream<Uint8Array>({
          async pull(controller) {
            await new Promise((resolve) => setTimeout(resolve, 20));
            controller.error(new Error('upstream failed'));
          },
        });
        return new Response(stream, { status: 200 });
      },
      { store: memoryStore(), scope: 'shared' },
    );
    const key = randomUUID();
    const response = await handler(post('/feed', key, {}));
    await new Promise((resolve) => setTimeout(resolve, 60)); // the source fails while no one reads
    await expect(response.text()).rejects.toThrow();
    const retry = await handler(post('/feed', key, {}));
    await retry.text().catch(() => undefined);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    expect(runs).toBe(2);
  });

  it('rejects a handler that is not a function', () => {
    expect(() => withIdempotency(undefined as never, { store: memoryStore(), scope: 'shared' })).toThrow(/Expected `handler` to be a function/);
  });

  it('security: without `scope` it refuses to start (no user convention), and says what to write', () => {
    expect(() => withIdempotency(async () => new Response(), { store: memoryStore() })).toThrow(
      /Expected `scope`.*idempotency-kit\/fetch.*scope: \(request\) => .*scope: 'shared'/,
    );
  });

  it('H14: fingerprintHeaders and the content type are read from the request headers (fetch and Hono)', async () => {
    for (const wrap of ['fetch', 'hono'] as const) {
      let runs = 0;
      const options = { store: memoryStore(), scope: 'shared' as const, fingerprintHeaders: ['x-account'] };
      const call =
        wrap === 'fetch'
          ? withIdempotency(async () => Response.json({ n: ++runs }, { status: 201 }), options)
          : (() => {
              const app = new Hono();
              app.use(idempotency(options));
              app.post('/orders', (c) => c.json({ n: ++runs }, 201));
              return (request: Request) => app.request(request);
            })();
      const key = randomUUID();
      expect((await call(post('/orders', key, { a: 1 }, { 'X-Account': 'a' }))).status).toBe(201);
      expect((await call(post('/orders', key, { a: 1 }, { 'x-account': 'a' }))).headers.get('idempotent-replayed')).toBe('true');
      expect((await call(post('/orders', key, { a: 1 }, { 'x-account': 'b' }))).status).toBe(422);
      // JSON bodies are compared as JSON (key order does not matter): the content type was seen.
      const reordered = new Request('http://localhost/orders', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key, 'x-account': 'a' },
        body: '{ "a": 1 }',
      });
      expect((await call(reordered)).headers.get('idempotent-replayed')).toBe('true');
      expect(runs).toBe(1);
    }
  });

  it('headersView: a record of the request headers, read on demand, listing each name once', () => {
    const headers = new Headers([
      ['Content-Type', 'application/json'],
      ['x-a', '1'],
      ['x-a', '2'],
      ['set-cookie', 'a=1'],
      ['set-cookie', 'b=2'],
    ]);
    const view = headersView(headers);
    expect(view['content-type']).toBe('application/json');
    expect(view['x-a']).toBe('1, 2');
    expect(view['missing']).toBeUndefined();
    expect('x-a' in view).toBe(true);
    expect('missing' in view).toBe(false);
    expect(Object.keys(view).sort()).toEqual(['content-type', 'set-cookie', 'x-a']);
    expect({ ...view }).toEqual({ 'content-type': 'application/json', 'set-cookie': 'a=1, b=2', 'x-a': '1, 2' });
    // Writes through the view change neither the view nor the request's headers.
    view['x-b'] = '3';
    delete view['x-a'];
    expect(view['x-b']).toBeUndefined();
    expect(headers.has('x-b')).toBe(false);
    expect(view['x-a']).toBe('1, 2');
    expect(typeof view[Symbol.iterator as unknown as string]).toBe('undefined');
  });

  it('requestTarget: path and query of an absolute URL, without the fragment', () => {
    expect(requestTarget('http://h:3000/a/b?x=1&y=2#frag')).toBe('/a/b?x=1&y=2');
    expect(requestTarget('https://h/')).toBe('/');
    expect(requestTarget('http://h?q=1')).toBe('/?q=1');
  });
});

describe('Hono adapter specifics', () => {
  it('H15: scope reads the principal from the context (c.get), set by authentication before it', async () => {
    const app = new Hono<{ Variables: { jwtPayload: { sub: string } } }>();
    let n = 0;
    app.use(async (c, next) => {
      c.set('jwtPayload', { sub: c.req.header('x-user') ?? 'nobody' });
      await next();
    });
    app.use(idempotency({ store: memoryStore(), scope: (c) => (c.get('jwtPayload') as { sub: string }).sub }));
    app.post('/orders', (c) => c.json({ n: ++n }, 201));
    const key = randomUUID();
    // Each body is read before the next request, as a server sends it: the record completes
    // once the response has gone out.
    const a = await (await app.request(post('/orders', key, {}, { 'x-user': 'alice' }))).json();
    const b = await (await app.request(post('/orders', key, {}, { 'x-user': 'bob' }))).json();
    const aAgain = await app.request(post('/orders', key, {}, { 'x-user': 'alice' }));
    expect([a, b, await aAgain.json()]).toEqual([{ n: 1 }, { n: 2 }, { n: 1 }]);
    expect(aAgain.headers.get('idempotent-replayed')).toBe('true');
  });

  it('H14: a body read before the middleware (a validator) is fingerprinted from what Hono kept', async () => {
    const app = new Hono();
    let n = 0;
    app.use(async (c, next) => {
      await c.req.json(); // as a validator does
      await next();
    });
    app.use(idempotency({ store: memoryStore(), scope: 'shared' }));
    app.post('/orders', async (c) => c.json({ n: ++n, body: await c.req.json() }, 201));
    const key = randomUUID();
    const first = await app.request(post('/orders', key, { a: 1, b: 2 }));
    expect(await first.json()).toEqual({ n: 1, body: { a: 1, b: 2 } });
    const reordered = await app.request(
      new Request('http://localhost/orders', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        body: '{ "b": 2, "a": 1 }',
      }),
    );
    expect(reordered.headers.get('idempotent-replayed')).toBe('true');
    const other = await app.request(post('/orders', key, { a: 9 }));
    expect(other.status).toBe(422);
    expect(n).toBe(1);
  });

  it('per route: only the routes given the middleware are covered; the handler reads c.req.raw itself', async () => {
    const app = new Hono();
    const once = idempotency({ store: memoryStore(), scope: 'shared' });
    let n = 0;
    app.post('/payments', once, async (c) => c.json({ n: ++n, raw: await c.req.raw.text() }, 201));
    app.post('/notes', (c) => c.json({ n: ++n }, 201));
    const key = randomUUID();
    const first = await app.request(post('/payments', key, { amount: 5 }));
    expect(await first.json()).toEqual({ n: 1, raw: '{"amount":5}' });
    expect((await app.request(post('/payments', key, { amount: 5 }))).headers.get('idempotent-replayed')).toBe('true');
    expect((await app.request(post('/notes', undefined, {}))).status).toBe(201); // not covered: no key needed
  });

  it('body-too-large: a chunked body (no Content-Length) is counted as it is read: 413 over the limit, readable under it', async () => {
    const app = new Hono();
    app.use(idempotency({ store: memoryStore(), scope: 'shared', maxBodyBytes: 64 }));
    app.post('/echo', async (c) => c.text(await c.req.raw.text(), 201));
    const chunked = (text: string, key: string) =>
      new Request('http://localhost/echo', {
        method: 'POST',
        headers: { 'content-type': 'text/plain', 'idempotency-key': key },
        body: new Blob([text]).stream(),
        duplex: 'half',
      } as RequestInit);
    const small = await app.request(chunked('x'.repeat(64), randomUUID()));
    expect(small.status).toBe(201);
    expect(await small.text()).toBe('x'.repeat(64));
    const big = await app.request(chunked('x'.repeat(65), randomUUID()));
    expect(big.status).toBe(413);
    expect(((await big.json()) as { code: string }).code).toBe('body-too-large');
  });

  it('body-too-large: a body read whole by its declared length is bounded by its bytes (Hono): a Request that declares less than it holds gets 413, and one that declares none is fingerprinted by what it holds', async () => {
    const app = new Hono();
    let runs = 0;
    app.use(idempotency({ store: memoryStore(), scope: 'shared', maxBodyBytes: 64 }));
    app.post('/echo', async (c) => {
      runs++;
      return c.text(await c.req.text(), 201);
    });
    const declaring = (text: string, length: number) =>
      new Request('http://localhost/echo', {
        method: 'POST',
        headers: { 'content-type': 'text/plain', 'idempotency-key': randomUUID(), 'content-length': String(length) },
        body: text,
      });
    const small = await app.request(declaring('x'.repeat(64), 64));
    expect(small.status).toBe(201);
    expect(await small.text()).toBe('x'.repeat(64));
    const lying = await app.request(declaring('x'.repeat(65), 10));
    expect(lying.status).toBe(413);
    expect(((await lying.json()) as { code: string }).code).toBe('body-too-large');
    expect(runs).toBe(1);
    // Declared empty, sent with bytes: the bytes are what the handler reads, so they are what is fingerprinted.
    const key = randomUUID();
    const sent = (text: string) =>
      new Request('http://localhost/echo', {
        method: 'POST',
        headers: { 'content-type': 'text/plain', 'idempotency-key': key, 'content-length': '0' },
        body: text,
      });
    expect(await (await app.request(sent('a'))).text()).toBe('a');
    expect((await app.request(sent('b'))).status).toBe(422);
    expect(runs).toBe(2);
  });

  it('H10: an error answered by app.onError with a 4xx still releases the key', async () => {
    const app = new Hono();
    let runs = 0;
    app.use(idempotency({ store: memoryStore(), scope: 'shared' }));
    app.post('/fail', () => {
      runs++;
      throw new Error('nope');
    });
    app.onError((_error, c) => c.json({ error: 'bad' }, 400));
    const key = randomUUID();
    const replies = [await app.request(post('/fail', key, {})), await app.request(post('/fail', key, {}))];
    expect(replies.map((r) => r.status)).toEqual([400, 400]);
    expect(replies[1]!.headers.get('idempotent-replayed')).toBeNull();
    expect(runs).toBe(2);
  });

  it('H11: headers set with c.header are replayed by the allow-list, cookies never', async () => {
    const app = new Hono();
    app.use(idempotency({ store: memoryStore(), scope: 'shared' }));
    app.post('/orders', (c) => {
      c.header('location', '/orders/1');
      c.header('set-cookie', 'a=1');
      c.header('set-cookie', 'b=2', { append: true });
      return c.json({ id: 1 }, 201);
    });
    const key = randomUUID();
    const first = await app.request(post('/orders', key, {}));
    expect(first.headers.getSetCookie()).toEqual(['a=1', 'b=2']);
    const firstText = await first.text();
    const replay = await app.request(post('/orders', key, {}));
    expect(replay.headers.get('location')).toBe('/orders/1');
    expect(replay.headers.getSetCookie()).toEqual([]);
    expect(await replay.text()).toBe(firstText);
  });

  describe('the body the middleware read, for what runs after it', () => {
    const body = '{"a":1,"b":"é"}';
    const text = (bytes: ArrayBuffer | Uint8Array) => new TextDecoder().decode(bytes);
    const readers: Record<string, (c: Context) => Promise<string>> = {
      'c.req.json()': async (c) => JSON.stringify(await c.req.json()),
      'c.req.text()': (c) => c.req.text(),
      'c.req.arrayBuffer()': async (c) => text(await c.req.arrayBuffer()),
      'c.req.bytes()': async (c) => text(await c.req.bytes()),
      'c.req.blob()': async (c) => (await c.req.blob()).text(),
      'c.req.raw.json()': async (c) => JSON.stringify(await c.req.raw.json()),
      'c.req.raw.text()': (c) => c.req.raw.text(),
      'c.req.raw.arrayBuffer()': async (c) => text(await c.req.raw.arrayBuffer()),
      'c.req.raw.body': async (c) => new Response(c.req.raw.body).text(),
      'c.req.raw passed on to another fetch handler': async (c) => {
        const inner = new Hono().post('/*', async (ic) => ic.text(await ic.req.text()));
        return (await inner.fetch(c.req.raw)).text();
      },
      'new Request(c.req.raw)': (c) => new Request(c.req.raw).text(),
      'cloneRawRequest(c.req)': async (c) => (await cloneRawRequest(c.req)).text(),
      'c.req.text(), then c.req.raw.text()': async (c) => `${await c.req.text()}${await c.req.raw.text()}`.slice(body.length),
      'c.req.raw.text(), then c.req.json()': async (c) => `${await c.req.raw.text()}${JSON.stringify(await c.req.json())}`.slice(body.length),
    };
    for (const [name, read] of Object.entries(readers)) {
      it(`H6: a handler reading ${name} gets the bytes sent`, async () => {
        const app = new Hono();
        app.use(idempotency({ store: memoryStore(), scope: 'shared' }));
        app.post('/orders', async (c) => c.json({ seen: await read(c), method: c.req.method, url: c.req.url, type: c.req.header('content-type') }, 201));
        const key = randomUUID();
        const send = () =>
          app.request(new Request('http://localhost/orders?x=1', { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': key }, body }));
        const first = await send();
        expect(await first.json()).toEqual({ seen: body, method: 'POST', url: 'http://localhost/orders?x=1', type: 'application/json' });
        expect((await send()).headers.get('idempotent-replayed')).toBe('true');
      });
    }

    it('H6: a handler that reads headers, url, query and c.req.json() builds no second Request; one that asks for c.req.raw gets it', async () => {
      const Native = globalThis.Request;
      let built = 0;
      globalThis.Request = class extends Native {
        constructor(...args: ConstructorParameters<typeof Request>) {
          super(...args);
          built++;
        }
      };
      try {
        const app = new Hono();
        app.use(idempotency({ store: memoryStore(), scope: 'shared' }));
        app.post('/orders', async (c) => c.json({ key: c.req.header('idempotency-key'), q: c.req.query('q'), all: c.req.header()['x-a'], body: await c.req.json() }, 201));
        app.post('/raw', async (c) => c.json({ body: await c.req.raw.json(), again: c.req.raw === c.req.raw }, 201));
        const request = (path: string) =>
          new Native(`http://localhost${path}?q=1`, { method: 'POST', headers: { 'idempotency-key': randomUUID(), 'x-a': 'b' }, body: '{"a":1}' });
        const orders = request('/orders');
        built = 0;
        const reply = await app.fetch(orders);
        expect(await reply.json()).toEqual({ key: orders.headers.get('idempotency-key'), q: '1', all: 'b', body: { a: 1 } });
        expect(built).toBe(0);
        const raw = request('/raw');
        built = 0;
        expect(await (await app.fetch(raw)).json()).toEqual({ body: { a: 1 }, again: true });
        expect(built).toBe(1);
      } finally {
        globalThis.Request = Native;
      }
    });

    it('H6: c.req.raw replaced by a later middleware is what c.req.header(), url and the body methods then see', async () => {
      const app = new Hono();
      app.use(idempotency({ store: memoryStore(), scope: 'shared' }));
      app.use(async (c, next) => {
        c.req.raw = new Request('http://localhost/other', { method: 'POST', headers: { 'x-replaced': 'yes' }, body: 'other' });
        await next();
      });
      app.post('/orders', async (c) => c.json({ replaced: c.req.header('x-replaced'), url: c.req.url, raw: await c.req.raw.text() }, 201));
      const reply = await app.request(post('/orders', randomUUID(), { a: 1 }));
      expect(await reply.json()).toEqual({ replaced: 'yes', url: 'http://localhost/other', raw: 'other' });
    });

    it('H6: form bodies: parseBody(), formData() and a binary file in multipart keep their bytes', async () => {
      const app = new Hono();
      app.use(idempotency({ store: memoryStore(), scope: 'shared' }));
      app.post('/form', async (c) => c.json(await c.req.parseBody(), 201));
      app.post('/upload', async (c) => {
        const file = (await c.req.formData()).get('file') as File;
        const parsed = (await c.req.parseBody())['file'] as File;
        return c.json({ bytes: [...new Uint8Array(await file.arrayBuffer())], same: (await parsed.arrayBuffer()).byteLength }, 201);
      });
      const form = await app.request(
        new Request('http://localhost/form', {
          method: 'POST',
          headers: { 'content-type': 'application/x-www-form-urlencoded', 'idempotency-key': randomUUID() },
          body: 'a=1&b=%C3%A9',
        }),
      );
      expect(await form.json()).toEqual({ a: '1', b: 'é' });
      const binary = Uint8Array.from({ length: 256 }, (_, i) => i);
      const data = new FormData();
      data.set('file', new Blob([binary]), 'f.bin');
      const upload = await app.request(new Request('http://localhost/upload', { method: 'POST', headers: { 'idempotency-key': randomUUID() }, body: data }));
      expect(await upload.json()).toEqual({ bytes: [...binary], same: 256 });
    });

    it('H6: a validator after the middleware (json and form) reads the same body', async () => {
      const app = new Hono();
      app.use(idempotency({ store: memoryStore(), scope: 'shared' }));
      app.post('/json', validator('json', (v) => v as { a: number }), async (c) => c.json({ valid: c.req.valid('json'), raw: await c.req.raw.text() }, 201));
      app.post('/form', validator('form', (v) => v), async (c) => c.json({ valid: c.req.valid('form'), text: await c.req.text() }, 201));
      const json = await app.request(post('/json', randomUUID(), { a: 1 }));
      expect(await json.json()).toEqual({ valid: { a: 1 }, raw: '{"a":1}' });
      const form = await app.request(
        new Request('http://localhost/form', {
          method: 'POST',
          headers: { 'content-type': 'application/x-www-form-urlencoded', 'idempotency-key': randomUUID() },
          body: 'a=1',
        }),
      );
      expect(await form.json()).toEqual({ valid: { a: '1' }, text: 'a=1' });
    });

    it('H6: two layers on one route (another header and store): each reads the body, the handler gets it', async () => {
      const app = new Hono();
      let runs = 0;
      app.use(idempotency({ store: memoryStore(), scope: 'shared' }));
      app.use(idempotency({ store: memoryStore(), scope: 'shared', header: 'X-Request-Id' }));
      app.post('/orders', async (c) => c.json({ n: ++runs, body: await c.req.json(), raw: await c.req.raw.text() }, 201));
      const key = randomUUID();
      const send = () => app.request(post('/orders', key, { a: 1 }, { 'x-request-id': key }));
      expect(await (await send()).json()).toEqual({ n: 1, body: { a: 1 }, raw: '{"a":1}' });
      expect(await (await send()).json()).toEqual({ n: 1, body: { a: 1 }, raw: '{"a":1}' });
    });
  });

  it('a context type flows to scope', () => {
    // Compile-time: `scope` receives Hono's Context.
    const scope = (c: Context) => c.req.header('x-tenant');
    expect(() => idempotency({ store: memoryStore(), scope })).not.toThrow();
  });
});
