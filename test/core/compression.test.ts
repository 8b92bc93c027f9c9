/**
 * The `compress` option (SPEC S11): its checks, the stored form, compression before
 * sealing, a record that does not inflate failing closed, and every store holding the
 * compressed form and replaying the response byte for byte (idempotent() and the Node
 * adapter).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import http from 'node:http';
import * as zlib from 'node:zlib';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { rmSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { withIdempotency } from '../../adapters/node.js';
import { createStore } from '../../drivers/create-store.js';
import { memoryStore } from '../../drivers/memory.js';
import { COMPRESSED_STATUS, compressedPayload, fromCompressedPayload, inflateResponse, isCompressed, resolveCompression } from '../../src/compression.js';
import { decodeCompact, encodeCompact, encodePlain } from '../../src/response-bytes.js';
import { decodeValue, encodeCompleted } from '../../drivers/redis-record.js';
import { isSealed, openRecord, resolveEncryption } from '../../src/encryption.js';
import { idempotent, RecordUnreadableError } from '../../src/index.js';
import { storageKey } from '../../src/key.js';
import type { IdempotencyStore, StoredResponse } from '../../src/store.js';
import { MYSQL_URL, POSTGRES_URL, REDIS_URL, serviceAvailable } from '../helpers/services.js';

const json = (n: number) => Buffer.from(JSON.stringify({ items: Array.from({ length: n }, (_, i) => ({ id: `item_${i}`, status: 'succeeded', amount: 2000 })) }));
const response: StoredResponse = { status: 201, headers: { 'content-type': 'application/json', 'set-cookie': ['a=1', 'b=2'] }, body: new Uint8Array(json(40)) };

describe('compress option', () => {
  it('refuses bad options with precise TypeErrors, through every entry that takes engine options', () => {
    expect(() => resolveCompression('yes' as never)).toThrow('Expected `compress` to be true, false or an object like { minBytes: 1024 }, got yes');
    expect(() => resolveCompression({ minBytes: -1 })).toThrow(/`compress.minBytes` to be/);
    expect(() => resolveCompression({ algorithm: 'lz4' as never })).toThrow(/`compress.algorithm`/);
    expect(() => idempotent(async () => 1, { store: memoryStore(), key: () => 'k', compress: { minBytes: 1.5 } })).toThrow(/`compress.minBytes`/);
    expect(resolveCompression(undefined)).toBeUndefined();
    expect(resolveCompression(false)).toBeUndefined();
    expect(resolveCompression(true)).toMatchObject({ minBytes: 1024, algorithm: 'brotli' });
  });

  it('stores large bodies compressed (gzip, brotli, zstd where the runtime has it) and inflates them exactly', () => {
    const algorithms: ('gzip' | 'brotli' | 'zstd')[] = ['gzip', 'brotli', ...(typeof (zlib as { zstdCompressSync?: unknown }).zstdCompressSync === 'function' ? (['zstd'] as const) : [])];
    for (const algorithm of algorithms) {
      const compressor = resolveCompression({ algorithm, minBytes: 100 })!;
      const packed = compressor.compress(response);
      expect(isCompressed(packed)).toBe(true);
      expect(packed.status).toBe(COMPRESSED_STATUS);
      expect(packed.body!.byteLength).toBeLessThan(response.body!.byteLength / 2);
      expect(inflateResponse(packed)).toEqual(response);
    }
    if (algorithms.length === 2) expect(() => resolveCompression({ algorithm: 'zstd' })).toThrow(/has no zstd/);
  });

  it('leaves small bodies, null bodies and bodies that do not shrink as they are', () => {
    const compressor = resolveCompression(true)!;
    const small = { ...response, body: new Uint8Array(json(2)) };
    expect(compressor.compress(small)).toBe(small);
    const none = { ...response, body: null };
    expect(compressor.compress(none)).toBe(none);
    const noise = { ...response, body: new Uint8Array(randomBytes(4096)) };
    expect(compressor.compress(noise)).toBe(noise);
    expect(inflateResponse(response)).toBe(response);
  });

  it('compresses before sealing: the sealed record is small and opens to the response', () => {
    const compressor = resolveCompression(true)!;
    const ring = resolveEncryption({ keys: [{ id: 'k', key: randomBytes(32) }] })!;
    const sealed = ring.seal(compressor.compress(response), 'skey', 'fp');
    expect(isSealed(sealed)).toBe(true);
    expect(sealed.body!.byteLength).toBeLessThan(response.body!.byteLength / 2);
    const record = { state: 'completed' as const, fingerprint: 'fp', token: 't', createdAt: 1, expiresAt: 2, response: sealed };
    expect(openRecord(record, 'skey', ring).response).toEqual(response);
  });

  it('the compact form keeps every status, header and body exactly: table pairs and names, other names, lists, odd names and values', () => {
    const cases: StoredResponse[] = [
      { status: 200, headers: { 'content-type': 'application/json; charset=utf-8', etag: 'W/"480-DEE3SxL0JJ5w8RtwyeR4stUbHEs"' }, body: new Uint8Array(json(3)) },
      // A table name with a value not in the table, a list, a name of no table, unicode, empty values.
      { status: 201, headers: { 'content-type': 'application/vnd.api+json', 'set-cookie': ['a=1', 'b=2; Path=/'], 'x-trace': 'ünïcödé ✓', location: '', link: [] }, body: new Uint8Array([0, 1, 2, 255]) },
      // A header named like an object's own properties stays a header.
      { status: 599, headers: JSON.parse('{"__proto__":"p","constructor":"c","x":"' + 'y'.repeat(300) + '"}'), body: new Uint8Array(0) },
      { status: 999, headers: {}, body: new Uint8Array(json(50)) },
    ];
    for (const c of cases) {
      const compact = encodeCompact(c as StoredResponse & { body: Uint8Array });
      const back = decodeCompact(compact);
      expect(back).toEqual(c);
      expect(Object.getPrototypeOf(back.headers)).toBe(Object.prototype);
      expect(Object.keys(back.headers)).toEqual(Object.keys(c.headers));
    }
    // The usual head is a few bytes: status, count, one byte for the content type, the etag.
    const usual = cases[0]!;
    const head = encodeCompact(usual as StoredResponse & { body: Uint8Array }).length - usual.body!.byteLength;
    expect(head).toBe(2 + 1 + 1 + 1 + 1 + Buffer.byteLength(usual.headers.etag as string));
    expect(head).toBeLessThan(encodePlain(usual).length - usual.body!.byteLength - 70);
    // Cut short anywhere in the head, or an unknown table entry: a TypeError, never a wrong response.
    const compact = encodeCompact(cases[1] as StoredResponse & { body: Uint8Array });
    const headLength = compact.length - cases[1]!.body!.byteLength;
    for (let cut = 0; cut < headLength; cut++) expect(() => decodeCompact(compact.subarray(0, cut))).toThrow(TypeError);
    expect(() => decodeCompact(Buffer.from([0, 200, 1, 0xff]))).toThrow(/unknown header pair/);
    expect(() => decodeCompact(Buffer.from([0, 200, 1, 0x7f, 0]))).toThrow(/unknown header name/);
    expect(() => decodeCompact(Buffer.from([0, 200, 1, 0x01]))).toThrow(/unknown header form/);
    // Counts past the bytes left (a damaged value) are refused before anything is allocated.
    expect(() => decodeCompact(Buffer.from([0, 200, 0xff, 0xff, 0xff, 0xff, 0x0f]))).toThrow(/cut short/);
    expect(() => decodeCompact(Buffer.from([0, 200, 1, 0x41, 0xff, 0xff, 0xff, 0xff, 0x0f]))).toThrow(/cut short/);
    // Random bytes: a TypeError or a response, never another error or a hang.
    for (let i = 0; i < 2000; i++) {
      const bytes = randomBytes(1 + (i % 40));
      try {
        decodeCompact(bytes);
      } catch (error) {
        expect(error).toBeInstanceOf(TypeError);
      }
    }
  });

  it('reads the first compressed form (IKz1: the plain form inside) as well', () => {
    const packed = Buffer.concat([Buffer.from('IKz1b', 'latin1'), zlib.brotliCompressSync(encodePlain(response))]);
    expect(inflateResponse({ status: COMPRESSED_STATUS, headers: {}, body: new Uint8Array(packed) })).toEqual(response);
  });

  it('the Redis layout keeps a compressed response as its payload behind one marker, and reads it back exactly', () => {
    const packed = resolveCompression(true)!.compress({ ...response, body: new Uint8Array(json(60)) });
    const payload = compressedPayload(packed)!;
    expect(payload.byteLength).toBe(packed.body!.byteLength - 4);
    expect(fromCompressedPayload(payload)).toEqual(packed);
    const record = { state: 'completed' as const, fingerprint: 'v2:fp', token: 'tok', createdAt: 1_796_614_818_418, expiresAt: 1_796_701_218_427, response: packed };
    const value = encodeCompleted(record);
    // Times in base 36, then `z` and the payload: no status line, no headers, no magic.
    const head = `C-tok\nv2:fp\n${(1_796_614_818_418).toString(36)}\n${(1_796_701_218_427).toString(36)}\nz`;
    expect(head).toBe('C-tok\nv2:fp\nmxcq2q2a\nmxe5ikqj\nz');
    expect(value.subarray(0, head.length).toString('latin1')).toBe(head);
    expect(value.byteLength).toBe(head.length + payload.byteLength);
    expect(decodeValue(value)).toEqual(record);
    expect(inflateResponse((decodeValue(value) as typeof record).response)).toEqual({ ...response, body: new Uint8Array(json(60)) });
    // Not the current compressed form (headers, the first form): the usual lines.
    expect(compressedPayload(response)).toBeUndefined();
    expect(compressedPayload({ ...packed, headers: { a: 'b' } })).toBeUndefined();
    expect(decodeValue(encodeCompleted({ ...record, response }))).toEqual({ ...record, response });
    // Times in decimal, as builds before base 36 wrote them, are read as such.
    expect(decodeValue(Buffer.from('P-tok\nv2:fp\n1796614818418\n1796614848418'))).toEqual({
      state: 'processing', token: 'tok', fingerprint: 'v2:fp', createdAt: 1_796_614_818_418, leaseUntil: 1_796_614_848_418,
    });
    expect(() => decodeValue(Buffer.from('P-tok\nv2:fp\n17966148184180000000\n1'))).toThrow(/malformed number/);
  });

  it('a record that fails to inflate fails closed: RecordUnreadableError, neither replayed nor run again', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    let runs = 0;
    const fn = idempotent(async () => ({ big: 'x'.repeat(4000), run: ++runs }), { store, key: () => 'k', compress: true });
    await fn();
    const skey = storageKey(undefined, 'k', 'function');
    const record = await store.get(skey);
    if (record?.state !== 'completed' || !isCompressed(record.response)) throw new Error('expected a compressed record');
    // Corrupt the compressed stream, keeping the envelope.
    const body = Buffer.from(record.response.body!);
    body.fill(0x41, 10, 30);
    await store.delete!(skey);
    const { token } = (await store.claim(skey, { token: 't2', fingerprint: record.fingerprint, createdAt: Date.now() }, 5000)).record;
    await store.complete(skey, token, { ...record.response, body: new Uint8Array(body) }, 60_000);
    await expect(fn()).rejects.toBeInstanceOf(RecordUnreadableError);
    await expect(fn()).rejects.toMatchObject({ code: 'record-unreadable', reason: 'malformed' });
    expect(runs).toBe(1);
    // A process without `compress` still reads compressed records (and this one fails closed too).
    const plain = idempotent(async () => ({ run: ++runs }), { store, key: () => 'k' });
    await expect(plain()).rejects.toBeInstanceOf(RecordUnreadableError);
    expect(runs).toBe(1);
    await store.close();
  });
});

interface Target {
  name: string;
  create: () => Promise<IdempotencyStore>;
}
const sqliteFile = join(tmpdir(), `compress-test-${process.pid}-${randomUUID().slice(0, 8)}.db`);
afterAll(() => {
  for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(`${sqliteFile}${suffix}`, { force: true });
});
const namespace = `ik_compress_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
const targets: Target[] = [
  { name: 'memory', create: async () => memoryStore({ sweepIntervalMs: 0 }) },
  { name: 'sqlite', create: async () => createStore(`sqlite://${sqliteFile}`, { namespace }) },
];
for (const [name, url] of [
  ['Redis', REDIS_URL],
  ['PostgreSQL', POSTGRES_URL],
  ['MySQL', MYSQL_URL],
] as const) {
  if (await serviceAvailable(name, url)) targets.push({ name, create: async () => createStore(url, { namespace }) });
}

describe.each(targets)('compress on the $name store', ({ create }) => {
  it('idempotent(): the store holds the compressed form, the replay is the result, run once', async () => {
    const store = await create();
    let runs = 0;
    const key = randomUUID();
    const fn = idempotent(async (n: number) => ({ items: JSON.parse(json(n).toString()) as unknown, run: ++runs }), { store, key: () => key, compress: { minBytes: 512 } });
    const first = await fn(50);
    expect(await fn(50)).toEqual(first);
    expect(runs).toBe(1);
    const stored = await store.get(storageKey(undefined, key, 'function'));
    expect(stored?.state === 'completed' && isCompressed(stored.response)).toBe(true);
    await store.close();
  });

  it('the Node adapter replays a compressed response byte for byte, encrypted as well', async () => {
    const inner = await create();
    // What the layer hands the store on completion.
    const completed: StoredResponse[] = [];
    const store: IdempotencyStore = { ...inner, name: inner.name, complete: (k, t, r, ttl) => (completed.push(r), inner.complete(k, t, r, ttl)) };
    const payload = json(60);
    let runs = 0;
    const handler = withIdempotency(
      (_req, res) => {
        runs++;
        res.writeHead(201, { 'content-type': 'application/json' }).end(payload);
      },
      { store, scope: 'shared', compress: true, encryption: { keys: [{ id: 'k1', key: randomBytes(32) }] } },
    );
    const server = http.createServer((req, res) => void handler(req, res));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
    const key = randomUUID();
    const send = async () => {
      const res = await fetch(url, { method: 'POST', headers: { 'idempotency-key': key, 'content-type': 'application/json' }, body: '{}' });
      return { status: res.status, replayed: res.headers.get('idempotent-replayed'), body: Buffer.from(await res.arrayBuffer()) };
    };
    const a = await send();
    const b = await send();
    expect(a.status).toBe(201);
    expect(b).toMatchObject({ status: 201, replayed: 'true' });
    expect(b.body.equals(payload)).toBe(true);
    expect(runs).toBe(1);
    expect(completed).toHaveLength(1);
    expect(isSealed(completed[0]!)).toBe(true);
    expect(completed[0]!.body!.byteLength).toBeLessThan(payload.length / 2);
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await inner.close();
  });
});
