/**
 * One process of the Nest multi-process race (./nestjs-race.test.ts): a Nest app on the
 * platform and store URL of argv, listening on an ephemeral port. Prints `port=<n>` and
 * "ready", serves until "stop" on stdin, then prints one JSON line: the keys it executed.
 */
import 'reflect-metadata';
import type http from 'node:http';
import { Body, Controller, Headers, Module, Post } from '@nestjs/common';
import { Idempotent, IdempotencyModule } from '../../adapters/nestjs/index.js';
import { listenNest } from './nest-apps.js';

const [platform, url] = process.argv.slice(2);
if (!url || (platform !== 'express' && platform !== 'fastify')) throw new Error('usage: nest-race-worker <express|fastify> <store url>');

const executed: string[] = [];

@Controller()
@Idempotent()
class RaceController {
  @Post('charge')
  async charge(@Headers('idempotency-key') key: string, @Body() body: { amount: number }) {
    executed.push(key);
    // Long enough for the duplicates of the other processes to arrive while it runs.
    await new Promise((resolve) => setTimeout(resolve, 20));
    return { key, amount: body.amount, pid: process.pid };
  }
}

@Module({
  // A generous waitMs: this proves one execution per key, not latency, on a busy machine.
  imports: [IdempotencyModule.forRoot({ store: url, scope: 'shared', waitMs: 30_000 })],
  controllers: [RaceController],
})
class AppModule {}

const { nest: app, port } = await listenNest(AppModule, platform);
process.stdout.write(`port=${port}\nready\n`);
await new Promise<void>((resolve) => {
  process.stdin.on('data', (chunk) => {
    if (String(chunk).includes('stop')) resolve();
  });
});
(app.getHttpServer() as http.Server).closeAllConnections();
await app.close();
process.stdout.write(`${JSON.stringify({ pid: process.pid, executed })}\n`);
process.stdin.destroy();
