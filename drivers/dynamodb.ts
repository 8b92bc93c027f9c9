/**
 * DynamoDB store on `@aws-sdk/client-dynamodb`: one item per record. A claim is one
 * conditional PutItem (the key is absent, or its lease or replay window ended) that hands
 * back the live item when it loses; completing, releasing and extending are conditional
 * writes on the claim's token. Reads are strongly consistent. Expiry is checked on every
 * read and kept in a TTL attribute (`ttl`, epoch seconds) so that DynamoDB deletes old
 * items itself. Throttled calls are retried with backoff within `timeoutMs`, then fail.
 * Safe across processes, hosts and Lambda invocations of one region (docs/drivers/dynamodb.md).
 * @module
 * @example
 * import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
 * import { createStore } from 'idempotency-kit';
 *
 * const store = createStore('dynamodb://idempotency?region=eu-west-1');
 * // or with a client you configured: createStore(new DynamoDBClient({ region: 'eu-west-1' }))
 * // or: dynamodbStore({ client, table: 'idempotency' })
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { gunzipSync, gzipSync } from 'node:zlib';
import {
  CreateTableCommand,
  DeleteItemCommand,
  DescribeTableCommand,
  DescribeTimeToLiveCommand,
  DynamoDBClient,
  GetItemCommand,
  PutItemCommand,
  ScanCommand,
  UpdateItemCommand,
  UpdateTimeToLiveCommand,
  type AttributeValue,
} from '@aws-sdk/client-dynamodb';
import type {
  ClaimRequest,
  ClaimResult,
  IdempotencyRecord,
  IdempotencyStore,
  MaintenanceOptions,
  ScanOptions,
  ScanPage,
  StoreStats,
  StoredResponse,
} from '../src/store.js';
import { withTimeout } from '../src/timers.js';
import { assertInteger } from '../src/validate.js';
import { assertDriverUrl } from './definition.js';
import { DYNAMODB_TABLE, dynamodbDriver, isDynamoDBClient, parseDynamoDBUrl } from './dynamodb-definition.js';
import { checkScanOptions, claimUntilSettled, isLive, redactUrl, sqlKey } from './utils.js';

export interface DynamoDBStoreOptions {
  /**
   * Where the table is: `dynamodb://table?region=eu-west-1`, with `&endpoint=http://…` for
   * DynamoDB Local or another server speaking its API, and optionally
   * `dynamodb://accessKeyId:secretAccessKey@table?…` (otherwise the SDK's default
   * credentials: the Lambda role, the environment, the profile). Give `url` or `client`.
   */
  url?: string;
  /** A `DynamoDBClient` you configured; the store leaves it open on `close()`. Give `url` or `client`. */
  client?: DynamoDBClient;
  /**
   * The table, with `client` (a URL names its own). Its partition key is the string
   * attribute `id`; see {@link createDynamoDBTable}.
   * @default 'idempotency-kit'
   */
  table?: string;
  /**
   * A prefix of every item's `id` (`<namespace>:<storage key>`), so that several
   * applications can share one table. Maintenance (`scan`, `stats`, `sweep`) then only
   * sees its own items.
   * @default none: the whole table is this store's
   */
  namespace?: string;
  /**
   * Longest time for one store call, in ms, throttling retries included; past it the call
   * rejects (the request then fails closed: 503, handler not run).
   * @default 2000
   */
  timeoutMs?: number;
  /**
   * Create the table (on-demand capacity, TTL on `ttl`) when the first call finds it
   * missing. Meant for development and tests; in production create it with your
   * infrastructure (docs/drivers/dynamodb.md#the-table).
   * @default false
   */
  createTable?: boolean;
  /**
   * Where the store's warnings go: a global table (replicated to other regions, where
   * conditional writes are last-writer-wins), TTL not enabled on the table.
   * @default console.warn
   */
  onWarning?: (message: string) => void;
}

/**
 * A response that does not fit one DynamoDB item (400 KB), even compressed. `complete`
 * does not throw it (a record that never completes would let a retry run the handler
 * again): the record then completes without its body, and a retry gets 409
 * `response-not-replayable`. `replaceResponse` (re-sealing) throws it.
 */
