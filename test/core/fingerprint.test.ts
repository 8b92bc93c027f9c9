import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  canonicalJson,
  FieldSelection,
  fingerprintRequest,
  hashValue,
  ParsedJsonBody,
  RawBody,
  UploadBody,
  type FingerprintInput,
} from '../../src/fingerprint.js';
import fc from 'fast-check';
import { jsonNumbersExact, numberText } from '../../src/canonical-json.js';
import { seededRandom } from '../helpers/random.js';

const base = {
  method: 'POST',
  url: '/payments?b=2&a=1',
  headers: { 'content-type': 'application/json' } as FingerprintInput['headers'],
  body: { amount: 1000, currency: 'EUR', meta: { z: 1, a: [1, 2] } } as unknown,
};
const fp = (over: Partial<FingerprintInput> = {}) => fingerprintRequest({ ...base, ...over });
const typed = (type: string, body: unknown, over: Partial<FingerprintInput> = {}) => fp({ url: '/u', headers: { 'content-type': type }, body, ...over });
const bytes = (body: string | Buffer) => typed('application/octet-stream', Buffer.from(body));
const FORM = 'application/x-www-form-urlencoded';
const sha = (data: string | Buffer) => createHash('sha256').update(data).digest('base64url');

/** A multipart body as a client writes it: any boundary, header spelling and order, optional preamble and epilogue. */
function multipart(
  parts: Part[],
  { boundary = 'b0undary', preamble = '', epilogue = '\r\n', headerStyle = 'usual' }: { boundary?: string; preamble?: string; epilogue?: string; headerStyle?: 'usual' | 'odd' } = {},
): { type: string; body: Buffer } {
  const chunks: Buffer[] = [Buffer.from(preamble)];
  for (const part of parts) {
    const disposition =
      headerStyle === 'usual'
        ? `Content-Disposition: form-data; name="${part.name}"${part.filename === undefined ? '' : `; filename="${part.filename}"`}`
        : `content-disposition:form-data;   NAME=${part.name}${part.filename === undefined ? '' : `;filename="${part.filename}"`}`;
    const lines = [disposition, ...(part.type === undefined ? [] : [headerStyle === 'usual' ? `Content-Type: ${part.type}` : `CONTENT-TYPE:${part.type.toUpperCase()}`]), ...(part.headers ?? [])];
    if (headerStyle === 'odd') lines.reverse();
    chunks.push(Buffer.from(`${preamble === '' && chunks.length === 1 ? '' : '\r\n'}--${boundary}\r\n${lines.join('\r\n')}\r\n\r\n`), Buffer.from(part.content));
  }
  chunks.push(Buffer.from(`\r\n--${boundary}--${epilogue}`));
  return { type: `multipart/form-data; boundary=${boundary}`, body: Buffer.concat(chunks) };
}

type Part = { name: string; filename?: string; type?: string; content: string | Buffer; headers?: string[] };
const invoice: Part[] = [
  { name: 'title', content: 'Invoice 7' },
  { name: 'file', filename: 'scan.pdf', type: 'application/pdf', content: Buffer.from([0x25, 0x50, 0x44, 0x46, 0, 0xff, 13, 10, 45, 45]) },
];

