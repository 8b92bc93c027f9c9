/**
 * GraphQL mutations under `idempotency-kit/nestjs`: code-first `@Resolver` + `@Mutation`
 * on `@nestjs/graphql` with the real Apollo driver, through Nest's testing module and a
 * real HTTP server; memory and Redis stores. The key from the `Idempotency-Key` header or
 * a mutation argument, the scope from the user a guard left on the context's request.
 */
import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { Inject, Injectable, UseGuards, type CanActivate, type ExecutionContext, type Type } from '@nestjs/common';
import { JwtService } from '@nestjs/jwt';
import { AuthGuard, PassportStrategy } from '@nestjs/passport';
import { ExtractJwt, Strategy } from 'passport-jwt';
import { Args, Context, Field, GqlExecutionContext, ID, InputType, Int, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { delay, of } from 'rxjs';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { createStore } from '../../drivers/create-store.js';
import { memoryStore } from '../../drivers/memory.js';
import type { IdempotencyStore } from '../../src/store.js';
import { Idempotent, IdempotencyModule, type IdempotencyModuleOptions } from '../../adapters/nestjs/index.js';
import { REDIS_URL, serviceAvailable } from '../helpers/services.js';
import { COUNTER, Counter, GATE, Gate, sleep, startGraphqlApp, type GraphqlResult } from './nest-graphql-app.js';

/** A guard as an app writes one for GraphQL: the user from a header, on the context's request (as Passport leaves it). */
class UserGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const { req } = GqlExecutionContext.create(context).getContext<{ req: { headers: Record<string, string>; user?: unknown } }>();
    const id = req.headers['x-user'];
    if (id) req.user = { id };
    return true;
  }
}

@ObjectType()
class Payment {
  @Field(() => ID)
  id!: string;
  @Field(() => Int)
  amount!: number;
  @Field(() => Int)
  n!: number;
  @Field(() => String, { nullable: true })
  user?: string;
  @Field(() => String)
  get label(): string {
    return `payment ${this.n} of ${this.amount}`;
  }
}

@InputType()
class PayInput {
  @Field(() => Int)
  amount!: number;
  @Field(() => String, { nullable: true })
  note?: string;
  @Field(() => String, { nullable: true })
  idempotencyKey?: string;
}

type Ctx = { req: { user?: { id: string } } };

@Resolver(() => Payment)
@UseGuards(UserGuard)
@Idempotent()
class PaymentsResolver {
  constructor(
    @Inject(COUNTER) private readonly counter: Counter,
    @Inject(GATE) private readonly gate: Gate,
  ) {}

  @Mutation(() => Payment)
  async pay(@Args('amount', { type: () => Int }) amount: number, @Context() ctx: Ctx) {
    const n = this.counter.hit();
    // Slow enough that concurrent duplicates find it processing.
    await sleep(30);
    // A class instance, as resolvers return entities: stored as its data (and getters).
    return Object.assign(new Payment(), { id: randomUUID(), amount, n, user: ctx.req.user?.id });
  }

  @Mutation(() => Payment)
  @Idempotent({ keyArg: 'input.idempotencyKey' })
  payWith(@Args('input', { type: () => PayInput }) input: PayInput, @Context() ctx: Ctx) {
    return { id: randomUUID(), amount: input.amount, n: this.counter.hit(), user: ctx.req.user?.id };
  }

  @Mutation(() => Payment)
  fail(@Args('amount', { type: () => Int }) amount: number): Payment {
    this.counter.hit();
    throw new Error(`declined ${amount}`);
  }

  @Mutation(() => Int)
  observed(@Args('amount', { type: () => Int }) amount: number) {
    return of(amount + this.counter.hit()).pipe(delay(5));
  }

  /** Runs until the test opens the gate. */
  @Mutation(() => Int)
  @Idempotent({ waitMs: 0 })
  async held() {
    const n = this.counter.hit();
    await this.gate.promise;
    return n;
  }

