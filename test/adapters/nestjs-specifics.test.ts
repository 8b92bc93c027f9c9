/**
 * What only the Nest adapter has: the module (forRoot, forRootAsync, the store provider and
 * its shutdown), `@Idempotent()` merged module → class → handler, the interceptor after a
 * real Passport JWT guard, exception filters, Nest's ways of answering, and bad input.
 * Real servers only: Nest's testing module, real HTTP, memory and Redis stores.
 */
import 'reflect-metadata';
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import {
  ArgumentsHost,
  Body,
  FileTypeValidator,
  Catch,
  Controller,
  ExceptionFilter,
  Header,
  HttpCode,
  HttpException,
  Inject,
  Injectable,
  Logger,
  Module,
  Post,
  Redirect,
  Req,
  Res,
  Sse,
  StreamableFile,
  UseGuards,
  type CallHandler,
  type ExecutionContext,
  type NestInterceptor,
  type INestApplication,
  type Type,
} from '@nestjs/common';
import { APP_FILTER, APP_INTERCEPTOR } from '@nestjs/core';
import { JwtService } from '@nestjs/jwt';
import { AuthGuard, PassportModule, PassportStrategy } from '@nestjs/passport';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import { ExtractJwt, Strategy } from 'passport-jwt';
import { interval, map, of, take, delay, timeout, type Observable } from 'rxjs';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createStore } from '../../drivers/create-store.js';
import { memoryStore } from '../../drivers/memory.js';
import type { IdempotencyEvent } from '../../src/events.js';
import type { IdempotencyStore } from '../../src/store.js';
import { hasRequestTransaction } from '../../src/transaction.js';
import {
  IDEMPOTENCY_STORE,
  Idempotent,
  IdempotencyInterceptor,
  IdempotencyModule,
  IdempotencyRejection,
  SkipIdempotency,
  type IdempotencyModuleOptions,
} from '../../adapters/nestjs/index.js';
import { REDIS_URL, serviceAvailable } from '../helpers/services.js';
import { expectProblem, send, type SendOptions } from './client.js';

const SECRET = 'nest-test-secret';
const jwt = new JwtService({ secret: SECRET });
const bearer = (sub: string) => ({ authorization: `Bearer ${jwt.sign({ sub })}` });
const COUNTER = Symbol('counter');

class Counter {
  n = 0;
  hit(): number {
    return ++this.n;
  }
}

@Injectable()
class JwtStrategy extends PassportStrategy(Strategy) {
  constructor() {
    super({ jwtFromRequest: ExtractJwt.fromAuthHeaderAsBearerToken(), secretOrKey: SECRET });
  }
  validate(payload: { sub: string }) {
    return { id: payload.sub };
  }
}

@Controller('secure')
@UseGuards(AuthGuard('jwt'))
@Idempotent()
class SecureController {
  constructor(@Inject(COUNTER) private readonly counter: Counter) {}

  @Post('payments')
  pay(@Req() req: { user: { id: string } }, @Body() body: { amount: number }) {
    return { user: req.user.id, amount: body.amount, n: this.counter.hit() };
  }
}

/** No guard: a request has no user, and the module has no `scope`. */
@Controller('open')
@Idempotent()
class OpenController {
  @Post()
  open() {
    return { ok: true };
  }
}

/** The handler fails after 300 ms (a 500: the key is released). */
@Controller('slow')
@Idempotent()
class SlowController {
  constructor(@Inject(COUNTER) private readonly counter: Counter) {}

  @Post('fail')
  async fail(): Promise<never> {
    this.counter.n++;
    await new Promise((resolve) => setTimeout(resolve, 300));
    throw new Error('the payment provider is down');
  }
}

/** Requests as the handlers got them, and whether `inTransaction` applied to them then. */
const heldRequests: { req: object; during: boolean }[] = [];

/** Handlers that keep their request, to see what the layer keeps of it once answered. */
@Controller('kept')
@Idempotent()
class KeptController {
  @Post('ok')
  ok(@Req() req: object) {
    heldRequests.push({ req, during: hasRequestTransaction(req) });
    return { ok: true };
  }

