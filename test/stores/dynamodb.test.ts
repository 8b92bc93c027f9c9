/**
 * The DynamoDB store on a real DynamoDB API server (dynalite, started by the test on a free
 * port): the shipped store contract, the maintenance suite, and what only DynamoDB does
 * (one conditional write per claim, the TTL attribute, the item limit, throttling retried
 * then failing closed, the global-table warning). Throttling and global tables are not
 * reproduced by dynalite: an HTTP proxy in front of it answers those the way DynamoDB does.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomBytes } from 'node:crypto';
import { DeleteTableCommand, GetItemCommand, ScanCommand } from '@aws-sdk/client-dynamodb';
import { afterAll, describe, expect, it } from 'vitest';
import { createStore } from '../../drivers/create-store.js';
import { DynamoDBItemTooLargeError, createDynamoDBTable, dynamodbStore } from '../../drivers/dynamodb.js';
import { dynalite } from '../helpers/dynalite.js';
import { storeMaintenanceSuite } from '../suites/store-maintenance.suite.js';
import { storeSuite } from '../suites/store.suite.js';

const server = await dynalite();
const admin = server.client();
const quiet = { onWarning: () => undefined };
afterAll(() => admin.destroy());

const claimOf = (token: string, fingerprint = 'fp') => ({ token, fingerprint, createdAt: Date.now() });
const response = (body: Uint8Array | null = new TextEncoder().encode('ok')) => ({ status: 201, headers: { 'content-type': 'text/plain' }, body });

storeSuite('dynamodb', {
  create: async () => dynamodbStore({ url: server.url(await server.table()), ...quiet }),
  // Nothing listens on port 1: connection refused, every call must reject within timeoutMs.
  broken: async () => ({
    store: dynamodbStore({ url: 'dynamodb://local:local@some-table?region=us-east-1&endpoint=http://127.0.0.1:1', timeoutMs: 1000, ...quiet }),
    failingKey: 'k',
    allOperations: true,
  }),
});

storeMaintenanceSuite('dynamodb', { create: async () => dynamodbStore({ client: server.client(), table: await server.table(), ...quiet }) });

/** An HTTP proxy to dynalite whose `answer` may reply in DynamoDB's place (by the operation's target header). */
async function proxy(
  answer: (operation: string, body: string) => { status: number; body: unknown } | undefined,
  transform?: (operation: string, body: string, status: number, text: string) => Promise<string>,
) {
  const seen: string[] = [];
  const proxyServer = http.createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks).toString('utf8');
    const operation = String(req.headers['x-amz-target'] ?? '').split('.').at(-1) ?? '';
    seen.push(operation);
    const own = answer(operation, body);
    if (own) {
      res.writeHead(own.status, { 'content-type': 'application/x-amz-json-1.0' }).end(JSON.stringify(own.body));
      return;
    }
    const upstream = await fetch(server.endpoint, {
      method: 'POST',
      headers: Object.fromEntries(Object.entries(req.headers).filter(([name]) => !['host', 'content-length', 'connection'].includes(name)) as [string, string][]),
      body,
    });
    let text = await upstream.text();
    if (transform) text = await transform(operation, body, upstream.status, text);
    res.writeHead(upstream.status, { 'content-type': upstream.headers.get('content-type') ?? 'application/x-amz-json-1.0' }).end(text);
  });
  await new Promise<void>((resolve) => proxyServer.listen(0, '127.0.0.1', () => resolve()));
  const endpoint = `http://127.0.0.1:${(proxyServer.address() as AddressInfo).port}`;
  return {
    seen,
    url: (table: string) => `dynamodb://local:local@${table}?region=us-east-1&endpoint=${encodeURIComponent(endpoint)}`,
    close: () => new Promise<void>((resolve) => proxyServer.close(() => resolve())),
  };
}

const THROTTLED = { status: 400, body: { __type: 'com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException', message: 'The level of configured provisioned throughput for the table was exceeded.' } };