  /** A cyclic object: GraphQL reads its selected fields, and so does the store. */
  @Mutation(() => Payment)
  cyclic() {
    const payment: Record<string, unknown> = { id: 'p-1', amount: 1, n: this.counter.hit() };
    payment.self = payment;
    return payment;
  }

  @Query(() => Int)
  count(): number {
    return this.counter.hit();
  }
}

const SECRET = 'nest-graphql-secret';
const jwt = new JwtService({ secret: SECRET });

@Injectable()
class JwtStrategy extends PassportStrategy(Strategy) {
  constructor() {
    super({ jwtFromRequest: ExtractJwt.fromAuthHeaderAsBearerToken(), secretOrKey: SECRET });
  }
  validate(payload: { sub: string }) {
    return { id: payload.sub };
  }
}

/** Passport's JWT guard for GraphQL, as docs/adapters/nestjs.md#graphql writes it. */
class GqlAuthGuard extends AuthGuard('jwt') {
  override getRequest(context: ExecutionContext) {
    return GqlExecutionContext.create(context).getContext<{ req: unknown }>().req;
  }
}

@Resolver()
@UseGuards(GqlAuthGuard)
@Idempotent()
class SecureResolver {
  constructor(@Inject(COUNTER) private readonly counter: Counter) {}

  @Mutation(() => String)
  transfer(@Args('amount', { type: () => Int }) amount: number, @Context() ctx: Ctx): string {
    return `${ctx.req.user!.id}:${amount}:${this.counter.hit()}`;
  }

  @Query(() => Int)
  total(): number {
    return this.counter.n;
  }
}

/** The same mutation without `@Idempotent()`: the control. */
@Resolver()
class UnprotectedResolver {
  constructor(@Inject(COUNTER) private readonly counter: Counter) {}

  @Mutation(() => Int)
  bump(): number {
    return this.counter.hit();
  }

  @Query(() => Int)
  count(): number {
    return this.counter.n;
  }
}

/** A `fingerprint` function (it gets the HTTP request) on a resolver: refused at start. */
@Resolver()
class BadResolver {
  @Mutation(() => Int)
  @Idempotent({ fingerprint: () => 1 })
  bad(): number {
    return 1;
  }

  @Query(() => Int)
  ok(): number {
    return 1;
  }
}

/**
 * vitest's esbuild emits no decorator metadata, and `@Args()` reads the parameter types
 * from it even with an explicit type: written here as TypeScript would emit them.
 */
const paramTypes = (target: Type<unknown>, method: string, types: unknown[]) =>
  Reflect.defineMetadata('design:paramtypes', types, target.prototype, method);
paramTypes(PaymentsResolver, 'pay', [Number, Object]);
paramTypes(PaymentsResolver, 'payWith', [PayInput, Object]);
paramTypes(PaymentsResolver, 'fail', [Number]);
paramTypes(PaymentsResolver, 'observed', [Number]);
paramTypes(SecureResolver, 'transfer', [Number, Object]);

const start = (store: IdempotencyStore, options: Partial<IdempotencyModuleOptions> = {}, resolvers: Type<unknown>[] = [PaymentsResolver]) =>
  startGraphqlApp(store, options, [...resolvers, JwtStrategy]);

const key = () => `gql-${randomUUID()}`;
const PAY = 'mutation Pay($amount: Int!) { pay(amount: $amount) { id amount n user label } }';
const PAY_WITH = 'mutation PayWith($input: PayInput!) { payWith(input: $input) { id amount n user } }';
const redis = await serviceAvailable('Redis', REDIS_URL);
const redisStores: IdempotencyStore[] = [];
afterAll(async () => {
  for (const store of redisStores) await store.close();
});

const stores: Array<[string, boolean, () => IdempotencyStore]> = [
  ['memory', true, () => memoryStore()],
  [
    'redis',
    redis,
    () => {
      const store = createStore(REDIS_URL);
      redisStores.push(store);
      return store;
    },
  ],
];