export class DynamoDBItemTooLargeError extends Error {
  override name = 'DynamoDBItemTooLargeError';
  readonly code = 'IDEMPOTENCY_DYNAMODB_ITEM_TOO_LARGE';
  constructor(
    /** The item's size in bytes as DynamoDB counts it. */
    readonly bytes: number,
  ) {
    super(`idempotency-kit: the response makes a DynamoDB item of ${bytes} bytes, over DynamoDB's 400 KB item limit even compressed`);
  }
}

/** The tables each client's stores have checked (DescribeTable) already: once per process is enough. */
const inspectedTables = new WeakMap<object, Set<string>>();

/** DynamoDB's item limit, 400 KB, less a margin for our estimate of numbers. */
const ITEM_LIMIT_BYTES = 400 * 1024 - 256;

/** Errors DynamoDB (or the network) answers when a call may succeed if tried again. */
const RETRYABLE = new Set([
  'ProvisionedThroughputExceededException',
  'ThrottlingException',
  'RequestLimitExceeded',
  'InternalServerError',
  'ServiceUnavailable',
  'TransactionConflictException',
]);

function isRetryable(error: unknown): boolean {
  const e = error as { name?: unknown; code?: unknown; $retryable?: unknown } | null;
  if (!e) return false;
  if (typeof e.name === 'string' && RETRYABLE.has(e.name)) return true;
  return typeof e.code === 'string' && ['ECONNRESET', 'EPIPE', 'ETIMEDOUT'].includes(e.code);
}

const errorName = (error: unknown): string => String((error as { name?: unknown } | null)?.name ?? '');

// Item attributes. `id` is the partition key; `ttl` is the TTL attribute (epoch seconds).
// s: 'p' processing | 'c' completed; f fingerprint; t token; c createdAt (ms); u lease end or
// expiry (ms); st status; h headers (JSON); b body bytes; z: the body is gzipped; nb: no body.
const NAMES = { '#id': 'id', '#s': 's', '#t': 't', '#u': 'u', '#ttl': 'ttl' };

const S = (value: string): AttributeValue => ({ S: value });
const N = (value: number): AttributeValue => ({ N: String(value) });
const seconds = (ms: number) => Math.ceil(ms / 1000);

/** DynamoDB's size of an item: each attribute's name plus its value (numbers counted at their most). */
function itemBytes(item: Record<string, AttributeValue>): number {
  let size = 0;
  for (const [name, value] of Object.entries(item)) {
    size += Buffer.byteLength(name);
    if (value.S !== undefined) size += Buffer.byteLength(value.S);
    else if (value.N !== undefined) size += 21;
    else if (value.B !== undefined) size += value.B.byteLength;
    else size += 1;
  }
  return size;
}

/** The response's attributes (status, headers, body): compressed when raw it would not fit the item. */
function responseAttributes(response: StoredResponse, rest: number): Record<string, AttributeValue> {
  const attributes: Record<string, AttributeValue> = { st: N(response.status), h: S(JSON.stringify(response.headers)) };
  if (response.body === null) return { ...attributes, nb: { BOOL: true } };
  const raw = { ...attributes, b: { B: response.body } };
  if (rest + itemBytes(raw) <= ITEM_LIMIT_BYTES) return raw;
  const zipped = { ...attributes, b: { B: gzipSync(response.body) }, z: { BOOL: true } };
  if (rest + itemBytes(zipped) <= ITEM_LIMIT_BYTES) return zipped;
  throw new DynamoDBItemTooLargeError(rest + itemBytes(zipped));
}

/**
 * The UpdateItem that writes a response's attributes (and removes the body attributes it
 * does not have) besides `sets`, with the condition and the names and values they use.
 */
function responseUpdate(
  table: string,
  id: AttributeValue,
  attributes: Record<string, AttributeValue>,
  base: { sets: string[]; condition: string; names: Record<string, string>; values: Record<string, AttributeValue> },
  returnOld: boolean,
): UpdateItemCommand {
  const sets = [...base.sets];
  const names = { ...base.names };
  const values = { ...base.values };
  for (const [name, value] of Object.entries(attributes)) {
    names[`#${name}`] = name;
    values[`:${name}`] = value;
    sets.push(`#${name} = :${name}`);
  }
  const removes = ['b', 'z', 'nb'].filter((name) => !(name in attributes));
  for (const name of removes) names[`#${name}`] = name;
  return new UpdateItemCommand({
    TableName: table,
    Key: { id },
    UpdateExpression: `SET ${sets.join(', ')}${removes.length > 0 ? ` REMOVE ${removes.map((name) => `#${name}`).join(', ')}` : ''}`,
    ConditionExpression: base.condition,
    ExpressionAttributeNames: names,
    ExpressionAttributeValues: values,
    ...(returnOld ? { ReturnValuesOnConditionCheckFailure: 'ALL_OLD' as const } : {}),
  });
}

