/**
 * Internal: what the MySQL driver declares (see drivers/definition.ts). Not a package entry.
 * @module
 */
import { networkUrl, sqlAdapter, sqlOptions, type DriverDefinition } from './definition.js';

export const mysqlDriver: DriverDefinition = {
  name: 'mysql',
  factory: 'mysqlStore',
  schemes: ['mysql'],
  forms: ['mysql://user[:password]@host[:port]/database (MySQL or MariaDB)'],
  packages: ['keyv', '@keyv/mysql'],
  adapter: { pkg: '@keyv/mysql', construct: 'new KeyvMysql(uri)', is: sqlAdapter('mysql') },
  namespace: 'table',
  checkUrl: (url) => networkUrl(url, 'MySQL').problem,
  options: sqlOptions,
};
