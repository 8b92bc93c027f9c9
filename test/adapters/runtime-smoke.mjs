// A fetch-adapter server on the runtime's own HTTP server (Bun.serve or Deno.serve), built
// from dist/ as a user's bundle loads it. Run by test/adapters/runtimes.test.ts, which
// sends the requests. Plain JavaScript, so each runtime runs it without a build step.
// usage: <runtime> runtime-smoke.mjs <port>
import { withIdempotency } from '../../dist/adapters/fetch.js';
import { memoryStore } from '../../dist/drivers/memory.js';

const runtime = globalThis.Bun ? 'bun' : globalThis.Deno ? 'deno' : 'node';
const port = Number(globalThis.Deno ? Deno.args[0] : process.argv[2]);

let orders = 0;
const handler = withIdempotency(
  async (request) => {
    const path = new URL(request.url).pathname;
    const body = await request.json();
    const id = ++orders;
    if (path === '/stream') {
      const encoder = new TextEncoder();
      const parts = ['chunk-1;', 'chunk-2;', `id=${id}`];
      const stream = new ReadableStream({
        async pull(controller) {
          await new Promise((resolve) => setTimeout(resolve, 5));
          const part = parts.shift();
          if (part === undefined) controller.close();
          else controller.enqueue(encoder.encode(part));
        },
      });
      return new Response(stream, { status: 201, headers: { 'content-type': 'text/plain' } });
    }
    if (path === '/throw') throw new Error('boom');
    if (path === '/slow') await new Promise((resolve) => setTimeout(resolve, 150));
    return Response.json({ id, ...body, runtime }, { status: 201, headers: { location: `/orders/${id}`, 'set-cookie': `s=${id}` } });
  },
  { store: memoryStore(), scope: (request) => request.headers.get('x-account-id') ?? 'public', leaseMs: 300, maxBodyBytes: 1024 },
);

const fetch = async (request) => {
  try {
    return await handler(request);
  } catch (error) {
    return Response.json({ error: String(error) }, { status: 500 });
  }
};
const ready = () => console.log(`listening ${runtime} ${port}`);
if (globalThis.Bun) {
  Bun.serve({ port, hostname: '127.0.0.1', fetch });
  ready();
} else if (globalThis.Deno) {
  Deno.serve({ port, hostname: '127.0.0.1', onListen: ready }, fetch);
} else {
  throw new Error('run this with bun or deno');
}
