/**
 * The conformance suite's test API (see ./apps.ts) as a Nest application, written the way a
 * Nest user writes it (return values, @HttpCode, @Header, @Res({ passthrough: true }),
 * thrown HttpExceptions), started through Nest's testing module on @nestjs/platform-express
 * or @nestjs/platform-fastify, listening on 127.0.0.1 on an ephemeral port.
 */
import 'reflect-metadata';
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import {
  BadRequestException,
  Body,
  Controller,
  Get,
  HttpCode,
  Inject,
  Module,
  Param,
  Patch,
  Post,
  Put,
  Req,
  Res,
  StreamableFile,
  type INestApplication,
  type Type,
} from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Idempotent, IdempotencyModule, type IdempotencyModuleOptions } from '../../adapters/nestjs/index.js';
import { Calls, answers, query, sleep } from './web-apps.js';
import type { RunningApp } from './apps.js';

export type NestPlatform = 'express' | 'fastify';

const CALLS = Symbol('calls');

/** Express's `res` or Fastify's reply: both have `status`/`code` and `header`. */
type PassthroughResponse = { header(name: string, value: string): unknown; status?(n: number): unknown; code?(n: number): unknown };
const setStatus = (res: PassthroughResponse, n: number) => (typeof res.code === 'function' ? res.code(n) : res.status!(n));
const urlOf = (req: { originalUrl?: string; url: string }) => req.originalUrl ?? req.url;

@Controller()
@Idempotent()
class PaymentsController {
  constructor(@Inject(CALLS) private readonly calls: Calls) {}

  @Post('off')
  @Idempotent(false)
  off() {
    return { n: this.calls.hit('off') };
  }

  @Post('payments')
  payments(@Body() body: unknown, @Res({ passthrough: true }) res: PassthroughResponse) {
    const n = this.calls.hit('payments');
    for (const [name, value] of Object.entries(answers.paymentHeaders(n))) res.header(name, value);
    return answers.payment(n, body);
  }

  @Patch('payments')
  patch(@Body() body: unknown) {
    return answers.payment(this.calls.hit('payments'), body);
  }

  @Get('payments')
  list() {
    return { n: this.calls.hit('list') };
  }

  @Put('payments')
  @HttpCode(200)
  put() {
    return { n: this.calls.hit('list') };
  }

  @Post('slow')
  async slow(@Req() req: { originalUrl?: string; url: string }, @Res({ passthrough: true }) res: PassthroughResponse) {
    const n = this.calls.hit('slow');
    await sleep(query(urlOf(req), 'ms', 100));
    setStatus(res, query(urlOf(req), 'status', 201));
    return { n };
  }

  @Post('status/:n')
  status(@Param('n') n: string, @Res({ passthrough: true }) res: PassthroughResponse) {
    setStatus(res, Number(n));
    return { n: this.calls.hit('status') };
  }

  @Post('fail-500')
  fail500(@Res({ passthrough: true }) res: PassthroughResponse) {
    setStatus(res, 500);
    return { n: this.calls.hit('fail-500') };
  }

  @Post('throw')
  throws() {
    this.calls.hit('throw');
    throw new Error('boom');
  }

  @Post('throw-400')
  throws400() {
    this.calls.hit('throw-400');
    throw new BadRequestException('bad request');
  }

  @Post('big')
  @HttpCode(200)
  big(@Req() req: { originalUrl?: string; url: string }, @Res({ passthrough: true }) res: PassthroughResponse) {
    res.header('content-type', 'text/plain');
    return answers.big(query(urlOf(req), 'bytes', 4096), this.calls.hit('big'));
  }

  @Post('stream')
  stream() {
    return new StreamableFile(Readable.from(answers.stream(this.calls.hit('stream'))), { type: 'text/plain' });
  }

  @Post('echo-body')
  @HttpCode(200)
  echo(@Body() body: unknown) {
    return { body, n: this.calls.hit('echo-body') };
  }
}

/** Compile `module` with Nest's testing module and serve it on `platform`, on an ephemeral port of 127.0.0.1. */
export async function listenNest(module: Type, platform: NestPlatform): Promise<{ nest: INestApplication; port: number }> {
  const moduleRef = await Test.createTestingModule({ imports: [module] }).compile();
  // `rawBody: true`, as docs/adapters/nestjs.md advises: the fingerprint reads the bytes
  // Nest's parser read (bytes that are not UTF-8, numbers beyond a double count as sent).
  const nest = moduleRef.createNestApplication(platform === 'express' ? new ExpressAdapter() : new FastifyAdapter(), { logger: false, rawBody: true });
  await nest.listen(0, '127.0.0.1');
  return { nest, port: ((nest.getHttpServer() as http.Server).address() as AddressInfo).port };
}

/** Start the suite's API on `platform`, protected with `options`. */
export async function startNestApp(platform: NestPlatform, options: IdempotencyModuleOptions): Promise<RunningApp & { nest: INestApplication }> {
  const calls = new Calls();
  @Module({
    imports: [IdempotencyModule.forRoot(options)],
    controllers: [PaymentsController],
    providers: [{ provide: CALLS, useValue: calls }],
  })
  class AppModule {}
  const { nest, port } = await listenNest(AppModule, platform);
  const server = nest.getHttpServer() as http.Server;
  return {
    adapter: `nest-${platform}` as RunningApp['adapter'],
    port,
    url: `http://127.0.0.1:${port}`,
    calls,
    nest,
    close: async () => {
      server.closeAllConnections();
      await nest.close();
    },
  };
}
