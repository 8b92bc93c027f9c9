/**
 * What only the Lambda entry points do, on event shapes as AWS documents them (API Gateway
 * REST payload 1.0 with multi-value headers, HTTP API payload 2.0, Function URL with IAM,
 * ALB in both header modes; SQS standard and FIFO, Kinesis, DynamoDB Streams records): the
 * key header in every form, the authorizer's principal as scope, base64 bodies, replay in
 * the source's own shape, the lease bounded by the invocation's deadline, Middy, batches,
 * the replay hook and the kill switch.
 */
import middy from '@middy/core';
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { idempotencyMiddleware, idempotent, idempotentBatch, withIdempotency, type LambdaHttpEvent, type LambdaHttpResult } from '../../adapters/lambda/index.js';
import { createStore } from '../../drivers/create-store.js';
import { dynamodbStore } from '../../drivers/dynamodb.js';
import type { IdempotencyStore } from '../../src/store.js';
import { dynalite } from '../helpers/dynalite.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const memory = () => createStore('memory://');
const context = (remainingMs = 30_000) => {
  const deadline = Date.now() + remainingMs;
  return { getRemainingTimeInMillis: () => deadline - Date.now(), functionName: 'test', awsRequestId: randomUUID() };
};
const json = (result: unknown) => JSON.parse((result as LambdaHttpResult).body!);

/** API Gateway REST API, payload 1.0 (Cognito user pool authorizer), as AWS documents it. */
function restEvent(key: string | string[] | undefined, body: unknown, sub = 'user-1'): LambdaHttpEvent {
  const keys = key === undefined ? [] : [key].flat();
  const bodyText = JSON.stringify(body);
  return {
    resource: '/orders',
    path: '/orders',
    httpMethod: 'POST',
    headers: { 'Content-Type': 'application/json', ...(keys.length ? { 'Idempotency-Key': keys.at(-1)! } : {}) },
    multiValueHeaders: { 'Content-Type': ['application/json'], ...(keys.length ? { 'Idempotency-Key': keys } : {}) },
    queryStringParameters: { currency: 'EUR' },
    multiValueQueryStringParameters: { currency: ['EUR'] },
    pathParameters: null,
    stageVariables: null,
    requestContext: {
      resourceId: 'abc123',
      resourcePath: '/orders',
      httpMethod: 'POST',
      stage: 'prod',
      apiId: 'api123',
      requestId: randomUUID(),
      identity: { sourceIp: '203.0.113.1', userArn: null, cognitoIdentityId: null },
      authorizer: { claims: { sub, email: 'a@example.com' } },
    },
    body: bodyText,
    isBase64Encoded: false,
  };
}

/** API Gateway HTTP API, payload 2.0, JWT authorizer. */
function httpEvent(key: string | undefined, body: string, options: { sub?: string; base64?: boolean; authorizer?: Record<string, unknown> } = {}): LambdaHttpEvent {
  return {
    version: '2.0',
    routeKey: 'POST /orders',
    rawPath: '/orders',
    rawQueryString: 'a=1',
    cookies: ['session=abc'],
    headers: { 'content-type': 'application/json', ...(key === undefined ? {} : { 'idempotency-key': key }) },
    requestContext: {
      accountId: '123456789012',
      apiId: 'api',
      domainName: 'id.execute-api.us-east-1.amazonaws.com',
      http: { method: 'POST', path: '/orders', protocol: 'HTTP/1.1', sourceIp: '203.0.113.1', userAgent: 'test' },
      requestId: randomUUID(),
      routeKey: 'POST /orders',
      stage: '$default',
      time: '06/Dec/2026:19:03:58 +0000',
      timeEpoch: Date.now(),
      authorizer: options.authorizer ?? { jwt: { claims: { sub: options.sub ?? 'user-1' }, scopes: null } },
    },
    body: options.base64 ? Buffer.from(body).toString('base64') : body,
    isBase64Encoded: options.base64 ?? false,
  };
}

