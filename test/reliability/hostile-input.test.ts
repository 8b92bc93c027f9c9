/**
 * Hostile input, property-based with fast-check, over real sockets to a
 * child server (Node adapter) on every store: keys of random bytes, 10 kB, CR/LF, quotes,
 * commas, SQL and Lua metacharacters, non-ASCII; bodies huge, deeply nested, invalid
 * JSON, wrong content type. Every answer is a 4xx (or the handler's 201), never a 5xx,
 * a crash or a hang; whatever executed replays byte for byte.
 */
import net from 'node:net';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execLog, figure, rawRequest, startServer, stopAllServers, type RawReply, type ServerProcess } from './fixtures/cluster.js';
import { storeReachable, storeTarget, type StoreKind, type StoreTarget } from './fixtures/stores.js';

const KINDS: StoreKind[] = ['memory', 'sqlite', 'redis', 'postgres', 'mysql', 'dynamodb'];
const MAX_BODY_BYTES = 256 * 1024;
/** Per store; the memory store, fastest, gets more. */
const KEY_RUNS: Record<StoreKind, number> = { memory: 600, sqlite: 300, redis: 300, postgres: 300, mysql: 300, dynamodb: 150 };
const BODY_RUNS: Record<StoreKind, number> = { memory: 150, sqlite: 80, redis: 80, postgres: 80, mysql: 80, dynamodb: 40 };

/** What may come back. 431: Node's own limit on header size; 415/400: the handler's. */
const ALLOWED = new Set([201, 400, 409, 413, 415, 422, 431]);

const tried = { keys: 0, bodies: 0, executed: 0, refused: 0, serverErrors: 0, hangs: 0, crashes: 0 };

function httpRequest(keyBytes: Buffer | undefined, body: Buffer, contentType: string | undefined, options: { chunked?: boolean } = {}): Buffer {
  const head = [`POST /work HTTP/1.1`, `Host: 127.0.0.1`, 'Connection: close'];
  if (contentType !== undefined) head.push(`Content-Type: ${contentType}`);
  if (options.chunked) head.push('Transfer-Encoding: chunked');
  else head.push(`Content-Length: ${body.length}`);
  const parts: Buffer[] = [Buffer.from(`${head.join('\r\n')}\r\n`, 'latin1')];
  if (keyBytes !== undefined) parts.push(Buffer.from('Idempotency-Key: ', 'latin1'), keyBytes, Buffer.from('\r\n', 'latin1'));
  parts.push(Buffer.from('\r\n', 'latin1'));
  if (options.chunked) {
    for (let at = 0; at < body.length; at += 16 * 1024) {
      const piece = body.subarray(at, at + 16 * 1024);
      parts.push(Buffer.from(`${piece.length.toString(16)}\r\n`, 'latin1'), piece, Buffer.from('\r\n', 'latin1'));
    }
    parts.push(Buffer.from('0\r\n\r\n', 'latin1'));
  } else parts.push(body);
  return Buffer.concat(parts);
}

function expectSafe(reply: RawReply, what: string, adapter: string): void {
  if (reply.status >= 500) tried.serverErrors++;
  if (!ALLOWED.has(reply.status)) throw new Error(`${what}: unexpected status ${reply.status} ${reply.body.toString('utf8').slice(0, 300)}`);
  // The layer's own refusals are problem+json (H19); Node's parser refuses bad header
  // bytes with a bare 400 before any of our code runs.
  // (A framework's own body parser answers 413 in its own format, before the layer.)
  if ([409, 422].includes(reply.status) || (reply.status === 413 && adapter === 'node')) {
    expect(reply.headers['content-type'], what).toBe('application/problem+json');
  }
}

const problemCode = (reply: RawReply): string | undefined => {
  if (reply.headers['content-type'] !== 'application/problem+json') return undefined;
  try {
    return (JSON.parse(reply.body.toString('utf8')) as { code?: string }).code;
  } catch {
    return undefined;
  }
};

// --- key generators -----------------------------------------------------------------

const metachars = [
  "'", '"', ';', '--', '/*', '*/', '\\', '%', '_', '*', '?', '[', ']', '{', '}', '(', ')', '$', '`', ',', ' ', '\t',
  '\r', '\n', '\r\n', '\0', '\x7f', "' OR '1'='1", '; DROP TABLE idempotency; --', "redis.call('FLUSHALL')",
  'KEYS[1]', 'ARGV[1]', ']]', '[[', '$1', ':', '=', '&', '<', '>', 'é', '日本', '😀', '\u0085', '\u2028', '\uFEFF',
];
const safeChars = [
  ...'abcXYZ019-_.~',
  "'", '%', '*', '?', '[', ']', '{', '}', '(', ')', '$', '`', ':', '=', '&', '<', '>', '/', '+', '!', '#', '@', '|', '^',
  '--', "' OR '1'='1", "redis.call('DEL')", 'KEYS[1]', 'SELECT * FROM x',
];

