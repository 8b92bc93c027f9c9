/**
 * GraphQL mutations attacked through what a resolver returns: entity classes with getters
 * that throw and properties outside the schema, fragments and aliases. What is stored is
 * what the client was sent (the selected fields), and whatever fails while storing ends
 * the claim: a retry is answered, never held at 409 by a lease that keeps being renewed.
 * NestJS 12, @nestjs/graphql with Apollo, a real HTTP server; memory and Redis stores.
 */
import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { Inject } from '@nestjs/common';
import { Field, ID, Int, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { afterAll, describe, expect, it } from 'vitest';
import { createStore } from '../../drivers/create-store.js';
import { memoryStore } from '../../drivers/memory.js';
import { storageKey } from '../../src/key.js';
import { deserializeResult } from '../../src/serialize.js';
import type { CompletedRecord, IdempotencyStore } from '../../src/store.js';
import { Idempotent } from '../../adapters/nestjs/index.js';
import { REDIS_URL, serviceAvailable } from '../helpers/services.js';
import { COUNTER, Counter, GATE, Gate, startGraphqlApp } from './nest-graphql-app.js';

/** An entity as an ORM returns it: schema fields, a computed field, and what the schema leaves out. */
@ObjectType()
class Account {
  @Field(() => ID)
  id!: string;
  @Field(() => Int)
  n!: number;
  /** Not in the schema: must never reach the store. */
  passwordHash = 'bcrypt$2b$12$secret-hash';
  @Field(() => String)
  get label(): string {
    return `account ${this.n}`;
  }
  /** A computed field whose service is down: GraphQL reads it only when it is selected. */
  @Field(() => String)
  get risk(): string {
    throw new Error('risk service down');
  }
}

@Resolver(() => Account)
@Idempotent()
class AccountsResolver {
  constructor(
    @Inject(COUNTER) private readonly counter: Counter,
    @Inject(GATE) readonly gate: Gate,
  ) {}

  @Mutation(() => Account)
  openAccount(): Account {
    return Object.assign(new Account(), { id: randomUUID(), n: this.counter.hit() });
  }

  @Query(() => Int)
  opened(): number {
    return this.counter.n;
  }
}

const redis = await serviceAvailable('Redis', REDIS_URL);
const opened: IdempotencyStore[] = [];
afterAll(async () => {
  for (const store of opened) await store.close();
});
const stores: Array<[string, boolean, () => IdempotencyStore]> = [
  ['memory', true, () => memoryStore()],
  ['redis', redis, () => opened[opened.push(createStore(REDIS_URL, { namespace: `hostile-gql-${randomUUID()}` })) - 1]!],
];

async function storedData(store: IdempotencyStore, key: string): Promise<unknown> {
  const record = (await store.get(storageKey(undefined, key))) as CompletedRecord | undefined;
  expect(record?.state).toBe('completed');
  return record!.response.body === null ? null : deserializeResult(record!.response.body);
}

for (const [name, available, makeStore] of stores) {
  describe.skipIf(!available)(`hostile GraphQL results on ${name}`, () => {
    it('C6: a getter that throws ends the claim: the retry is answered (not replayable), never 409 while the lease is renewed', async () => {
      const store = makeStore();
      const app = await startGraphqlApp(store, { scope: 'shared', leaseMs: 1000, waitMs: 0 }, [AccountsResolver]);
      const key = `gql-${randomUUID()}`;
      const first = await app.request('mutation { openAccount { id risk } }', { key });
      expect(first.body.errors?.[0]?.message).toMatch(/risk service down/);
      expect(app.counter.n).toBe(1);
      for (let attempt = 0; attempt < 3; attempt++) {
        const again = await app.request('mutation { openAccount { id risk } }', { key });
        expect(again.body.errors![0]!.extensions).toMatchObject({ code: 'response-not-replayable' });
      }
      expect(app.counter.n).toBe(1); // the mutation's effect happened once: never run again
      expect(app.events.some((e) => e.type === 'conflict')).toBe(false);
    });

    it('C6: a throwing getter the operation did not select is never read; only the selected fields are stored and replayed', async () => {
      const store = makeStore();
      const app = await startGraphqlApp(store, { scope: 'shared' }, [AccountsResolver]);
      const key = `gql-${randomUUID()}`;
      const query = 'mutation { openAccount { ...Basic tag: label } } fragment Basic on Account { id n }';
      const first = await app.request(query, { key });
      expect(first.body.errors).toBeUndefined();
      expect(first.body.data!.openAccount).toMatchObject({ n: 1, tag: 'account 1' });
      const again = await app.request(query, { key });
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(again.body).toEqual(first.body);
      expect(app.counter.n).toBe(1);
      // The store holds the fields the client was sent, by their names: no password hash, no unselected getter.
      const data = (await storedData(store, key)) as Record<string, unknown>;
      expect(Object.keys(data).sort()).toEqual(['id', 'label', 'n']);
      expect(JSON.stringify(data)).not.toContain('bcrypt');
    });
  });
}
