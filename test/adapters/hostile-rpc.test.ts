/**
 * NestJS message handlers attacked through their key spaces: controllers whose class names
 * a minifier made alike, handlers that share a method name, and an HTTP client on the same
 * store who sends, as its Idempotency-Key, the key a message handler would use (also as the
 * earlier releases spelled it: `nest-rpc:<Class>.<method>:<key>`). Real NATS, Nest's
 * testing module and client proxies; memory and Redis stores.
 */
import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Controller, type INestMicroservice, type Type } from '@nestjs/common';
import { ClientProxyFactory, EventPattern, MessagePattern, NatsRecordBuilder, Payload, Transport, type ClientProxy } from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import { headers as natsHeaders, type NatsConnection } from '@nats-io/transport-node';
import { firstValueFrom } from 'rxjs';
import { afterAll, describe, expect, it } from 'vitest';
import { withIdempotency } from '../../adapters/node.js';
import { Idempotent, IdempotencyModule } from '../../adapters/nestjs/index.js';
import { createStore } from '../../drivers/create-store.js';
import { memoryStore } from '../../drivers/memory.js';
import type { IdempotencyStore } from '../../src/store.js';
import { REDIS_URL, serviceAvailable } from '../helpers/services.js';

const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
const natsUp = await serviceAvailable('NATS', NATS_URL);
const redisUp = await serviceAvailable('Redis', REDIS_URL);

/** A controller class named as a minifier leaves it (`e`), with one `handle` method on `pattern`. */
function minified(pattern: string, runs: string[], tag: string, keySpace?: string, kind: 'message' | 'event' = 'message'): Type<unknown> {
  const Pattern = kind === 'message' ? MessagePattern : EventPattern;
  @Controller()
  @Idempotent(keySpace ? { rpc: { keySpace } } : {})
  class Handlers {
    @Pattern(pattern)
    handle(@Payload() data: { n: number }) {
      runs.push(`${tag}:${data.n}`);
      return `${tag}:${data.n}`;
    }
  }
  Reflect.defineMetadata('design:paramtypes', [Object], Handlers.prototype, 'handle');
  Object.defineProperty(Handlers, 'name', { value: 'e' });
  return Handlers;
}

const record = (data: unknown, key: string) => {
  const h = natsHeaders();
  h.set('Idempotency-Key', key);
  return new NatsRecordBuilder(data).setHeaders(h).build();
};

const closers: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  for (const close of closers.reverse()) await close();
});

async function start(store: IdempotencyStore, controllers: Type<unknown>[]): Promise<ClientProxy> {
  const moduleRef = await Test.createTestingModule({ imports: [IdempotencyModule.forRoot({ store })], controllers }).compile();
  const app: INestMicroservice = moduleRef.createNestMicroservice({ transport: Transport.NATS, options: { servers: [NATS_URL] } });
  app.useLogger(false);
  closers.push(() => app.close());
  await app.listen();
  await app.unwrap<NatsConnection>().flush();
  const client = ClientProxyFactory.create({ transport: Transport.NATS, options: { servers: [NATS_URL] } });
  await client.connect();
  closers.push(() => client.close());
  return client;
}

const stores: Array<[string, boolean, () => IdempotencyStore]> = [
  ['memory', true, () => memoryStore()],
  ['redis', redisUp, () => createStore(REDIS_URL, { namespace: `hostile_rpc_${randomUUID().slice(0, 8)}` })],
];

for (const [name, available, makeStore] of stores) {
  describe.skipIf(!natsUp || !available)(`hostile message handler keys on ${name}`, () => {
    it('C6: two handlers whose classes a minifier named alike, one method name, two patterns: one key runs each once', async () => {
      const run = randomUUID().slice(0, 8);
      const store = makeStore();
      closers.push(() => store.close());
      const runs: string[] = [];
      const client = await start(store, [minified(`${run}.orders`, runs, 'orders'), minified(`${run}.refunds`, runs, 'refunds')]);
      const key = randomUUID();
      expect(await firstValueFrom(client.send(`${run}.orders`, record({ n: 1 }, key)))).toBe('orders:1');
      expect(await firstValueFrom(client.send(`${run}.refunds`, record({ n: 1 }, key)))).toBe('refunds:1');
      expect(await firstValueFrom(client.send(`${run}.refunds`, record({ n: 1 }, key)))).toBe('refunds:1');
      expect(runs).toEqual(['orders:1', 'refunds:1']);
    });

    it('C6: two event handlers that would share a key space fail the start with a TypeError naming `keySpace`; with it, each runs once', async () => {
      const run = randomUUID().slice(0, 8);
      const store = makeStore();
      closers.push(() => store.close());
      const runs: string[] = [];
      await expect(start(store, [minified(`${run}.paid`, runs, 'a', undefined, 'event'), minified(`${run}.paid`, runs, 'b', undefined, 'event')])).rejects.toThrow(
        /would share one key space .*rpc: \{ keySpace/,
      );
      const client = await start(store, [minified(`${run}.orders`, runs, 'a', undefined, 'event'), minified(`${run}.orders`, runs, 'b', 'audit', 'event')]);
      const key = randomUUID();
      await firstValueFrom(client.emit(`${run}.orders`, record({ n: 1 }, key)));
      await firstValueFrom(client.emit(`${run}.orders`, record({ n: 1 }, key)));
      // A later event, then a pause: by then a second run of the first one would have shown.
      await firstValueFrom(client.emit(`${run}.orders`, record({ n: 2 }, randomUUID())));
      const deadline = Date.now() + 10_000;
      while (runs.filter((r) => r.endsWith(':2')).length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      await new Promise((r) => setTimeout(r, 300));
      expect(runs.filter((r) => r.endsWith(':1')).sort()).toEqual(['a:1', 'b:1']);
      expect(runs.filter((r) => r.endsWith(':2')).sort()).toEqual(['a:2', 'b:2']);
    });

    it("C6: an HTTP client with `scope: 'shared'` on the same store cannot claim a message's key first, however it spells it", async () => {
      const run = randomUUID().slice(0, 8);
      const store = makeStore();
      closers.push(() => store.close());
      const runs: string[] = [];
      const client = await start(store, [minified(`${run}.charge`, runs, 'charge')]);
      const server = http.createServer(
        withIdempotency((_req, res) => void res.writeHead(200, { 'content-type': 'text/plain' }).end('from http'), { store, scope: 'shared' }),
      );
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      closers.push(() => new Promise((resolve) => server.close(resolve)));
      const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      const key = randomUUID();
      for (const spelled of [key, `nest-rpc:e.handle:${key}`]) {
        const answer = await fetch(base, { method: 'POST', headers: { 'idempotency-key': spelled, 'content-type': 'application/json' }, body: '{"n":3}' });
        expect(answer.status).toBe(200);
      }
      expect(await firstValueFrom(client.send(`${run}.charge`, record({ n: 3 }, key)))).toBe('charge:3');
      expect(runs).toEqual(['charge:3']);
    });
  });
}