/** The bytes of an item's attributes other than the response's (id, state, fingerprint, token, times), for its size. */
const restBytes = (id: AttributeValue, token: string) => itemBytes({ id, s: S('c'), f: S('x'.repeat(128)), t: S(token), c: N(0), u: N(0), ttl: N(0) });

/** The record an item holds; undefined for an item that is not one of ours. */
function recordOf(item: Record<string, AttributeValue> | undefined): IdempotencyRecord | undefined {
  if (!item || item.s?.S === undefined) return undefined;
  const base = { fingerprint: item.f?.S ?? '', token: item.t?.S ?? '', createdAt: Number(item.c?.N ?? 0) };
  const until = Number(item.u?.N ?? 0);
  if (item.s.S === 'p') return { state: 'processing', ...base, leaseUntil: until };
  let body: Uint8Array | null = null;
  if (!item.nb?.BOOL) {
    const bytes = item.b?.B ?? new Uint8Array();
    body = item.z?.BOOL ? new Uint8Array(gunzipSync(bytes)) : bytes;
  }
  return {
    state: 'completed',
    ...base,
    expiresAt: until,
    response: { status: Number(item.st?.N ?? 0), headers: JSON.parse(item.h?.S ?? '{}') as StoredResponse['headers'], body },
  };
}

/**
 * Create the store's table: partition key `id` (string), on-demand capacity, TTL on the
 * `ttl` attribute. Resolves once the table is ACTIVE. An existing table is left as it is.
 * For production, the same table in CloudFormation or the CDK: docs/drivers/dynamodb.md.
 */
export async function createDynamoDBTable(client: DynamoDBClient, table: string, { timeoutMs = 30_000 }: { timeoutMs?: number } = {}): Promise<void> {
  if (!isDynamoDBClient(client)) throw new TypeError('Expected `client` to be a DynamoDBClient (@aws-sdk/client-dynamodb)');
  if (typeof table !== 'string' || !DYNAMODB_TABLE.test(table)) {
    throw new TypeError(`Expected \`table\` to be a DynamoDB table name (3 to 255 letters, digits, _ . -), got ${JSON.stringify(table)}`);
  }
  try {
    await client.send(
      new CreateTableCommand({
        TableName: table,
        AttributeDefinitions: [{ AttributeName: 'id', AttributeType: 'S' }],
        KeySchema: [{ AttributeName: 'id', KeyType: 'HASH' }],
        BillingMode: 'PAY_PER_REQUEST',
      }),
    );
  } catch (error) {
    if (errorName(error) !== 'ResourceInUseException') throw error;
  }
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { Table } = await client.send(new DescribeTableCommand({ TableName: table }));
    if (Table?.TableStatus === 'ACTIVE') break;
    if (Date.now() > deadline) throw new Error(`idempotency-kit: the DynamoDB table ${table} was not ACTIVE after ${timeoutMs} ms`);
    await sleep(50);
  }
  try {
    await client.send(new UpdateTimeToLiveCommand({ TableName: table, TimeToLiveSpecification: { AttributeName: 'ttl', Enabled: true } }));
  } catch (error) {
    // Already enabled (a second call), or a server without TTL (some local emulators).
    if (!/already enabled|UnknownOperation|not supported/i.test(`${errorName(error)} ${(error as Error).message}`)) throw error;
  }
}