/** An Application Load Balancer event, with or without multi-value headers. */
function albEvent(key: string, body: string, multi: boolean): LambdaHttpEvent {
  const headers = { 'content-type': 'application/json', 'idempotency-key': key };
  return {
    requestContext: { elb: { targetGroupArn: 'arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/lambda/abc' } },
    httpMethod: 'POST',
    path: '/orders',
    ...(multi ? { multiValueHeaders: Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, [v]])), multiValueQueryStringParameters: {} } : { headers, queryStringParameters: {} }),
    body,
    isBase64Encoded: false,
  };
}

let runs = 0;
const order = async (event: LambdaHttpEvent): Promise<LambdaHttpResult> => {
  runs++;
  const text = event.body ? Buffer.from(event.body, event.isBase64Encoded ? 'base64' : 'utf8').toString() : '';
  return {
    statusCode: 201,
    headers: { 'content-type': 'application/json', 'x-request-id': randomUUID() },
    multiValueHeaders: { link: ['</a>; rel=a', '</b>; rel=b'] },
    body: JSON.stringify({ id: `order-${runs}`, got: text === '' ? null : JSON.parse(text) }),
  };
};

afterEach(() => {
  runs = 0;
  delete process.env.IDEMPOTENCY_KIT_DISABLED;
});

