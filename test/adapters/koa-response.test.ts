/**
 * What the Koa adapter reads of Koa's private state (adapters/koa/koa-response.ts): the mark
 * Koa leaves when a handler sets `ctx.body = null` itself. Pinned to the installed Koa 3 and
 * Koa 2, with the fallback (no mark: Koa's public status rules) and the answer it decides.
 */
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { createRequire } from 'node:module';
import Koa from 'koa';
import Koa2 from 'koa2';
import { describe, expect, it } from 'vitest';
import { idempotency } from '../../adapters/koa/index.js';
import { explicitNullBody } from '../../adapters/koa/koa-response.js';
import { memoryStore } from '../../drivers/memory.js';

const require = createRequire(import.meta.url);
const versionOf = (name: string) => (JSON.parse(readFileSync(require.resolve(`${name}/package.json`), 'utf8')) as { version: string }).version;

async function serve(app: { callback(): (req: never, res: never) => void }) {
  const { createServer } = await import('node:http');
  const server = createServer(app.callback() as never);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { base: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => new Promise((resolve) => server.close(resolve)) };
}

for (const [name, Framework, major] of [
  ['koa', Koa, 3],
  ['koa2', Koa2, 2],
] as const) {
  const version = versionOf(name);

  describe(`Koa's private state, pinned to ${name} ${version}`, () => {
    it(`Koa ${version} marks a body set to null by the handler, and only then`, async () => {
      expect(Number(version.split('.')[0]), 'review adapters/koa/koa-response.ts against this Koa release').toBe(major);
      const seen: Record<string, boolean | undefined> = {};
      const app = new Framework();
      app.use(async (ctx, next) => {
        await next();
        seen[ctx.path] = explicitNullBody(ctx.response);
      });
      app.use(async (ctx) => {
        if (ctx.path === '/null') ctx.body = null;
        if (ctx.path === '/text') ctx.body = 'x';
        // After the body: Koa keeps a 200 with no body only by the mark.
        ctx.status = 200;
      });
      const { base, close } = await serve(app);
      try {
        for (const path of ['/null', '/text', '/none']) await (await fetch(`${base}${path}`)).arrayBuffer();
      } finally {
        await close();
      }
      expect(seen['/null']).toBe(true);
      expect([seen['/text'], seen['/none']]).not.toContain(true);
    });

    it('through the layer: a 200 with a null body is answered and replayed empty, as Koa sends it', async () => {
      const runs = { n: 0 };
      const app = new Framework();
      app.use(idempotency({ store: memoryStore(), scope: 'shared', waitMs: 0 }));
      app.use(async (ctx) => {
        runs.n++;
        ctx.body = null;
        ctx.status = 200;
      });
      const { base, close } = await serve(app);
      try {
        const post = () => fetch(`${base}/orders`, { method: 'POST', headers: { 'idempotency-key': 'k1' } });
        const first = await post();
        const firstBody = await first.text();
        const replay = await post();
        expect([first.status, firstBody]).toEqual([200, '']);
        expect([replay.status, await replay.text(), replay.headers.get('idempotent-replayed')]).toEqual([200, '', 'true']);
        expect(runs.n).toBe(1);
      } finally {
        await close();
      }
    });
  });
}

describe('fallback: a Koa without the mark', () => {
  it('reads no mark (undefined), so the answer follows the status alone', () => {
    expect(explicitNullBody({} as never)).toBeUndefined();
    expect(explicitNullBody({ _explicitNullBody: 'yes' } as never)).toBeUndefined();
    expect(explicitNullBody({ _explicitNullBody: true } as never)).toBe(true);
  });
});
