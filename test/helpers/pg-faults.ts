/** Fault injection on the real PostgreSQL server. */
import pg from 'pg';
import { POSTGRES_URL } from './services.js';

/**
 * A pool whose clients run `atCommit(commit, pid)` in place of COMMIT (`pid`: the client's
 * backend, for `pg_terminate_backend`), so a test can kill the connection at COMMIT or
 * lose COMMIT's answer after it landed.
 */
export function poolWithCommit(atCommit: (commit: () => Promise<unknown>, pid: number) => Promise<unknown>): pg.Pool {
  const faulty = new pg.Pool({ connectionString: POSTGRES_URL, max: 3 });
  faulty.on('error', () => undefined);
  faulty.on('connect', (client) => {
    const query = client.query.bind(client) as (...args: unknown[]) => Promise<unknown>;
    const pid = (client as unknown as { processID: number }).processID;
    (client as unknown as { query: unknown }).query = (...args: unknown[]) =>
      args[0] === 'COMMIT' ? atCommit(() => query(...args), pid) : query(...args);
  });
  return faulty;
}