  @Post('fails')
  fails(@Req() req: object) {
    heldRequests.push({ req, during: hasRequestTransaction(req) });
    throw new Error('boom');
  }

  @Post('optional')
  @Idempotent({ required: false })
  optional(@Req() req: object) {
    heldRequests.push({ req, during: hasRequestTransaction(req) });
    return { ok: true };
  }
}

/**
 * A request deadline as the NestJS docs write one, app-wide, here for the requests that ask
 * for one (`x-deadline-ms`): when it passes, it unsubscribes what it wraps.
 */
@Injectable()
class DeadlineInterceptor implements NestInterceptor {
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const ms = context.switchToHttp().getRequest<{ headers: Record<string, string | undefined> }>().headers['x-deadline-ms'];
    return ms === undefined ? next.handle() : next.handle().pipe(timeout(Number(ms)));
  }
}

/** The deadline, app-wide from a module imported before the idempotency module: it wraps ours. */
@Module({ providers: [{ provide: APP_INTERCEPTOR, useClass: DeadlineInterceptor }] })
class DeadlineModule {}

@Controller('ways')
@Idempotent({ waitMs: 0 })
class WaysController {
  constructor(@Inject(COUNTER) private readonly counter: Counter) {}

  @Post('observable')
  observable() {
    return of({ n: this.counter.hit() }).pipe(delay(5));
  }

  @Post('header')
  @HttpCode(202)
  @Header('x-kind', 'header')
  @Header('content-language', 'fr')
  header() {
    return { n: this.counter.hit() };
  }

  @Post('redirect')
  @Redirect('/elsewhere', 303)
  redirect() {
    this.counter.hit();
  }

  @Post('passthrough')
  passthrough(@Res({ passthrough: true }) res: { header(n: string, v: string): unknown }) {
    res.header('etag', '"v1"');
    return { n: this.counter.hit() };
  }

  @Post('http-exception')
  httpException() {
    throw new HttpException({ n: this.counter.hit(), message: 'conflict of ours' }, 409);
  }

  @Post('optional')
  @Idempotent({ required: false })
  optional() {
    return { n: this.counter.hit() };
  }

  @Post('skipped')
  @SkipIdempotency()
  skipped() {
    return { n: this.counter.hit() };
  }

  @Post('unstorable')
  unstorable() {
    this.counter.hit();
    // JSON cannot carry a BigInt: Nest's reply fails, its filter answers 500.
    return { n: 1n };
  }

  @Post('raw')
  raw(@Res() res: { status?(n: number): unknown; code?(n: number): unknown; send(body: string): unknown }) {
    this.counter.hit();
    if (typeof res.code === 'function') res.code(201);
    else res.status!(201);
    res.send('raw');
  }

  @Sse('events')
  events() {
    this.counter.hit();
    return interval(1).pipe(
      take(2),
      map((i) => ({ data: { i } })),
    );
  }

  @Post('file')
  file() {
    this.counter.hit();
    return new StreamableFile(Readable.from(['file']), { type: 'text/plain' });
  }
}

/** An application filter: renders every HttpException its own way. */
@Catch(HttpException)
class EnvelopeFilter implements ExceptionFilter {
  catch(exception: HttpException, host: ArgumentsHost) {
    const res = host.switchToHttp().getResponse<{ status?(n: number): unknown; code?(n: number): unknown; send(b: unknown): unknown; header(n: string, v: string): unknown }>();
    if (typeof res.code === 'function') res.code(exception.getStatus());
    else res.status!(exception.getStatus());
    res.header('content-type', 'application/json');
    res.send(JSON.stringify({ envelope: true, code: exception instanceof IdempotencyRejection ? exception.code : undefined }));
  }
}

type Platform = 'express' | 'fastify';

interface Started {
  url: string;
  nest: INestApplication;
  counter: Counter;
  events: IdempotencyEvent[];
  send(options: SendOptions): ReturnType<typeof send>;
  close(): Promise<void>;
}

const running: Started[] = [];
afterEach(async () => {
  for (const app of running.splice(0)) await app.close();
});

