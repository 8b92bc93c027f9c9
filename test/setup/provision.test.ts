/**
 * The global setup makes what the tests need on a fresh machine: a MySQL user and database
 * (as root over the local socket) and a PostgreSQL database; when it cannot, it says what
 * to run. Each test uses names of its own and drops only what it created (the `idem` user
 * and the `test` databases are shared with other runs and never touched).
 */
import { randomUUID } from 'node:crypto';
import mysql from 'mysql2/promise';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MYSQL_URL, POSTGRES_URL, serviceAvailable } from '../helpers/services.js';
import { mysqlSocketPath, provisionMysql, provisionPostgres } from './provision.js';

const mysqlUp = await serviceAvailable('MySQL', MYSQL_URL);
const postgresUp = await serviceAvailable('PostgreSQL', POSTGRES_URL);
const suffix = () => randomUUID().replaceAll('-', '').slice(0, 10);

describe.skipIf(!mysqlUp)('test setup: MySQL', () => {
  let root: mysql.Connection;
  const users: string[] = [];
  const databases: string[] = [];
  const fresh = () => {
    const id = suffix();
    users.push(`idem_t_${id}`);
    databases.push(`test_t_${id}`);
    return { user: `idem_t_${id}`, database: `test_t_${id}` };
  };
  const urlOf = (user: string, password: string, database: string) => {
    const url = new URL(MYSQL_URL);
    url.username = user;
    url.password = password;
    url.pathname = `/${database}`;
    return url.toString();
  };
  beforeAll(async () => {
    root = await mysql.createConnection({ socketPath: mysqlSocketPath(), user: 'root' });
  });
  afterAll(async () => {
    for (const user of users) for (const host of ['127.0.0.1', 'localhost']) await root.query('DROP USER IF EXISTS ?@?', [user, host]);
    for (const database of databases) await root.query('DROP DATABASE IF EXISTS ??', [database]);
    await root?.end();
  });

  it('creates a missing user and database as root over the socket; the user can then make tables', async () => {
    const { user, database } = fresh();
    const url = urlOf(user, 'secret', database);
    await expect(mysql.createConnection({ uri: url })).rejects.toThrow(/Access denied/);
    expect(await provisionMysql(url)).toBe('created');
    const connection = await mysql.createConnection({ uri: url });
    await connection.query('CREATE TABLE t (id INT PRIMARY KEY)');
    await connection.query('INSERT INTO t VALUES (1)');
    expect((await connection.query('SELECT id FROM t'))[0]).toEqual([{ id: 1 }]);
    await connection.end();
    // Run again (a second test run, or two at once): nothing to do.
    expect(await provisionMysql(url)).toBe('present');
    expect(await Promise.all([provisionMysql(url), provisionMysql(url)])).toEqual(['present', 'present']);
  });

  it('creates a missing database for a user that exists', async () => {
    const { user, database } = fresh();
    await provisionMysql(urlOf(user, 'pw', database));
    const other = `${database}_b`;
    databases.push(other);
    expect(await provisionMysql(urlOf(user, 'pw', other))).toBe('created');
    const connection = await mysql.createConnection({ uri: urlOf(user, 'pw', other) });
    await connection.end();
  });

  it('leaves a user that exists with another password as it is, and says what to run', async () => {
    const { user, database } = fresh();
    await provisionMysql(urlOf(user, 'right', database));
    const failure = provisionMysql(urlOf(user, 'wrong', database));
    await expect(failure).rejects.toThrow(/does the user exist with another password/);
    await expect(failure).rejects.toThrow(`mariadb -uroot -e "CREATE DATABASE IF NOT EXISTS \`${database}\`;`);
    // Still the old password.
    const connection = await mysql.createConnection({ uri: urlOf(user, 'right', database) });
    await connection.end();
  });

  it('when root cannot log in either, the error names the socket and the command to run', async () => {
    const { user, database } = fresh();
    await expect(provisionMysql(urlOf(user, 'pw', database), '/nonexistent/mysqld.sock')).rejects.toThrow(
      /logging in as root over \/nonexistent\/mysqld\.sock failed too[\s\S]*Run \(as a MySQL\/MariaDB admin\):\n {2}mariadb -uroot -e "CREATE DATABASE IF NOT EXISTS/,
    );
    const [rows] = await root.query('SELECT 1 FROM mysql.user WHERE user = ?', [user]);
    expect(rows).toEqual([]);
  });

  it('the test user of this run can use its database (the setup ran before this file)', async () => {
    const connection = await mysql.createConnection({ uri: MYSQL_URL });
    await connection.query('SELECT 1');
    await connection.end();
  });
});

describe.skipIf(!postgresUp)('test setup: PostgreSQL', () => {
  const databases: string[] = [];
  const admin = () => {
    const url = new URL(POSTGRES_URL);
    url.pathname = '/postgres';
    return new pg.Client({ connectionString: url.toString() });
  };
  afterAll(async () => {
    const client = admin();
    await client.connect();
    for (const database of databases) await client.query(`DROP DATABASE IF EXISTS ${client.escapeIdentifier(database)}`);
    await client.end();
  });

  it('creates a missing database, once, also when two runs race for it', async () => {
    const database = `test_t_${suffix()}`;
    databases.push(database);
    const url = new URL(POSTGRES_URL);
    url.pathname = `/${database}`;
    const results = await Promise.all([provisionPostgres(url.toString()), provisionPostgres(url.toString())]);
    expect(results).toContain('created');
    const client = new pg.Client({ connectionString: url.toString() });
    await client.connect();
    expect((await client.query('SELECT current_database() AS d')).rows).toEqual([{ d: database }]);
    await client.end();
    expect(await provisionPostgres(url.toString())).toBe('present');
  });
});