for (const [name, available, makeStore] of stores) {
  describe.skipIf(!available)(`nest graphql (${name} store)`, () => {
    it('H6 H7: the same key twice runs the mutation once; the replay is the identical data, with Idempotent-Replayed', async () => {
      const app = await start(makeStore());
      const k = key();
      const first = await app.request(PAY, { key: k, user: 'alice', variables: { amount: 10 } });
      expect(first.status).toBe(200);
      expect(first.body.errors).toBeUndefined();
      expect(first.body.data!.pay).toMatchObject({ amount: 10, n: 1, user: 'alice', label: 'payment 1 of 10' });
      expect(first.headers.get('idempotent-replayed')).toBeNull();
      const again = await app.request(PAY, { key: k, user: 'alice', variables: { amount: 10 } });
      expect(again.body).toEqual(first.body);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(app.counter.n).toBe(1);
      // Another key is another payment.
      const other = await app.request(PAY, { key: key(), user: 'alice', variables: { amount: 10 } });
      expect(other.body.data!.pay.n).toBe(2);
    });

    it('H9: 20 concurrent duplicates run the mutation once and all get its data', async () => {
      const app = await start(makeStore());
      const k = key();
      const answers = await Promise.all(
        Array.from({ length: 20 }, () => app.request(PAY, { key: k, user: 'alice', variables: { amount: 7 } })),
      );
      expect(app.counter.n).toBe(1);
      for (const answer of answers) {
        expect(answer.body.errors).toBeUndefined();
        expect(answer.body.data).toEqual(answers[0]!.body.data);
      }
      expect(answers.filter((a) => a.headers.get('idempotent-replayed') === 'true')).toHaveLength(19);
    });

    it('the key from a mutation argument (keyArg): replayed without a header; the key does not count in the fingerprint', async () => {
      const app = await start(makeStore());
      const k = key();
      const first = await app.request(PAY_WITH, { user: 'alice', variables: { input: { amount: 5, idempotencyKey: k } } });
      expect(first.body.errors).toBeUndefined();
      const again = await app.request(PAY_WITH, { user: 'alice', variables: { input: { idempotencyKey: k, amount: 5 } } });
      expect(again.body).toEqual(first.body);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      // The same key in the header instead of the argument is the same request.
      const byHeader = await app.request(PAY_WITH, { key: k, user: 'alice', variables: { input: { amount: 5 } } });
      expect(byHeader.body).toEqual(first.body);
      expect(app.counter.n).toBe(1);
      // Header and argument naming different keys: refused, nothing runs.
      const both = await app.request(PAY_WITH, { key: key(), user: 'alice', variables: { input: { amount: 5, idempotencyKey: k } } });
      expect(both.body.errors![0]!.extensions).toMatchObject({ code: 'key-invalid', reason: 'several-values', status: 400 });
      expect(app.counter.n).toBe(1);
    });

    it('H14: the same key with different arguments is refused (key-reused, 422) and the resolver does not run', async () => {
      const app = await start(makeStore());
      const k = key();
      await app.request(PAY, { key: k, user: 'alice', variables: { amount: 10 } });
      const reused = await app.request(PAY, { key: k, user: 'alice', variables: { amount: 11 } });
      expect(reused.status).toBe(200);
      expect(reused.body.data).toBeNull();
      expect(reused.body.errors).toHaveLength(1);
      expect(reused.body.errors![0]).toMatchObject({
        message: 'This idempotency key was already used with a different request.',
        path: ['pay'],
        extensions: { code: 'key-reused', type: 'urn:idempotency-kit:problem:key-reused', status: 422 },
      });
      // Another mutation with the same key and arguments is another request too.
      const elsewhere = await app.request('mutation { fail(amount: 10) { id } }', { key: k, user: 'alice' });
      expect(elsewhere.body.errors![0]!.extensions).toMatchObject({ code: 'key-reused' });
      expect(app.counter.n).toBe(1);
    });

    it('H15: two users with one key never share a result; the same user gets the replay', async () => {
      const app = await start(makeStore());
      const k = key();
      const alice = await app.request(PAY, { key: k, user: 'alice', variables: { amount: 10 } });
      const bob = await app.request(PAY, { key: k, user: 'bob', variables: { amount: 10 } });
      expect(alice.body.data!.pay).toMatchObject({ user: 'alice', n: 1 });
      expect(bob.body.data!.pay).toMatchObject({ user: 'bob', n: 2 });
      expect(bob.headers.get('idempotent-replayed')).toBeNull();
      const aliceAgain = await app.request(PAY, { key: k, user: 'alice', variables: { amount: 10 } });
      expect(aliceAgain.body).toEqual(alice.body);
      expect(app.counter.n).toBe(2);
    });

    it('H15: behind a Passport JWT guard: two users with one key never share a result; no token is refused before the store', async () => {
      const app = await start(makeStore(), {}, [SecureResolver]);
      const k = key();
      const transfer = (sub?: string, amount = 10) =>
        app.request(`mutation { transfer(amount: ${amount}) }`, { key: k, headers: sub ? { authorization: `Bearer ${jwt.sign({ sub })}` } : {} });
      const alice = await transfer('alice');
      expect(alice.body.data).toEqual({ transfer: 'alice:10:1' });
      const bob = await transfer('bob');
      expect(bob.body.data).toEqual({ transfer: 'bob:10:2' });
      const aliceAgain = await transfer('alice');
      expect(aliceAgain.body).toEqual(alice.body);
      expect(aliceAgain.headers.get('idempotent-replayed')).toBe('true');
      // Bob's key space has his own record: other arguments with it are refused for him.
      expect((await transfer('bob', 11)).body.errors![0]!.extensions).toMatchObject({ code: 'key-reused' });
      const anonymous = await transfer(undefined);
      expect(anonymous.body.errors![0]!.extensions).toMatchObject({ code: 'UNAUTHENTICATED' });
      expect(anonymous.headers.get('idempotent-replayed')).toBeNull();
      expect(app.counter.n).toBe(2);
    });

    it('H15: no user on the context and no `scope` option: scope-required, the resolver does not run', async () => {
      const app = await start(makeStore());
      const answer = await app.request(PAY, { key: key(), variables: { amount: 10 } });
      expect(answer.body.data).toBeNull();
      expect(answer.body.errors![0]!.extensions).toMatchObject({ code: 'scope-required', status: 500 });
      expect(answer.body.errors![0]!.message).toMatch(/no authenticated user/);
      expect(app.counter.n).toBe(0);
    });

    it('H2 H4: no key is key-missing; an invalid header key is key-invalid; neither runs the resolver', async () => {
      const app = await start(makeStore());
      const missing = await app.request(PAY_WITH, { user: 'alice', variables: { input: { amount: 1 } } });
      expect(missing.body.errors![0]!.extensions).toMatchObject({ code: 'key-missing', status: 400 });
      expect(missing.body.errors![0]!.message).toBe('This mutation requires an idempotency key: the `input.idempotencyKey` argument or the Idempotency-Key header.');
      const invalid = await app.request(PAY, { key: 'a'.repeat(256), user: 'alice', variables: { amount: 1 } });
      expect(invalid.body.errors![0]!.extensions).toMatchObject({ code: 'key-invalid', reason: 'too-long' });
      const empty = await app.request(PAY_WITH, { user: 'alice', variables: { input: { amount: 1, idempotencyKey: '' } } });
      expect(empty.body.errors![0]!.extensions).toMatchObject({ code: 'key-invalid', reason: 'empty' });
      expect(app.counter.n).toBe(0);
    });

    it('H10: a thrown error releases the key: the retry runs the resolver again', async () => {
      const app = await start(makeStore());
      const k = key();
      const first = await app.request('mutation { fail(amount: 3) { id } }', { key: k, user: 'alice' });
      expect(first.body.errors![0]!.message).toBe('declined 3');
      const again = await app.request('mutation { fail(amount: 3) { id } }', { key: k, user: 'alice' });
      expect(again.body.errors![0]!.message).toBe('declined 3');
      expect(app.counter.n).toBe(2);
      expect(app.events.filter((e) => e.type === 'released')).toHaveLength(2);
    });

    it('H8: a duplicate while the first still runs (waitMs: 0) is refused as request-in-progress, with when to retry', async () => {
      const app = await start(makeStore());
      const k = key();
      const first = app.request('mutation { held }', { key: k, user: 'alice' });
      await vi.waitFor(() => expect(app.counter.n).toBe(1), { timeout: 10_000 });
      const duplicate = await app.request('mutation { held }', { key: k, user: 'alice' });
      expect(duplicate.body.errors![0]!.extensions).toEqual({
        code: 'request-in-progress',
        type: 'urn:idempotency-kit:problem:request-in-progress',
        status: 409,
        retryAfterSeconds: 1,
      });
      app.gate.open();
      expect((await first).body.data).toEqual({ held: 1 });
      const replay = await app.request('mutation { held }', { key: k, user: 'alice' });
      expect(replay.body.data).toEqual({ held: 1 });
      expect(app.counter.n).toBe(1);
    });

    it('H13 H17 H18: the client gone mid-mutation stops the lease renewal: a resolver that hangs frees its key after leaseMs', async () => {
      const app = await start(makeStore(), { leaseMs: 600 });
      const k = key();
      const aborted = new AbortController();
      const first = fetch(app.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': k, 'x-user': 'alice' },
        body: JSON.stringify({ query: 'mutation { held }' }),
        signal: aborted.signal,
      }).catch((error: unknown) => error);
      await vi.waitFor(() => expect(app.counter.n).toBe(1), { timeout: 10_000 });
      aborted.abort();
      await first;
      // Renewed, the claim would hold for as long as the resolver hangs (every retry 409).
      // Freed after the lease, a retry claims the key and runs the resolver again.
      const retries: Promise<GraphqlResult>[] = [];
      await vi.waitFor(
        () => {
          if (app.counter.n < 2) retries.push(app.request('mutation { held }', { key: k, user: 'alice' }));
          expect(app.counter.n).toBe(2);
        },
        { timeout: 10_000, interval: 100 },
      );
      app.gate.open();
      const answers = await Promise.all(retries);
      expect(answers.filter((a) => a.body.data?.held === 2)).toHaveLength(1);
      expect(answers.every((a) => a.body.data?.held === 2 || a.body.errors?.[0]?.extensions?.code === 'request-in-progress')).toBe(true);
      // The first run ends too, late: its write is refused by token (H18); the second's result stays.
      await vi.waitFor(() => expect(app.events.find((e) => e.type === 'lease-lost')).toMatchObject({ operation: 'complete' }), { timeout: 10_000 });
      const replay = await app.request('mutation { held }', { key: k, user: 'alice' });
      expect(replay.body.data).toEqual({ held: 2 });
      expect(app.counter.n).toBe(2);
    });

    it('an Observable result is stored by its last value', async () => {
      const app = await start(makeStore());
      const k = key();
      const first = await app.request('mutation { observed(amount: 40) }', { key: k, user: 'alice' });
      expect(first.body.data).toEqual({ observed: 41 });
      const again = await app.request('mutation { observed(amount: 40) }', { key: k, user: 'alice' });
      expect(again.body).toEqual(first.body);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(app.counter.n).toBe(1);
    });

    it('queries are not protected unless decorated; one header key names one mutation of a request', async () => {
      const app = await start(makeStore());
      const k = key();
      await app.request('query { count }', { key: k, user: 'alice' });
      await app.request('query { count }', { key: k, user: 'alice' });
      expect(app.counter.n).toBe(2);
      const twice = await app.request('mutation { a: pay(amount: 1) { n } b: pay(amount: 1) { n } }', { key: key(), user: 'alice' });
      expect(twice.body.data).toBeNull();
      expect(twice.body.errors![0]).toMatchObject({ path: ['b'], extensions: { code: 'key-invalid', reason: 'several-values' } });
      expect(app.counter.n).toBe(3);
    });

    it('control: a mutation without @Idempotent() runs every time, key or not', async () => {
      const app = await start(makeStore(), {}, [UnprotectedResolver]);
      const k = key();
      const first = await app.request('mutation { bump }', { key: k, user: 'alice' });
      const again = await app.request('mutation { bump }', { key: k, user: 'alice' });
      expect([first.body.data, again.body.data]).toEqual([{ bump: 1 }, { bump: 2 }]);
      expect(again.headers.get('idempotent-replayed')).toBeNull();
    });
  });
}

