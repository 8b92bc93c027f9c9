/**
 * Internal: what the DynamoDB driver declares (see drivers/definition.ts): a
 * `dynamodb://table?region=…&endpoint=…` URL, or a `DynamoDBClient` passed as itself.
 * Loads no AWS SDK. Not a package entry.
 * @module
 */
import type { DriverDefinition } from './definition.js';
import { parseUrl } from './utils.js';

/** DynamoDB's own rule for table names. */
export const DYNAMODB_TABLE = /^[A-Za-z0-9_.-]{3,255}$/;

/**
 * Whether `value` is an AWS SDK v3 `DynamoDBClient` (recognised by shape: importing the
 * SDK here would load it for every `createStore()`). A `DynamoDBDocumentClient` is not one:
 * it translates commands, and the store sends the low-level ones.
 */
export function isDynamoDBClient(value: unknown): boolean {
  const candidate = value as { send?: unknown; config?: { serviceId?: unknown }; middlewareStack?: unknown; constructor?: { name?: unknown } } | null;
  return (
    typeof candidate === 'object' &&
    candidate !== null &&
    typeof candidate.send === 'function' &&
    typeof candidate.middlewareStack === 'object' &&
    candidate.config?.serviceId === 'DynamoDB' &&
    candidate.constructor?.name !== 'DynamoDBDocumentClient'
  );
}

/** The table, region and endpoint of a `dynamodb://` URL, or the problem with it. */
export function parseDynamoDBUrl(url: string):
  | { table: string; region: string | undefined; endpoint: string | undefined; accessKeyId: string | undefined; secretAccessKey: string | undefined }
  | { problem: { reason: string; expected: string } } {
  const parsed = parseUrl(url);
  if (!parsed) return { problem: { reason: 'it is not a valid DynamoDB URL', expected: 'a valid DynamoDB URL (dynamodb://table?region=eu-west-1), got' } };
  const table = decodeURIComponent(parsed.host);
  if (!DYNAMODB_TABLE.test(table)) {
    return {
      problem: {
        reason: `the DynamoDB URL must name a table (3 to 255 letters, digits, _ . -) after dynamodb://, got ${JSON.stringify(table)}`,
        expected: `a table name (3 to 255 letters, digits, _ . -) after dynamodb:// in`,
      },
    };
  }
  if (parsed.pathname !== '' && parsed.pathname !== '/') {
    return { problem: { reason: 'the DynamoDB URL takes no path (dynamodb://table?region=…)', expected: 'no path after the table name in' } };
  }
  for (const name of parsed.searchParams.keys()) {
    if (name !== 'region' && name !== 'endpoint') {
      return { problem: { reason: `unknown DynamoDB URL parameter ${JSON.stringify(name)} (known: region, endpoint)`, expected: `only region and endpoint parameters in` } };
    }
  }
  const endpoint = parsed.searchParams.get('endpoint') ?? undefined;
  if (endpoint !== undefined && !/^https?:\/\/[^/]+/.test(endpoint)) {
    return { problem: { reason: `the DynamoDB endpoint must be an http(s) URL, got ${JSON.stringify(endpoint)}`, expected: 'an http(s) endpoint in' } };
  }
  return {
    table,
    region: parsed.searchParams.get('region') ?? undefined,
    endpoint,
    accessKeyId: parsed.username ? decodeURIComponent(parsed.username) : undefined,
    secretAccessKey: parsed.password ? decodeURIComponent(parsed.password) : undefined,
  };
}

export const dynamodbDriver: DriverDefinition = {
  name: 'dynamodb',
  factory: 'dynamodbStore',
  schemes: ['dynamodb'],
  forms: ['dynamodb://table?region=eu-west-1[&endpoint=http://127.0.0.1:8000]'],
  packages: ['@aws-sdk/client-dynamodb'],
  binding: { kind: 'a DynamoDBClient (@aws-sdk/client-dynamodb)', option: 'client', is: isDynamoDBClient },
  namespace: 'prefix',
  checkUrl(url) {
    const result = parseDynamoDBUrl(url);
    return 'problem' in result ? result.problem : undefined;
  },
  options: (common) => ({
    ...(common.timeoutMs !== undefined ? { timeoutMs: common.timeoutMs } : {}),
    ...(common.namespace !== undefined ? { namespace: common.namespace } : {}),
  }),
};
