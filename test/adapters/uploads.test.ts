/**
 * Retried uploads and forms on every adapter, with bodies built by real clients (Node's
 * fetch FormData, the `form-data` package sent with got, axios) and the upload middleware
 * each framework's users reach for, the layer before it and after it (upload-apps.ts):
 *
 * - H14: the same form built again (a new boundary, another client's spelling) replays;
 *   another file, filename, field or part order with the same key is 422, never a replay;
 * - H6: the handler receives the body it would have got without the layer;
 * - a storage that keeps files nowhere readable is refused with a message, never passed over;
 * - urlencoded bodies are canonical like JSON (order of names does not matter, values of a
 *   repeated name do);
 * - malformed bodies (no boundary, truncated, another boundary, a bad percent-escape) are
 *   fingerprinted by their bytes: the handler answers as it does without the layer;
 * - `maxBodyBytes` bounds an upload (413), and raised, lets a larger one retry.
 */
import { Buffer } from 'node:buffer';
import axios from 'axios';
import FormDataPackage from 'form-data';
import got from 'got';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { memoryStore } from '../../drivers/memory.js';
import { expectProblem, send, type Reply } from './client.js';
import { received, sha256Hex, uniqueKey, UPLOAD_APPS, type RunningUploadApp, type UploadAppConfig } from './upload-apps.js';

interface Part {
  name: string;
  value?: string;
  filename?: string;
  type?: string;
  bytes?: Uint8Array;
}

const pdf = Buffer.concat([Buffer.from('%PDF-1.7\n'), Buffer.from(Array.from({ length: 3000 }, (_, i) => (i * 31) % 256)), Buffer.from('\r\n--\r\n%%EOF')]);
const form: Part[] = [
  { name: 'title', value: 'Invoice 7' },
  { name: 'tags', value: 'a' },
  { name: 'tags', value: 'b' },
  { name: 'document', filename: 'scan.pdf', type: 'application/pdf', bytes: pdf },
  { name: 'note', filename: 'note.txt', type: 'text/plain', bytes: Buffer.from('hello, retry\n') },
];

/** What the handler must receive for `parts`. */
function expected(parts: Part[], config: UploadAppConfig, n = 1) {
  const fields: Record<string, unknown> = {};
  for (const p of parts) if (p.value !== undefined) fields[p.name] = p.name in fields ? [fields[p.name], p.value].flat() : p.value;
  const files = parts
    .filter((p) => p.bytes)
    .map((p) => ({ field: p.name, filename: config.filenames ? p.filename! : null, size: p.bytes!.byteLength, sha256: sha256Hex(p.bytes!) }));
  return received(n, fields, files);
}

interface Answer {
  status: number;
  headers: Record<string, string | undefined>;
  text: string;
}

const specForm = (parts: Part[]) => {
  const data = new FormData();
  for (const p of parts) {
    if (p.bytes) data.append(p.name, new Blob([p.bytes], { type: p.type }), p.filename);
    else data.append(p.name, p.value!);
  }
  return data;
};

/** The three clients, each building the form from scratch on every call (a fresh boundary). */
const clients: Record<string, (url: string, key: string, parts: Part[]) => Promise<Answer>> = {
  'fetch FormData': async (url, key, parts) => {
    const res = await fetch(url, { method: 'POST', headers: { 'idempotency-key': key }, body: specForm(parts) });
    return { status: res.status, headers: Object.fromEntries(res.headers), text: await res.text() };
  },
  'form-data with got': async (url, key, parts) => {
    const data = new FormDataPackage();
    for (const p of parts) {
      if (p.bytes) data.append(p.name, Buffer.from(p.bytes), { filename: p.filename, contentType: p.type });
      else data.append(p.name, p.value!);
    }
    const res = await got.post(url, { body: data, headers: { 'idempotency-key': key, ...data.getHeaders() }, throwHttpErrors: false, retry: { limit: 0 } });
    return { status: res.statusCode, headers: res.headers as Record<string, string>, text: res.body };
  },
  'axios FormData': async (url, key, parts) => {
    const res = await axios.post(url, specForm(parts), { headers: { 'Idempotency-Key': key }, validateStatus: () => true, responseType: 'text', transformResponse: (x) => x });
    return { status: res.status, headers: Object.fromEntries(Object.entries(res.headers).map(([k, v]) => [k, String(v)])), text: res.data as string };
  },
};