describe('nest graphql options', () => {
  it('H12: a result larger than maxResponseBytes is answered; the retry is refused as not replayable, never run twice', async () => {
    const app = await start(memoryStore(), { maxResponseBytes: 16 });
    const k = key();
    const first = await app.request(PAY, { key: k, user: 'alice', variables: { amount: 10 } });
    expect(first.body.data!.pay).toMatchObject({ amount: 10, n: 1 });
    const again = await app.request(PAY, { key: k, user: 'alice', variables: { amount: 10 } });
    expect(again.body.errors![0]!.extensions).toMatchObject({ code: 'response-not-replayable', status: 409 });
    expect(app.counter.n).toBe(1);
  });

  it('a cyclic result is stored as the fields the operation selected, and replays (the cycle is never followed)', async () => {
    const app = await start(memoryStore());
    const k = key();
    const first = await app.request('mutation { cyclic { id n } }', { key: k, user: 'alice' });
    expect(first.body.data).toEqual({ cyclic: { id: 'p-1', n: 1 } });
    const again = await app.request('mutation { cyclic { id n } }', { key: k, user: 'alice' });
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body).toEqual(first.body);
    expect(app.counter.n).toBe(1);
  });

  it('`fingerprint: { exclude }` paths apply to the arguments', async () => {
    const app = await start(memoryStore(), { fingerprint: { exclude: ['input.note'] } });
    const k = key();
    const first = await app.request(PAY_WITH, { user: 'alice', variables: { input: { amount: 5, note: 'a', idempotencyKey: k } } });
    const again = await app.request(PAY_WITH, { user: 'alice', variables: { input: { amount: 5, note: 'b', idempotencyKey: k } } });
    expect(again.body).toEqual(first.body);
    const other = await app.request(PAY_WITH, { user: 'alice', variables: { input: { amount: 6, note: 'a', idempotencyKey: k } } });
    expect(other.body.errors![0]!.extensions).toMatchObject({ code: 'key-reused' });
    expect(app.counter.n).toBe(1);
  });

  it('a bad `keyArg` fails where it is written, with a TypeError naming it', () => {
    expect(() => Idempotent({ keyArg: 'input..key' })).toThrow(/Expected `keyArg` to be an argument name/);
    expect(() => IdempotencyModule.forRoot({ store: memoryStore(), keyArg: 42 as never })).toThrow(/Expected `keyArg`/);
  });

  it("a resolver's options are checked at start: a TypeError naming the resolver and the option", async () => {
    await expect(start(memoryStore(), {}, [BadResolver])).rejects.toThrow(/@Idempotent\(\) on BadResolver\.bad: A `fingerprint` function gets the HTTP request/);
  });

  it("`scope: 'shared'` lets a mutation without a user run; a scope function gets the context's request", async () => {
    const shared = await start(memoryStore(), { scope: 'shared' });
    const k = key();
    await shared.request(PAY, { key: k, variables: { amount: 1 } });
    const again = await shared.request(PAY, { key: k, variables: { amount: 1 } });
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(shared.counter.n).toBe(1);
    const tenants = await start(memoryStore(), { scope: (req) => req.headers['x-tenant'] as string | undefined });
    const a = await tenants.request(PAY, { key: k, variables: { amount: 1 } });
    expect(a.body.errors![0]!.extensions).toMatchObject({ code: 'scope-required' });
    expect(tenants.counter.n).toBe(0);
  });
});
