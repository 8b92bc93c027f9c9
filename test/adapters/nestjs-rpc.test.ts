/**
 * The Nest adapter on microservice message handlers (`@MessagePattern()`, `@EventPattern()`
 * from @nestjs/microservices): real NATS and RabbitMQ servers, Nest's testing module, Nest's
 * own client proxies. The key comes from the message (NATS headers, RabbitMQ `messageId`,
 * a payload field); a repeat or a redelivery runs the handler once and gets its reply again.
 */
import 'reflect-metadata';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Controller, UseFilters, UseInterceptors, type ArgumentsHost, type INestMicroservice, type Type } from '@nestjs/common';
import {
  BaseRpcExceptionFilter,
  ClientProxyFactory,
  Ctx,
  EventPattern,
  MessagePattern,
  NatsRecordBuilder,
  Payload,
  RmqRecordBuilder,
  RpcException,
  Transport,
  type ClientProxy,
  type RmqContext,
} from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import { headers as natsHeaders, type NatsConnection } from '@nats-io/transport-node';
import { firstValueFrom, interval, lastValueFrom, map, take, toArray, type Observable } from 'rxjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { memoryStore } from '../../drivers/memory.js';
import { createStore } from '../../drivers/create-store.js';
import { isIdempotencyError } from '../../src/errors.js';
import type { IdempotencyStore } from '../../src/store.js';
import {
  Idempotent,
  IdempotencyInterceptor,
  IdempotencyModule,
  type IdempotencyModuleOptions,
  type RpcRefusal,
} from '../../adapters/nestjs/index.js';
import { importsFromSources } from '../helpers/package-imports.js';
import { AMQP_URL, REDIS_URL, serviceAvailable } from '../helpers/services.js';

const root = fileURLToPath(new URL('../../', import.meta.url));

const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
const natsUp = await serviceAvailable('NATS', NATS_URL);
const rabbitUp = await serviceAvailable('RabbitMQ', AMQP_URL);
const redisUp = await serviceAvailable('Redis', REDIS_URL);