describe('Lambda HTTP events', () => {
  it('H7: REST API (payload 1.0): runs once, replays with the replay marker, multi-value headers kept as lists; the key header in any case', async () => {
    const handler = withIdempotency(order, { store: memory() });
    const first = await handler(restEvent('k1', { amount: 5 }), context());
    expect(first).toMatchObject({ statusCode: 201 });
    const event = restEvent('k1', { amount: 5 });
    // The same header in another case, in both maps.
    event.headers = { 'content-type': 'application/json', 'IDEMPOTENCY-KEY': 'k1' };
    event.multiValueHeaders = { 'content-type': ['application/json'], 'IDEMPOTENCY-KEY': ['k1'] };
    const replay = await handler(event, context());
    expect(runs).toBe(1);
    expect(replay).toMatchObject({ statusCode: 201, isBase64Encoded: false, body: (first as LambdaHttpResult).body });
    expect((replay as LambdaHttpResult).headers).toMatchObject({ 'idempotent-replayed': 'true', 'content-type': 'application/json' });
    expect((replay as LambdaHttpResult).multiValueHeaders).toEqual({ link: ['</a>; rel=a', '</b>; rel=b'] });
    expect((replay as LambdaHttpResult).headers).not.toHaveProperty('x-request-id');
  });

  it('H2/H4/H14: REST API: no key is 400, two key lines in multiValueHeaders are 400 key-invalid, another body under the key is 422; all problem+json', async () => {
    const handler = withIdempotency(order, { store: memory() });
    const missing = (await handler(restEvent(undefined, { amount: 5 }), context())) as LambdaHttpResult;
    expect(missing.statusCode).toBe(400);
    expect(missing.headers!['content-type']).toBe('application/problem+json');
    expect(json(missing).code).toBe('key-missing');
    const twice = (await handler(restEvent(['a', 'b'], { amount: 5 }), context())) as LambdaHttpResult;
    expect([twice.statusCode, json(twice).code]).toEqual([400, 'key-invalid']);
    await handler(restEvent('k', { amount: 5 }), context());
    const reused = (await handler(restEvent('k', { amount: 6 }), context())) as LambdaHttpResult;
    expect([reused.statusCode, json(reused).code]).toEqual([422, 'key-reused']);
    expect(runs).toBe(1);
  });

  it('H15: the principal comes from the authorizer: REST Cognito sub, HTTP API JWT sub, Lambda authorizer context, IAM (Function URL); another principal with the same key runs on its own', async () => {
    const handler = withIdempotency(order, { store: memory() });
    await handler(restEvent('same', { amount: 1 }, 'alice'), context());
    await handler(restEvent('same', { amount: 1 }, 'bob'), context());
    expect(runs).toBe(2);
    await handler(httpEvent('same', '{"amount":1}', { sub: 'carol' }), context());
    await handler(httpEvent('same', '{"amount":1}', { sub: 'carol' }), context());
    expect(runs).toBe(3);
    await handler(httpEvent('same', '{"amount":1}', { authorizer: { lambda: { principalId: 'dave' } } }), context());
    // A Function URL with AWS_IAM auth: the caller's ARN.
    await handler(httpEvent('same', '{"amount":1}', { authorizer: { iam: { userArn: 'arn:aws:iam::123456789012:user/erin', accessKey: 'AKIA' } } }), context());
    expect(runs).toBe(5);
    // No authorizer at all: the key cannot be kept apart, 500 scope-required.
    const none = (await handler(httpEvent('same', '{"amount":1}', { authorizer: {} }), context())) as LambdaHttpResult;
    expect([none.statusCode, json(none).code]).toEqual([500, 'scope-required']);
  });

  it('H14: a base64-encoded body fingerprints as its bytes: the same JSON replays whether encoded or not; a handler that returns a plain value (HTTP API) replays as the 200 JSON API Gateway made of it', async () => {
    let n = 0;
    const handler = withIdempotency(async () => ({ id: ++n }), { store: memory() });
    const first = await handler(httpEvent('b64', '{"amount":7,"x":[1,2]}', { base64: true }), context());
    expect(first).toEqual({ id: 1 });
    const replay = (await handler(httpEvent('b64', '{"x":[1,2],"amount":7}'), context())) as LambdaHttpResult;
    expect(n).toBe(1);
    expect(replay).toMatchObject({ statusCode: 200, headers: { 'content-type': 'application/json', 'idempotent-replayed': 'true' } });
    expect(json(replay)).toEqual({ id: 1 });
  });

  it('H11: the cookies a handler sets (HTTP API `cookies`) reach the first client and are never replayed', async () => {
    const handler = withIdempotency(async () => ({ statusCode: 201, cookies: ['session=s1; Path=/'], body: 'ok' }), { store: memory() });
    expect(await handler(httpEvent('c', '{}'), context())).toMatchObject({ cookies: ['session=s1; Path=/'] });
    const replay = (await handler(httpEvent('c', '{}'), context())) as LambdaHttpResult;
    expect(replay).toMatchObject({ statusCode: 201, body: 'ok' });
    expect(replay.cookies).toBeUndefined();
    expect(replay.headers).not.toHaveProperty('set-cookie');
  });

  it('ALB: the answer follows the target group\'s header mode (multi-value or not) and carries a statusDescription; no authorizer, so `scope` is given', async () => {
    const handler = withIdempotency(order, { store: memory(), scope: (event) => (event.headers?.['x-tenant'] ?? event.multiValueHeaders?.['x-tenant']?.[0] ?? 'shared-tenant') });
    await handler(albEvent('alb', '{"a":1}', true), context());
    const multi = (await handler(albEvent('alb', '{"a":1}', true), context())) as LambdaHttpResult;
    expect(multi.statusDescription).toBe('201 Created');
    expect(multi.headers).toBeUndefined();
    expect(multi.multiValueHeaders).toMatchObject({ 'idempotent-replayed': ['true'], 'content-type': ['application/json'], link: ['</a>; rel=a', '</b>; rel=b'] });
    const single = (await handler(albEvent('alb', '{"a":1}', false), context())) as LambdaHttpResult;
    expect(single.multiValueHeaders).toBeUndefined();
    expect(single.headers).toMatchObject({ 'idempotent-replayed': 'true', link: '</a>; rel=a, </b>; rel=b' });
    expect(runs).toBe(1);
  });

  it('H8: a duplicate while the first runs waits, then gets 409 with Retry-After (problem+json)', async () => {
    const store = memory();
    const slow = withIdempotency(async () => {
      await sleep(400);
      return { statusCode: 201, body: 'done' };
    }, { store, waitMs: 0 });
    const first = slow(httpEvent('busy', '{}'), context());
    await sleep(50);
    const second = (await slow(httpEvent('busy', '{}'), context())) as LambdaHttpResult;
    expect(second.statusCode).toBe(409);
    expect(second.headers).toMatchObject({ 'retry-after': '1', 'content-type': 'application/problem+json' });
    expect(await first).toMatchObject({ statusCode: 201 });
  });

  it('onReplay changes a replayed response (here a header and a body field), never the first one or the stored record', async () => {
    const handler = withIdempotency(order, {
      store: memory(),
      onReplay: (response) => {
        const body = JSON.parse(Buffer.from(response.body).toString());
        return { ...response, headers: { ...response.headers, 'x-replayed-at': 'now' }, body: Buffer.from(JSON.stringify({ ...body, replayed: true })) };
      },
    });
    const first = await handler(httpEvent('hook', '{}'), context());
    expect(json(first).replayed).toBeUndefined();
    const replay = (await handler(httpEvent('hook', '{}'), context())) as LambdaHttpResult;
    expect(replay.headers!['x-replayed-at']).toBe('now');
    expect(json(replay)).toMatchObject({ id: 'order-1', replayed: true });
    const again = (await handler(httpEvent('hook', '{}'), context())) as LambdaHttpResult;
    expect(json(again)).toMatchObject({ id: 'order-1', replayed: true });
  });
});

