/**
 * The first fingerprint scheme is kept frozen so that records stored by releases before the
 * versioned scheme keep replaying (H14): it gives exactly the digests that release made,
 * on the corpus it was run on (test/fixtures/fingerprint-v1.json, made by
 * test/fixtures/generate-fingerprint-v1.ts on that release's own code).
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { fingerprintRequest, fingerprintScheme, ParsedJsonBody, RawBody, requestFingerprint, UploadBody } from '../../src/fingerprint.js';
import { fingerprintRequestV1 } from '../../src/fingerprint-v1.js';
import { fingerprintCorpus } from '../fixtures/fingerprint-corpus.js';

const fixture = JSON.parse(readFileSync(new URL('../fixtures/fingerprint-v1.json', import.meta.url), 'utf8')) as { release: string; inputs: string[] };
const corpus = fingerprintCorpus({ ParsedJsonBody });

describe('the first fingerprint scheme, frozen (H14 versions)', () => {
  it(`H14: gives the digests of release ${fixture.release} on all ${fixture.inputs.length} corpus inputs`, () => {
    expect(corpus).toHaveLength(fixture.inputs.length);
    const mismatches = corpus.map((input, i) => [i, fingerprintRequestV1(input), fixture.inputs[i]] as const).filter(([, got, want]) => got !== want);
    expect(mismatches).toEqual([]);
  });

  it('H14: a request matches the record that release stored for it, and a record of another request does not', () => {
    for (const [i, input] of corpus.entries()) {
      const fingerprint = requestFingerprint(input);
      expect(fingerprint.matches(fixture.inputs[i]!), `input ${i}`).toBe(true);
      // Another input with another digest under that scheme is another request.
      const other = fixture.inputs.find((d) => d !== fixture.inputs[i])!;
      expect(fingerprint.matches(other), `input ${i}`).toBe(false);
    }
  });

  it('H14: new fingerprints carry their version; the stored form tells the scheme', () => {
    const value = fingerprintRequest(corpus[0]!);
    expect(value).toMatch(/^v2:[\w-]{43}$/);
    expect(fingerprintScheme(value)).toBe(2);
    expect(fingerprintScheme(fixture.inputs[0]!)).toBe(1);
    expect(fingerprintScheme('fn:abc')).toBeUndefined();
    // A record of the current scheme is compared as it is: never under the first scheme.
    const fingerprint = requestFingerprint(corpus[0]!);
    expect(fingerprint.matches(value)).toBe(true);
    expect(fingerprint.matches(`v2:${fixture.inputs[0]}`)).toBe(false);
    expect(fingerprint.matches('fn:')).toBe(false);
  });

  it('H14: the first scheme sees what its adapters handed over: a chunked body as one buffer, an upload as what they fingerprinted then', () => {
    const headers = { 'content-type': 'application/octet-stream' };
    const whole = fingerprintRequestV1({ method: 'POST', url: '/u', headers, body: Buffer.from('abcdef') });
    const chunked = new RawBody([Buffer.from('abc'), Buffer.from('def')], 6);
    expect(requestFingerprint({ method: 'POST', url: '/u', headers, body: chunked }).matches(whole)).toBe(true);
    // Fastify handed over `request.body` (undefined) for an upload it had not read.
    const unread = fingerprintRequestV1({ method: 'POST', url: '/u', headers, body: undefined });
    const read = new RawBody([Buffer.from('abc')], 3, { legacy: undefined });
    expect(requestFingerprint({ method: 'POST', url: '/u', headers, body: read }).matches(unread)).toBe(true);
    // Multer's text fields were all that counted after it.
    const fields = { title: 'x' };
    const old = fingerprintRequestV1({ method: 'POST', url: '/u', headers: {}, body: fields });
    const upload = new UploadBody(fields, [{ name: 'f', filename: 'a', type: null, sha256: 'h' }], fields);
    expect(requestFingerprint({ method: 'POST', url: '/u', headers: {}, body: upload }).matches(old)).toBe(true);
  });

  it('H14: the first scheme is only computed when a record of it is found', () => {
    let reads = 0;
    const spy = new (class extends RawBody {
      override bytes() {
        reads++;
        return super.bytes();
      }
    })([Buffer.from('x')], 1);
    const fingerprint = requestFingerprint({ method: 'POST', url: '/u', headers: {}, body: spy });
    fingerprint.matches(fingerprint.value);
    fingerprint.matches('v2:other');
    expect(reads).toBe(0);
    fingerprint.matches('legacyDigestWithoutPrefix');
    fingerprint.matches('anotherLegacyDigest');
    expect(reads).toBe(1);
  });
});