async function listen(nest: INestApplication): Promise<string> {
  await nest.listen(0, '127.0.0.1');
  const { port } = (nest.getHttpServer() as http.Server).address() as AddressInfo;
  return `http://127.0.0.1:${port}`;
}

async function start(
  platform: Platform,
  idempotency: ReturnType<typeof IdempotencyModule.forRoot>,
  controllers: Type<unknown>[],
  extra: { providers?: unknown[]; before?: Type<unknown>[] } = {},
): Promise<Started> {
  const counter = new Counter();
  @Module({
    imports: [...(extra.before ?? []), idempotency, PassportModule],
    controllers,
    providers: [JwtStrategy, { provide: COUNTER, useValue: counter }, ...((extra.providers ?? []) as never[])],
  })
  class AppModule {}
  const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
  const nest = moduleRef.createNestApplication(platform === 'express' ? new ExpressAdapter() : new FastifyAdapter(), { logger: false });
  const url = await listen(nest);
  const app: Started = {
    url,
    nest,
    counter,
    events: [],
    send: (options) => send(url, options),
    close: async () => {
      (nest.getHttpServer() as http.Server).closeAllConnections();
      await nest.close();
    },
  };
  running.push(app);
  return app;
}

const key = () => `nest-${randomUUID()}`;
const redis = await serviceAvailable('Redis', REDIS_URL);

/** One route with `@Idempotent()` and one without, in the same controller. */
@Controller('mixed')
class MixedController {
  constructor(@Inject(COUNTER) private readonly counter: Counter) {}

  @Post('open')
  open() {
    return { n: this.counter.hit() };
  }

  @Post('protected')
  @Idempotent()
  protected() {
    return { n: this.counter.hit() };
  }
}

