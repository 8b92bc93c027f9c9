/**
 * One Lambda invocation in a process of its own, for the SIGKILL scenario of
 * bench/lambda-powertools.ts: argv lib (ours | powertools), endpoint, table, key,
 * remaining ms. It claims the key, prints "started" and never returns; the parent kills it.
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';

const [lib, endpoint, table, key, remaining] = process.argv.slice(2);
const client = new DynamoDBClient({ region: 'us-east-1', endpoint, credentials: { accessKeyId: 'local', secretAccessKey: 'local' }, maxAttempts: 1 });
const deadline = Date.now() + Number(remaining);
const context = { getRemainingTimeInMillis: () => deadline - Date.now(), functionName: 'bench', awsRequestId: 'killed' };
const hang = async () => {
  process.stdout.write('started\n');
  await new Promise(() => setInterval(() => undefined, 1000));
};

if (lib === 'ours') {
  const { dynamodbStore } = await import('../drivers/dynamodb.js');
  const { idempotent } = await import('../adapters/lambda/index.js');
  const store = dynamodbStore({ client, table: table!, onWarning: () => undefined });
  await idempotent(hang, { store, key: (event: { id: string }) => event.id })({ id: key! }, context);
} else {
  const { makeIdempotent, IdempotencyConfig } = await import('@aws-lambda-powertools/idempotency');
  const { DynamoDBPersistenceLayer } = await import('@aws-lambda-powertools/idempotency/dynamodb');
  const persistenceStore = new DynamoDBPersistenceLayer({ tableName: table!, awsSdkV3Client: client });
  const handler = makeIdempotent(hang as (event: unknown, context: unknown) => Promise<void>, { persistenceStore, config: new IdempotencyConfig({ eventKeyJmesPath: 'id' }) });
  await handler({ id: key! }, context as never);
}