describe('the lease is bounded by the invocation deadline', () => {
  it('Lambda: a claim holds until the remaining time (plus a margin), with no renewal writes', async () => {
    const server = await dynalite();
    const inner = dynamodbStore({ client: server.client(), table: await server.table(), onWarning: () => undefined });
    const extends_: string[] = [];
    const store: IdempotencyStore = { ...inner, name: inner.name, extend: (...args) => (extends_.push(args[0]), inner.extend(...args)) };
    let seen: unknown;
    const handler = withIdempotency(async () => {
      seen = await inner.get((await listKeys(inner))[0]!);
      await sleep(600);
      return { statusCode: 201, body: 'ok' };
    }, { store, leaseMs: 300 });
    const started = Date.now();
    await handler(httpEvent('deadline', '{}'), context(5000));
    // leaseMs 300 would have renewed every 100 ms; the deadline lease holds 5 s + 1 s, unrenewed.
    expect(extends_).toEqual([]);
    expect((seen as { leaseUntil: number }).leaseUntil).toBeGreaterThan(started + 5000);
    expect((seen as { leaseUntil: number }).leaseUntil).toBeLessThan(started + 6500);
    await inner.close();
  });

  it('H17: a timed-out invocation (its handler never returns) frees its key only after its deadline; then the retry runs', async () => {
    const store = memory();
    let started = 0;
    const hang = withIdempotency(async () => {
      started++;
      await new Promise(() => undefined); // Lambda kills it at the deadline
      return { statusCode: 201 };
    }, { store, waitMs: 0 });
    void hang(httpEvent('timeout', '{}'), context(300));
    await sleep(50);
    const during = (await withIdempotency(order, { store, waitMs: 0 })(httpEvent('timeout', '{}'), context())) as LambdaHttpResult;
    expect(during.statusCode).toBe(409);
    await sleep(300 + 1000 + 100); // the deadline, the margin
    const retry = await withIdempotency(order, { store, waitMs: 0 })(httpEvent('timeout', '{}'), context());
    expect(retry).toMatchObject({ statusCode: 201 });
    expect([started, runs]).toEqual([1, 1]);
  });

  it('C1/C2: idempotent() runs any handler once per key, with the context-bound lease', async () => {
    let n = 0;
    const handler = idempotent(async (event: { detail: { id: string } }) => ({ n: ++n, id: event.detail.id }), {
      store: memory(),
      key: (event) => event.detail.id,
    });
    expect(await handler({ detail: { id: 'e1' } }, context())).toEqual({ n: 1, id: 'e1' });
    expect(await handler({ detail: { id: 'e1' } }, context())).toEqual({ n: 1, id: 'e1' });
    expect(await handler({ detail: { id: 'e2' } }, undefined)).toEqual({ n: 2, id: 'e2' });
    expect(() => idempotent(async () => 1, { store: memory(), key: 'x' as never })).toThrow(/Expected `key` to be a function/);
  });
});