for (const platform of ['express', 'fastify'] as Platform[]) {
  describe(`nest (${platform} platform)`, () => {
    it('a route without @Idempotent() runs none of the layer\'s code; the protected one beside it replays', async () => {
      const intercept = vi.spyOn(IdempotencyInterceptor.prototype, 'intercept');
      try {
        const app = await start(platform, IdempotencyModule.forRoot({ store: memoryStore(), scope: 'shared' }), [MixedController]);
        const open = key();
        for (let i = 0; i < 2; i++) {
          const res = await app.send({ path: '/mixed/open', key: open, body: { a: 1 } });
          expect(res.status).toBe(201);
          expect(res.headers['idempotent-replayed']).toBeUndefined();
        }
        expect(app.counter.n).toBe(2);
        expect(intercept).not.toHaveBeenCalled();
        const guarded = key();
        const first = await app.send({ path: '/mixed/protected', key: guarded, body: { a: 1 } });
        const again = await app.send({ path: '/mixed/protected', key: guarded, body: { a: 1 } });
        expect(again.json()).toEqual(first.json());
        expect(again.headers['idempotent-replayed']).toBe('true');
        expect(app.counter.n).toBe(3);
        expect(intercept).toHaveBeenCalledTimes(2);
      } finally {
        intercept.mockRestore();
      }
    });

    it('a request given up by an outer interceptor (a deadline) while it waited on its key releases the key it then wins: the next retry runs at once', async () => {
      const app = await start(platform, IdempotencyModule.forRoot({ store: memoryStore(), scope: 'shared' }), [SlowController], {
        before: [DeadlineModule],
      });
      const k = key();
      // The first runs 300 ms and fails (its key released); the second waits on it, and its
      // deadline gives it up at 100 ms, before the key comes free and it wins the claim.
      const first = app.send({ path: '/slow/fail', key: k, body: {} });
      // The second goes once the first holds the key (its handler started), however slow
      // the machine: never before it.
      await vi.waitFor(() => expect(app.counter.n).toBe(1), { timeout: 10_000, interval: 5 });
      const second = await app.send({ path: '/slow/fail', key: k, body: {}, headers: { 'x-deadline-ms': '100' } });
      expect(second.status).toBe(500);
      expect((await first).status).toBe(500);
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(app.counter.n).toBe(1);
      // The given-up request's claim was released, not left processing: a retry runs.
      const started = Date.now();
      const third = await app.send({ path: '/slow/fail', key: k, body: {} });
      expect(third.status).toBe(500);
      expect(third.headers['idempotent-replayed']).toBeUndefined();
      expect(app.counter.n).toBe(2);
      expect(Date.now() - started).toBeLessThan(1_500);
    });

    it('a request is let go once its response is done (stored, released, passed without a key, replayed): inTransaction no longer holds it', async () => {
      const app = await start(platform, IdempotencyModule.forRoot({ store: memoryStore(), scope: 'shared' }), [KeptController]);
      heldRequests.length = 0;
      const k = key();
      expect((await app.send({ path: '/kept/ok', key: k, body: { a: 1 } })).status).toBe(201);
      expect((await app.send({ path: '/kept/fails', key: key(), body: { a: 1 } })).status).toBe(500);
      expect((await app.send({ path: '/kept/optional', body: { a: 1 } })).status).toBe(201);
      expect((await app.send({ path: '/kept/ok', key: k, body: { a: 1 } })).headers['idempotent-replayed']).toBe('true');
      expect(heldRequests.map((held) => held.during)).toEqual([true, true, true]);
      await vi.waitFor(() => expect(heldRequests.map((held) => hasRequestTransaction(held.req))).toEqual([false, false, false]), {
        timeout: 5_000,
        interval: 5,
      });
    });

    it('H15: a Passport JWT guard is the key space: two users with one key never share a response, the same user gets the replay', async () => {
      const app = await start(platform, IdempotencyModule.forRoot({ store: memoryStore() }), [SecureController]);
      const k = key();
      const pay = (sub: string, amount = 10) => app.send({ path: '/secure/payments', key: k, body: { amount }, headers: bearer(sub) });
      const alice = await pay('alice');
      expect(alice.status).toBe(201);
      expect(alice.json()).toEqual({ user: 'alice', amount: 10, n: 1 });
      const bob = await pay('bob', 99);
      expect(bob.status).toBe(201);
      expect(bob.json()).toEqual({ user: 'bob', amount: 99, n: 2 });
      expect(bob.headers['idempotent-replayed']).toBeUndefined();
      const again = await pay('alice');
      expect(again.headers['idempotent-replayed']).toBe('true');
      expect(again.body.equals(alice.body)).toBe(true);
      expect(app.counter.n).toBe(2);
    });

    it('H15: no Authorization header is a 401 of the guard, never a replay', async () => {
      const app = await start(platform, IdempotencyModule.forRoot({ store: memoryStore() }), [SecureController]);
      const k = key();
      expect((await app.send({ path: '/secure/payments', key: k, body: { amount: 1 }, headers: bearer('alice') })).status).toBe(201);
      const anonymous = await app.send({ path: '/secure/payments', key: k, body: { amount: 1 } });
      expect(anonymous.status).toBe(401);
      expect(anonymous.headers['idempotent-replayed']).toBeUndefined();
      const forged = await app.send({ path: '/secure/payments', key: k, body: { amount: 1 }, headers: { authorization: 'Bearer not-a-token' } });
      expect(forged.status).toBe(401);
      expect(app.counter.n).toBe(1);
    });

    it('H15: without `scope` and without a user, the same scope-required answer as the other adapters', async () => {
      const app = await start(platform, IdempotencyModule.forRoot({ store: memoryStore() }), [OpenController]);
      const problem = expectProblem(await app.send({ path: '/open', key: key(), body: {} }), 500, 'scope-required');
      expect(problem.detail).toMatch(/request\.user/);
    });

    it('answers a return value, an Observable, @HttpCode + @Header, @Redirect and @Res({ passthrough: true }) once, and replays each', async () => {
      const app = await start(platform, IdempotencyModule.forRoot({ store: memoryStore(), scope: 'shared' }), [WaysController]);
      const cases: Array<[string, number, Record<string, string>]> = [
        ['/ways/observable', 201, {}],
        ['/ways/header', 202, { 'content-language': 'fr' }],
        ['/ways/redirect', 303, { location: '/elsewhere' }],
        ['/ways/passthrough', 201, { etag: '"v1"' }],
      ];
      for (const [path, status, headers] of cases) {
        const before = app.counter.n;
        const k = key();
        const first = await app.send({ path, key: k, body: {} });
        expect(first.status, path).toBe(status);
        const replay = await app.send({ path, key: k, body: {} });
        expect(replay.status, path).toBe(status);
        expect(replay.headers['idempotent-replayed'], path).toBe('true');
        expect(replay.body.equals(first.body), path).toBe(true);
        for (const [name, value] of Object.entries(headers)) expect(replay.headers[name], `${path} ${name}`).toBe(value);
        expect(app.counter.n - before, path).toBe(1);
      }
    });

    it('H10: a thrown HttpException is stored and replayed by its status; a 5xx one releases', async () => {
      const app = await start(platform, IdempotencyModule.forRoot({ store: memoryStore(), scope: 'shared' }), [WaysController]);
      const k = key();
      const first = await app.send({ path: '/ways/http-exception', key: k, body: {} });
      expect(first.status).toBe(409);
      const replay = await app.send({ path: '/ways/http-exception', key: k, body: {} });
      expect(replay.headers['idempotent-replayed']).toBe('true');
      expect(replay.json()).toEqual(first.json());
      expect(app.counter.n).toBe(1);
    });

    it('options merge module → class → handler; @SkipIdempotency() turns one handler off', async () => {
      const app = await start(platform, IdempotencyModule.forRoot({ store: memoryStore(), scope: 'shared' }), [WaysController]);
      // The handler's `required: false`: runs without a key.
      expect((await app.send({ path: '/ways/optional', body: {} })).status).toBe(201);
      // The class's `required` (the module default, true) elsewhere.
      expectProblem(await app.send({ path: '/ways/observable', body: {} }), 400, 'key-missing');
      // Skipped: a key is not looked at.
      const k = key();
      await app.send({ path: '/ways/skipped', key: k, body: {} });
      const again = await app.send({ path: '/ways/skipped', key: k, body: {} });
      expect(again.headers['idempotent-replayed']).toBeUndefined();
      expect(again.json()).toEqual({ n: 3 });
    });

    it("H8: the class's `waitMs: 0` answers a running duplicate 409 at once, as problem+json through Nest's own filter", async () => {
      const app = await start(platform, IdempotencyModule.forRoot({ store: memoryStore(), scope: 'shared' }), [WaysController]);
      const k = key();
      // The observable handler takes 5 ms; ten at once: one runs, the others 409 (or replay once it is done).
      const replies = await Promise.all(Array.from({ length: 10 }, () => app.send({ path: '/ways/observable', key: k, body: {} })));
      const conflicts = replies.filter((r) => r.status === 409);
      for (const reply of conflicts) expectProblem(reply, 409, 'request-in-progress');
      expect(replies.filter((r) => r.status === 201 && r.headers['idempotent-replayed'] === undefined)).toHaveLength(1);
      expect(app.counter.n).toBe(1);
    });

    it("rejections are HttpExceptions: the application's filter renders them", async () => {
      const app = await start(platform, IdempotencyModule.forRoot({ store: memoryStore(), scope: 'shared' }), [WaysController], {
        providers: [{ provide: APP_FILTER, useClass: EnvelopeFilter }],
      });
      const reply = await app.send({ path: '/ways/observable', body: {} });
      expect(reply.status).toBe(400);
      expect(reply.json()).toEqual({ envelope: true, code: 'key-missing' });
    });

    it('formatError reshapes the body here too', async () => {
      const app = await start(
        platform,
        IdempotencyModule.forRoot({ store: memoryStore(), scope: 'shared', formatError: (problem) => ({ error: { code: problem.code } }) }),
        [WaysController],
      );
      const reply = await app.send({ path: '/ways/observable', body: {} });
      expect(reply.status).toBe(400);
      expect(reply.headers['content-type']).toMatch(/^application\/json/);
      expect(reply.json()).toEqual({ error: { code: 'key-missing' } });
    });

    it('a result that cannot be sent (a BigInt) is answered by Nest and released, with an event; the retry runs again', async () => {
      const events: IdempotencyEvent[] = [];
      const app = await start(
        platform,
        IdempotencyModule.forRoot({ store: memoryStore(), scope: 'shared', onEvent: (e) => events.push(e) }),
        [WaysController],
      );
      const k = key();
      const first = await app.send({ path: '/ways/unstorable', key: k, body: {} });
      expect(first.status).toBe(500);
      const second = await app.send({ path: '/ways/unstorable', key: k, body: {} });
      expect(second.status).toBe(500);
      expect(second.headers['idempotent-replayed']).toBeUndefined();
      expect(app.counter.n).toBe(2);
      expect(events.filter((e) => e.type === 'released')).toHaveLength(2);
    });

    it('an @Sse() handler on a covered method runs unprotected, with one warning', async () => {
      const warn = vi.spyOn(Logger.prototype, 'warn').mockImplementation(() => {});
      try {
        const app = await start(platform, IdempotencyModule.forRoot({ store: memoryStore(), scope: 'shared', methods: ['GET', 'POST'] }), [WaysController]);
        const k = key();
        for (let i = 0; i < 2; i++) {
          const reply = await app.send({ method: 'GET', path: '/ways/events', key: k });
          expect(reply.status).toBe(200);
          expect(reply.headers['content-type']).toMatch(/^text\/event-stream/);
          expect(reply.headers['idempotent-replayed']).toBeUndefined();
        }
        expect(app.counter.n).toBe(2);
        expect(warn.mock.calls.map(([m]) => String(m)).filter((m) => m.includes('SSE'))).toHaveLength(1);
      } finally {
        warn.mockRestore();
      }
    });

    it('StreamableFile, SSE and @Res() without passthrough run unprotected, with one warning each, never left processing', async () => {
      const warn = vi.spyOn(Logger.prototype, 'warn').mockImplementation(() => {});
      try {
        const store = memoryStore();
        const app = await start(platform, IdempotencyModule.forRoot({ store, scope: 'shared' }), [WaysController]);
        for (const [path, method] of [
          ['/ways/file', 'POST'],
          ['/ways/raw', 'POST'],
        ] as const) {
          const k = key();
          for (let i = 0; i < 2; i++) {
            const reply = await app.send({ method, path, key: k, body: {} });
            expect(reply.status, path).toBe(201);
            expect(reply.headers['idempotent-replayed'], path).toBeUndefined();
          }
        }
        expect(app.counter.n).toBe(4);
        const warnings = warn.mock.calls.map(([message]) => String(message));
        expect(warnings.filter((m) => m.includes('StreamableFile'))).toHaveLength(1);
        expect(warnings.filter((m) => m.includes('@Res() without passthrough'))).toHaveLength(1);
      } finally {
        warn.mockRestore();
      }
    });
  });
}