describe('fingerprint (H14)', () => {
  describe('JSON', () => {
    it('H14: object key order does not matter, at any depth', () => {
      expect(fp({ body: { meta: { a: [1, 2], z: 1 }, currency: 'EUR', amount: 1000 } })).toBe(fp());
    });

    it('H14: raw JSON bytes, its text and the parsed body give the same fingerprint (whitespace, key order)', () => {
      const raw = Buffer.from('{ "currency":"EUR", "meta":{"z":1,"a":[1,2]},"amount":1000 }');
      expect(fp({ body: raw })).toBe(fp());
      expect(fp({ body: raw.toString() })).toBe(fp());
      expect(fp({ body: new RawBody([raw.subarray(0, 7), raw.subarray(7)], raw.length) })).toBe(fp());
    });

    it('H14: a body the adapter parsed already gives the fingerprint its bytes give (big numbers and empty bodies too)', () => {
      for (const text of ['{ "b": [1, {"y":2,"x":1}], "a": "é" }', '{"n": 1e400}', '{"n": 12345678901234567890123}', '[]', 'null', '"s"']) {
        const raw = Buffer.from(text);
        expect(fp({ body: new ParsedJsonBody(JSON.parse(text), raw) })).toBe(fp({ body: raw }));
      }
      expect(fp({ body: new ParsedJsonBody(undefined, Buffer.alloc(0)) })).toBe(fp({ body: Buffer.alloc(0) }));
      expect(fp({ body: new ParsedJsonBody({ a: 2 }, Buffer.from('{"a":2}')) })).not.toBe(fp({ body: Buffer.from('{"a":1}') }));
    });

    it('H14: a body a parser parsed from a text it kept gives the fingerprint the text gives, also when the value is checked', () => {
      for (const text of ['{ "b": [1, {"y":2,"x":1}], "a": "é" }', '{"n": 1e400}', '{"n": 12345678901234567890123}', '[]', 'null', '"s"']) {
        for (const checked of [false, true]) {
          expect(fp({ body: new ParsedJsonBody(JSON.parse(text), text, checked) })).toBe(fp({ body: text }));
        }
      }
      expect(fp({ body: new ParsedJsonBody({}, '', true) })).toBe(fp({ body: '' }));
      // A value changed into something that is not JSON data: the text counts, whatever the value holds.
      const text = '{"when":"2026-01-01","amount":1}';
      expect(fp({ body: new ParsedJsonBody({ when: new Map([['x', 1]]), amount: 1 }, text, true) })).toBe(fp({ body: text }));
      expect(fp({ body: new ParsedJsonBody({ when: new Map([['x', 1]]), amount: 1 }, text, true) })).not.toBe(
        fp({ body: new ParsedJsonBody({ when: new Map([['x', 1]]), amount: 1 }, text.replace('2026', '2027'), true) }),
      );
    });

    it('H14: array order, values and types matter', () => {
      const body = base.body as Record<string, unknown>;
      expect(fp({ body: { ...body, meta: { z: 1, a: [2, 1] } } })).not.toBe(fp());
      expect(fp({ body: { ...body, amount: 1001 } })).not.toBe(fp());
      expect(fp({ body: { ...body, amount: '1000' } })).not.toBe(fp());
    });

    it('H14: invalid JSON and JSON that is not UTF-8 count by their bytes', () => {
      const json = (body: Buffer) => typed('application/json', body);
      expect(json(Buffer.from('{"a":'))).toBe(bytes('{"a":'));
      // Two different invalid byte sequences must not both decode to U+FFFD and collide.
      expect(json(Buffer.from([0x22, 0xff, 0x22]))).not.toBe(json(Buffer.from([0x22, 0xfe, 0x22])));
      expect(json(Buffer.from([0x22, 0xff, 0x22]))).toBe(bytes(Buffer.from([0x22, 0xff, 0x22])));
    });
  });

  describe('method, path, query, headers', () => {
    it('H14: method and route path are in the fingerprint', () => {
      expect(fp({ method: 'PATCH' })).not.toBe(fp());
      expect(fp({ url: '/refunds?b=2&a=1' })).not.toBe(fp());
      expect(fp({ method: 'post' })).toBe(fp());
    });

    it('H14: the query is canonical: pairs decoded and sorted by name, the values of a name kept in order', () => {
      expect(fp({ url: '/payments?a=1&b=2' })).toBe(fp());
      expect(fp({ url: '/payments?a=1&b=3' })).not.toBe(fp());
      expect(fp({ url: '/payments' })).not.toBe(fp());
      // Repeated names: every framework hands the handler a different array.
      expect(fp({ url: '/p?ids=1&ids=2' })).not.toBe(fp({ url: '/p?ids=2&ids=1' }));
      expect(fp({ url: '/p?ids=1&x=0&ids=2' })).toBe(fp({ url: '/p?x=0&ids=1&ids=2' }));
      // Spelling does not count: escapes, `+` for a space, an empty query.
      expect(fp({ url: '/p?q=a+b&%C3%A9=1' })).toBe(fp({ url: '/p?%C3%A9=1&q=a%20b' }));
      expect(fp({ url: '/p?' })).toBe(fp({ url: '/p' }));
      expect(fp({ url: '/p?a=1&&b=2' })).toBe(fp({ url: '/p?b=2&a=1' }));
    });

    it('H14: a query that does not decode counts as it is, and differs from every query that does', () => {
      expect(() => fp({ url: '/p?a=%zz' })).not.toThrow();
      expect(fp({ url: '/p?a=%zz' })).not.toBe(fp({ url: '/p?a=%25zz' }));
      expect(fp({ url: '/p?a=%ff' })).not.toBe(fp({ url: '/p?a=%fe' }));
      expect(fp({ url: '/p?a=%ff' })).toBe(fp({ url: '/p?a=%ff' }));
    });

    it('H14: fingerprintHeaders count; other headers do not', () => {
      const withHeaders = (extra: Record<string, string>) =>
        fingerprintRequest({ ...base, headers: { ...base.headers, ...extra }, fingerprintHeaders: ['x-account'] });
      expect(withHeaders({ 'x-account': 'A', 'x-trace': '1' })).toBe(withHeaders({ 'x-account': 'A', 'x-trace': '2' }));
      expect(withHeaders({ 'x-account': 'A' })).not.toBe(withHeaders({ 'x-account': 'B' }));
      expect(withHeaders({})).not.toBe(withHeaders({ 'x-account': '' }));
    });

    it('H14: a custom fingerprint replaces query, body and headers but keeps method and path', () => {
      const custom = (c: unknown, over: Partial<FingerprintInput> = {}) => fp({ ...over, custom: c });
      expect(custom({ id: 1 }, { body: { other: true }, url: '/payments?x=1' })).toBe(custom({ id: 1 }));
      expect(custom({ id: 1 })).not.toBe(custom({ id: 2 }));
      expect(custom({ id: 1 }, { url: '/other' })).not.toBe(custom({ id: 1 }));
      expect(custom({ id: 1 }, { method: 'PATCH' })).not.toBe(custom({ id: 1 }));
    });
  });

  describe('application/x-www-form-urlencoded', () => {
    it('H14: pairs decoded and sorted by name, like JSON keys; values of a repeated name kept in order', () => {
      expect(typed(FORM, Buffer.from('b=2&a=1'))).toBe(typed(FORM, Buffer.from('a=1&b=2')));
      expect(typed(FORM, Buffer.from('a=1&b=2'))).not.toBe(typed(FORM, Buffer.from('a=1&b=3')));
      expect(typed(FORM, Buffer.from('tag=x&tag=y&n=1'))).toBe(typed(FORM, Buffer.from('n=1&tag=x&tag=y')));
      expect(typed(FORM, Buffer.from('tag=x&tag=y'))).not.toBe(typed(FORM, Buffer.from('tag=y&tag=x')));
      expect(typed(FORM, Buffer.from('q=a+b&name=%C3%A9'))).toBe(typed(FORM, Buffer.from('name=é&q=a%20b')));
      expect(typed(`${FORM}; charset=UTF-8`, Buffer.from('a=1'))).toBe(typed(FORM, Buffer.from('a=1')));
    });

    it('H14: a form parser’s raw text (Koa’s rawBody) gives what the bytes give', () => {
      expect(typed(FORM, 'b=2&a=1')).toBe(typed(FORM, Buffer.from('a=1&b=2')));
    });

    it('H14: a bad percent-escape or bytes that are not UTF-8 count by their bytes; never a throw', () => {
      for (const text of ['a=%zz', 'a=%', 'a=%e9', '%ff=1', 'a=%C3']) {
        expect(() => typed(FORM, Buffer.from(text))).not.toThrow();
        expect(typed(FORM, Buffer.from(text))).toBe(bytes(text));
      }
      expect(typed(FORM, Buffer.from([0x61, 0x3d, 0xff]))).toBe(bytes(Buffer.from([0x61, 0x3d, 0xff])));
      expect(typed(FORM, Buffer.from('a=%ff'))).not.toBe(typed(FORM, Buffer.from('a=%fe')));
    });
  });

  describe('multipart/form-data', () => {
    it('H14: a new boundary, the part headers’ spelling, case and order, preamble and epilogue do not count', () => {
      const first = multipart(invoice, { boundary: '----formdata-undici-0123456789' });
      const again = multipart(invoice, { boundary: 'XyZ987', preamble: 'This is a preamble.', epilogue: '\r\nand an epilogue', headerStyle: 'odd' });
      expect(first.body.equals(again.body)).toBe(false);
      expect(typed(first.type, first.body)).toBe(typed(again.type, again.body));
    });

    it('H14: each part’s name, filename, content type and content count, and their order', () => {
      const digest = (parts: typeof invoice) => {
        const m = multipart(parts);
        return typed(m.type, m.body);
      };
      const same = digest(invoice);
      const file = invoice[1]!;
      expect(digest([invoice[0]!, { ...file, content: Buffer.from('another file') }])).not.toBe(same);
      expect(digest([invoice[0]!, { ...file, filename: 'other.pdf' }])).not.toBe(same);
      expect(digest([invoice[0]!, { ...file, type: 'image/png' }])).not.toBe(same);
      expect(digest([invoice[0]!, { ...file, name: 'doc' }])).not.toBe(same);
      expect(digest([invoice[1]!, invoice[0]!])).not.toBe(same);
      expect(digest([invoice[0]!])).not.toBe(same);
      // A file part and a text part with the same bytes are not the same part.
      expect(digest([{ name: 'a', content: 'x' }])).not.toBe(digest([{ name: 'a', filename: 'x', content: 'x' }]));
    });

    it('H14: the same parts in any chunking give the same fingerprint (every split point, and random splits)', () => {
      const m = multipart(invoice, { boundary: 'split-me' });
      const want = typed(m.type, m.body);
      for (let at = 1; at < m.body.length; at++) {
        const chunked = new RawBody([m.body.subarray(0, at), m.body.subarray(at)], m.body.length);
        expect(typed(m.type, chunked), `split at ${at}`).toBe(want);
      }
      const next = seededRandom(5);
      for (let round = 0; round < 200; round++) {
        const chunks: Buffer[] = [];
        for (let pos = 0; pos < m.body.length; ) {
          const size = 1 + Math.floor(next() * 12);
          chunks.push(m.body.subarray(pos, pos + size));
          pos += size;
        }
        expect(typed(m.type, new RawBody(chunks, m.body.length))).toBe(want);
      }
    });

    it('H14: parts larger than the scanner reads at a time: a delimiter at any offset around its windows is found, and each part hashes to its own content', () => {
      const next = seededRandom(11);
      const noise = (n: number) => Buffer.from(Array.from({ length: n }, () => Math.floor(next() * 256)));
      // The scanner searches 32 KiB at a time: put the next delimiter before, across and after such an edge.
      for (const size of [32 * 1024 - 40, 32 * 1024 - 36, 32 * 1024 - 1, 32 * 1024, 32 * 1024 + 1, 32 * 1024 + 35, 64 * 1024 + 3, 100_000]) {
        for (const shift of [0, 1, 17]) {
          const first = noise(size - shift);
          const second = noise(70_000 + shift);
          const parts: Part[] = [
            { name: 'a', filename: 'a.bin', content: first },
            { name: 'b', filename: 'b.bin', content: second },
          ];
          const m = multipart(parts, { boundary: 'edge-boundary' });
          // The digest names each part's own hash: a missed delimiter would fold b into a.
          const other = multipart(parts, { boundary: 'Zz' });
          expect(typed(m.type, m.body), `size ${size}, shift ${shift}`).toBe(typed(other.type, other.body));
          const chunks = [m.body.subarray(0, 40_000), m.body.subarray(40_000)];
          expect(typed(m.type, new RawBody(chunks, m.body.length)), `size ${size}, shift ${shift}, two chunks`).toBe(typed(m.type, m.body));
          const merged = multipart([{ name: 'a', filename: 'a.bin', content: Buffer.concat([first, Buffer.from('\r\n--x'), second]) }], { boundary: 'edge-boundary' });
          expect(typed(m.type, m.body)).not.toBe(typed(merged.type, merged.body));
        }
      }
    });

    it('H14: content that holds most of a delimiter, CRLFs and dashes is read to the real one', () => {
      const tricky = Buffer.from('\r\n--b0undar\r\n--b0undarz\r\n-\r\n--\r\n\r\n-b0undary\r\n\r\n--b0undar');
      const m = multipart([{ name: 'f', filename: 'f.bin', content: tricky }], { boundary: 'b0undary' });
      const plain = multipart([{ name: 'f', filename: 'f.bin', content: tricky }], { boundary: 'zzzzzz' });
      // Under another boundary the same content is the same part; its hash is the content's own.
      expect(typed(m.type, m.body)).toBe(typed(plain.type, plain.body));
      expect(typed(m.type, m.body)).not.toBe(typed(m.type, multipart([{ name: 'f', filename: 'f.bin', content: tricky.subarray(2) }], { boundary: 'b0undary' }).body));
    });

    it('H14: a Content-Transfer-Encoding does not count: base64 and quoted-printable parts are their decoded content', () => {
      const content = Buffer.from('Grüße, = and a very long line\r\n');
      const plain = multipart([{ name: 'f', filename: 'a.txt', content }]);
      const b64 = multipart([{ name: 'f', filename: 'a.txt', content: `${content.toString('base64').slice(0, 10)}\r\n${content.toString('base64').slice(10)}`, headers: ['Content-Transfer-Encoding: base64'] }]);
      const qp = multipart([{ name: 'f', filename: 'a.txt', content: 'Gr=C3=BC=C3=9Fe, =3D and a very =\r\nlong line\r\n', headers: ['Content-Transfer-Encoding: quoted-printable'] }]);
      expect(typed(b64.type, b64.body)).toBe(typed(plain.type, plain.body));
      expect(typed(qp.type, qp.body)).toBe(typed(plain.type, plain.body));
    });

    it('H14: filename* (RFC 8187) and an escaped quote in a quoted filename are read as the name they spell', () => {
      const star = multipart([{ name: 'f', content: 'x', headers: [] }]);
      const body = star.body.toString().replace('name="f"', `name="f"; filename*=UTF-8''r%C3%A9sum%C3%A9.pdf`);
      const plain = multipart([{ name: 'f', filename: 'résumé.pdf', content: 'x' }]);
      expect(typed(star.type, Buffer.from(body))).toBe(typed(plain.type, plain.body));
      const quoted = multipart([{ name: 'f', filename: 'a\\"b.txt', content: 'x' }]);
      const other = multipart([{ name: 'f', filename: 'ab.txt', content: 'x' }]);
      expect(typed(quoted.type, quoted.body)).not.toBe(typed(other.type, other.body));
    });

    it('H14: malformed bodies count by their raw bytes, never a throw or a hang', () => {
      const good = multipart(invoice, { boundary: 'good' });
      const cases: Record<string, [string, Buffer]> = {
        'no boundary parameter': ['multipart/form-data', good.body],
        'an empty boundary': ['multipart/form-data; boundary=', good.body],
        'an unterminated quoted boundary': ['multipart/form-data; boundary="good', good.body],
        'another boundary than the body’s': ['multipart/form-data; boundary=other', good.body],
        'truncated (no closing delimiter)': [good.type, good.body.subarray(0, good.body.length - 10)],
        'truncated inside the part headers': [good.type, good.body.subarray(0, 20)],
        'a delimiter followed by garbage': [good.type, Buffer.from('--good\r\nContent-Disposition: form-data; name="a"\r\n\r\nx\r\n--goodX\r\n--good--')],
        'a header line without a colon': [good.type, Buffer.from('--good\r\nnot a header\r\n\r\nx\r\n--good--')],
        'part headers that never end': [good.type, Buffer.concat([Buffer.from('--good\r\nX-Long: '), Buffer.alloc(40_000, 0x61), Buffer.from('\r\n--good--')])],
        'only a preamble': [good.type, Buffer.from('just some text')],
        'an unterminated quote in the disposition': [good.type, Buffer.from('--good\r\nContent-Disposition: form-data; name="a\r\n\r\nx\r\n--good--')],
      };
      for (const [title, [type, body]] of Object.entries(cases)) {
        let digest = '';
        expect(() => (digest = typed(type, body)), title).not.toThrow();
        expect(digest, title).toBe(bytes(body));
      }
      // An empty form is a form: `--b--` alone parses to no parts.
      expect(typed('multipart/form-data; boundary=b', Buffer.from('--b--\r\n'))).not.toBe(bytes('--b--\r\n'));
    });

    it('H14: a body made of delimiters and part headers only stays linear (no quadratic scan)', () => {
      const many = Buffer.from(`${'--b\r\nContent-Disposition: form-data; name="a"\r\n\r\n\r\n'.repeat(20_000)}--b--`);
      const started = performance.now();
      typed('multipart/form-data; boundary=b', many);
      // 20 000 parts in about 1 MB: a quadratic scan would take minutes; this is a loose bound for a loaded machine.
      expect(performance.now() - started).toBeLessThan(5_000);
    });
  });

  describe('an upload middleware’s result (multer, formidable, @fastify/multipart)', () => {
    const file = (over: Partial<{ name: string; filename: string | null; type: string | null; sha256: string }> = {}) => ({
      name: 'file',
      filename: 'a.pdf',
      type: 'application/pdf',
      sha256: sha('content'),
      ...over,
    });
    const upload = (fields: unknown, files = [file()]) => typed('multipart/form-data; boundary=x', new UploadBody(fields, files));

    it('H14: the files’ content, names and order count; the fields count as data (key order does not matter)', () => {
      expect(upload({ b: '2', a: '1' })).toBe(upload({ a: '1', b: '2' }));
      expect(upload({ a: '1' })).not.toBe(upload({ a: '2' }));
      expect(upload({ a: '1' }, [file({ sha256: sha('other') })])).not.toBe(upload({ a: '1' }));
      expect(upload({ a: '1' }, [file({ filename: 'b.pdf' })])).not.toBe(upload({ a: '1' }));
      expect(upload({ a: '1' }, [file(), file({ name: 'second' })])).not.toBe(upload({ a: '1' }, [file({ name: 'second' }), file()]));
      expect(upload({ a: '1' }, [])).not.toBe(upload({ a: '1' }));
    });
  });

  describe('every branch has its own tag: no body of one kind spells another’s digest input', () => {
    it('H14: the text `\\0json{...}` is not the JSON `{...}`, `\\0none` is not an empty body (Fastify text, Koa rawBody)', () => {
      const json = fp({ url: '/u', body: { amount: 1 } });
      const none = fp({ url: '/u', body: undefined });
      for (const type of ['text/plain', FORM, 'application/octet-stream']) {
        for (const text of ['\u0000json{"amount":1}', '\u0000none', '\u0000value', '\u0000bytes', 'json\u0000{"amount":1}', '{"amount":1}']) {
          expect(typed(type, text), `${type} ${JSON.stringify(text)}`).not.toBe(json);
          expect(typed(type, text), `${type} ${JSON.stringify(text)}`).not.toBe(none);
          expect(typed(type, Buffer.from(text))).not.toBe(json);
        }
      }
    });

    it('H14: bodies of each kind, with contents built to look like the others, all differ', () => {
      const m = multipart([{ name: 'a', content: '1' }]);
      const digests = [
        fp({ url: '/u', body: undefined }),
        fp({ url: '/u', body: { a: '1' } }),
        typed(FORM, 'a=1'),
        typed(m.type, m.body),
        typed('multipart/form-data; boundary=x', new UploadBody({ a: '1' }, [])),
        typed('text/plain', 'a=1'),
        typed('text/plain', '{"a":"1"}'),
        typed(FORM, new URLSearchParams('a=1') as unknown),
        typed(FORM, { a: '1' }),
        fp({ url: '/u', body: { when: new Date(0) } }),
        fp({ url: '/u', custom: { a: '1' } }),
        fp({ url: '/u', custom: '[["a","1"]]' }),
        fp({ url: '/u?a=1', body: undefined }),
      ];
      expect(new Set(digests).size).toBe(digests.length);
    });
  });

  describe('fingerprint: { include } and { exclude }', () => {
    const exclude = (paths: string[]) => FieldSelection.from({ exclude: paths });
    const include = (paths: string[]) => FieldSelection.from({ include: paths });
    const order = { amount: 5, metadata: { sent_at: '2024-01-01T00:00:00Z', order: 'o_1' }, items: [{ sku: 'a', seen: 1 }, { sku: 'b', seen: 2 }] };

    it('H14: exclude leaves out the paths (through arrays); everything else still counts', () => {
      const fields = exclude(['metadata.sent_at', 'items.seen']);
      const later = { ...order, metadata: { ...order.metadata, sent_at: '2024-01-01T00:00:05Z' }, items: [{ sku: 'a', seen: 9 }, { sku: 'b', seen: 9 }] };
      expect(fp({ body: later, fields })).toBe(fp({ body: order, fields }));
      expect(fp({ body: { ...later, amount: 6 }, fields })).not.toBe(fp({ body: order, fields }));
      expect(fp({ body: Buffer.from(JSON.stringify(later)), fields })).toBe(fp({ body: order, fields }));
      expect(fp({ body: new ParsedJsonBody(later, Buffer.from(JSON.stringify(later))), fields })).toBe(fp({ body: order, fields }));
      // Without the option the timestamp counts.
      expect(fp({ body: later })).not.toBe(fp({ body: order }));
    });

    it('H14: include keeps only the paths', () => {
      const fields = include(['amount', 'items.sku']);
      expect(fp({ body: { ...order, metadata: { other: true }, items: [{ sku: 'a' }, { sku: 'b', seen: 0 }] }, fields })).toBe(fp({ body: order, fields }));
      expect(fp({ body: { ...order, amount: 6 }, fields })).not.toBe(fp({ body: order, fields }));
      expect(fp({ body: { ...order, items: [{ sku: 'b' }, { sku: 'a' }] }, fields })).not.toBe(fp({ body: order, fields }));
    });

    it('H14: form fields match by the path their name stands for (brackets or dots), in urlencoded and multipart bodies', () => {
      const fields = exclude(['metadata.sent_at']);
      expect(typed(FORM, 'amount=5&metadata[sent_at]=1', { fields })).toBe(typed(FORM, 'metadata[sent_at]=2&amount=5', { fields }));
      expect(typed(FORM, 'amount=5&metadata.sent_at=1', { fields })).toBe(typed(FORM, 'amount=5', { fields }));
      expect(typed(FORM, 'amount=5&metadata[order]=1', { fields })).not.toBe(typed(FORM, 'amount=5&metadata[order]=2', { fields }));
      const kept = include(['items.sku']);
      expect(typed(FORM, 'items[0][sku]=a&items[0][seen]=1&x=1', { fields: kept })).toBe(typed(FORM, 'items[0][sku]=a', { fields: kept }));
      const a = multipart([{ name: 'metadata[sent_at]', content: '1' }, invoice[1]!]);
      const b = multipart([{ name: 'metadata[sent_at]', content: '2' }, invoice[1]!], { boundary: 'other' });
      expect(typed(a.type, a.body, { fields })).toBe(typed(b.type, b.body, { fields }));
      expect(typed(a.type, a.body)).not.toBe(typed(b.type, b.body));
      // A file left out by its field name.
      const c = multipart([{ name: 'metadata[sent_at]', content: '1' }, { ...invoice[1]!, content: 'other' }]);
      expect(typed(a.type, a.body, { fields: exclude(['file', 'metadata']) })).toBe(typed(c.type, c.body, { fields: exclude(['file', 'metadata']) }));
    });

    it('H14: bodies the paths cannot apply to count whole', () => {
      const fields = exclude(['a']);
      expect(typed('text/plain', 'a=1', { fields })).toBe(typed('text/plain', 'a=1'));
      expect(typed('text/plain', 'a=1', { fields })).not.toBe(typed('text/plain', 'a=2', { fields }));
    });

    it('precise TypeErrors for a bad option', () => {
      const bad: [unknown, string][] = [
        [{ exclude: ['metadata..sent_at'] }, "Expected `fingerprint.exclude[0]` to be a dotted path such as 'metadata.sent_at', got \"metadata..sent_at\" (an empty segment: a leading, trailing or double dot)"],
        [{ exclude: ['a', '.b'] }, 'Expected `fingerprint.exclude[1]` to be a dotted path'],
        [{ exclude: ['a.'] }, 'an empty segment'],
        [{ include: [''] }, 'Expected `fingerprint.include[0]` to be a dotted path such as \'metadata.sent_at\', got an empty string'],
        [{ include: [7] }, 'Expected `fingerprint.include[0]` to be a dotted path such as \'metadata.sent_at\', got 7'],
        [{ exclude: ['metadata[sent_at]'] }, "write form fields' brackets as dots ('metadata[sent_at]' is 'metadata.sent_at')"],
        [{ include: [] }, 'Expected `fingerprint.include` to list at least one path'],
        [{ include: ['a'], exclude: ['b'] }, 'Expected `fingerprint` to have either `include` or `exclude`, not both'],
        [{ exclude: 'a.b' }, 'Expected `fingerprint.exclude` to be an array of dotted paths, got "a.b"'],
        [{ excludes: ['a'] }, 'Expected `fingerprint` to have `include` or `exclude` (a list of dotted paths), got `excludes`'],
        [{}, 'got neither'],
        ['a.b', 'Expected `fingerprint` to be a function or { include: [...paths] } or { exclude: [...paths] }, got "a.b"'],
        [['a'], 'got an array'],
      ];
      for (const [option, message] of bad) expect(() => FieldSelection.from(option), JSON.stringify(option)).toThrow(message);
      expect(() => FieldSelection.from({ exclude: [] })).not.toThrow();
    });
  });

  it('H14: fingerprints are stable: the current scheme’s digests are pinned (a change needs a new version)', () => {
    const text = '{"z":{"b":[1,{"y":null,"x":"é"}],"a":true},"10":1,"2":2,"__proto__":{"k":1},"amount":1e3}';
    expect(canonicalJson(JSON.parse(text))).toBe('{"2":2,"10":1,"__proto__":{"k":1},"amount":1000,"z":{"a":true,"b":[1,{"x":"é","y":null}]}}');
    const raw = Buffer.from(text);
    const pinned = {
      json: fp({ body: raw }),
      parsed: fp({ body: new ParsedJsonBody(JSON.parse(text), raw) }),
      form: typed(FORM, 'b=2&a=1&a=0'),
      multipart: typed(multipart(invoice).type, multipart(invoice).body),
      bytes: bytes('hello'),
      none: fp({ body: undefined }),
      custom: fp({ custom: { id: 1 } }),
    };
    expect(pinned.parsed).toBe(pinned.json);
    expect(pinned).toMatchInlineSnapshot(`
      {
        "bytes": "v2:yLctck_IQDKljuUVSrp_Wc9XJZpwx-jM6hT0lIC0p6o",
        "custom": "v2:8XKLXOC7bgw8W4NjoK02H0wYtDwSCzoighthGz--p6o",
        "form": "v2:7iyJU5MLuhqfZglimAlRTV1WrTd1BoG5AwCCaOmkLHQ",
        "json": "v2:i6bi38Gy6mXi94p978SC2mb1QOzzUdfq_webct1kwPA",
        "multipart": "v2:rdB7TCubtmCsYJOMw9HBhYHx7vp5rN9ihKU6EVSaKME",
        "none": "v2:Mlqs5jB2FTohbYOJE-Zjld7W-9cvr2MKglVXYwg8Hcg",
        "parsed": "v2:i6bi38Gy6mXi94p978SC2mb1QOzzUdfq_webct1kwPA",
      }
    `);
  });

  it('canonical JSON: a shared object, or an array with its own toJSON, counts as object-hash and by its elements, as before', () => {
    const shared = { x: 1 };
    expect(canonicalJson({ p: shared, q: shared })).toBeUndefined();
    const withToJson = Object.assign([{ b: 1, a: 2 }], { toJSON: () => 'other' });
    expect(canonicalJson({ list: withToJson })).toBe('{"list":[{"a":2,"b":1}]}');
  });

  it('canonical JSON: a repeat is found however many objects come before it, and distinct objects are never taken for one', () => {
    for (const count of [1, 30, 31, 32, 33, 100, 1_000]) {
      const items = Array.from({ length: count }, (_, i) => ({ i }));
      // Distinct objects, however many: plain data.
      expect(canonicalJson({ items })).toBe(JSON.stringify({ items }));
      // The first object again, the last one again, and a cycle at the end.
      expect(canonicalJson({ items: [...items, items[0]] })).toBeUndefined();
      expect(canonicalJson({ items: [...items, items[count - 1]] })).toBeUndefined();
      const cyclic: Record<string, unknown> = { items: items.map((item) => ({ ...item })) };
      (cyclic.items as Record<string, unknown>[])[count - 1]!.back = cyclic;
      expect(canonicalJson(cyclic)).toBeUndefined();
      expect(() => hashValue(cyclic)).not.toThrow();
    }
  });

  it('canonical JSON survives deep nesting without a stack overflow', () => {
    let deep: unknown = 1;
    for (let i = 0; i < 200_000; i++) deep = [deep];
    expect(() => hashValue(deep)).not.toThrow();
    const text = '['.repeat(100_000) + ']'.repeat(100_000);
    expect(() => fingerprintRequest({ ...base, body: text })).not.toThrow();
  });

  it('canonical JSON: sorted keys, undefined dropped, non-plain values fall back to object-hash', () => {
    expect(canonicalJson({ b: 1, a: undefined, c: [undefined] })).toBe('{"b":1,"c":[null]}');
    expect(canonicalJson(new Date(0))).toBeUndefined();
    expect(hashValue({ when: new Date(0) })).toBe(hashValue({ when: new Date(0) }));
    expect(hashValue({ when: new Date(0) })).not.toBe(hashValue({ when: new Date(1) }));
    const cyclic: Record<string, unknown> = { a: 1 };
    cyclic.self = cyclic;
    expect(() => hashValue(cyclic)).not.toThrow();
  });
});