describe('Middy', () => {
  it('replays, and a concurrent duplicate is 409, never 500', async () => {
    const store = memory();
    let n = 0;
    const handler = middy(async () => {
      n++;
      await sleep(300);
      return { statusCode: 201, headers: { 'content-type': 'text/plain' }, body: `n=${n}` };
    }).use(idempotencyMiddleware({ store, waitMs: 0 }));
    const first = handler(httpEvent('m', '{}') as never, context() as never);
    await sleep(50);
    const duplicate = (await handler(httpEvent('m', '{}') as never, context() as never)) as LambdaHttpResult;
    expect(duplicate.statusCode).toBe(409);
    expect(JSON.parse(duplicate.body!).code).toBe('request-in-progress');
    expect(await first).toMatchObject({ statusCode: 201, body: 'n=1' });
    const replay = (await handler(httpEvent('m', '{}') as never, context() as never)) as LambdaHttpResult;
    expect(replay).toMatchObject({ statusCode: 201, body: 'n=1', headers: { 'idempotent-replayed': 'true' } });
    expect(n).toBe(1);
  });

  it("a refused duplicate's error path never frees the original's claim; the owner's error releases its own", async () => {
    const store = memory();
    let n = 0;
    // Another middleware that fails after ours answered: its onError runs for the duplicate.
    const failing = { before: async () => undefined, after: async () => { throw new Error('after failed'); } };
    const handler = middy(async () => {
      n++;
      await sleep(300);
      return { statusCode: 201, body: 'ok' };
    })
      .use(failing)
      .use(idempotencyMiddleware({ store, waitMs: 0 }));
    const first = handler(httpEvent('err', '{}') as never, context() as never).catch((e: unknown) => e);
    await sleep(50);
    await handler(httpEvent('err', '{}') as never, context() as never).catch(() => undefined);
    // The original still holds the key: a third request is refused too.
    const third = (await middy(async () => ({ statusCode: 201 })).use(idempotencyMiddleware({ store, waitMs: 0 }))(httpEvent('err', '{}') as never, context() as never)) as LambdaHttpResult;
    expect(third.statusCode).toBe(409);
    await first;
    expect(n).toBe(1);
    // A handler that throws releases the key: the retry runs.
    let m = 0;
    const throwing = middy(async () => {
      if (++m === 1) throw new Error('boom');
      return { statusCode: 201, body: 'second' };
    }).use(idempotencyMiddleware({ store }));
    await expect(throwing(httpEvent('throw', '{}') as never, context() as never)).rejects.toThrow('boom');
    expect(await throwing(httpEvent('throw', '{}') as never, context() as never)).toMatchObject({ statusCode: 201, body: 'second' });
  });
});

