import { describe, expect, it } from 'vitest';
import { canonicalJson, fingerprintRequest, hashValue, ParsedJsonBody } from '../../src/fingerprint.js';

const base = {
  method: 'POST',
  url: '/payments?b=2&a=1',
  headers: { 'content-type': 'application/json' },
  body: { amount: 1000, currency: 'EUR', meta: { z: 1, a: [1, 2] } },
};
const fp = (over: Partial<typeof base> & { fingerprintHeaders?: string[]; custom?: unknown } = {}) =>
  fingerprintRequest({ ...base, ...over });

describe('fingerprint (H14)', () => {
  it('H14: object key order does not matter, at any depth', () => {
    expect(fp({ body: { meta: { a: [1, 2], z: 1 }, currency: 'EUR', amount: 1000 } })).toBe(fp());
  });

  it('H14: raw JSON bytes and the parsed body give the same fingerprint (whitespace, key order)', () => {
    const raw = Buffer.from('{ "currency":"EUR", "meta":{"z":1,"a":[1,2]},"amount":1000 }');
    expect(fp({ body: raw as never })).toBe(fp());
    expect(fp({ body: raw.toString() as never })).toBe(fp());
  });

  it('H14: a body the adapter parsed already gives the fingerprint its bytes give (big numbers and empty bodies too)', () => {
    for (const text of ['{ "b": [1, {"y":2,"x":1}], "a": "é" }', '{"n": 1e400}', '{"n": 12345678901234567890123}', '[]', 'null', '"s"']) {
      const bytes = Buffer.from(text);
      expect(fp({ body: new ParsedJsonBody(JSON.parse(text), bytes) as never })).toBe(fp({ body: bytes as never }));
    }
    expect(fp({ body: new ParsedJsonBody(undefined, Buffer.alloc(0)) as never })).toBe(fp({ body: Buffer.alloc(0) as never }));
    // A different body is a different fingerprint, parsed or not.
    expect(fp({ body: new ParsedJsonBody({ a: 2 }, Buffer.from('{"a":2}')) as never })).not.toBe(fp({ body: Buffer.from('{"a":1}') as never }));
  });

  it('H14: array order, values and types matter', () => {
    expect(fp({ body: { ...base.body, meta: { z: 1, a: [2, 1] } } })).not.toBe(fp());
    expect(fp({ body: { ...base.body, amount: 1001 } })).not.toBe(fp());
    expect(fp({ body: { ...base.body, amount: '1000' as never } })).not.toBe(fp());
  });

  it('H14: method and route path are in the fingerprint', () => {
    expect(fp({ method: 'PATCH' })).not.toBe(fp());
    expect(fp({ url: '/refunds?b=2&a=1' })).not.toBe(fp());
    expect(fp({ method: 'post' })).toBe(fp());
  });

  it('H14: the query is sorted, but its values count', () => {
    expect(fp({ url: '/payments?a=1&b=2' })).toBe(fp());
    expect(fp({ url: '/payments?a=1&b=3' })).not.toBe(fp());
    expect(fp({ url: '/payments' })).not.toBe(fp());
  });

  it('H14: fingerprintHeaders count; other headers do not', () => {
    const a = fingerprintRequest({ ...base, headers: { ...base.headers, 'x-account': 'A', 'x-trace': '1' }, fingerprintHeaders: ['x-account'] });
    const b = fingerprintRequest({ ...base, headers: { ...base.headers, 'x-account': 'A', 'x-trace': '2' }, fingerprintHeaders: ['x-account'] });
    const c = fingerprintRequest({ ...base, headers: { ...base.headers, 'x-account': 'B' }, fingerprintHeaders: ['x-account'] });
    expect(a).toBe(b);
    expect(a).not.toBe(c);
  });

  it('H14: non-JSON bodies count by their bytes; invalid JSON too', () => {
    const text = { 'content-type': 'text/plain' };
    expect(fingerprintRequest({ ...base, headers: text, body: 'a=1' })).not.toBe(fingerprintRequest({ ...base, headers: text, body: 'a=2' }));
    expect(fingerprintRequest({ ...base, body: '{"a":' })).not.toBe(fingerprintRequest({ ...base, body: '{"a":1' }));
    // an empty body is no body
    expect(fingerprintRequest({ ...base, body: Buffer.alloc(0) })).toBe(fingerprintRequest({ ...base, body: undefined }));
  });

  it('H14: a custom fingerprint replaces query, body and headers but keeps method and path', () => {
    const custom = (c: unknown, over = {}) => fingerprintRequest({ ...base, ...over, custom: c });
    expect(custom({ id: 1 }, { body: { other: true } })).toBe(custom({ id: 1 }));
    expect(custom({ id: 1 })).not.toBe(custom({ id: 2 }));
    expect(custom({ id: 1 }, { url: '/other' })).not.toBe(custom({ id: 1 }));
  });

  it('H14: fingerprints are stable across releases: a record stored by an earlier version still matches its retry', () => {
    // Index keys first in numeric order, then the rest by code unit; `__proto__` stays a plain key.
    const text = '{"z":{"b":[1,{"y":null,"x":"é"}],"a":true},"10":1,"2":2,"__proto__":{"k":1},"amount":1e3}';
    expect(canonicalJson(JSON.parse(text))).toBe('{"2":2,"10":1,"__proto__":{"k":1},"amount":1000,"z":{"a":true,"b":[1,{"x":"é","y":null}]}}');
    const raw = Buffer.from(text);
    expect(fp({ body: raw as never })).toBe('cW83emQGA-NQsaje8jAYMhOEiUm9vN7f1akKyIvC-Cs');
    expect(fp({ body: new ParsedJsonBody(JSON.parse(text), raw) as never })).toBe('cW83emQGA-NQsaje8jAYMhOEiUm9vN7f1akKyIvC-Cs');
    expect(fp({ body: { b: [3, { d: undefined, c: 'x' }], a: { y: 2, x: [undefined, 1] } } as never })).toBe(
      'IqKCXvu-jc-UH0RRvNbfqqcJMOL3cX-8ybfv9UMjUpg',
    );
  });

  it('canonical JSON: a shared object, or an array with its own toJSON, counts as object-hash and by its elements, as before', () => {
    const shared = { x: 1 };
    expect(canonicalJson({ p: shared, q: shared })).toBeUndefined();
    const withToJson = Object.assign([{ b: 1, a: 2 }], { toJSON: () => 'other' });
    expect(canonicalJson({ list: withToJson })).toBe('{"list":[{"a":2,"b":1}]}');
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