describe('JSON numbers by their decimal text (H14)', () => {
  it('H14: numberText writes what JSON.stringify writes for every number a double holds as written', () => {
    fc.assert(
      fc.property(fc.double({ noNaN: true, noDefaultInfinity: true }), (d) => {
        const text = JSON.stringify(d);
        expect(numberText(text)).toBe(text);
        // The same value spelled otherwise: trailing zeros, an exponent.
        const [mantissa, exp = '0'] = text.split('e');
        const padded = mantissa!.includes('.') ? `${mantissa}00` : `${mantissa}.00`;
        expect(numberText(`${padded}E${exp}`)).toBe(text);
      }),
      { numRuns: 2000 },
    );
    for (const [token, text] of [
      ['1.0', '1'],
      ['1e2', '100'],
      ['100E-2', '1'],
      ['-0', '0'],
      ['-0.000', '0'],
      ['0.000001', '0.000001'],
      ['0.0000001', '1e-7'],
      ['1e21', '1e+21'],
      ['123456789012345678901', '123456789012345678901'],
      ['12345678901234567890', '12345678901234567890'],
      ['12345678901234567891', '12345678901234567891'],
      ['0.10000000000000001', '0.10000000000000001'],
      ['1e-400', '1e-400'],
      ['-15e-1', '-1.5'],
    ] as const) {
      expect([token, numberText(token)]).toEqual([token, text]);
    }
  });

  it('H14: jsonNumbersExact accepts every text JSON.stringify writes, and refuses a number a double rounds', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        expect(jsonNumbersExact(JSON.stringify(value))).toBe(true);
      }),
      { numRuns: 1000 },
    );
    expect(jsonNumbersExact('{"id":12345678901234567890}')).toBe(false);
    expect(jsonNumbersExact('[0.10000000000000001]')).toBe(false);
    expect(jsonNumbersExact('{"a":"\\"12345678901234567890\\\\","b":1e-400}')).toBe(false);
    // Digits inside strings are not numbers.
    expect(jsonNumbersExact('{"card":"12345678901234567890","esc":"\\\\","n":1.5e3}')).toBe(true);
  });

  it('H14: jsonNumbersExact is false exactly when one number token is not the number its double writes (random tokens in random JSON)', () => {
    const digits = (min: number, max: number) => fc.string({ unit: fc.constantFrom(...'0123456789'), minLength: min, maxLength: max });
    const token = fc
      .tuple(fc.boolean(), digits(1, 24), fc.option(digits(1, 20)), fc.option(fc.tuple(fc.constantFrom('e', 'E'), fc.constantFrom('', '+', '-'), digits(1, 3))))
      .map(([negative, int, frac, exp]) => `${negative ? '-' : ''}${int.length > 1 ? int.replace(/^0+/, '') || '0' : int}${frac === null ? '' : `.${frac}`}${exp === null ? '' : exp.join('')}`)
      .filter((t) => Number.isFinite(Number(t)));
    // JSON text with the number tokens it holds (strings may hold digits, exponents, escaped quotes).
    type Doc = { text: string; tokens: string[] };
    const doc = fc.letrec((tie) => ({
      value: fc.oneof(
        { depthSize: 'small' },
        token.map((t): Doc => ({ text: t, tokens: [t] })),
        fc.oneof(fc.string(), token.map((t) => `\\"${t}e123`)).map((s): Doc => ({ text: JSON.stringify(s), tokens: [] })),
        tie('array'),
        tie('object'),
      ),
      array: fc.array(tie('value'), { maxLength: 4 }).map((items): Doc => {
        const docs = items as Doc[];
        return { text: `[${docs.map((d) => d.text).join(',')}]`, tokens: docs.flatMap((d) => d.tokens) };
      }),
      object: fc.array(fc.tuple(fc.string(), tie('value')), { maxLength: 4 }).map((members): Doc => {
        const docs = members as [string, Doc][];
        return { text: `{${docs.map(([k, d]) => `${JSON.stringify(k)} : ${d.text}`).join(',')}}`, tokens: docs.flatMap(([, d]) => d.tokens) };
      }),
    })).value as fc.Arbitrary<Doc>;
    fc.assert(
      fc.property(doc, ({ text, tokens }) => {
        JSON.parse(text);
        expect(jsonNumbersExact(text)).toBe(tokens.every((t) => numberText(t) === JSON.stringify(Number(t))));
      }),
      { numRuns: 3000 },
    );
  });

  it('H14: two JSON bodies fingerprint alike exactly when their numbers are equal decimals (any spelling, any member order)', () => {
    const fp = (body: string) => fingerprintRequest({ method: 'POST', url: '/p', headers: { 'content-type': 'application/json' }, body });
    expect(fp('{"id":12345678901234567890,"a":1}')).not.toBe(fp('{"id":12345678901234567891,"a":1}'));
    expect(fp('{"id":12345678901234567890,"a":1}')).toBe(fp('{ "a": 1.0, "id": 1234567890123456789.0e1 }'));
    expect(fp('{"id":12345678901234567890}')).not.toBe(fp('{"id":12345678901234567000}'));
    expect(fp('{"id":12345678901234567000}')).toBe(fp('{"id":1.2345678901234567e19}'));
    // The same on a body an adapter parsed already, given its bytes or its text.
    const text = '{"id":12345678901234567891,"a":[1,{"__proto__":2}]}';
    const parsed = (bytes: Uint8Array | string) =>
      fingerprintRequest({ method: 'POST', url: '/p', headers: { 'content-type': 'application/json' }, body: new ParsedJsonBody(JSON.parse(text), bytes, true) });
    expect(parsed(Buffer.from(text))).toBe(fp(text));
    expect(parsed(text)).toBe(fp(text));
    expect(parsed(Buffer.from(text))).not.toBe(fp(text.replace('891', '890')));
  });

  it('H14: a JSON body that is not UTF-8 counts by its bytes, parsed already or not', () => {
    const bad = (byte: number) => Buffer.concat([Buffer.from('{"a":"'), Buffer.from([byte]), Buffer.from('"}')]);
    const raw = (bytes: Buffer) => fingerprintRequest({ method: 'POST', url: '/p', headers: { 'content-type': 'application/json' }, body: bytes });
    const parsed = (bytes: Buffer) =>
      fingerprintRequest({
        method: 'POST',
        url: '/p',
        headers: { 'content-type': 'application/json' },
        body: new ParsedJsonBody(JSON.parse(bytes.toString('utf8')), bytes, false, bytes.toString('utf8')),
      });
    expect(parsed(bad(0xff))).not.toBe(parsed(bad(0xfe)));
    expect(parsed(bad(0xff))).toBe(raw(bad(0xff)));
    expect(parsed(bad(0xff))).not.toBe(raw(Buffer.from('{"a":"\ufffd"}')));
  });
});