describe('batches', () => {
  const sqs = (id: string, body: unknown, fifo?: string) => ({
    messageId: id,
    receiptHandle: 'r',
    body: JSON.stringify(body),
    attributes: { ApproximateReceiveCount: '1', SentTimestamp: '1', SenderId: 's', ApproximateFirstReceiveTimestamp: '1', ...(fifo ? { MessageGroupId: fifo, SequenceNumber: '1', MessageDeduplicationId: id } : {}) },
    messageAttributes: {},
    md5OfBody: 'x',
    eventSource: 'aws:sqs',
    eventSourceARN: `arn:aws:sqs:us-east-1:123456789012:orders${fifo ? '.fifo' : ''}`,
    awsRegion: 'us-east-1',
  });

  it('Lambda: SQS standard: each record on its own key; failures reported by messageId; a redelivered batch runs only what failed', async () => {
    const store = memory();
    const done: string[] = [];
    const work = async (record: { messageId: string; body: string }) => {
      const { fail } = JSON.parse(record.body) as { fail?: boolean };
      if (fail && !done.includes(`${record.messageId}-failed`)) {
        done.push(`${record.messageId}-failed`);
        throw new Error('fails once');
      }
      done.push(record.messageId);
      return record.messageId;
    };
    const event = { Records: [sqs('m1', {}), sqs('m2', { fail: true }), sqs('m3', {})] };
    const first = await idempotentBatch(event, work, { store, context: context() });
    expect(first.batchItemFailures).toEqual([{ itemIdentifier: 'm2' }]);
    const again = await idempotentBatch(event, work, { store, context: context() });
    expect(again.batchItemFailures).toEqual([]);
    expect(done).toEqual(['m1', 'm2-failed', 'm3', 'm2']);
  });

  it('Lambda: SQS FIFO: in order, and after the first failure the rest are reported without running', async () => {
    const ran: string[] = [];
    const event = { Records: [sqs('f1', {}, 'g'), sqs('f2', { fail: true }, 'g'), sqs('f3', {}, 'g'), sqs('f4', {}, 'h')] };
    const result = await idempotentBatch(
      event,
      async (record: { messageId: string; body: string }) => {
        ran.push(record.messageId);
        if ((JSON.parse(record.body) as { fail?: boolean }).fail) throw new Error('no');
      },
      { store: memory() },
    );
    expect(ran).toEqual(['f1', 'f2']);
    expect(result.batchItemFailures).toEqual([{ itemIdentifier: 'f2' }, { itemIdentifier: 'f3' }, { itemIdentifier: 'f4' }]);
  });

  it('Lambda: Kinesis and DynamoDB Streams: keyed by eventID, failures reported by sequence number', async () => {
    const kinesis = (seq: string) => ({
      kinesis: { kinesisSchemaVersion: '1.0', partitionKey: 'p', sequenceNumber: seq, data: Buffer.from('{}').toString('base64'), approximateArrivalTimestamp: 1 },
      eventSource: 'aws:kinesis',
      eventVersion: '1.0',
      eventID: `shardId-000000000000:${seq}`,
      eventName: 'aws:kinesis:record',
      eventSourceARN: 'arn:aws:kinesis:us-east-1:123456789012:stream/orders',
      awsRegion: 'us-east-1',
    });
    const store = memory();
    let n = 0;
    const result = await idempotentBatch({ Records: [kinesis('100'), kinesis('101'), kinesis('100')] }, async (record) => {
      n++;
      if (record.kinesis?.sequenceNumber === '101') throw new Error('bad');
    }, { store, concurrency: 1 });
    expect(n).toBe(2); // the repeated record replays
    expect(result.batchItemFailures).toEqual([{ itemIdentifier: '101' }]);

    const stream = (seq: string) => ({ eventID: `ev-${seq}`, eventName: 'INSERT', eventSource: 'aws:dynamodb', dynamodb: { SequenceNumber: seq, Keys: { id: { S: 'x' } } } });
    const ddb = await idempotentBatch({ Records: [stream('1'), stream('2')] }, async (record) => {
      if (record.dynamodb?.SequenceNumber === '2') throw new Error('bad');
    }, { store });
    expect(ddb.batchItemFailures).toEqual([{ itemIdentifier: '2' }]);
    await expect(idempotentBatch({} as never, async () => undefined, { store })).rejects.toThrow(/Expected an SQS, Kinesis or DynamoDB Streams event with `Records`/);
  });
});

