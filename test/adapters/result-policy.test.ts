/**
 * One policy for results that are not stored, through every entry point of the "run once,
 * store the result" flow: `idempotent()`, a NestJS GraphQL mutation, a NestJS message
 * handler on NATS, and a BullMQ processor on Redis. A result over the size limit, or one
 * the entry point's stored form cannot keep, is delivered as it is, the key completes
 * without it (a `result-not-stored` event with the reason), and the repeat is refused as
 * `response-not-replayable`: the work ran once, and the key is never left in flight.
 */
import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { Controller, Inject, type INestMicroservice } from '@nestjs/common';
import { Field, ID, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { ClientProxyFactory, EventPattern, MessagePattern, NatsRecordBuilder, Payload, Transport, type ClientProxy } from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import { headers as natsHeaders, type NatsConnection } from '@nats-io/transport-node';
import { Queue, QueueEvents, Worker, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import { firstValueFrom } from 'rxjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { idempotentProcessor } from '../../consumers/bullmq.js';
import { createStore } from '../../drivers/create-store.js';
import { memoryStore } from '../../drivers/memory.js';
import { Idempotent, IdempotencyModule } from '../../adapters/nestjs/index.js';
import { isIdempotencyError } from '../../src/errors.js';
import type { IdempotencyEvent } from '../../src/events.js';
import { idempotent } from '../../src/idempotent.js';
import type { IdempotencyStore } from '../../src/store.js';
import { REDIS_URL, serviceAvailable } from '../helpers/services.js';
import { COUNTER, Counter, startGraphqlApp, type Started } from './nest-graphql-app.js';

const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
const natsUp = await serviceAvailable('NATS', NATS_URL);
const redisUp = await serviceAvailable('Redis', REDIS_URL);

/** The size limit every entry point gets, in bytes. */
const LIMIT = 256;
const BIG = 'x'.repeat(4 * LIMIT);

type Kind = 'too-large' | 'not-storable';

/** A value GraphQL serializes (a String field reads `valueOf()`) but that is a class instance, which the store refuses. */
class Label {
  constructor(readonly text: string) {}
  valueOf(): string {
    return this.text;
  }
}

@ObjectType()
class Receipt {
  @Field(() => ID)
  id!: string;
  @Field(() => String)
  text!: unknown;
}

@Resolver(() => Receipt)
class ReceiptResolver {
  constructor(@Inject(COUNTER) private readonly counter: Counter) {}
  @Query(() => String)
  ping(): string {
    return 'pong';
  }
  @Mutation(() => Receipt)
  @Idempotent()
  receipt(): Receipt {
    this.counter.hit();
    return { id: 'r-1', text: BIG };
  }
  @Mutation(() => Receipt)
  @Idempotent()
  labelled(): Receipt {
    this.counter.hit();
    return { id: 'r-1', text: new Label('hello') };
  }
}

/** What each entry point gives the table: run the work under a key, repeat it, and what it saw. */
interface Entry {
  /** The first call with `key`: what the caller got (undefined where nothing answers, a NATS event). */
  first(kind: Kind, key: string): Promise<unknown>;
  /** The same call again: the code of its refusal. */
  repeat(kind: Kind, key: string): Promise<string>;
  /** How often the work ran for `key`. */
  runs(key: string): number;
  events: IdempotencyEvent[];
  /** What the first caller gets, as the entry point delivers it. */
  delivered(kind: Kind): unknown;
}

const codeOf = (error: unknown): string => {
  if (isIdempotencyError(error)) return error.code;
  const code = (error as { code?: unknown })?.code;
  return typeof code === 'string' ? code : String(error);
};

/** Wait (bounded) until `events` has one of `type` for `key`. */
async function eventFor(events: IdempotencyEvent[], key: string, type: IdempotencyEvent['type']): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!events.some((e) => e.key === key && e.type === type)) {
    if (Date.now() > deadline) throw new Error(`no ${type} event for ${key}: saw ${events.filter((e) => e.key === key).map((e) => e.type).join(', ')}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** A class instance: storable by no entry point that stores values as they are. */
class Invoice {
  constructor(readonly total: number) {}
}

function functionEntry(store: IdempotencyStore): Entry {
  const runs = new Map<string, number>();
  const events: IdempotencyEvent[] = [];
  const results = { 'too-large': { big: BIG }, 'not-storable': { invoice: new Invoice(5) } };
  const handles = Object.fromEntries(
    (['too-large', 'not-storable'] as const).map((kind) => [
      kind,
      idempotent(
        (key: string) => {
          runs.set(key, (runs.get(key) ?? 0) + 1);
          return results[kind];
        },
        { store, key: (key) => key, maxResultBytes: LIMIT, onEvent: (e) => events.push(e) },
      ),
    ]),
  ) as Record<Kind, (key: string) => Promise<unknown>>;
  return {
    events,
    first: (kind, key) => handles[kind](key),
    repeat: (kind, key) => handles[kind](key).then(() => 'replayed', codeOf),
    runs: (key) => runs.get(key) ?? 0,
    delivered: (kind) => results[kind],
  };
}

async function graphqlEntry(store: IdempotencyStore): Promise<Entry & { app: Started }> {
  const app = await startGraphqlApp(store, { scope: 'shared', maxResponseBytes: LIMIT }, [ReceiptResolver]);
  const runsByKey = new Map<string, number>();
  const mutation = (kind: Kind) => (kind === 'too-large' ? 'mutation { receipt { id text } }' : 'mutation { labelled { id text } }');
  return {
    app,
    events: app.events,
    async first(kind, key) {
      const before = app.counter.n;
      const { body } = await app.request(mutation(kind), { key });
      runsByKey.set(key, (runsByKey.get(key) ?? 0) + app.counter.n - before);
      return body.data;
    },
    async repeat(kind, key) {
      const before = app.counter.n;
      const { body } = await app.request(mutation(kind), { key });
      runsByKey.set(key, (runsByKey.get(key) ?? 0) + app.counter.n - before);
      return String(body.errors?.[0]?.extensions?.code ?? 'replayed');
    },
    runs: (key) => runsByKey.get(key) ?? 0,
    delivered: (kind) => (kind === 'too-large' ? { receipt: { id: 'r-1', text: BIG } } : { labelled: { id: 'r-1', text: 'hello' } }),
  };
}

async function rpcEntry(store: IdempotencyStore): Promise<Entry & { close(): Promise<void> }> {
  const run = `policy-${randomUUID().slice(0, 8)}`;
  const runs = new Map<string, number>();
  const events: IdempotencyEvent[] = [];
  const hit = (key: string) => runs.set(key, (runs.get(key) ?? 0) + 1);
  @Controller()
  class Orders {
    // Answered: a reply too large to store.
    @MessagePattern(`${run}.big`)
    @Idempotent({ rpc: { key: 'key' } })
    big(@Payload() data: { key: string }) {
      hit(data.key);
      return { big: BIG };
    }
    // Not even the JSON the transport sends can keep a cycle: an event, nothing answers.
    @EventPattern(`${run}.cyclic`)
    @Idempotent({ rpc: { key: 'key' } })
    cyclic(@Payload() data: { key?: string }) {
      hit(String(data.key));
      const value: { self?: unknown } = {};
      value.self = value;
      return value;
    }
  }
  const moduleRef = await Test.createTestingModule({
    imports: [IdempotencyModule.forRoot({ store, maxResponseBytes: LIMIT, onEvent: (e) => events.push(e) })],
    controllers: [Orders],
  }).compile();
  const app: INestMicroservice = moduleRef.createNestMicroservice({ transport: Transport.NATS, options: { servers: [NATS_URL] } });
  app.useLogger(false);
  await app.listen();
  await app.unwrap<NatsConnection>().flush();
  const client: ClientProxy = ClientProxyFactory.create({ transport: Transport.NATS, options: { servers: [NATS_URL] } });
  await client.connect();
  const record = (key: string) => new NatsRecordBuilder({ key }).setHeaders(natsHeaders()).build();
  return {
    events,
    async first(kind, key) {
      if (kind === 'too-large') return firstValueFrom(client.send(`${run}.big`, record(key)));
      await firstValueFrom(client.emit(`${run}.cyclic`, record(key)));
      await eventFor(events, key, 'completed');
      return undefined;
    },
    async repeat(kind, key) {
      if (kind === 'too-large') return firstValueFrom(client.send(`${run}.big`, record(key))).then(() => 'replayed', codeOf);
      await firstValueFrom(client.emit(`${run}.cyclic`, record(key)));
      // An event has no reply: the refusal shows as the engine's `not-replayable` event.
      await eventFor(events, key, 'not-replayable');
      return 'response-not-replayable';
    },
    runs: (key) => runs.get(key) ?? 0,
    delivered: (kind) => (kind === 'too-large' ? { big: BIG } : undefined),
    async close() {
      await client.close();
      await app.close();
    },
  };
}

async function bullmqEntry(store: IdempotencyStore): Promise<Entry & { close(): Promise<void> }> {
  const runs = new Map<string, number>();
  const events: IdempotencyEvent[] = [];
  const connection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  const name = `policy-${randomUUID().slice(0, 8)}`;
  const prefix = `ik-policy-${name}`;
  const queue = new Queue<{ kind: Kind }>(name, { connection, prefix });
  const queueEvents = new QueueEvents(name, { connection: new Redis(REDIS_URL, { maxRetriesPerRequest: null }), prefix });
  const worker = new Worker<{ kind: Kind }>(
    name,
    idempotentProcessor(
      async (job: Job<{ kind: Kind }>) => {
        runs.set(job.id!, (runs.get(job.id!) ?? 0) + 1);
        return job.data.kind === 'too-large' ? { big: BIG } : { invoice: new Invoice(5) };
      },
      { store, maxResultBytes: LIMIT, onEvent: (e) => events.push(e) },
    ),
    { connection: new Redis(REDIS_URL, { maxRetriesPerRequest: null }), prefix },
  );
  await Promise.all([worker.waitUntilReady(), queueEvents.waitUntilReady()]);
  const add = (kind: Kind, key: string) => queue.add('work', { kind }, { jobId: key, removeOnComplete: true, removeOnFail: true });
  return {
    events,
    async first(kind, key) {
      return (await add(kind, key)).waitUntilFinished(queueEvents, 10_000);
    },
    async repeat(kind, key) {
      // BullMQ answers a failed job with its failedReason: `idempotency-kit: <code>: ...`.
      return (await add(kind, key)).waitUntilFinished(queueEvents, 10_000).then(
        () => 'replayed',
        (error: Error) => /idempotency-kit: ([a-z-]+):/.exec(error.message)?.[1] ?? error.message,
      );
    },
    runs: (key) => runs.get(key) ?? 0,
    // BullMQ keeps a job's return value as its JSON.
    delivered: (kind) => (kind === 'too-large' ? { big: BIG } : { invoice: { total: 5 } }),
    async close() {
      await worker.close();
      await queueEvents.close();
      await queue.obliterate({ force: true });
      await queue.close();
      connection.disconnect();
    },
  };
}

describe.skipIf(!natsUp || !redisUp)('one policy for results that are not stored, at every entry point (C1 H12)', () => {
  const entries = new Map<string, Entry>();
  const closers: Array<() => Promise<unknown>> = [];
  let redis: IdempotencyStore;

  beforeAll(async () => {
    redis = createStore(REDIS_URL, { namespace: `policy_${randomUUID().slice(0, 8)}` });
    closers.push(() => redis.close());
    entries.set('idempotent()', functionEntry(memoryStore()));
    const rpc = await rpcEntry(memoryStore());
    closers.push(() => rpc.close());
    entries.set('NestJS message handler (NATS)', rpc);
    const bull = await bullmqEntry(redis);
    closers.push(() => bull.close());
    entries.set('BullMQ processor', bull);
  });
  afterAll(async () => {
    for (const close of closers.reverse()) await close().catch(() => undefined);
  });

  const table: Array<[string, Kind]> = [];
  for (const entry of ['idempotent()', 'NestJS GraphQL mutation', 'NestJS message handler (NATS)', 'BullMQ processor']) {
    for (const kind of ['too-large', 'not-storable'] as const) table.push([entry, kind]);
  }

  it.each(table)('%s, a %s result: delivered, the key completed without it (result-not-stored), the repeat refused as response-not-replayable, run once', async (name, kind) => {
    // The GraphQL app is per test (its helper closes it after each).
    const entry = name === 'NestJS GraphQL mutation' ? await graphqlEntry(memoryStore()) : entries.get(name)!;
    const key = randomUUID();
    expect(await entry.first(kind, key)).toEqual(entry.delivered(kind));
    await eventFor(entry.events, key, 'completed');
    const mine = () => entry.events.filter((e) => e.key === key);
    expect(mine().map((e) => e.type)).toEqual(['claimed', 'result-not-stored', 'completed']);
    expect(mine()[1]).toMatchObject({ reason: kind, error: { code: 'result-not-storable' } });
    expect(await entry.repeat(kind, key)).toBe('response-not-replayable');
    expect(entry.runs(key)).toBe(1);
    expect(mine().map((e) => e.type)).not.toContain('released');
  });
});
