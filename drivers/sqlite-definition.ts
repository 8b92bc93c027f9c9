/**
 * Internal: what the SQLite driver declares (see drivers/definition.ts). Not a package entry.
 * @module
 */
import { sqlAdapter, sqlOptions, type DriverDefinition } from './definition.js';

export const sqliteDriver: DriverDefinition = {
  name: 'sqlite',
  factory: 'sqliteStore',
  schemes: ['sqlite'],
  forms: ['sqlite://relative/path.db', 'sqlite:///absolute/path.db', 'sqlite://:memory:'],
  packages: ['keyv', '@keyv/sqlite'],
  adapter: { pkg: '@keyv/sqlite', construct: 'new KeyvSqlite(url)', is: sqlAdapter('sqlite') },
  namespace: 'table',
  // Not parsed with `URL`: `sqlite://:memory:` and relative paths are not valid URLs.
  checkUrl(url) {
    if (!url.startsWith('sqlite://')) {
      return {
        reason: 'a SQLite URL starts with sqlite:// followed by the file path',
        expected: '`url` to be sqlite://relative/path.db, sqlite:///absolute/path.db or sqlite://:memory:, got',
      };
    }
    const file = url.slice('sqlite://'.length);
    if (file === '' || file === '/') {
      return {
        reason: 'the SQLite URL names no file',
        expected: 'a file after sqlite:// (sqlite://relative/path.db, sqlite:///absolute/path.db or sqlite://:memory:) in',
      };
    }
    return undefined;
  },
  options: sqlOptions,
};