/** A promise with its resolve, to wait for what a handler or a hook reports. */
function signal() {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

/** What the handlers of one app saw. */
class Seen {
  runs = new Map<string, number>();
  entered = new Map<string, ReturnType<typeof signal>>();
  gates = new Map<string, Promise<void>>();
  watchers: Array<{ name: string; n: number; resolve: () => void }> = [];
  hit(name: string): number {
    const n = (this.runs.get(name) ?? 0) + 1;
    this.runs.set(name, n);
    this.entered.get(name)?.resolve();
    for (const w of this.watchers) if (w.name === name && w.n === n) w.resolve();
    return n;
  }
  /** Resolves when the handler of `name` has run `n` times. */
  reach(name: string, n: number): Promise<void> {
    return new Promise((resolve) => this.watchers.push({ name, n, resolve }));
  }
  count(name: string): number {
    return this.runs.get(name) ?? 0;
  }
  /** Resolves when the handler of `name` is entered; the handler then waits for `gate`. */
  hold(name: string, gate: Promise<void>): Promise<void> {
    const s = signal();
    this.entered.set(name, s);
    this.gates.set(name, gate);
    return s.promise;
  }
}

const refusalOf = async (reply: Promise<unknown>): Promise<RpcRefusal> => {
  try {
    await reply;
  } catch (error) {
    return error as RpcRefusal;
  }
  throw new Error('expected the message to be refused');
};

/** What an ORM hands back: a class instance, sent by the transport as its JSON. */
class OrderEntity {
  constructor(
    readonly id: number,
    readonly sku: string,
  ) {}
  get label(): string {
    return `#${this.id}`;
  }
  toJSON() {
    return { id: this.id, sku: this.sku, label: this.label };
  }
}

/** NATS: the controller, with subjects of its own for this run. */
function natsController(run: string, seen: Seen, replays: (key: string) => void, events: string[], eventSeen: (type: string) => void): Type<unknown> {
  @Controller()
  @Idempotent()
  class NatsOrders {
    @MessagePattern(`${run}.orders.create`)
    async create(@Payload() data: { sku: string; key?: string }) {
      const n = seen.hit(`create:${data.sku}`);
      await seen.gates.get(`create:${data.sku}`);
      return { run: n, sku: data.sku, at: new Date(0) };
    }

    @MessagePattern(`${run}.orders.busy`)
    @Idempotent({ waitMs: 0 })
    async busy(@Payload() data: { sku: string }) {
      seen.hit(`busy:${data.sku}`);
      await seen.gates.get(`busy:${data.sku}`);
      return { ok: true };
    }

    @MessagePattern(`${run}.orders.entity`)
    entity(@Payload() data: { sku: string }) {
      return new OrderEntity(seen.hit(`entity:${data.sku}`), data.sku);
    }

    @EventPattern(`${run}.orders.cyclic`)
    @Idempotent({ onEvent: (event) => (events.push(event.type), eventSeen(event.type)) })
    cyclic(@Payload() data: { sku?: string }) {
      seen.hit(`cyclic:${data.sku}`);
      const value: { self?: unknown } = {};
      value.self = value;
      return value;
    }

    @MessagePattern(`${run}.orders.twiceBound`)
    @UseInterceptors(IdempotencyInterceptor)
    twiceBound(@Payload() data: { sku: string }) {
      return { run: seen.hit(`twiceBound:${data.sku}`) };
    }

    @MessagePattern(`${run}.orders.fail`)
    fail(@Payload() data: { sku: string }) {
      if (seen.hit(`fail:${data.sku}`) === 1) throw new Error('the first attempt fails');
      return { ok: true, sku: data.sku };
    }

    @MessagePattern(`${run}.orders.stream`)
    stream(@Payload() data: { sku: string }): Observable<number> {
      const n = seen.hit(`stream:${data.sku}`);
      return interval(1).pipe(
        take(3),
        map((i) => n * 10 + i),
      );
    }

    @MessagePattern(`${run}.orders.byField`)
    @Idempotent({ rpc: { key: 'order.id' } })
    byField(@Payload() data: { order: { id: number; amount: number } }) {
      return { run: seen.hit(`byField:${data.order.id}`), amount: data.order.amount };
    }

    @MessagePattern(`${run}.orders.tenant`)
    @Idempotent({ rpc: { key: 'ref', scope: (data) => (data as { tenant?: string }).tenant } })
    tenant(@Payload() data: { ref: string; tenant: string }) {
      return { run: seen.hit(`tenant:${data.ref}`), tenant: data.tenant };
    }

    @MessagePattern(`${run}.orders.optional`)
    @Idempotent({ rpc: { required: false } })
    optional(@Payload() data: { sku: string }) {
      return { run: seen.hit(`optional:${data.sku}`) };
    }

    @EventPattern(`${run}.orders.created`)
    @Idempotent({ rpc: { onReplay: (data) => replays((data as { sku: string }).sku) } })
    created(@Payload() data: { sku?: string }) {
      seen.hit(`created:${data.sku}`);
    }
  }
  return NatsOrders;
}

const natsRecord = (data: unknown, headers: Record<string, string> = {}) => {
  const h = natsHeaders();
  for (const [name, value] of Object.entries(headers)) h.set(name, value);
  return new NatsRecordBuilder(data).setHeaders(h).build();
};

const stores: Array<[string, () => IdempotencyStore, boolean]> = [
  ['memory', () => memoryStore(), true],
  ['redis', () => createStore(REDIS_URL), redisUp],
];

for (const [storeName, makeStore, storeUp] of stores) {
  describe.skipIf(!natsUp || !storeUp)(`NestJS microservices on NATS (${storeName} store)`, () => {
    const run = `idem-${randomUUID().slice(0, 8)}`;
    const seen = new Seen();
    const replayed = new Map<string, ReturnType<typeof signal>>();
    const events: string[] = [];
    const eventWaits = new Map<string, ReturnType<typeof signal>>();
    let app: INestMicroservice;
    let client: ClientProxy;
    let store: IdempotencyStore;
    const send = <T = unknown>(pattern: string, data: unknown, headers?: Record<string, string>): Promise<T> =>
      firstValueFrom(client.send<T>(`${run}.orders.${pattern}`, headers ? natsRecord(data, headers) : data));

    beforeAll(async () => {
      store = makeStore();
      const moduleRef = await Test.createTestingModule({
        imports: [IdempotencyModule.forRoot({ store, waitMs: 5000 })],
        controllers: [natsController(run, seen, (sku) => replayed.get(sku)?.resolve(), events, (type) => eventWaits.get(type)?.resolve())],
      }).compile();
      app = moduleRef.createNestMicroservice({ transport: Transport.NATS, options: { servers: [NATS_URL] } });
      app.useLogger(false);
      await app.listen();
      // The subscriptions are on the server before the first request.
      await app.unwrap<NatsConnection>().flush();
      client = ClientProxyFactory.create({ transport: Transport.NATS, options: { servers: [NATS_URL] } });
      await client.connect();
    });
    afterAll(async () => {
      await client?.close();
      await app?.close();
      await store?.close();
    });

    it('H1 a message sent twice with one Idempotency-Key header runs its handler once; both get the same reply', async () => {
      const key = randomUUID();
      const first = await send('create', { sku: 'twice' }, { 'Idempotency-Key': key });
      const second = await send('create', { sku: 'twice' }, { 'Idempotency-Key': key });
      expect(first).toEqual({ run: 1, sku: 'twice', at: new Date(0).toISOString() });
      expect(second).toEqual(first);
      expect(seen.count('create:twice')).toBe(1);
    });

    it('H1 the Nats-Msg-Id header is a key too', async () => {
      const key = randomUUID();
      const first = await send('create', { sku: 'msgid' }, { 'Nats-Msg-Id': key });
      expect(await send('create', { sku: 'msgid' }, { 'Nats-Msg-Id': key })).toEqual(first);
      expect(seen.count('create:msgid')).toBe(1);
    });

    it('C1 many parallel sends of one key, while the first runs, run the handler once and all get its reply', async () => {
      const key = randomUUID();
      const gate = signal();
      const entered = seen.hold('create:storm', gate.promise);
      const first = send('create', { sku: 'storm' }, { 'Idempotency-Key': key });
      await entered;
      const duplicates = Array.from({ length: 24 }, () => send('create', { sku: 'storm' }, { 'Idempotency-Key': key }));
      gate.resolve();
      const replies = await Promise.all([first, ...duplicates]);
      expect(seen.count('create:storm')).toBe(1);
      for (const reply of replies) expect(reply).toEqual(replies[0]);
    });

    it('C1 parallel sends of different keys run once each', async () => {
      const keys = Array.from({ length: 8 }, () => randomUUID());
      const replies = await Promise.all(keys.flatMap((key, i) => [0, 1].map(() => send<{ sku: string }>('create', { sku: `each-${i}` }, { 'Idempotency-Key': key }))));
      for (let i = 0; i < keys.length; i++) expect(seen.count(`create:each-${i}`)).toBe(1);
      expect(new Set(replies.map((r) => r.sku)).size).toBe(keys.length);
    });

    it('H4 a message without a key is refused with key-missing, its handler not run', async () => {
      const refusal = await refusalOf(send('create', { sku: 'nokey' }));
      expect(refusal).toMatchObject({ status: 'error', code: 'key-missing', retryable: false });
      expect(seen.count('create:nokey')).toBe(0);
    });

    it('H4 with rpc.required false a message without a key runs unprotected', async () => {
      expect(await send('optional', { sku: 'o' })).toEqual({ run: 1 });
      expect(await send('optional', { sku: 'o' })).toEqual({ run: 2 });
    });

    it('H7 a duplicate while the first runs, with wait 0, is refused with a retryable request-in-progress', async () => {
      const key = randomUUID();
      const gate = signal();
      const entered = seen.hold('busy:b', gate.promise);
      const first = send('busy', { sku: 'b' }, { 'Idempotency-Key': key });
      await entered;
      const refusal = await refusalOf(send('busy', { sku: 'b' }, { 'Idempotency-Key': key }));
      gate.resolve();
      expect(refusal).toMatchObject({ status: 'error', code: 'request-in-progress', retryable: true });
      expect(await first).toEqual({ ok: true });
      expect(await send('busy', { sku: 'b' }, { 'Idempotency-Key': key })).toEqual({ ok: true });
      expect(seen.count('busy:b')).toBe(1);
    });

    it('H1 the interceptor bound a second time (@UseInterceptors) takes a message once: a run, then a replay', async () => {
      const key = randomUUID();
      expect(await send('twiceBound', { sku: 't' }, { 'Idempotency-Key': key })).toEqual({ run: 1 });
      expect(await send('twiceBound', { sku: 't' }, { 'Idempotency-Key': key })).toEqual({ run: 1 });
      expect(seen.count('twiceBound:t')).toBe(1);
    });

    it('H9 a thrown error releases the key: the next delivery runs the handler again', async () => {
      const key = randomUUID();
      const refusal = await refusalOf(send('fail', { sku: 'f' }, { 'Idempotency-Key': key }));
      expect(refusal).toMatchObject({ status: 'error' });
      expect(await send('fail', { sku: 'f' }, { 'Idempotency-Key': key })).toEqual({ ok: true, sku: 'f' });
      expect(await send('fail', { sku: 'f' }, { 'Idempotency-Key': key })).toEqual({ ok: true, sku: 'f' });
      expect(seen.count('fail:f')).toBe(2);
    });

    it('H5 a class instance is stored as the JSON the transport sends, and replayed the same', async () => {
      const key = randomUUID();
      const first = await send('entity', { sku: 'e' }, { 'Idempotency-Key': key });
      expect(first).toEqual({ id: 1, sku: 'e', label: '#1' });
      expect(await send('entity', { sku: 'e' }, { 'Idempotency-Key': key })).toEqual(first);
      expect(seen.count('entity:e')).toBe(1);
    });

    it('H5 H12 a result that is not even JSON (a cycle) is answered as it is; the key completes without it (result-not-stored), the redelivery is refused as not replayable, never run twice', async () => {
      const key = randomUUID();
      const emit = () => firstValueFrom(client.emit(`${run}.orders.cyclic`, natsRecord({ sku: 'c' }, { 'Idempotency-Key': key })));
      const completed = signal();
      const refused = signal();
      eventWaits.set('completed', completed);
      eventWaits.set('not-replayable', refused);
      await emit();
      await completed.promise;
      await emit();
      await refused.promise;
      expect(seen.count('cyclic:c')).toBe(1);
      expect(events).toEqual(expect.arrayContaining(['claimed', 'result-not-stored', 'completed', 'not-replayable']));
      expect(events).not.toContain('released');
    });

    it('H5 every value of an Observable is stored and replayed', async () => {
      const key = randomUUID();
      const first = await lastValueFrom(client.send(`${run}.orders.stream`, natsRecord({ sku: 's' }, { 'Idempotency-Key': key })).pipe(toArray()));
      const again = await lastValueFrom(client.send(`${run}.orders.stream`, natsRecord({ sku: 's' }, { 'Idempotency-Key': key })).pipe(toArray()));
      expect(first).toEqual([10, 11, 12]);
      expect(again).toEqual(first);
      expect(seen.count('stream:s')).toBe(1);
    });

    it('H2 rpc.key names a payload field; another payload under a used key is refused with key-reused', async () => {
      const id = Math.floor(Math.random() * 1e9);
      const first = await send('byField', { order: { id, amount: 5 } });
      expect(await send('byField', { order: { amount: 5, id } })).toEqual(first);
      const refusal = await refusalOf(send('byField', { order: { id, amount: 6 } }));
      expect(refusal).toMatchObject({ status: 'error', code: 'key-reused', retryable: false });
      expect(seen.count(`byField:${id}`)).toBe(1);
    });

    it('S1 rpc.scope keeps two tenants apart; a message without one is refused with scope-required', async () => {
      const ref = randomUUID();
      const a = await send('tenant', { ref, tenant: 'a' });
      const b = await send('tenant', { ref, tenant: 'b' });
      expect(a).toEqual({ run: 1, tenant: 'a' });
      expect(b).toEqual({ run: 2, tenant: 'b' });
      expect(await send('tenant', { ref, tenant: 'a' })).toEqual(a);
      expect(await refusalOf(send('tenant', { ref }))).toMatchObject({ code: 'scope-required' });
      expect(seen.count(`tenant:${ref}`)).toBe(2);
    });

    it('H1 an event emitted twice with one key runs its handler once; onReplay sees the repeat', async () => {
      const key = randomUUID();
      const repeat = signal();
      replayed.set('evt', repeat);
      const firstRun = seen.reach('created:evt', 1);
      const secondRun = seen.reach('created:evt', 2);
      await firstValueFrom(client.emit(`${run}.orders.created`, natsRecord({ sku: 'evt' }, { 'Idempotency-Key': key })));
      await firstRun;
      await firstValueFrom(client.emit(`${run}.orders.created`, natsRecord({ sku: 'evt' }, { 'Idempotency-Key': key })));
      // Whichever comes first: the replay (protected) or a second run (broken).
      await Promise.race([repeat.promise, secondRun]);
      expect(seen.count('created:evt')).toBe(1);
    });
  });
}

/** What an application does with a refused message on manual acks: settle it in its RPC exception filter. */
class SettleFilter extends BaseRpcExceptionFilter {
  constructor(private readonly seen: unknown[]) {
    super();
  }
  override catch(exception: unknown, host: ArgumentsHost) {
    this.seen.push(exception);
    const ctx = host.switchToRpc().getContext<RmqContext>();
    const retryable = (exception as { cause?: { retryable?: boolean } }).cause?.retryable === true;
    ctx.getChannelRef().nack(ctx.getMessage(), false, retryable);
    return super.catch(exception, host);
  }
}

/** RabbitMQ: manual acks (noAck: false); the first delivery of an event is nacked back once. */
function rmqController(seen: Seen, replays: (sku: string) => void, filtered: unknown[] = []): Type<unknown> {
  const ack = (ctx: RmqContext) => ctx.getChannelRef().ack(ctx.getMessage());
  @Controller()
  @UseFilters(new SettleFilter(filtered))
  @Idempotent({ rpc: { onReplay: (data, ctx) => (ack(ctx as RmqContext), replays((data as { sku: string }).sku)) } })
  class RmqOrders {
    @MessagePattern('orders.create')
    async create(@Payload() data: { sku: string }, @Ctx() ctx: RmqContext) {
      const n = seen.hit(`create:${data.sku}`);
      await seen.gates.get(`create:${data.sku}`);
      ack(ctx);
      return { run: n, sku: data.sku };
    }

    @EventPattern('orders.created')
    created(@Payload() data: { sku?: string }, @Ctx() context: unknown) {
      const ctx = context as RmqContext;
      seen.hit(`created:${data.sku}`);
      // Processed, but the ack is lost: the broker hands the message to a consumer again.
      if (!ctx.getMessage().fields.redelivered) ctx.getChannelRef().nack(ctx.getMessage(), false, true);
      else ack(ctx);
    }
  }
  return RmqOrders;
}

describe.skipIf(!rabbitUp)('NestJS microservices on RabbitMQ (manual acks)', () => {
  const queue = `idem-nest-${randomUUID()}`;
  const seen = new Seen();
  const filtered: unknown[] = [];
  const replayed = new Map<string, ReturnType<typeof signal>>();
  let app: INestMicroservice;
  let client: ClientProxy;
  const options = { urls: [AMQP_URL], queue, queueOptions: { durable: false, autoDelete: true } };
  const record = (data: unknown, messageId?: string) => new RmqRecordBuilder(data).setOptions(messageId ? { messageId } : {}).build();
  const send = <T = unknown>(data: unknown, messageId?: string) => firstValueFrom(client.send<T>('orders.create', record(data, messageId)));

  beforeAll(async () => {
    const moduleOptions: IdempotencyModuleOptions = { store: memoryStore(), waitMs: 5000 };
    const moduleRef = await Test.createTestingModule({
      imports: [IdempotencyModule.forRoot(moduleOptions)],
      controllers: [rmqController(seen, (sku) => replayed.get(sku)?.resolve(), filtered)],
    }).compile();
    app = moduleRef.createNestMicroservice({ transport: Transport.RMQ, options: { ...options, noAck: false } });
    app.useLogger(false);
    await app.listen();
    client = ClientProxyFactory.create({ transport: Transport.RMQ, options });
    await client.connect();
  });
  afterAll(async () => {
    await client?.close();
    await app?.close();
  });

  it('H1 a message sent twice with one messageId runs its handler once; both get the same reply', async () => {
    const id = randomUUID();
    const first = await send({ sku: 'twice' }, id);
    expect(await send({ sku: 'twice' }, id)).toEqual(first);
    expect(first).toEqual({ run: 1, sku: 'twice' });
    expect(seen.count('create:twice')).toBe(1);
  });

  it('H1 a redelivered event (nacked back after its handler ran) runs its handler once; onReplay settles the redelivery', async () => {
    const id = randomUUID();
    const repeat = signal();
    replayed.set('redelivered', repeat);
    const secondRun = seen.reach('created:redelivered', 2);
    await firstValueFrom(client.emit('orders.created', record({ sku: 'redelivered' }, id)));
    await Promise.race([repeat.promise, secondRun]);
    expect(seen.count('created:redelivered')).toBe(1);
  });

  it('C1 many parallel sends of one messageId run the handler once; all get its reply', async () => {
    const id = randomUUID();
    const gate = signal();
    const entered = seen.hold('create:storm', gate.promise);
    const first = send({ sku: 'storm' }, id);
    await entered;
    const duplicates = Array.from({ length: 16 }, () => send({ sku: 'storm' }, id));
    gate.resolve();
    const replies = await Promise.all([first, ...duplicates]);
    expect(seen.count('create:storm')).toBe(1);
    for (const reply of replies) expect(reply).toEqual(replies[0]);
  });

  it('C1 different messageIds run once each', async () => {
    const ids = Array.from({ length: 6 }, () => randomUUID());
    await Promise.all(ids.map((id, i) => send({ sku: `each-${i}` }, id)));
    for (let i = 0; i < ids.length; i++) expect(seen.count(`create:each-${i}`)).toBe(1);
  });

  it('H4 a message without a messageId is refused with key-missing, its handler not run', async () => {
    const refusal = await refusalOf(send({ sku: 'nokey' }));
    expect(refusal).toMatchObject({ status: 'error', code: 'key-missing', retryable: false });
    expect(seen.count('create:nokey')).toBe(0);
    // The application's exception filter got it (and settled it): an RpcException, the layer's error its cause.
    const exception = filtered.at(-1) as RpcException & { cause?: unknown };
    expect(exception).toBeInstanceOf(RpcException);
    expect(exception.getError()).toEqual(refusal);
    expect(isIdempotencyError(exception.cause)).toBe(true);
    expect((exception.cause as { code?: string }).code).toBe('key-missing');
  });
});

describe.skipIf(!rabbitUp || !redisUp)('NestJS microservices on RabbitMQ: two consumers of one queue, one Redis store', () => {
  const queue = `idem-nest-two-${randomUUID()}`;
  const seen = new Seen();
  const apps: INestMicroservice[] = [];
  const stores: IdempotencyStore[] = [];
  let client: ClientProxy;
  const options = { urls: [AMQP_URL], queue, queueOptions: { durable: false, autoDelete: true } };
  const send = <T = unknown>(data: unknown, messageId: string) =>
    firstValueFrom(client.send<T>('orders.create', new RmqRecordBuilder(data).setOptions({ messageId }).build()));

  beforeAll(async () => {
    for (let i = 0; i < 2; i++) {
      // Each consumer its own store client, as two processes would have.
      const store = createStore(REDIS_URL);
      stores.push(store);
      const moduleRef = await Test.createTestingModule({
        imports: [IdempotencyModule.forRoot({ store, waitMs: 5000 })],
        controllers: [rmqController(seen, () => {})],
      }).compile();
      const app = moduleRef.createNestMicroservice({ transport: Transport.RMQ, options: { ...options, noAck: false, prefetchCount: 50 } });
      app.useLogger(false);
      await app.listen();
      apps.push(app);
    }
    client = ClientProxyFactory.create({ transport: Transport.RMQ, options });
    await client.connect();
  });
  afterAll(async () => {
    await client?.close();
    for (const app of apps) await app.close();
    for (const store of stores) await store.close();
  });

  it('C1 parallel sends of one messageId, spread over both consumers while the first runs, run the handler once', async () => {
    const id = randomUUID();
    const gate = signal();
    const entered = seen.hold('create:two', gate.promise);
    const first = send({ sku: 'two' }, id);
    await entered;
    const duplicates = Array.from({ length: 30 }, () => send({ sku: 'two' }, id));
    gate.resolve();
    const replies = await Promise.all([first, ...duplicates]);
    expect(seen.count('create:two')).toBe(1);
    for (const reply of replies) expect(reply).toEqual({ run: 1, sku: 'two' });
  });

  it('C1 many messages with their own ids, each sent twice at once, run once each', async () => {
    const ids = Array.from({ length: 20 }, () => randomUUID());
    await Promise.all(ids.flatMap((id, i) => [send({ sku: `pair-${i}` }, id), send({ sku: `pair-${i}` }, id)]));
    for (let i = 0; i < ids.length; i++) expect(seen.count(`create:pair-${i}`)).toBe(1);
  });
});

describe.skipIf(!natsUp)('NestJS microservices in a hybrid application (HTTP and NATS)', () => {
  // @Idempotent() binds the interceptor to the handler: Nest's inheritAppConfig (which gives a
  // connected microservice the application's global enhancers) makes no difference.
  it.each([true, false])('H1 with inheritAppConfig %s the connected microservice\'s handlers are protected by the same module', async (inheritAppConfig) => {
    const subject = `idem-hybrid-${randomUUID().slice(0, 8)}.ship`;
    let runs = 0;
    @Controller()
    @Idempotent()
    class Hybrid {
      @MessagePattern(subject)
      ship() {
        return { run: ++runs };
      }
    }
    const moduleRef = await Test.createTestingModule({
      imports: [IdempotencyModule.forRoot({ store: memoryStore(), scope: 'shared' })],
      controllers: [Hybrid],
    }).compile();
    const app = moduleRef.createNestApplication({ logger: false });
    const microservice = app.connectMicroservice({ transport: Transport.NATS, options: { servers: [NATS_URL] } }, { inheritAppConfig });
    const client = ClientProxyFactory.create({ transport: Transport.NATS, options: { servers: [NATS_URL] } });
    try {
      await app.startAllMicroservices();
      await app.init();
      await microservice.unwrap<NatsConnection>().flush();
      await client.connect();
      const key = randomUUID();
      const send = () => firstValueFrom(client.send(subject, natsRecord({}, { 'Idempotency-Key': key })));
      expect(await send()).toEqual({ run: 1 });
      expect(await send()).toEqual({ run: 1 });
      expect(runs).toBe(1);
    } finally {
      await client.close();
      await app.close();
    }
  });
});

describe('NestJS microservices: bad rpc options', () => {
  it('a bad rpc option fails the module start with a TypeError naming it', async () => {
    @Controller()
    class Bad {
      @MessagePattern('bad.pattern')
      @Idempotent({ rpc: { key: 42 as unknown as string } })
      handle() {
        return 1;
      }
    }
    const moduleRef = Test.createTestingModule({ imports: [IdempotencyModule.forRoot({ store: memoryStore() })], controllers: [Bad] });
    const compiled = await moduleRef.compile();
    await expect(compiled.createNestMicroservice({ transport: Transport.TCP, options: { port: 0 } }).init()).rejects.toThrow(
      /Bad\.handle: Expected `rpc\.key` to be a payload field name or a function/,
    );
    expect(() => IdempotencyModule.forRoot({ store: memoryStore(), rpc: { scope: 'everyone' as 'shared' } })).toThrow(
      /Expected `rpc\.scope` to be a function \(data, context\) => tenant or 'shared'/,
    );
    expect(() => IdempotencyModule.forRoot({ store: memoryStore(), rpc: { onReplay: true as unknown as () => void } })).toThrow(/rpc\.onReplay/);
    expect(() => IdempotencyModule.forRoot({ store: memoryStore(), rpc: { keyField: 'id' } as never })).toThrow(/Unknown `rpc` option `keyField`/);
  });
});

describe.skipIf(!natsUp)('docs/adapters/nestjs.md: the microservices example runs as written', () => {
  it('H1 a message sent twice with one Idempotency-Key ships once; another key ships again', async () => {
    const page = readFileSync(join(root, 'docs', 'adapters', 'nestjs.md'), 'utf8');
    const at = page.indexOf('## Microservices\n');
    expect(at).toBeGreaterThan(-1);
    const code = /```ts\n([\s\S]*?)```/.exec(page.slice(at))?.[1];
    expect(code).toContain("@MessagePattern('orders.ship')");
    const subject = `idem-docs-${randomUUID().slice(0, 8)}.orders.ship`;
    // Decorators need the project's tsconfig (experimentalDecorators): a folder under test/.
    const home = join(root, 'test', `docs-copy-${randomUUID().slice(0, 8)}`);
    mkdirSync(home, { recursive: true });
    const file = join(home, 'microservice.mts');
    writeFileSync(file, importsFromSources(code!.replaceAll("'orders.ship'", JSON.stringify(subject))));
    const child = spawn(process.execPath, ['--import', 'tsx', file], {
      cwd: root,
      // The page's default store (memory://), as a user who copies it gets it.
      env: { ...Object.fromEntries(Object.entries(process.env).filter(([name]) => name !== 'IDEMPOTENCY_STORE')), NATS_URL },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    const client = ClientProxyFactory.create({ transport: Transport.NATS, options: { servers: [NATS_URL] } });
    try {
      await client.connect();
      const ship = (key: string) => firstValueFrom(client.send(subject, natsRecord({ sku: 'A1' }, { 'Idempotency-Key': key })));
      const key = randomUUID();
      // Until the example has subscribed, NATS answers "no responders" (nothing ran).
      let first: unknown;
      for (let attempt = 0; first === undefined; attempt++) {
        if (child.exitCode !== null || attempt > 200) throw new Error(`the example did not start:\n${output}`);
        first = await ship(key).catch(async () => {
          await new Promise((resolve) => setTimeout(resolve, 50));
          return undefined;
        });
      }
      expect(first, output).toEqual({ shipment: 1, sku: 'A1' });
      expect(await ship(key)).toEqual(first);
      expect(await ship(randomUUID())).toEqual({ shipment: 2, sku: 'A1' });
    } finally {
      await client.close();
      child.kill('SIGTERM');
      rmSync(home, { recursive: true, force: true });
    }
  }, 30_000);
});