const isOurs = (answer: { headers: Record<string, unknown> }) => String(answer.headers['content-type'] ?? '').startsWith('application/problem+json');

/** A multipart body written by hand, for the malformed cases. */
const handMade = (boundary: string) =>
  Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="title"\r\n\r\nInvoice 7\r\n--${boundary}\r\nContent-Disposition: form-data; name="f"; filename="a.txt"\r\nContent-Type: text/plain\r\n\r\nabc\r\n--${boundary}--\r\n`);

const malformed: Record<string, { type: string; body: Buffer }> = {
  'without its boundary parameter': { type: 'multipart/form-data', body: handMade('b1') },
  'truncated': { type: 'multipart/form-data; boundary=b1', body: handMade('b1').subarray(0, 80) },
  'with another boundary than its own': { type: 'multipart/form-data; boundary=zz', body: handMade('b1') },
};

for (const [name, config] of Object.entries(UPLOAD_APPS)) {
  describe(`uploads: ${name}`, () => {
    const store = memoryStore();
    let app: RunningUploadApp;
    let control: RunningUploadApp;
    let raised: RunningUploadApp;
    beforeAll(async () => {
      [app, control, raised] = await Promise.all([config.start({ store }), config.start({ store, layer: false }), config.start({ store, maxBodyBytes: 8 * 1024 * 1024 })]);
    });
    afterAll(async () => {
      await Promise.all([app?.close(), control?.close(), raised?.close()]);
      await store.close();
    });

    if (config.refuses) {
      it('an upload whose files the layer cannot read is refused with a 500 that says to put the layer first; never run unprotected', async () => {
        const answer = await clients['fetch FormData']!(`${app.url}/upload`, uniqueKey(), form);
        expect(answer.status).toBe(500);
        expect(answer.text).toContain('has no content this layer can read');
        expect(answer.text).toContain('before the upload middleware');
        expect(app.calls.count('upload')).toBe(0);
      });
      return;
    }

    for (const [client, sendForm] of Object.entries(clients)) {
      it(`H14 H6 H7: ${client}: the same form built again (a new boundary) replays, and the handler got the form as sent`, async () => {
        const key = uniqueKey();
        const first = await sendForm(`${app.url}/upload`, key, form);
        expect(first.status, first.text).toBe(201);
        const before = app.calls.count('upload');
        expect(JSON.parse(first.text)).toEqual({ ...expected(form, config), n: before });
        const again = await sendForm(`${app.url}/upload`, key, form);
        expect(again.status, again.text).toBe(201);
        expect(again.headers['idempotent-replayed']).toBe('true');
        expect(again.text).toBe(first.text);
        expect(app.calls.count('upload')).toBe(before);
      });
    }

    it('H14: another client retrying the same form (axios after fetch after form-data) replays too', async () => {
      const key = uniqueKey();
      const first = await clients['form-data with got']!(`${app.url}/upload`, key, form);
      const before = app.calls.count('upload');
      for (const client of ['fetch FormData', 'axios FormData']) {
        const again = await clients[client]!(`${app.url}/upload`, key, form);
        expect(again.headers['idempotent-replayed'], client).toBe('true');
        expect(again.text).toBe(first.text);
      }
      expect(app.calls.count('upload')).toBe(before);
    });

    const changes: Record<string, Part[]> = {
      'another file content': form.map((p) => (p.name === 'document' ? { ...p, bytes: Buffer.concat([pdf.subarray(0, -1), Buffer.from('X')]) } : p)),
      'another field value': form.map((p) => (p.name === 'title' ? { ...p, value: 'Invoice 8' } : p)),
      'a file left out': form.filter((p) => p.name !== 'note'),
      ...(config.filenames ? { 'another filename': form.map((p) => (p.name === 'document' ? { ...p, filename: 'other.pdf' } : p)) } : {}),
    };
    for (const [change, parts] of Object.entries(changes)) {
      it(`H14: ${change} with the same key is 422 key-reused, never the first response`, async () => {
        const key = uniqueKey();
        expect((await clients['fetch FormData']!(`${app.url}/upload`, key, form)).status).toBe(201);
        const before = app.calls.count('upload');
        const other = await clients['fetch FormData']!(`${app.url}/upload`, key, parts);
        expect(other.status, other.text).toBe(422);
        expect(JSON.parse(other.text)).toMatchObject({ code: 'key-reused' });
        expect(app.calls.count('upload')).toBe(before);
      });
    }

    it('H14: urlencoded forms are canonical: names in another order replay; the values of a repeated name keep their order', async () => {
      const key = uniqueKey();
      const post = (body: string) => fetch(`${app.url}/form`, { method: 'POST', headers: { 'idempotency-key': key, 'content-type': 'application/x-www-form-urlencoded' }, body });
      const first = await post(new URLSearchParams([['b', '2'], ['a', '1'], ['tag', 'x'], ['tag', 'y']]).toString());
      expect(first.status).toBe(201);
      const text = await first.text();
      const again = await post('tag=x&a=1&tag=y&b=2');
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(await again.text()).toBe(text);
      // Spelled with %20 instead of +: the same pairs.
      const axiosAgain = await axios.post(`${app.url}/form`, new URLSearchParams([['a', '1'], ['b', '2'], ['tag', 'x'], ['tag', 'y']]), { headers: { 'Idempotency-Key': key }, validateStatus: () => true });
      expect(axiosAgain.headers['idempotent-replayed']).toBe('true');
      expectProblem(await send(app.url, { path: '/form', key, body: 'a=1&b=2&tag=y&tag=x', contentType: 'application/x-www-form-urlencoded' }), 422, 'key-reused');
      expect(app.calls.count('form')).toBe(1);
    });

    it('a bad percent-escape in a form: the handler answers as it does without the layer; a retry replays that answer', async () => {
      const body = 'a=%zz&b=%E9&c=1';
      const without = await send(control.url, { path: '/form', body, contentType: 'application/x-www-form-urlencoded' });
      const key = uniqueKey();
      const first = await send(app.url, { path: '/form', key, body, contentType: 'application/x-www-form-urlencoded' });
      expect(first.status).toBe(without.status);
      expect(isOurs(first)).toBe(false);
      if (first.status < 500) {
        const again = await send(app.url, { path: '/form', key, body, contentType: 'application/x-www-form-urlencoded' });
        expect(again.headers['idempotent-replayed']).toBe('true');
      }
    });

    for (const [title, { type, body }] of Object.entries(malformed)) {
      if (config.raw) {
        it(`a multipart body ${title} counts by its bytes: the handler gets them, a retry replays, other bytes are 422`, async () => {
          const key = uniqueKey();
          const first = await send(app.url, { path: '/raw', key, body, contentType: type });
          expect(first.status, first.text).toBe(201);
          expect(first.json()).toMatchObject({ size: body.length, sha256: sha256Hex(body) });
          const again = await send(app.url, { path: '/raw', key, body, contentType: type });
          expect(again.headers['idempotent-replayed']).toBe('true');
          expectProblem(await send(app.url, { path: '/raw', key, body: Buffer.concat([body, Buffer.from('x')]), contentType: type }), 422, 'key-reused');
        });
      }
      it(`a multipart body ${title} sent to the upload route: answered as without the layer, never a problem of ours`, async () => {
        const without = await send(control.url, { path: '/upload', body, contentType: type });
        const first = await send(app.url, { path: '/upload', key: uniqueKey(), body, contentType: type });
        expect(first.status, first.text).toBe(without.status);
        expect(isOurs(first)).toBe(false);
      });
    }

    it('an upload over maxBodyBytes (1 MiB by default) is 413 body-too-large; with the limit raised it runs once and its retry replays', async () => {
      const big: Part[] = [{ name: 'title', value: 'big' }, { name: 'document', filename: 'big.bin', type: 'application/octet-stream', bytes: Buffer.alloc(2 * 1024 * 1024, 7) }];
      const refused = await clients['fetch FormData']!(`${app.url}/upload`, uniqueKey(), big);
      expect(refused.status, refused.text).toBe(413);
      expect(JSON.parse(refused.text)).toMatchObject({ code: 'body-too-large' });
      const key = uniqueKey();
      const first = await clients['fetch FormData']!(`${raised.url}/upload`, key, big);
      expect(first.status, first.text).toBe(201);
      expect(JSON.parse(first.text)).toEqual({ ...expected(big, config), n: raised.calls.count('upload') });
      const again = await clients['axios FormData']!(`${raised.url}/upload`, key, big);
      expect(again.headers['idempotent-replayed']).toBe('true');
      expect(raised.calls.count('upload')).toBe(1);
    });
  });
}
