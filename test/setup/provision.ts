/**
 * Vitest global setup: makes the MySQL user and database and the PostgreSQL database that
 * the tests use (MYSQL_URL, POSTGRES_URL; see ../helpers/services.ts) when the server is up
 * but they are missing, so that `npm test` passes on a fresh machine with nothing run
 * before it. MySQL: when logging in as the test user is refused (no such user, no such
 * database, no grant), it logs in as root over the local socket, as `mariadb -uroot` does,
 * and creates them (IF NOT EXISTS: an existing user is never changed or dropped).
 * PostgreSQL: a missing database is created as the URL's user, connected to `postgres`.
 *
 * What cannot be provisioned is printed with the command to run, and handed to the test
 * workers (`SETUP_PROBLEMS_ENV`), where `serviceAvailable` reports it instead of letting
 * every test fail with "Access denied".
 */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import mysql from 'mysql2/promise';
import pg from 'pg';
import { MYSQL_URL, POSTGRES_URL, SETUP_PROBLEMS_ENV, reachable } from '../helpers/services.js';

/** MySQL errors that mean "the user or its database is missing", which root can fix. */
const MYSQL_MISSING = new Set([
  1044, // ER_DBACCESS_DENIED_ERROR: the user has no grant on the database
  1045, // ER_ACCESS_DENIED_ERROR: no such user (or another password)
  1049, // ER_BAD_DB_ERROR: no such database
  1698, // ER_ACCESS_DENIED_NO_PASSWORD_ERROR: what MariaDB answers for some unknown users
]);
const LOCAL_HOSTS = new Set(['127.0.0.1', 'localhost', '[::1]']);

/** The server's socket: MYSQL_SOCKET, else what `mysql_config --socket` says, else Debian's path. */
export function mysqlSocketPath(): string {
  if (process.env.MYSQL_SOCKET) return process.env.MYSQL_SOCKET;
  try {
    const path = execFileSync('mysql_config', ['--socket'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    if (path) return path;
  } catch {
    // no mysql_config (it comes with the client development package)
  }
  return ['/run/mysqld/mysqld.sock', '/var/run/mysqld/mysqld.sock', '/tmp/mysql.sock'].find((p) => existsSync(p)) ?? '/run/mysqld/mysqld.sock';
}

const errorText = (error: unknown) => (error instanceof Error ? error.message : String(error));

async function canConnect(url: string): Promise<unknown> {
  try {
    const connection = await mysql.createConnection({ uri: url, connectTimeout: 5000 });
    await connection.end();
    return undefined;
  } catch (error) {
    return error;
  }
}

/**
 * Make sure `url`'s user can use `url`'s database. Resolves with what was done
 * ('present' or 'created'); rejects with an error that says what to run.
 */
export async function provisionMysql(url: string, socketPath = mysqlSocketPath()): Promise<'present' | 'created'> {
  const first = await canConnect(url);
  if (first === undefined) return 'present';
  const errno = (first as { errno?: number }).errno;
  const parsed = new URL(url);
  const user = decodeURIComponent(parsed.username);
  const password = decodeURIComponent(parsed.password);
  const database = decodeURIComponent(parsed.pathname.slice(1));
  const hosts = ['127.0.0.1', 'localhost'];
  const fix =
    `mariadb -uroot -e "CREATE DATABASE IF NOT EXISTS \`${database}\`; ` +
    hosts.map((h) => `CREATE USER IF NOT EXISTS '${user}'@'${h}' IDENTIFIED BY '${password}'; `).join('') +
    hosts.map((h) => `GRANT ALL ON \`${database}\`.* TO '${user}'@'${h}';`).join(' ') +
    '"';
  const giveUp = (why: string) =>
    new Error(`MySQL: cannot use ${parsed.host}/${database} as '${user}' (${errorText(first)}); ${why}. Run (as a MySQL/MariaDB admin):\n  ${fix}\nor set MYSQL_URL to a user and database that exist.`);
  if (errno === undefined || !MYSQL_MISSING.has(errno)) throw giveUp('this is not a missing user or database');
  if (!LOCAL_HOSTS.has(parsed.hostname)) throw giveUp('the server is not local, so root over its socket cannot fix it');

  let root: mysql.Connection;
  try {
    root = await mysql.createConnection({ socketPath, user: 'root', connectTimeout: 5000 });
  } catch (error) {
    throw giveUp(`logging in as root over ${socketPath} failed too (${errorText(error)})`);
  }
  try {
    await root.query('CREATE DATABASE IF NOT EXISTS ??', [database]);
    for (const host of hosts) {
      await root.query('CREATE USER IF NOT EXISTS ?@? IDENTIFIED BY ?', [user, host, password]);
      await root.query('GRANT ALL ON ??.* TO ?@?', [database, user, host]);
    }
  } catch (error) {
    throw giveUp(`root could not create them (${errorText(error)})`);
  } finally {
    await root.end();
  }
  const again = await canConnect(url);
  // An existing user with another password stays as it is (other sessions may use it).
  if (again !== undefined) throw giveUp(`still refused after creating them (${errorText(again)}): does the user exist with another password?`);
  return 'created';
}

/** Make sure `url`'s database exists, creating it as `url`'s user (connected to `postgres`). */
export async function provisionPostgres(url: string): Promise<'present' | 'created'> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 });
  try {
    await client.connect();
    return 'present';
  } catch (error) {
    if ((error as { code?: string }).code !== '3D000') {
      throw new Error(`PostgreSQL: cannot connect to ${url} (${errorText(error)})`);
    }
  } finally {
    await client.end().catch(() => undefined);
  }
  const parsed = new URL(url);
  const database = decodeURIComponent(parsed.pathname.slice(1));
  parsed.pathname = '/postgres';
  const admin = new pg.Client({ connectionString: parsed.toString(), connectionTimeoutMillis: 5000 });
  try {
    await admin.connect();
    await admin.query(`CREATE DATABASE ${admin.escapeIdentifier(database)}`);
  } catch (error) {
    const code = (error as { code?: string }).code;
    // Another run created it at the same moment.
    if (code !== '42P04' && code !== '23505') {
      throw new Error(
        `PostgreSQL: database "${database}" does not exist and could not be created (${errorText(error)}). Run:\n  psql -h ${parsed.hostname} -U ${decodeURIComponent(parsed.username) || 'postgres'} -d postgres -c 'CREATE DATABASE "${database}"'\nor set POSTGRES_URL to a database that exists.`,
      );
    }
  } finally {
    await admin.end().catch(() => undefined);
  }
  return 'created';
}

/** Vitest global setup: provision what is reachable; an unreachable server is the tests' own report. */
export default async function setup(): Promise<void> {
  const problems: Record<string, string> = {};
  const services = [
    { name: 'MySQL', url: MYSQL_URL, provision: provisionMysql },
    { name: 'PostgreSQL', url: POSTGRES_URL, provision: provisionPostgres },
  ];
  for (const { name, url, provision } of services) {
    if (!(await reachable(url))) continue;
    try {
      if ((await provision(url)) === 'created') console.log(`test setup: ${name}: created what ${url} needs`);
    } catch (error) {
      problems[name] = errorText(error);
      console.warn(`\n!!!!!!!! test setup: ${problems[name]} !!!!!!!!\n`);
    }
  }
  // Test workers start after the global setup and inherit the environment.
  process.env[SETUP_PROBLEMS_ENV] = JSON.stringify(problems);
}
