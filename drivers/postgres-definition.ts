/**
 * Internal: what the PostgreSQL driver declares (see drivers/definition.ts). Not a package entry.
 * @module
 */
import { networkUrl, sqlAdapter, sqlOptions, type DriverDefinition } from './definition.js';

export const postgresDriver: DriverDefinition = {
  name: 'postgres',
  factory: 'postgresStore',
  schemes: ['postgres', 'postgresql'],
  forms: ['postgres://user[:password]@host[:port]/database', 'postgresql://…'],
  packages: ['keyv', '@keyv/postgres'],
  adapter: { pkg: '@keyv/postgres', construct: 'new KeyvPostgres({ uri })', is: sqlAdapter('postgres') },
  namespace: 'qualified-table',
  checkUrl: (url) => networkUrl(url, 'PostgreSQL').problem,
  options: sqlOptions,
};