describe('the kill switch', () => {
  it('IDEMPOTENCY_KIT_DISABLED=1 runs every request unprotected (said loudly); with NODE_ENV=production it is refused unless its value is force', async () => {
    process.env.IDEMPOTENCY_KIT_DISABLED = '1';
    const handler = withIdempotency(order, { store: memory() });
    await handler(httpEvent('off', '{}'), context());
    await handler(httpEvent('off', '{}'), context());
    expect(runs).toBe(2);
    const fn = idempotent(async () => ++runs, { store: memory(), key: () => 'same' });
    await fn({}, context());
    await fn({}, context());
    expect(runs).toBe(4);
    const env = process.env.NODE_ENV;
    const store = memory();
    process.env.NODE_ENV = 'production';
    try {
      expect(() => withIdempotency(order, { store })).toThrow(/refusing IDEMPOTENCY_KIT_DISABLED=1 with NODE_ENV=production.*=force/);
      expect(() => idempotent(async () => 1, { store, key: () => 'k' })).toThrow(/refusing IDEMPOTENCY_KIT_DISABLED=1/);
      process.env.IDEMPOTENCY_KIT_DISABLED = 'force';
      expect(() => withIdempotency(order, { store })).not.toThrow();
      process.env.IDEMPOTENCY_KIT_DISABLED = 'maybe';
      expect(() => withIdempotency(order, { store })).toThrow('Expected IDEMPOTENCY_KIT_DISABLED to be 1, true, force, 0 or false, got "maybe"');
    } finally {
      process.env.NODE_ENV = env;
    }
  });
});

/** The keys of a store's live records (the test looks at the one record it made). */
async function listKeys(store: IdempotencyStore): Promise<string[]> {
  const page = await store.scan!({ limit: 100 });
  return page.records.map((r) => r.key);
}

describe('the local cache of completed records', () => {
  it('a repeat of a request this process saw completed replays without a store call; records in progress always go to the store', async () => {
    const { withLocalCache } = await import('../../src/local-cache.js');
    const inner = memory();
    const calls: string[] = [];
    const counted: IdempotencyStore = {
      name: 'counted',
      claim: (...args) => (calls.push('claim'), inner.claim(...args)),
      get: (...args) => (calls.push('get'), inner.get(...args)),
      complete: (...args) => (calls.push('complete'), inner.complete(...args)),
      release: (...args) => (calls.push('release'), inner.release(...args)),
      extend: (...args) => (calls.push('extend'), inner.extend(...args)),
      close: () => inner.close(),
      delete: (key) => (calls.push('delete'), inner.delete!(key)),
    };
    const store = withLocalCache(counted, { maxEntries: 2 });
    const handler = withIdempotency(order, { store, waitMs: 0 });
    await handler(httpEvent('c1', '{}'), context());
    expect(calls).toEqual(['claim', 'complete']);
    calls.length = 0;
    const replay = (await handler(httpEvent('c1', '{}'), context())) as LambdaHttpResult;
    expect(replay.headers!['idempotent-replayed']).toBe('true');
    expect(calls).toEqual([]); // served from the cache
    // Another body under the key: still refused (the cached record has its fingerprint).
    expect(((await handler(httpEvent('c1', '{"other":1}'), context())) as LambdaHttpResult).statusCode).toBe(422);
    // Bounded: two more keys push c1 out; its next repeat reads the store again.
    await handler(httpEvent('c2', '{}'), context());
    await handler(httpEvent('c3', '{}'), context());
    calls.length = 0;
    await handler(httpEvent('c1', '{}'), context());
    expect(calls).toEqual(['claim']);
    // A record in progress is never cached: each claim on it asks the store.
    calls.length = 0;
    await store.claim('p', { token: 't1', fingerprint: 'f', createdAt: Date.now() }, 5000);
    expect(await store.claim('p', { token: 't2', fingerprint: 'f', createdAt: Date.now() }, 5000)).toMatchObject({ claimed: false, record: { state: 'processing', token: 't1' } });
    expect(calls).toEqual(['claim', 'claim']);
    // A deleted record leaves the cache.
    const [someKey] = await listKeys(inner);
    await store.get(someKey!);
    await store.delete!(someKey!);
    calls.length = 0;
    await store.get(someKey!);
    expect(calls).toEqual(['get']);
    expect(runs).toBe(3);
    expect(() => withLocalCache(inner, { maxEntries: 0 })).toThrow('Expected `maxEntries` to be a positive integer, got 0');
  });
});
