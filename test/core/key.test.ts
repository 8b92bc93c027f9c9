import { describe, expect, it } from 'vitest';
import { IdempotencyKeyError } from '../../src/errors.js';
import { sha256 } from '../../src/fingerprint.js';
import fc from 'fast-check';
import { checkKey, keyHeaderPattern, parseIdempotencyKey, scopePartition } from '../../src/key.js';

const key = (value: string | string[] | undefined, max = 255) => parseIdempotencyKey(value, max);
const reason = (value: string | string[] | undefined, max = 255) => {
  const result = key(value, max);
  if (result.key !== undefined) throw new Error(`expected an error, got key ${result.key}`);
  return result.error?.reason;
};

describe('key parsing', () => {
  it('H2: an absent header is "missing", not an error of its own', () => {
    expect(key(undefined)).toEqual({ key: undefined, error: undefined });
    expect(key([])).toEqual({ key: undefined, error: undefined });
  });

  it('H3: a bare token and an sf-string name the same key', () => {
    expect(key('abc-123')).toEqual({ key: 'abc-123' });
    expect(key('"abc-123"')).toEqual({ key: 'abc-123' });
    expect(key('8e03978e-40d5-43e8-bc93-6894a57f9324')).toEqual({ key: '8e03978e-40d5-43e8-bc93-6894a57f9324' });
  });

  it('H3: escaped quote and backslash are unescaped in sf-strings', () => {
    expect(key('"a\\"b\\\\c"')).toEqual({ key: 'a"b\\c' });
  });

  it('H3: sf parameters are ignored on an sf-string', () => {
    expect(key('"abc";v=1')).toEqual({ key: 'abc' });
    expect(key('"abc";v="x,y";w')).toEqual({ key: 'abc' });
    expect(key('"abc";v="a\\"b"')).toEqual({ key: 'abc' });
  });

  it('H3: a bare value is the key as sent, byte for byte: `;` never cuts it, whatever its first character', () => {
    expect(key('order-7;a')).toEqual({ key: 'order-7;a' });
    expect(key('order-7;b')).toEqual({ key: 'order-7;b' });
    expect(key('1order;a')).toEqual({ key: '1order;a' });
    expect(key(';v=1')).toEqual({ key: ';v=1' });
    expect(key('*a;b=?1')).toEqual({ key: '*a;b=?1' });
    // Distinct bare values are distinct keys.
    const values = ['order-7', 'order-7;a', 'order-7;b', 'order-7;a=1', '1order', '1order;a'];
    expect(new Set(values.map((v) => key(v).key)).size).toBe(values.length);
    // The same text quoted names the same key.
    expect(key('"order-7;a"')).toEqual({ key: 'order-7;a' });
  });

  it('H4: the parameters of an sf-string are printable ASCII, one list member', () => {
    expect(reason('"abc";v=\u00e9')).toBe('non-ascii');
    expect(reason('"abc";v=1\t')).toBe('non-printable');
    expect(reason('"abc";v=1,w')).toBe('several-values');
    expect(reason('"abc";v="x\\')).toBe('malformed-quoting');
  });

  it('H3: a comma inside an sf-string is part of the key', () => {
    expect(key('"a,b"')).toEqual({ key: 'a,b' });
  });

  it('H5: keys are opaque and case-sensitive: no trimming or folding', () => {
    expect(key('ABC')).toEqual({ key: 'ABC' });
    expect(key('abc')).toEqual({ key: 'abc' });
    expect(key('" padded "')).toEqual({ key: ' padded ' });
    expect(key('a b')).toEqual({ key: 'a b' });
  });

  it('H4: empty', () => {
    expect(reason('')).toBe('empty');
    expect(reason('""')).toBe('empty');
  });

  it('H4: too long, measured after unescaping, default limit 255', () => {
    expect(key('a'.repeat(255))).toEqual({ key: 'a'.repeat(255) });
    expect(reason('a'.repeat(256))).toBe('too-long');
    expect(reason('abcdef', 5)).toBe('too-long');
    expect(key('"ab\\"c"', 4)).toEqual({ key: 'ab"c' });
  });

  it('H4: non-printable and non-ASCII', () => {
    expect(reason('abc\u0001')).toBe('non-printable');
    expect(reason('abc\u007f')).toBe('non-printable');
    expect(reason('"ab\tc"')).toBe('non-printable');
    expect(reason('clé')).toBe('non-ascii');
    expect(reason('"ключ"')).toBe('non-ascii');
  });

  it('H4: malformed quoting', () => {
    expect(reason('"abc')).toBe('malformed-quoting');
    expect(reason('"abc"def')).toBe('malformed-quoting');
    expect(reason('"a\\bc"')).toBe('malformed-quoting');
    expect(reason('ab"c')).toBe('malformed-quoting');
    expect(reason('ab\\c')).toBe('malformed-quoting');
    expect(reason('"abc";v="x')).toBe('malformed-quoting');
  });

  it('H4: several values, as repeated lines or a comma list', () => {
    expect(reason(['a', 'b'])).toBe('several-values');
    expect(reason(['a', 'a'])).toBe('several-values');
    expect(reason('a, b')).toBe('several-values');
    expect(reason('"a", "b"')).toBe('several-values');
    expect(reason('a,b')).toBe('several-values');
    expect(key(['only'])).toEqual({ key: 'only' });
  });

  it('H4: errors are typed key-invalid with a reason', () => {
    const result = key('');
    expect(result.key).toBeUndefined();
    const error = (result as { error: IdempotencyKeyError }).error;
    expect(error).toBeInstanceOf(IdempotencyKeyError);
    expect(error.code).toBe('key-invalid');
    expect(error.status).toBe(400);
  });
});

