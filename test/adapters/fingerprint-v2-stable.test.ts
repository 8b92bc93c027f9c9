/**
 * Counting JSON numbers by their text and bodies that are not UTF-8 by their bytes kept
 * the second scheme's digests wherever they were right (H14, S10): for the corpus of
 * test/fixtures/fingerprint-corpus.ts, the fingerprints made now equal those the release
X * own code and adapters), so records it stored replay, and records made now replay on
 * a process of that release during a rolling deploy.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { memoryStore } from '../../drivers/memory.js';
import * as lib from '../../src/fingerprint.js';
import { isParsedJsonBody, type ParsedJsonBody } from '../../src/request-body.js';
import { fingerprintCorpus, HTTP_CORPUS, HTTP_OPTION_SETS, optionsFor, type HttpOptionSet } from '../fixtures/fingerprint-corpus.js';
import { ADAPTERS, startApp } from './apps.js';
import { send } from './client.js';

interface Fixture {
  release: string;
  inputs: string[];
  http: Record<string, Record<HttpOptionSet, Record<string, string | null>>>;
}
const fixture = JSON.parse(readFileSync(new URL('../fixtures/fingerprint-v2.json', import.meta.url), 'utf8')) as Fixture;

describe('the second scheme’s digests are kept (H14, and records shared with the release before)', () => {
  it('H14: every corpus input fingerprints as the release before the change did, but those it rounded a number of', () => {
    const corpus = fingerprintCorpus(lib);
    const now = corpus.map((input) => lib.fingerprintRequest(input as lib.FingerprintInput));
    expect(now.length).toBe(fixture.inputs.length);
    // The corpus's one number a double rounds: 12345678901234567890123 (the earlier release merged it with ...0000).
    const rounds = (input: (typeof corpus)[number]): boolean => {
      const { body } = input;
      const parsed = typeof body === 'object' && body !== null && isParsedJsonBody(body);
      if (!parsed && !lib.isJsonType(input.headers['content-type'])) return false;
      const bytes = parsed ? (body as ParsedJsonBody).bytes : body;
      const text = typeof bytes === 'string' ? bytes : bytes instanceof Uint8Array ? Buffer.from(bytes).toString('latin1') : '';
      return /\d{18}/.test(text);
    };
    const changed = now.flatMap((value, i) => (value === fixture.inputs[i] ? [] : [i]));
    const expected = corpus.flatMap((input, i) => (input.custom === undefined && rounds(input) ? [i] : []));
    expect(expected.length).toBeGreaterThan(0);
    expect(changed).toEqual(expected);
  });

  for (const adapter of ADAPTERS) {
    it(`H14: ${adapter}: every corpus request claims with the fingerprint that release stored`, async () => {
      let n = 0;
      for (const set of HTTP_OPTION_SETS) {
        const store = memoryStore();
        const claims: string[] = [];
        const claim = store.claim.bind(store);
        store.claim = (key, request, leaseMs) => {
          claims.push(request.fingerprint);
          return claim(key, request, leaseMs);
        };
        const app = await startApp(adapter, { store, ...optionsFor(set) });
        try {
          for (const request of HTTP_CORPUS) {
            const before = claims.length;
            await send(app.url, {
              method: request.method,
              path: request.path,
              key: `v2-stable-${n++}`,
              body: request.body === undefined ? undefined : Buffer.from(request.body, 'base64'),
              contentType: request.contentType,
              headers: request.headers,
            });
            const found = claims.length > before ? claims.at(-1)! : null;
            expect([set, request.name, found]).toEqual([set, request.name, fixture.http[adapter]![set][request.name]]);
          }
        } finally {
          await app.close();
          await store.close();
        }
      }
    });
  }
});
