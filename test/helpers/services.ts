import net from 'node:net';

export const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
export const POSTGRES_URL = process.env.POSTGRES_URL ?? 'postgresql://postgres@127.0.0.1:5432/test';
/** MySQL or MariaDB; test/setup/provision.ts creates the user and the database if they are missing. */
export const MYSQL_URL = process.env.MYSQL_URL ?? 'mysql://idem:idem@127.0.0.1:3306/test';
export const AMQP_URL = process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
/** Set by the global setup (test/setup/provision.ts): JSON, service name -> what it could not provision. */
export const SETUP_PROBLEMS_ENV = 'IDEMPOTENCY_KIT_TEST_SETUP_PROBLEMS';

export function reachable(url: string, timeoutMs = 1000): Promise<boolean> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = net.connect({ host: hostname, port: Number(port) });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

/**
 * Whether a store/broker test can run. With CI set, an unreachable server is an error
 * (a skipped store test must never look like a pass); locally it prints a loud line
 * and the caller skips with `describe.skipIf(!available)`.
 */
export async function serviceAvailable(name: string, url: string): Promise<boolean> {
  // A server that is up but lacks the test user or database (and the setup could not make them).
  const problem = (JSON.parse(process.env[SETUP_PROBLEMS_ENV] || '{}') as Record<string, string>)[name];
  const up = await reachable(url);
  if (up && !problem) return true;
  const message = up ? problem! : `${name} is not reachable at ${url}`;
  if (process.env.CI) throw new Error(`${message} (CI is set: store tests must run)`);
  console.warn(`\n!!!!!!!! SKIPPING ${name} TESTS: ${message} !!!!!!!!\n`);
  return false;
}
