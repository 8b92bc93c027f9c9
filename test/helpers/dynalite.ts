/**
 * A real DynamoDB API server for tests: `dynalite` (DynamoDB on LevelDB, in memory) on a
 * free local port. Started in this process (it is a Node package, not a binary), so it
 * dies with the test process; other processes of a test (race workers, crash servers)
 * reach it by its endpoint. One per test process, started on first use.
 */
import { randomBytes } from 'node:crypto';
import type { Server } from 'node:http';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { createDynamoDBTable } from '../../drivers/dynamodb.js';

export interface Dynalite {
  /** `http://127.0.0.1:<port>` */
  endpoint: string;
  /** A client for it (dummy credentials, one attempt: the stores retry themselves). */
  client(): DynamoDBClient;
  /** A fresh table with the store's key schema; its name is unique. */
  table(prefix?: string): Promise<string>;
  /** `dynamodb://local:local@<table>?region=us-east-1&endpoint=…` */
  url(table: string): string;
}

let started: Promise<Dynalite> | undefined;

/** The test process's dynalite (started on first call). */
export function dynalite(): Promise<Dynalite> {
  return (started ??= start());
}

async function start(): Promise<Dynalite> {
  // @ts-expect-error dynalite ships no types
  const { default: create } = (await import('dynalite')) as unknown as { default: (options: Record<string, unknown>) => Server };
  // Tables are ACTIVE at once (dynalite otherwise plays CREATING for a while).
  const server = create({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  server.unref();
  const { port } = server.address() as { port: number };
  const endpoint = `http://127.0.0.1:${port}`;
  const client = () =>
    new DynamoDBClient({ region: 'us-east-1', endpoint, credentials: { accessKeyId: 'local', secretAccessKey: 'local' }, maxAttempts: 1 });
  const admin = client();
  return {
    endpoint,
    client,
    async table(prefix = 'idk') {
      const name = `${prefix}-${randomBytes(6).toString('hex')}`;
      await createDynamoDBTable(admin, name);
      return name;
    },
    url: (table) => `dynamodb://local:local@${table}?region=us-east-1&endpoint=${encodeURIComponent(endpoint)}`,
  };
}