describe('nest module', () => {
  it("Nest's FileTypeValidator loads file-type as installed (package.json overrides it to a version for Node 20) and checks magic numbers", async () => {
    const png = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAAAAAA6fptVAAAACklEQVR4nGNgAAAAAgABSK+kcQAAAABJRU5ErkJggg==', 'base64');
    const file = (buffer: Buffer, mimetype: string) => ({ buffer, mimetype, size: buffer.length }) as never;
    const warn = vi.spyOn(Logger.prototype, 'warn').mockImplementation(() => {});
    try {
      // No fallback to the declared type: only a loaded file-type can tell a PNG.
      const validator = new FileTypeValidator({ fileType: 'image/png' });
      expect(await validator.isValid(file(png, 'text/plain'))).toBe(true);
      expect(await validator.isValid(file(Buffer.from('not an image, only text'), 'image/png'))).toBe(false);
      expect(warn.mock.calls.map(([m]) => String(m)).filter((m) => m.includes('file-type'))).toEqual([]);
    } finally {
      warn.mockRestore();
    }
  });

  it('forRootAsync builds the options from the app’s own providers (useFactory + inject); a given store is left open at shutdown', async () => {
    const store = memoryStore();
    const closed = vi.spyOn(store, 'close');
    const STORE = Symbol('app store');
    @Module({ providers: [{ provide: STORE, useValue: store }], exports: [STORE] })
    class StoreModule {}
    const app = await start(
      'express',
      IdempotencyModule.forRootAsync({
        imports: [StoreModule],
        inject: [STORE],
        useFactory: (appStore: IdempotencyStore) => ({ store: appStore, scope: 'shared' }),
      }),
      [WaysController],
    );
    expect(app.nest.get(IDEMPOTENCY_STORE)).toBe(store);
    const k = key();
    await app.send({ path: '/ways/observable', key: k, body: {} });
    expect((await app.send({ path: '/ways/observable', key: k, body: {} })).headers['idempotent-replayed']).toBe('true');
    await app.close();
    running.splice(running.indexOf(app), 1);
    expect(closed).not.toHaveBeenCalled();
  });

  it('forRootAsync with useClass', async () => {
    @Injectable()
    class Options {
      createIdempotencyOptions(): Omit<IdempotencyModuleOptions, 'isGlobal'> {
        return { store: memoryStore(), scope: 'shared', waitMs: 0 };
      }
    }
    const app = await start('fastify', IdempotencyModule.forRootAsync({ useClass: Options }), [WaysController]);
    const k = key();
    await app.send({ path: '/ways/observable', key: k, body: {} });
    expect((await app.send({ path: '/ways/observable', key: k, body: {} })).headers['idempotent-replayed']).toBe('true');
  });

  it.skipIf(!redis)('a store URL: the module creates the store and closes it at shutdown', async () => {
    const app = await start('express', IdempotencyModule.forRoot({ store: REDIS_URL, scope: 'shared' }), [WaysController]);
    const store = app.nest.get<IdempotencyStore>(IDEMPOTENCY_STORE);
    const closed = vi.spyOn(store, 'close');
    const k = key();
    await app.send({ path: '/ways/observable', key: k, body: {} });
    expect((await app.send({ path: '/ways/observable', key: k, body: {} })).headers['idempotent-replayed']).toBe('true');
    await app.close();
    running.splice(running.indexOf(app), 1);
    expect(closed).toHaveBeenCalledTimes(1);
  });

  it('an invalid option fails at module start with a TypeError naming it', async () => {
    await expect(start('express', IdempotencyModule.forRoot({ store: memoryStore(), scope: 'shared', maxKeyLength: 0 }), [WaysController])).rejects.toThrow(
      /maxKeyLength/,
    );
    await expect(
      start('express', IdempotencyModule.forRootAsync({ useFactory: () => ({ store: memoryStore(), scope: 'shared', methods: 'POST' as never }) }), [WaysController]),
    ).rejects.toThrow(/methods/);
    @Controller('bad')
    class BadController {
      @Post()
      @Idempotent({ waitMs: -1 })
      bad() {
        return {};
      }
    }
    await expect(start('express', IdempotencyModule.forRoot({ store: memoryStore(), scope: 'shared' }), [BadController])).rejects.toThrow(
      /BadController\.bad: .*wait/,
    );
    expect(() => IdempotencyModule.forRoot({ store: undefined as never })).toThrow(TypeError);
    expect(() => IdempotencyModule.forRoot({ store: undefined as never })).toThrow(/store/);
    expect(() => IdempotencyModule.forRootAsync({})).toThrow(/useFactory/);
    expect(() => Idempotent({ store: memoryStore() } as never)).toThrow(/store/);
    expect(() => Idempotent('yes' as never)).toThrow(TypeError);
    void createStore;
  });

  it('with isGlobal: false, a protected controller in a module that does not import the module fails the start, naming the interceptor', async () => {
    @Module({ controllers: [MixedController], providers: [{ provide: COUNTER, useValue: new Counter() }] })
    class FeatureModule {}
    @Module({ imports: [IdempotencyModule.forRoot({ store: memoryStore(), scope: 'shared', isGlobal: false }), FeatureModule] })
    class RootModule {}
    await expect(Test.createTestingModule({ imports: [RootModule] }).compile()).rejects.toThrow(/IdempotencyInterceptor/);
  });
});
