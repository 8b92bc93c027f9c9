/**
 * What the NestJS adapter reads of Nest's private state (adapters/nestjs/nest-private.ts),
 * pinned to the installed Nest: this file runs on Nest 12 (the root) and on Nest 11 (the
 * vitest project `nest11`), and fails loudly, naming the version, when a release moves a key.
 * Every fallback runs here too: the keys probed from Nest's public decorators when the known
 * ones are wrong, the known ones when nothing can be probed, and a response silenced without
 * changing its prototype.
 */
import 'reflect-metadata';
import { Controller, Get, HttpCode, Next, Post, RequestMethod, Res, Sse } from '@nestjs/common';
import nestPackage from '@nestjs/common/package.json' with { type: 'json' };
import { describe, expect, it } from 'vitest';
import {
  handlerTakesOver,
  httpCodeOf,
  KNOWN_KEYS,
  messagePatternOf,
  nestKeys,
  PATTERN_METADATA,
  probeNestKeys,
  resolveNestKeys,
  routeMethod,
  silenceReplies,
  type NestKeys,
} from '../../adapters/nestjs/nest-private.js';

const version = (nestPackage as { version: string }).version;

@Controller('probe')
class Routes {
  @Sse('events')
  events(): void {}

  @Post('own')
  own(@Res() _res: unknown): void {}

  @Post('next')
  next(@Next() _next: unknown): void {}

  @Post('passthrough')
  @HttpCode(202)
  passthrough(@Res({ passthrough: true }) _res: unknown): void {}

  @Get('plain')
  plain(): void {}
}

const takesOver = (keys?: NestKeys) =>
  Object.fromEntries(['events', 'own', 'next', 'passthrough', 'plain'].map((name) => [name, handlerTakesOver(Routes, Routes.prototype[name as 'plain'], keys)]));
const expected = { events: 'SSE', own: '@Res() without passthrough', next: '@Res() without passthrough', passthrough: undefined, plain: undefined };

describe(`Nest's private state, pinned to the installed @nestjs/common ${version}`, () => {
  it(`the metadata keys and route-argument types Nest ${version} writes are the ones the adapter knows (a failure here: Nest moved a key; update KNOWN_KEYS)`, () => {
    expect(Number(version.split('.')[0]), `supported: Nest 11 and 12, installed ${version}`).toBeOneOf([11, 12]);
    expect(probeNestKeys(), `@nestjs/common ${version}`).toEqual(KNOWN_KEYS);
    expect(nestKeys()).toEqual(KNOWN_KEYS);
  });

  it('reads SSE, @Res() and @Next() without passthrough, the route method and @HttpCode() from real decorated handlers', () => {
    expect(takesOver()).toEqual(expected);
    expect(routeMethod(Routes.prototype.plain)).toBe(RequestMethod.GET);
    expect(routeMethod(Routes.prototype.own)).toBe(RequestMethod.POST);
    expect(routeMethod(function notARoute() {})).toBeUndefined();
    expect(httpCodeOf(Routes.prototype.passthrough)).toBe(202);
    expect(httpCodeOf(Routes.prototype.plain)).toBeUndefined();
  });

  it("@nestjs/microservices writes @MessagePattern()'s pattern under the key the adapter reads (where the package is installed)", async () => {
    let microservices: { MessagePattern(pattern: unknown): MethodDecorator } | undefined;
    try {
      microservices = (await import('@nestjs/microservices')) as typeof microservices;
    } catch {
      // The Nest 11 workspace has no @nestjs/microservices: its RPC tests run on Nest 12 only.
      expect(Number(version.split('.')[0])).toBe(11);
      return;
    }
    class Handlers {
      handle(): void {}
    }
    microservices!.MessagePattern({ cmd: 'probe' })(Handlers.prototype, 'handle', Object.getOwnPropertyDescriptor(Handlers.prototype, 'handle')!);
    expect(PATTERN_METADATA).toBe('microservices:pattern');
    expect(messagePatternOf(Handlers.prototype.handle)).toEqual([{ cmd: 'probe' }]);
    expect(messagePatternOf(Routes.prototype.plain)).toBeUndefined();
  });
});