describe('dynamodb store specifics', () => {
  it('S1: a claim is one conditional PutItem; a completion one conditional UpdateItem; a replay one strongly consistent GetItem', async () => {
    const table = await server.table();
    const counting = await proxy(() => undefined);
    const store = dynamodbStore({ url: counting.url(table), ...quiet });
    try {
      await store.get('warm-up');
      counting.seen.length = 0;
      expect((await store.claim('k', claimOf('t'), 5000)).claimed).toBe(true);
      expect(counting.seen).toEqual(['PutItem']);
      expect(await store.complete('k', 't', response(), 60_000)).toBe(true);
      expect(counting.seen).toEqual(['PutItem', 'UpdateItem']);
      expect(await store.get('k')).toMatchObject({ state: 'completed', token: 't' });
      expect(counting.seen).toEqual(['PutItem', 'UpdateItem', 'GetItem']);
    } finally {
      await store.close();
      await counting.close();
    }
  });

  it('S1: against a server that returns the item with a refused write (as DynamoDB does), a lost claim costs no read', async () => {
    const table = await server.table();
    // dynalite does not return it: the proxy adds the live item to the refusal, as DynamoDB's
    // ReturnValuesOnConditionCheckFailure does.
    const returning = await proxy(
      () => undefined,
      async (operation, body, status, text) => {
        if (operation !== 'PutItem' || status !== 400 || !text.includes('ConditionalCheckFailedException')) return text;
        const { Item } = JSON.parse(body) as { Item: { id: { S: string } } };
        // A processing item: strings and numbers only, so the SDK's shape is the wire's.
        const { Item: live } = await admin.send(new GetItemCommand({ TableName: table, Key: { id: Item.id }, ConsistentRead: true }));
        return JSON.stringify({ ...(JSON.parse(text) as object), Item: live });
      },
    );
    const store = dynamodbStore({ url: returning.url(table), ...quiet });
    try {
      expect((await store.claim('k', claimOf('first'), 5000)).claimed).toBe(true);
      returning.seen.length = 0;
      expect(await store.claim('k', claimOf('second', 'other'), 5000)).toMatchObject({ claimed: false, record: { state: 'processing', token: 'first', fingerprint: 'fp' } });
      expect(returning.seen).toEqual(['PutItem']);
      // Our own claim whose answer was lost (a retried attempt): the returned item carries our token, so it is ours.
      expect(await store.claim('k', claimOf('first'), 5000)).toMatchObject({ claimed: true, record: { token: 'first' } });
    } finally {
      await store.close();
      await returning.close();
    }
  });

  it('S3/H20: the item carries its end in the TTL attribute (epoch seconds) and a record past it is never returned, whether or not DynamoDB deleted it', async () => {
    const table = await server.table();
    const store = dynamodbStore({ client: server.client(), table, ...quiet });
    await store.claim('k', claimOf('t'), 5000);
    const { Item } = await admin.send(new GetItemCommand({ TableName: table, Key: { id: { S: 'k' } }, ConsistentRead: true }));
    const leaseUntil = Number(Item!.u!.N);
    expect(Number(Item!.ttl!.N)).toBe(Math.ceil(leaseUntil / 1000));
    await store.complete('k', 't', response(), 300);
    const completed = await admin.send(new GetItemCommand({ TableName: table, Key: { id: { S: 'k' } }, ConsistentRead: true }));
    expect(Number(completed.Item!.ttl!.N)).toBe(Math.ceil(Number(completed.Item!.u!.N) / 1000));
    expect(completed.Item!.b!.B).toBeInstanceOf(Uint8Array); // the body is binary
    await new Promise((r) => setTimeout(r, 450));
    // dynalite never deletes by TTL (nor does DynamoDB for a while): the item is still there...
    expect((await admin.send(new GetItemCommand({ TableName: table, Key: { id: { S: 'k' } }, ConsistentRead: true }))).Item).toBeDefined();
    // ...and the store treats it as gone.
    expect(await store.get('k')).toBeUndefined();
    expect((await store.claim('k', claimOf('next'), 5000)).claimed).toBe(true);
    await store.close();
  });

  it('S2: a body over the 400 KB item limit is stored compressed; one that does not fit even then completes without a body (a retry gets 409, never a second run), and replaceResponse refuses it with a typed error', async () => {
    const store = dynamodbStore({ client: server.client(), table: await server.table(), ...quiet });
    const compressible = new Uint8Array(600 * 1024).fill(97);
    await store.claim('zip', claimOf('t'), 5000);
    expect(await store.complete('zip', 't', response(compressible), 60_000)).toBe(true);
    const zipped = await store.get('zip');
    expect(zipped?.state === 'completed' && zipped.response.body).toEqual(compressible);

    const random = new Uint8Array(randomBytes(500 * 1024));
    await store.claim('big', claimOf('t'), 5000);
    expect(await store.complete('big', 't', response(random), 60_000)).toBe(true);
    const big = await store.get('big');
    expect(big).toMatchObject({ state: 'completed', token: 't' });
    expect(big?.state === 'completed' && big.response.body).toBeNull();

    const error = await store.replaceResponse!('zip', 't', response(random)).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DynamoDBItemTooLargeError);
    expect(error).toMatchObject({ code: 'IDEMPOTENCY_DYNAMODB_ITEM_TOO_LARGE' });
    expect((error as DynamoDBItemTooLargeError).bytes).toBeGreaterThan(400 * 1024);
    await store.close();
  });

  it('S6: throttling (ProvisionedThroughputExceededException) is retried with backoff and the call succeeds once DynamoDB accepts it', async () => {
    const table = await server.table();
    let throttles = 3;
    const throttling = await proxy((operation) => (operation === 'PutItem' && throttles-- > 0 ? THROTTLED : undefined));
    const store = dynamodbStore({ url: throttling.url(table), timeoutMs: 5000, ...quiet });
    try {
      expect((await store.claim('k', claimOf('t'), 5000)).claimed).toBe(true);
      expect(throttling.seen.filter((op) => op === 'PutItem')).toHaveLength(4);
    } finally {
      await store.close();
      await throttling.close();
    }
  });

  it('S6/H16: throttling that lasts past timeoutMs fails the call closed, within the bound, naming the cause', async () => {
    const table = await server.table();
    const throttling = await proxy((operation) => (operation === 'DescribeTable' || operation === 'DescribeTimeToLive' ? undefined : THROTTLED));
    const store = dynamodbStore({ url: throttling.url(table), timeoutMs: 600, ...quiet });
    try {
      const started = Date.now();
      await expect(store.claim('k', claimOf('t'), 5000)).rejects.toThrow(/DynamoDB PutItem failed for 600 ms \(ProvisionedThroughputExceededException\); failing closed/);
      expect(Date.now() - started).toBeLessThan(3000);
      expect(throttling.seen.filter((op) => op === 'PutItem').length).toBeGreaterThan(1);
      // Nothing was written: the key is free.
      expect((await admin.send(new ScanCommand({ TableName: table }))).Count).toBe(0);
    } finally {
      await store.close();
      await throttling.close();
    }
  });

  it('S6/H16: when the time runs out during an attempt after DynamoDB throttled, the error still names the throttling', async () => {
    const table = await server.table();
    let puts = 0;
    // The first PutItem is throttled; the retry is answered only after the bound has passed.
    const throttling = await proxy(
      (operation) => (operation === 'PutItem' && ++puts === 1 ? THROTTLED : undefined),
      async (operation, _body, _status, text) => {
        if (operation === 'PutItem') await new Promise((resolve) => setTimeout(resolve, 1500));
        return text;
      },
    );
    const store = dynamodbStore({ url: throttling.url(table), timeoutMs: 600, ...quiet });
    try {
      const started = Date.now();
      await expect(store.claim('k', claimOf('t'), 5000)).rejects.toThrow(/DynamoDB PutItem failed for 600 ms \(ProvisionedThroughputExceededException\); failing closed/);
      expect(Date.now() - started).toBeLessThan(1500);
      expect(puts).toBe(2);
    } finally {
      await store.close();
      await throttling.close();
    }
  });

  it('warns when the table is a global table (replicated to other regions) and when TTL is not enabled on `ttl`', async () => {
    const table = await server.table();
    const replicated = await proxy((operation) =>
      operation === 'DescribeTable'
        ? {
            status: 200,
            body: {
              Table: {
                TableName: table,
                TableStatus: 'ACTIVE',
                KeySchema: [{ AttributeName: 'id', KeyType: 'HASH' }],
                Replicas: [{ RegionName: 'eu-west-1' }, { RegionName: 'us-east-1' }],
              },
            },
          }
        : undefined,
    );
    const warnings: string[] = [];
    const store = dynamodbStore({ url: replicated.url(table), onWarning: (message) => warnings.push(message) });
    try {
      await store.claim('k', claimOf('t'), 5000);
      await expect.poll(() => warnings.length).toBe(2);
      expect(warnings[0]).toMatch(/is a global table \(replicas: eu-west-1, us-east-1\).*home region/);
      expect(warnings[1]).toMatch(/TTL is not enabled on the attribute "ttl"/);
    } finally {
      await store.close();
      await replicated.close();
    }
  });

  it('a missing table fails with how to create it; createTable: true creates it (key schema id, on demand) on first use', async () => {
    const table = `idk-missing-${randomBytes(4).toString('hex')}`;
    const store = dynamodbStore({ client: server.client(), table, ...quiet });
    await expect(store.claim('k', claimOf('t'), 5000)).rejects.toThrow(/does not exist: create it .*createTable/);
    await store.close();
    const creating = dynamodbStore({ client: server.client(), table, createTable: true, ...quiet });
    expect((await creating.claim('k', claimOf('t'), 5000)).claimed).toBe(true);
    await creating.close();
    await createDynamoDBTable(admin, table); // a second call leaves it as it is
    await admin.send(new DeleteTableCommand({ TableName: table }));
  });

  it('namespace: two stores share one table with their own items and maintenance', async () => {
    const table = await server.table();
    const a = dynamodbStore({ client: server.client(), table, namespace: 'app-a', ...quiet });
    const b = dynamodbStore({ client: server.client(), table, namespace: 'app-b', ...quiet });
    expect((await a.claim('k', claimOf('ta'), 5000)).claimed).toBe(true);
    expect((await b.claim('k', claimOf('tb'), 5000)).claimed).toBe(true);
    expect((await a.stats!()).processing).toBe(1);
    const page = await b.scan!({ limit: 10 });
    expect(page.records.map((r) => [r.key, r.record.token])).toEqual([['k', 'tb']]);
    await Promise.all([a.close(), b.close()]);
  });

  it('createStore takes a dynamodb:// URL or a DynamoDBClient; the client is left open on close', async () => {
    const table = await server.table();
    const viaUrl = createStore(server.url(table));
    expect(viaUrl.name).toBe('dynamodb');
    expect((await viaUrl.claim('k', claimOf('t'), 5000)).claimed).toBe(true);
    await viaUrl.close();
    const client = server.client();
    const viaClient = createStore(client, { namespace: 'ns' });
    expect(viaClient.name).toBe('dynamodb');
    // The default table of a client: idempotency-kit.
    await createDynamoDBTable(admin, 'idempotency-kit');
    expect((await viaClient.claim('k', claimOf('t'), 5000)).claimed).toBe(true);
    await viaClient.close();
    expect((await client.send(new GetItemCommand({ TableName: 'idempotency-kit', Key: { id: { S: 'ns:k' } }, ConsistentRead: true }))).Item).toBeDefined();
    client.destroy();
  });

  it('rejects bad options and URLs with precise TypeErrors', () => {
    expect(() => dynamodbStore({} as never)).toThrow('Expected exactly one of `url` or `client`');
    expect(() => dynamodbStore({ url: 'dynamodb://ab?region=x' })).toThrow(/table name \(3 to 255 letters, digits, _ \. -\)/);
    expect(() => dynamodbStore({ url: 'dynamodb://table/path' })).toThrow(/no path/);
    expect(() => dynamodbStore({ url: 'dynamodb://table?regoin=x' })).toThrow(/only region and endpoint/);
    expect(() => dynamodbStore({ url: 'dynamodb://table?endpoint=localhost:8000' })).toThrow(/http\(s\) endpoint/);
    expect(() => dynamodbStore({ url: 'redis://x' })).toThrow('Expected `url` to start with dynamodb://, got "redis://x"');
    expect(() => dynamodbStore({ url: 'dynamodb://table', timeoutMs: 0 })).toThrow('Expected `timeoutMs` to be a positive integer, got 0');
    expect(() => dynamodbStore({ url: 'dynamodb://table', table: 'other' })).toThrow(/no `table` with a `url`/);
    expect(() => dynamodbStore({ client: {} as never })).toThrow(/Expected `client` to be a DynamoDBClient/);
    expect(() => dynamodbStore({ client: server.client(), table: 'a b' })).toThrow(/Expected `table` to be a DynamoDB table name/);
    expect(() => dynamodbStore({ client: server.client(), namespace: '' })).toThrow('Expected `namespace` to be a non-empty string, got ""');
    expect(() => createStore('dynamodb://x')).toThrow(/cannot create a store from "dynamodb:\/\/x": the DynamoDB URL must name a table/);
  });

  it('a closed store rejects calls', async () => {
    const store = dynamodbStore({ client: server.client(), table: await server.table(), ...quiet });
    await store.close();
    await expect(store.get('k')).rejects.toThrow(/closed/);
  });
});