describe('the pattern of accepted header values (the OpenAPI description)', () => {
  // What HTTP delivers: no space at either end (a server trims it).
  const delivered = (value: string) => value === value.trim();
  const accepts = (value: string, max: number) => parseIdempotencyKey(value, max).key !== undefined;

  it('H3 H4 H21: accepts exactly what the parser accepts (random values over the interesting characters)', () => {
    const alphabet = ['a', 'Z', '0', '-', ';', '=', '"', '\\', ',', ' ', '\t', '\u00e9', '?', '*', ':'];
    const char = fc.constantFrom(...alphabet);
    for (const max of [1, 2, 3, 5, 255]) {
      const regex = new RegExp(keyHeaderPattern(max));
      fc.assert(
        fc.property(fc.array(char, { maxLength: 12 }).map((cs) => cs.join('')), (value) => {
          fc.pre(delivered(value));
          expect(regex.test(value)).toBe(accepts(value, max));
        }),
        { numRuns: 3000 },
      );
    }
  });

  it('H4 H21: the length limit is the key after unescaping, bare and quoted', () => {
    const regex = new RegExp(keyHeaderPattern(4));
    for (const value of ['abcd', '"abcd"', '"a\\"cd"', '"abcd";v=1', 'ab;d']) expect([value, regex.test(value)]).toEqual([value, true]);
    for (const value of ['abcde', '"abcde"', '"a\\"cde"', '']) expect([value, regex.test(value)]).toEqual([value, false]);
  });
});

describe('a key given as a value (checkKey: a GraphQL argument)', () => {
  const reasonOf = (value: string, max = 255) => {
    const result = checkKey(value, max);
    if (result.key !== undefined) throw new Error(`expected an error, got key ${result.key}`);
    return result.error?.reason;
  };

  it('H3 H5: taken as it is: quotes, commas and semicolons are part of the key', () => {
    expect(checkKey('"abc"', 255)).toEqual({ key: '"abc"' });
    expect(checkKey('a,b;c=1', 255)).toEqual({ key: 'a,b;c=1' });
    expect(checkKey('AbC', 255)).toEqual({ key: 'AbC' });
  });

  it('H4: empty, too long, non-printable, non-ASCII', () => {
    expect(reasonOf('')).toBe('empty');
    expect(reasonOf('a'.repeat(11), 10)).toBe('too-long');
    expect(checkKey('a'.repeat(10), 10)).toEqual({ key: 'a'.repeat(10) });
    expect(reasonOf('a\tb')).toBe('non-printable');
    expect(reasonOf('caf\u00e9')).toBe('non-ascii');
  });
});

describe('scope partition (what a store sees of a scope)', () => {
  it('is the hash of the scope, the same for a scope however the calls alternate, and never the text', () => {
    const expected = (scope: string | undefined) => sha256(JSON.stringify(['partition', scope ?? null]));
    const scopes = ['user-1', 'user-1', 'user-2', 'user-1', undefined, undefined, 'null', '', 'user-2', ''];
    for (const scope of scopes) {
      const partition = scopePartition(scope);
      expect(partition).toBe(expected(scope));
      if (scope) expect(partition).not.toContain(scope);
    }
    expect(new Set(scopes.map(scopePartition)).size).toBe(5);
  });
});