describe('the fallbacks', () => {
  it('a key Nest moved is taken from the probe of its public decorators: the handlers read the same', () => {
    // As if a Nest release had renamed every key and renumbered the argument types.
    const moved: NestKeys = { sse: 'x-sse', routeArgs: 'x-args', passthrough: 'x-pass', httpCode: 'x-code', method: 'x-method', responseType: 91, nextType: 92 };
    // With the stale keys alone, the adapter would protect an SSE stream and a @Res() handler:
    expect(takesOver(moved)).toEqual({ events: undefined, own: undefined, next: undefined, passthrough: undefined, plain: undefined });
    // The probe's keys override them, key by key.
    const probed = probeNestKeys();
    expect(probed).toBeDefined();
    const keys = { ...moved, ...probed };
    expect(takesOver(keys)).toEqual(expected);
    expect(routeMethod(Routes.prototype.plain, keys)).toBe(RequestMethod.GET);
    expect(httpCodeOf(Routes.prototype.passthrough, keys)).toBe(202);
  });

  it('when nothing can be probed (no reflect-metadata walk, a decorator that throws), the keys Nest 11 and 12 write are read', () => {
    const keys = resolveNestKeys(undefined);
    expect(keys).toEqual(KNOWN_KEYS);
    expect(takesOver(keys)).toEqual(expected);
    // A probe that singled out only some keys keeps the known value of the others.
    expect(resolveNestKeys({ sse: 'x-sse' })).toEqual({ ...KNOWN_KEYS, sse: 'x-sse' });
    // Without Reflect.getOwnMetadataKeys the probe finds nothing (and throws nothing).
    const own = Reflect.getOwnMetadataKeys;
    try {
      (Reflect as { getOwnMetadataKeys?: unknown }).getOwnMetadataKeys = undefined;
      expect(probeNestKeys()).toBeUndefined();
    } finally {
      Reflect.getOwnMetadataKeys = own;
    }
  });
});

/** A platform response: reply methods on its prototype that record what they were asked to write. */
class Reply {
  readonly written: string[] = [];
  status(code: number) {
    this.written.push(`status ${code}`);
    return this;
  }
  send(body: string) {
    this.written.push(`send ${body}`);
    return this;
  }
  json(body: unknown) {
    this.written.push(`json ${JSON.stringify(body)}`);
    return this;
  }
  end() {
    this.written.push('end');
    return this;
  }
}

describe('a replayed response: Nest replies after the layer, and nothing is written', () => {
  const reply = (res: Reply) => res.status(200).send('again').json({ a: 1 }).end();

  it('by a prototype of its own (one per platform prototype), with a method a middleware set on the response replaced too', () => {
    const a = new Reply();
    const b = new Reply();
    (a as unknown as Record<string, unknown>).end = () => a.written.push('wrapped end');
    silenceReplies(a as unknown as Record<string, unknown>);
    silenceReplies(b as unknown as Record<string, unknown>);
    expect(reply(a)).toBe(a);
    reply(b);
    expect([a.written, b.written]).toEqual([[], []]);
    expect(Object.getPrototypeOf(a)).toBe(Object.getPrototypeOf(b));
    expect(Object.getPrototypeOf(Object.getPrototypeOf(a))).toBe(Reply.prototype);
    // Other responses of the platform are untouched.
    const c = new Reply();
    reply(c);
    expect(c.written).toEqual(['status 200', 'send again', 'json {"a":1}', 'end']);
  });

  it('fallback: its own no-op methods when its prototype cannot change (forced, or a null prototype); the prototype stays', () => {
    const forced = new Reply();
    silenceReplies(forced as unknown as Record<string, unknown>, true);
    expect(Object.getPrototypeOf(forced)).toBe(Reply.prototype);
    expect(reply(forced)).toBe(forced);
    expect(forced.written).toEqual([]);

    const bare = Object.assign(Object.create(null) as Record<string, unknown>, { written: [] as string[] });
    for (const name of ['status', 'send', 'json', 'end'] as const) bare[name] = () => (bare.written as string[]).push(name);
    silenceReplies(bare);
    expect(reply(bare as unknown as Reply)).toBe(bare);
    expect(bare.written).toEqual([]);
  });

  it('a frozen response is left as it is, without throwing', () => {
    const frozen = Object.freeze(new Reply());
    expect(() => silenceReplies(frozen as unknown as Record<string, unknown>)).not.toThrow();
    expect(Object.getPrototypeOf(frozen)).toBe(Reply.prototype);
  });
});