/** Create a DynamoDB store. */
export function dynamodbStore(options: DynamoDBStoreOptions): IdempotencyStore {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError("Expected options with a `url` or a `client`, e.g. dynamodbStore({ url: 'dynamodb://idempotency?region=eu-west-1' })");
  }
  const { url, client: given, namespace, createTable = false, onWarning = (message: string) => console.warn(message) } = options;
  const timeoutMs = options.timeoutMs ?? 2000;
  assertInteger('timeoutMs', timeoutMs, 1);
  if ((url === undefined) === (given === undefined)) throw new TypeError('Expected exactly one of `url` or `client`');
  if (namespace !== undefined && (typeof namespace !== 'string' || namespace === '')) {
    throw new TypeError(`Expected \`namespace\` to be a non-empty string, got ${JSON.stringify(namespace)}`);
  }
  if (typeof createTable !== 'boolean') throw new TypeError(`Expected \`createTable\` to be a boolean, got ${String(createTable)}`);
  if (typeof onWarning !== 'function') throw new TypeError(`Expected \`onWarning\` to be a function, got ${String(onWarning)}`);

  let client: DynamoDBClient;
  let table: string;
  if (url !== undefined) {
    assertDriverUrl(dynamodbDriver, url, 'dynamodb://idempotency?region=eu-west-1');
    if (options.table !== undefined) throw new TypeError(`Expected no \`table\` with a \`url\`: the URL names the table, got ${redactUrl(url)}`);
    const parsed = parseDynamoDBUrl(url) as Exclude<ReturnType<typeof parseDynamoDBUrl>, { problem: unknown }>;
    table = parsed.table;
    client = new DynamoDBClient({
      ...(parsed.region !== undefined ? { region: parsed.region } : parsed.endpoint !== undefined && !process.env.AWS_REGION ? { region: 'us-east-1' } : {}),
      ...(parsed.endpoint !== undefined ? { endpoint: parsed.endpoint } : {}),
      ...(parsed.accessKeyId !== undefined ? { credentials: { accessKeyId: parsed.accessKeyId, secretAccessKey: parsed.secretAccessKey ?? '' } } : {}),
      // Retries are the store's, within timeoutMs (throttling included).
      maxAttempts: 1,
      requestHandler: { connectionTimeout: timeoutMs, requestTimeout: timeoutMs },
    });
  } else {
    if (!isDynamoDBClient(given)) {
      throw new TypeError(`Expected \`client\` to be a DynamoDBClient from @aws-sdk/client-dynamodb (not a DynamoDBDocumentClient), got ${typeof given === 'object' && given !== null ? 'another object' : String(given)}`);
    }
    client = given!;
    table = options.table ?? 'idempotency-kit';
    if (typeof table !== 'string' || !DYNAMODB_TABLE.test(table)) {
      throw new TypeError(`Expected \`table\` to be a DynamoDB table name (3 to 255 letters, digits, _ . -), got ${JSON.stringify(table)}`);
    }
  }
  const owned = url !== undefined;
  const prefix = namespace === undefined ? '' : `${namespace}:`;
  const itemId = (key: string) => S(prefix + sqlKey(key));
  let closed = false;

  /**
   * One DynamoDB call, retried with backoff while DynamoDB throttles it (or answers a
   * retryable error), all within `timeoutMs`; then it rejects with the last error.
   */
  const call = async <T>(what: string, send: (signal: AbortSignal) => Promise<T>): Promise<T> => {
    if (closed) throw new Error('idempotency-kit: the DynamoDB store is closed');
    const deadline = Date.now() + timeoutMs;
    const timedOut = `idempotency-kit: DynamoDB ${what} timed out after ${timeoutMs} ms`;
    // What DynamoDB last answered that asked for a retry: when the time runs out during a
    // later attempt, that is the cause to name, not only the clock.
    let refused: unknown;
    for (let attempt = 0; ; attempt++) {
      const left = deadline - Date.now();
      const controller = new AbortController();
      try {
        return await withTimeout(send(controller.signal), Math.max(1, left), timedOut);
      } catch (error) {
        controller.abort();
        if (isRetryable(error)) refused = error;
        const pause = Math.min(25 * 2 ** attempt, 500) * (0.5 + Math.random() / 2);
        if (!isRetryable(error) || Date.now() + pause >= deadline) {
          const cause = isRetryable(error) ? error : error instanceof Error && error.message === timedOut ? refused : undefined;
          if (cause !== undefined) {
            throw new Error(`idempotency-kit: DynamoDB ${what} failed for ${timeoutMs} ms (${errorName(cause)}); failing closed`, { cause });
          }
          if (errorName(error) === 'ResourceNotFoundException') {
            throw new Error(
              `idempotency-kit: the DynamoDB table ${JSON.stringify(table)} does not exist: create it (docs/drivers/dynamodb.md#the-table, createDynamoDBTable()) or pass \`createTable: true\` in development`,
              { cause: error },
            );
          }
          throw error;
        }
        await sleep(pause);
      }
    }
  };

  // The first call checks the table once, in the background (a claim never waits for it):
  // a replicated (global) table and a table without TTL get a warning. With `createTable`,
  // the first call waits for the table instead.
  let prepared: Promise<void> | undefined;
  const inspect = async () => {
    const { Table } = await client.send(new DescribeTableCommand({ TableName: table }));
    if ((Table?.Replicas?.length ?? 0) > 0) {
      const regions = Table!.Replicas!.map((replica) => replica.RegionName).join(', ');
      onWarning(
        `idempotency-kit: the DynamoDB table ${table} is a global table (replicas: ${regions}). Conditional writes are only atomic within one region: ` +
          'two regions can both claim one key and run the handler twice. Send each key to one home region (docs/drivers/dynamodb.md#global-tables).',
      );
    }
    const ttl = await client.send(new DescribeTimeToLiveCommand({ TableName: table })).catch(() => undefined);
    const status = ttl?.TimeToLiveDescription;
    if (status && !(status.AttributeName === 'ttl' && (status.TimeToLiveStatus === 'ENABLED' || status.TimeToLiveStatus === 'ENABLING'))) {
      onWarning(`idempotency-kit: TTL is not enabled on the attribute "ttl" of the DynamoDB table ${table}: expired records are never returned, but DynamoDB will not delete them (docs/drivers/dynamodb.md#the-table)`);
    }
  };
  const prepare = (): Promise<void> | undefined => {
    if (prepared === undefined) {
      // Once per client and table (every store of a process on one client shares it).
      let tables = inspectedTables.get(client);
      if (!tables) inspectedTables.set(client, (tables = new Set()));
      const first = !tables.has(table);
      tables.add(table);
      if (createTable) prepared = createDynamoDBTable(client, table, { timeoutMs: Math.max(timeoutMs, 30_000) }).then(() => (first ? inspect() : undefined));
      else {
        prepared = Promise.resolve();
        // After the first call, not beside it; best effort: missing permissions must not fail requests.
        if (first) setTimeout(() => void inspect().catch(() => undefined), 0).unref();
      }
    }
    return createTable ? prepared : undefined;
  };
  const send = async <T>(what: string, command: object): Promise<T> => {
    const pending = prepare();
    if (pending) await pending;
    return call(what, (abortSignal) => client.send(command as never, { abortSignal }) as Promise<T>);
  };

  /** A conditional write: whether it took effect, and the item as it was when its condition failed. */
  const conditional = async (what: string, command: object): Promise<{ ok: true } | { ok: false; item?: Record<string, AttributeValue> }> => {
    try {
      await send(what, command);
      return { ok: true };
    } catch (error) {
      if (errorName(error) !== 'ConditionalCheckFailedException') throw error;
      return { ok: false, item: (error as { Item?: Record<string, AttributeValue> }).Item };
    }
  };

  const getItem = async (key: string) =>
    (await send<{ Item?: Record<string, AttributeValue> }>('GetItem', new GetItemCommand({ TableName: table, Key: { id: itemId(key) }, ConsistentRead: true }))).Item;

  /** The condition of a write fenced by the token: the owner's processing record, lease not ended. */
  const OWNED = '#t = :token AND #s = :p AND #u > :now';

  return {
    name: 'dynamodb',
    async claim(key: string, request: ClaimRequest, leaseMs: number): Promise<ClaimResult> {
      return claimUntilSettled('DynamoDB', async () => {
        const now = Date.now();
        const leaseUntil = now + leaseMs;
        const result = await conditional(
          'PutItem',
          new PutItemCommand({
            TableName: table,
            Item: {
              id: itemId(key),
              s: S('p'),
              f: S(request.fingerprint),
              t: S(request.token),
              c: N(request.createdAt),
              u: N(leaseUntil),
              ttl: N(seconds(leaseUntil)),
            },
            ConditionExpression: 'attribute_not_exists(#id) OR #u <= :now',
            ExpressionAttributeNames: { '#id': NAMES['#id'], '#u': NAMES['#u'] },
            ExpressionAttributeValues: { ':now': N(now) },
            // The live item comes back with the refusal: a lost claim costs no read.
            ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
          }),
        );
        const record = { state: 'processing' as const, fingerprint: request.fingerprint, token: request.token, createdAt: request.createdAt, leaseUntil };
        if (result.ok) return { claimed: true, record };
        // A server that does not return the item with the refusal: read it (strongly consistent).
        const live = recordOf(result.item ?? (await getItem(key)));
        if (live === undefined || !isLive(live, Date.now())) return undefined; // released or ended meanwhile: try again
        // Our own write that landed although its answer was lost (a retried attempt).
        if (live.token === request.token && live.state === 'processing') return { claimed: true, record: live };
        return { claimed: false, record: live };
      });
    },
    async get(key: string) {
      const record = recordOf(await getItem(key));
      // DynamoDB deletes items after their TTL lazily (within days): the expiry is checked here.
      return record && isLive(record, Date.now()) ? record : undefined;
    },
    async complete(key: string, token: string, response: StoredResponse, ttlMs: number) {
      const now = Date.now();
      const expiresAt = now + ttlMs;
      const id = itemId(key);
      let attributes: Record<string, AttributeValue>;
      try {
        attributes = responseAttributes(response, restBytes(id, token));
      } catch (error) {
        if (!(error instanceof DynamoDBItemTooLargeError)) throw error;
        // Completed without its body: a retry gets 409 response-not-replayable, never a second run.
        attributes = responseAttributes({ ...response, body: null }, restBytes(id, token));
      }
      const result = await conditional(
        'UpdateItem',
        responseUpdate(
          table,
          id,
          attributes,
          {
            sets: ['#s = :c', '#u = :u', '#ttl = :ttl'],
            condition: OWNED,
            names: { '#s': 's', '#t': 't', '#u': 'u', '#ttl': 'ttl' },
            values: { ':token': S(token), ':p': S('p'), ':now': N(now), ':c': S('c'), ':u': N(expiresAt), ':ttl': N(seconds(expiresAt)) },
          },
          true,
        ),
      );
      if (result.ok) return true;
      // Refused: our own completion that landed although its answer was lost counts as done.
      return result.item?.s?.S === 'c' && result.item.t?.S === token;
    },
    async release(key: string, token: string) {
      const result = await conditional(
        'DeleteItem',
        new DeleteItemCommand({
          TableName: table,
          Key: { id: itemId(key) },
          ConditionExpression: OWNED,
          ExpressionAttributeNames: { '#s': 's', '#t': 't', '#u': 'u' },
          ExpressionAttributeValues: { ':token': S(token), ':p': S('p'), ':now': N(Date.now()) },
        }),
      );
      return result.ok;
    },
    async extend(key: string, token: string, leaseMs: number) {
      const now = Date.now();
      const result = await conditional(
        'UpdateItem',
        new UpdateItemCommand({
          TableName: table,
          Key: { id: itemId(key) },
          UpdateExpression: 'SET #u = :u, #ttl = :ttl',
          ConditionExpression: OWNED,
          ExpressionAttributeNames: { '#s': 's', '#t': 't', '#u': 'u', '#ttl': 'ttl' },
          ExpressionAttributeValues: { ':token': S(token), ':p': S('p'), ':now': N(now), ':u': N(now + leaseMs), ':ttl': N(seconds(now + leaseMs)) },
        }),
      );
      return result.ok;
    },
    async close() {
      if (closed) return;
      closed = true;
      if (owned) client.destroy();
    },
    async delete(key: string) {
      const { Attributes } = await send<{ Attributes?: Record<string, AttributeValue> }>(
        'DeleteItem',
        new DeleteItemCommand({ TableName: table, Key: { id: itemId(key) }, ReturnValues: 'ALL_OLD' }),
      );
      return Attributes !== undefined;
    },
    async stats(options: MaintenanceOptions = {}): Promise<StoreStats> {
      const stats: StoreStats = { processing: 0, completed: 0, expired: 0, oldestExpiresAt: undefined };
      let visited = 0;
      await eachPage(undefined, undefined, (items) => {
        const now = Date.now();
        for (const item of items) {
          const record = recordOf(item);
          if (!record) continue;
          const ends = record.state === 'processing' ? record.leaseUntil : record.expiresAt;
          if (ends <= now) stats.expired++;
          else stats[record.state]++;
          if (stats.oldestExpiresAt === undefined || ends < stats.oldestExpiresAt) stats.oldestExpiresAt = ends;
        }
        visited += items.length;
        options.onProgress?.(visited);
      });
      return stats;
    },
    async sweep(options: MaintenanceOptions = {}) {
      // DynamoDB deletes items past their TTL itself, but lazily (within days): the sweep
      // deletes the expired ones now, each with a condition that spares a fresh claim.
      let deleted = 0;
      await eachPage('#u <= :now', { ':now': N(Date.now()) }, async (items) => {
        for (const item of items) {
          const result = await conditional(
            'DeleteItem',
            new DeleteItemCommand({
              TableName: table,
              Key: { id: item.id! },
              ConditionExpression: '#u <= :now',
              ExpressionAttributeNames: { '#u': 'u' },
              ExpressionAttributeValues: { ':now': N(Date.now()) },
            }),
          );
          if (result.ok) deleted++;
        }
        options.onProgress?.(deleted);
      });
      return deleted;
    },
    async scan(scanOptions: ScanOptions): Promise<ScanPage> {
      const { cursor, limit } = checkScanOptions(scanOptions);
      let start: Record<string, AttributeValue> | undefined;
      if (cursor !== undefined) {
        const id = Buffer.from(cursor, 'base64url').toString('utf8');
        if (!id || Buffer.from(id, 'utf8').toString('base64url') !== cursor) {
          throw new TypeError(`Expected \`cursor\` to be a cursor a previous DynamoDB scan returned, got ${JSON.stringify(cursor)}`);
        }
        start = { id: S(id) };
      }
      const page = await send<{ Items?: Record<string, AttributeValue>[]; LastEvaluatedKey?: Record<string, AttributeValue> }>(
        'Scan',
        new ScanCommand({ TableName: table, ConsistentRead: true, Limit: limit, ...(start ? { ExclusiveStartKey: start } : {}), ...prefixFilter() }),
      );
      const now = Date.now();
      const records: ScanPage['records'] = [];
      for (const item of page.Items ?? []) {
        const record = recordOf(item);
        if (record && isLive(record, now)) records.push({ key: item.id!.S!.slice(prefix.length), record });
      }
      const last = page.LastEvaluatedKey?.id?.S;
      return { records, cursor: last === undefined ? undefined : Buffer.from(last, 'utf8').toString('base64url') };
    },
    async replaceResponse(key: string, token: string, response: StoredResponse) {
      const id = itemId(key);
      const attributes = responseAttributes(response, restBytes(id, token)); // throws DynamoDBItemTooLargeError
      const result = await conditional(
        'UpdateItem',
        responseUpdate(
          table,
          id,
          attributes,
          {
            sets: [],
            condition: '#t = :token AND #s = :c AND #u > :now',
            names: { '#s': 's', '#t': 't', '#u': 'u' },
            values: { ':token': S(token), ':c': S('c'), ':now': N(Date.now()) },
          },
          false,
        ),
      );
      return result.ok;
    },
  };

  /** Only this namespace's items, when there is one. */
  function prefixFilter(extra?: string, values?: Record<string, AttributeValue>) {
    const parts = [...(prefix ? ['begins_with(#id, :prefix)'] : []), ...(extra ? [extra] : [])];
    if (parts.length === 0) return {};
    return {
      FilterExpression: parts.join(' AND '),
      ExpressionAttributeNames: { ...(prefix ? { '#id': 'id' } : {}), ...(extra?.includes('#u') ? { '#u': 'u' } : {}) },
      ExpressionAttributeValues: { ...(prefix ? { ':prefix': S(prefix) } : {}), ...values },
    };
  }

  /** Every page of a strongly consistent Scan of this store's items. */
  async function eachPage(filter: string | undefined, values: Record<string, AttributeValue> | undefined, visit: (items: Record<string, AttributeValue>[]) => unknown): Promise<void> {
    let start: Record<string, AttributeValue> | undefined;
    do {
      const page = await send<{ Items?: Record<string, AttributeValue>[]; LastEvaluatedKey?: Record<string, AttributeValue> }>(
        'Scan',
        new ScanCommand({ TableName: table, ConsistentRead: true, ...(start ? { ExclusiveStartKey: start } : {}), ...prefixFilter(filter, values) }),
      );
      await visit(page.Items ?? []);
      start = page.LastEvaluatedKey;
    } while (start !== undefined);
  }
}