const utf8 = (s: string) => Buffer.from(s, 'utf8');
/** Keys meant to be refused or accepted, whatever they hold. */
const anyKey = fc.oneof(
  fc.uint8Array({ minLength: 0, maxLength: 80 }).map((a) => Buffer.from(a)),
  fc.array(fc.constantFrom(...metachars, 'a', 'Z', '0', '-'), { minLength: 1, maxLength: 30 }).map((a) => utf8(a.join(''))),
  fc.integer({ min: 256, max: 10 * 1024 }).map((n) => utf8('k'.repeat(n))),
  fc.tuple(fc.string({ maxLength: 20 }), fc.string({ maxLength: 20 })).map(([a, b]) => utf8(`${a},${b}`)),
  fc.string({ unit: 'binary', maxLength: 40 }).map(utf8),
  fc.string({ maxLength: 40 }).map((s) => utf8(`"${s}`)),
);
/** Printable ASCII with SQL / Lua / glob metacharacters, no quoting or list syntax: always valid (H3–H5). */
const validKey = fc
  .array(fc.constantFrom(...safeChars), { minLength: 1, maxLength: 60 })
  .map((a) => a.join('').slice(0, 255))
  .filter((k) => k.length > 0 && k.trim() === k);
const sfString = (key: string) => `"${key.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;

// --- body generators ----------------------------------------------------------------

type BodyCase = { name: string; body: Buffer; contentType: string | undefined; chunked?: boolean };
const nested = (depth: number, open: string, close: string) => Buffer.from(open.repeat(depth) + '1' + close.repeat(depth));
const bodyCaseRaw: fc.Arbitrary<BodyCase> = fc.oneof(
  fc.record({
    name: fc.constant('huge'),
    body: fc.integer({ min: MAX_BODY_BYTES + 1, max: MAX_BODY_BYTES * 4 }).map((n) => Buffer.alloc(n, 0x61)),
    contentType: fc.constant('application/json'),
    chunked: fc.boolean(),
  }),
  fc.record({
    name: fc.constant('deeply nested'),
    body: fc.oneof(
      fc.integer({ min: 1, max: 100_000 }).map((d) => nested(d, '[', ']')),
      fc.integer({ min: 1, max: 20_000 }).map((d) => nested(d, '{"a":', '}')),
      fc.integer({ min: 1, max: 100_000 }).map((d) => Buffer.from('['.repeat(d))), // never closed
    ),
    contentType: fc.constant('application/json'),
  }),
  fc.record({
    name: fc.constant('invalid json'),
    body: fc.oneof(fc.string({ maxLength: 200 }).map(utf8), fc.uint8Array({ maxLength: 500 }).map((a) => Buffer.from(a))),
    contentType: fc.constantFrom('application/json', 'application/json; charset=utf-8', 'application/merge-patch+json'),
  }),
  fc.record({
    name: fc.constant('wrong content type'),
    body: fc.json({ maxDepth: 3 }).map(utf8),
    contentType: fc.constantFrom(
      undefined,
      '',
      'text/plain',
      'application/xml',
      'multipart/form-data; boundary=x',
      'application/x-www-form-urlencoded',
      'application/jsonx',
      'text/json',
      'application/json, text/plain',
      '\u00e9/\u00e9',
      ';;;',
    ),
  }),
);

type Adapter = 'node' | 'express' | 'fastify' | 'koa' | 'fetch' | 'hono';
/** The Node adapter on every store; the framework adapters on the memory store, fewer runs. */
const OTHER_ADAPTERS: Adapter[] = ['express', 'fastify', 'koa', 'fetch', 'hono'];
/** Counterexamples print as a line, not as a megabyte of bytes. */
const bodyCase = bodyCaseRaw.map((c) =>
  Object.assign(c, {
    [fc.toStringMethod]: () =>
      `${c.name} body (${c.body.length} bytes, ${JSON.stringify(c.contentType)}${c.chunked ? ', chunked' : ''}): ${JSON.stringify(c.body.subarray(0, 60).toString('latin1'))}`,
  }),
);

const targets: { adapter: Adapter; target: StoreTarget; available: boolean; share: number }[] = [];
for (const kind of KINDS) targets.push({ adapter: 'node', target: storeTarget(kind), available: await storeReachable(kind), share: 1 });
for (const adapter of OTHER_ADAPTERS) targets.push({ adapter, target: storeTarget('memory'), available: true, share: 0.25 });

afterAll(async () => {
  await stopAllServers();
  for (const { target, available } of targets) if (available) await target.dispose().catch(() => {});
  figure(
    `hostile input: ${tried.keys} keys and ${tried.bodies} bodies tried on ${KINDS.length} stores (Node adapter) and on ${OTHER_ADAPTERS.join(', ')}; ` +
      `${tried.executed} executed and replayed, ${tried.refused} refused with a 4xx; ` +
      `${tried.serverErrors} 5xx, ${tried.crashes} crashes, ${tried.hangs} hangs or resets`,
  );
});

for (const { adapter, target, available, share } of targets) {
  const keyRuns = Math.ceil(KEY_RUNS[target.kind] * share);
  const bodyRuns = Math.ceil(BODY_RUNS[target.kind] * share);
  describe.skipIf(!available)(`hostile input, ${adapter} adapter on ${target.kind}`, () => {
    let server: ServerProcess;
    const log = execLog();

    beforeAll(async () => {
      server = await startServer({
        STORE: target.url,
        NAMESPACE: target.namespace,
        EXEC_LOG: log.path,
        MAX_BODY_BYTES,
        WAIT_MS: 500,
        // This suite is about input, not store latency (outage.test.ts is): a store call
        // slowed by a loaded machine must not turn into a 503 here.
        STORE_TIMEOUT_MS: 15_000,
        ADAPTER: adapter,
      });
    });
    afterAll(async () => {
      await server?.stop();
      log.dispose();
    });

    const send = (bytes: Buffer, what: string) =>
      rawRequest(server.port, bytes, 10_000).catch((error: Error) => {
        if (server.alive()) tried.hangs++;
        else tried.crashes++;
        throw new Error(`${what}: ${error.message}`);
      });

    it('H3/H4/H5/S7: random, long, CR/LF, quoted, comma, SQL/Lua and non-ASCII keys get 201 or a 4xx; an accepted key runs once and replays', async () => {
      await fc.assert(
        fc.asyncProperty(anyKey, async (key) => {
          tried.keys++;
          const what = `key ${JSON.stringify(key.toString('latin1').slice(0, 80))}`;
          const body = Buffer.from(JSON.stringify({ amount: 1 }));
          const first = await send(httpRequest(key, body, 'application/json'), what);
          expectSafe(first, what, adapter);
          if (first.status !== 201) {
            tried.refused++;
            // A key with an empty line in it ends the header block there: the bytes after it
            // are a second, malformed request, which Node answers with its own 400 by closing
            // the connection, and that can cut our answer's body short. Otherwise the
            // refusal says why.
            const endsHeaders = /(\r\n|\n)(\r\n|\n)/.test(`${key.toString('latin1')}\r\n`);
            if (first.status === 400 && first.headers['content-type'] === 'application/problem+json' && !endsHeaders) {
              expect(problemCode(first), what).toMatch(/^key-(invalid|missing)$/);
            }
            return;
          }
          tried.executed++;
          // Only printable ASCII may name a key (H4). A CR/LF in the bytes ends the header
          // line (what follows is another header, to the server), and Node trims
          // surrounding whitespace: the key is what remains of the first line.
          const value = key.toString('latin1').split(/\r\n|\n/)[0]!.replace(/^[ \t]+|[ \t]+$/g, '');
          expect(/^[\x20-\x7e]+$/.test(value), what).toBe(true);
          const again = await send(httpRequest(key, body, 'application/json'), what);
          expect(again.status, what).toBe(201);
          expect(again.headers['idempotent-replayed'], what).toBe('true');
          expect(again.body.equals(first.body), what).toBe(true);
        }),
        { numRuns: keyRuns, interruptAfterTimeLimit: 25_000 },
      );
      expect(server.alive()).toBe(true);
      expect(server.lines.filter((l) => l.type === 'fatal')).toEqual([]);
    }, 60_000);

    it('H3/H6/H7/S7: keys full of SQL and Lua metacharacters run exactly once; bare and quoted forms name the same record', async () => {
      const seen = new Set<string>();
      await fc.assert(
        fc.asyncProperty(validKey, fc.boolean(), async (generated, quotedFirst) => {
          // A unique prefix keeps these keys apart from those the other properties tried.
          const key = `${seen.size}~${generated}`;
          if (seen.has(key)) return;
          seen.add(key);
          tried.keys++;
          const body = Buffer.from(JSON.stringify({ key }));
          const [a, b] = quotedFirst ? [sfString(key), key] : [key, sfString(key)];
          const first = await send(httpRequest(Buffer.from(a, 'latin1'), body, 'application/json'), key);
          expect(first.status, key).toBe(201);
          expect(first.headers['idempotent-replayed'], key).toBeUndefined();
          const second = await send(httpRequest(Buffer.from(b, 'latin1'), body, 'application/json'), key);
          expect(second.status, key).toBe(201);
          expect(second.headers['idempotent-replayed'], key).toBe('true');
          expect(second.body.equals(first.body), key).toBe(true);
          tried.executed++;
        }),
        { numRuns: keyRuns, interruptAfterTimeLimit: 25_000 },
      );
      // Every distinct key ran once: no two keys collided, no key ran twice.
      // The log holds the header as sent: bare, or this property's sf-string form.
      const perKey = new Map<string, number>();
      for (const e of log.entries()) {
        const k = e.key.startsWith('"') && e.key.endsWith('"') ? e.key.slice(1, -1).replace(/\\(["\\])/g, '$1') : e.key;
        if (seen.has(k)) perKey.set(k, (perKey.get(k) ?? 0) + 1);
      }
      expect(perKey.size).toBe(seen.size);
      expect([...perKey.values()].every((n) => n === 1)).toBe(true);
      expect(server.alive()).toBe(true);
    }, 60_000);

    it('H14/§5: huge, deeply nested, invalid JSON and wrongly typed bodies get 201 or a 4xx, and replay or 422 on retry', async () => {
      let n = 0;
      await fc.assert(
        fc.asyncProperty(bodyCase, fc.uint8Array({ minLength: 1, maxLength: 8 }), async (c, salt) => {
          tried.bodies++;
          const key = Buffer.from(`body-${adapter}-${target.kind}-${n++}-${Buffer.from(salt).toString('hex')}`);
          const what = `${c.name} body (${c.body.length} bytes, ${String(c.contentType)})`;
          const request = httpRequest(key, c.body, c.contentType, { chunked: c.chunked });
          const first = await send(request, what);
          expectSafe(first, what, adapter);
          if (c.name === 'huge') {
            expect(first.status, what).toBe(413);
            // The frameworks' own body parsers refuse it before the layer, in their format.
            if (adapter === 'node') expect(problemCode(first), what).toBe('body-too-large');
            tried.refused++;
            return;
          }
          if (c.name === 'wrong content type') expect([415, 400], what).toContain(first.status);
          // (Fastify also answers 415 itself for a +json type it has no parser for.)
          if (c.name === 'invalid json') expect(adapter === 'node' ? [201, 400] : [201, 400, 415], what).toContain(first.status);
          const again = await send(request, what);
          // A framework's parser may refuse the body before the layer sees the request:
          // then nothing was claimed or stored, and the retry is refused the same way.
          if (adapter !== 'node' && !again.headers['idempotent-replayed'] && first.status !== 201) {
            expect(again.status, what).toBe(first.status);
            tried.refused++;
            return;
          }
          tried.executed++;
          // The handler's answer, 2xx or 4xx, is stored (H10): the retry replays it.
          expect(again.status, what).toBe(first.status);
          expect(again.headers['idempotent-replayed'], what).toBe('true');
          expect(again.body.equals(first.body), what).toBe(true);
          // The same key with another body is refused without revealing the first (H14).
          const other = await send(httpRequest(key, Buffer.from('{"other":true}'), 'application/json'), what);
          expect(other.status, what).toBe(422);
          expect(problemCode(other), what).toBe('key-reused');
        }),
        { numRuns: bodyRuns, interruptAfterTimeLimit: 25_000 },
      );
      expect(server.alive()).toBe(true);
      expect(server.lines.filter((l) => l.type === 'fatal')).toEqual([]);
    }, 60_000);

    it('H2/H16: a client that sends half a body and disconnects, or a request without a key, leaves the server serving', async () => {
      for (let i = 0; i < 20; i++) {
        const key = Buffer.from(`aborted-${adapter}-${target.kind}-${i}`);
        const full = httpRequest(key, Buffer.from(JSON.stringify({ i, pad: 'x'.repeat(1000) })), 'application/json');
        await new Promise<void>((resolve) => {
          const socket = net.connect(server.port, '127.0.0.1', () => {
            socket.write(full.subarray(0, full.length - 500), () => {
              socket.destroy();
              resolve();
            });
          });
          socket.on('error', () => resolve());
        });
        tried.bodies++;
      }
      const missing = await send(httpRequest(undefined, Buffer.from('{}'), 'application/json'), 'no key');
      expect(missing.status).toBe(400);
      expect(problemCode(missing)).toBe('key-missing');
      // An aborted body never reached the handler or the store: the same key runs normally now.
      const after = await send(httpRequest(Buffer.from(`aborted-${adapter}-${target.kind}-0`), Buffer.from('{"i":0}'), 'application/json'), 'after abort');
      expect(after.status).toBe(201);
      expect(log.entries().filter((e) => e.key.startsWith('aborted-')).length).toBe(1);
      expect(server.alive()).toBe(true);
    }, 30_000);
  });
}
