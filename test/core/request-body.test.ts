import { describe, expect, it } from 'vitest';
import { isJsonType, mediaType } from '../../src/request-body.js';

describe('media type of a Content-Type header', () => {
  it('is the type before any parameter, trimmed and lower-cased; of a repeated header, the first', () => {
    expect(mediaType('application/json')).toBe('application/json');
    expect(mediaType('Application/JSON')).toBe('application/json');
    expect(mediaType(' application/json ; charset=utf-8')).toBe('application/json');
    expect(mediaType('multipart/form-data; boundary=a;b')).toBe('multipart/form-data');
    expect(mediaType('text/plain;x=1')).toBe('text/plain');
    expect(mediaType(['application/merge-patch+json; q=1', 'text/html'])).toBe('application/merge-patch+json');
    expect(mediaType(';')).toBe('');
    expect(mediaType('')).toBe('');
    expect(mediaType(undefined)).toBe('');
    expect(mediaType([])).toBe('');
  });

  it('JSON is application/json or any +json type, whatever the case and parameters', () => {
    expect(isJsonType('application/json')).toBe(true);
    expect(isJsonType('APPLICATION/JSON; charset=utf-8')).toBe(true);
    expect(isJsonType('application/vnd.api+json')).toBe(true);
    expect(isJsonType('application/jsonx')).toBe(false);
    expect(isJsonType('text/json-ish')).toBe(false);
    expect(isJsonType(undefined)).toBe(false);
  });
});
