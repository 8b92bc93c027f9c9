/**
 * A NestJS payments API protected by idempotency-kit/nestjs, behind a Passport JWT guard:
 * each user's keys are their own, and the store comes from the app's own Redis connection
 * through `forRootAsync` (or memory when REDIS_URL is not set).
 *
 *   REDIS_URL=redis://127.0.0.1:6379 PORT=3000 npx tsx examples/nestjs/app.ts
 *   TOKEN=$(curl -s -XPOST localhost:3000/login -H 'content-type: application/json' -d '{"user":"alice"}' | jq -r .token)
 *   curl -i localhost:3000/payments -H "authorization: Bearer $TOKEN" -H 'Idempotency-Key: 8e03978e' \
 *     -H 'content-type: application/json' -d '{"amount":40}'
 *
 * The second identical curl is a replay (Idempotent-Replayed: true, one payment); without
 * the Authorization header it is the guard's 401, never the stored payment.
 */
import 'reflect-metadata';
import KeyvRedis from '@keyv/redis';
import { Body, Controller, Inject, Injectable, Module, Post, Req, UseGuards, type OnApplicationShutdown } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { JwtModule, JwtService } from '@nestjs/jwt';
import { AuthGuard, PassportModule, PassportStrategy } from '@nestjs/passport';
import { ExtractJwt, Strategy } from 'passport-jwt';
import { Idempotent, IdempotencyModule, SkipIdempotency } from 'idempotency-kit/nestjs';
import { memoryStore } from 'idempotency-kit/drivers/memory';
import { redisStore } from 'idempotency-kit/drivers/redis';

const SECRET = process.env.JWT_SECRET ?? 'change-me';
const REDIS = Symbol('redis');

@Injectable()
class JwtStrategy extends PassportStrategy(Strategy) {
  constructor() {
    super({ jwtFromRequest: ExtractJwt.fromAuthHeaderAsBearerToken(), secretOrKey: SECRET });
  }
  validate(payload: { sub: string }) {
    return { id: payload.sub }; // request.user: the key space of this user's keys
  }
}

/** The app's Redis connection, opened and closed by the app (undefined: no REDIS_URL). */
@Module({
  providers: [{ provide: REDIS, useFactory: () => (process.env.REDIS_URL ? new KeyvRedis(process.env.REDIS_URL) : undefined) }],
  exports: [REDIS],
})
class RedisModule implements OnApplicationShutdown {
  constructor(@Inject(REDIS) private readonly redis: KeyvRedis<unknown> | undefined) {}
  async onApplicationShutdown() {
    await this.redis?.disconnect();
  }
}

let payments = 0;

@Controller()
@UseGuards(AuthGuard('jwt'))
@Idempotent()
class PaymentsController {
  constructor(@Inject(JwtService) private readonly jwt: JwtService) {}

  @Post('payments')
  pay(@Req() req: { user: { id: string } }, @Body() body: { amount: number }) {
    payments++; // the side effect: once per user and key
    return { id: `pay_${payments}`, user: req.user.id, amount: body.amount };
  }
}

@Controller()
class LoginController {
  constructor(@Inject(JwtService) private readonly jwt: JwtService) {}

  /** A stand-in for a real login: a token for the user named in the body. */
  @Post('login')
  @SkipIdempotency()
  login(@Body() body: { user: string }) {
    return { token: this.jwt.sign({ sub: body.user }) };
  }
}

@Module({
  imports: [
    PassportModule,
    JwtModule.register({ secret: SECRET }),
    RedisModule,
    IdempotencyModule.forRootAsync({
      imports: [RedisModule],
      inject: [REDIS],
      useFactory: (redis: KeyvRedis<unknown> | undefined) => ({ store: redis ? redisStore({ adapter: redis }) : memoryStore() }),
    }),
  ],
  controllers: [PaymentsController, LoginController],
  providers: [JwtStrategy],
})
class AppModule {}

const app = await NestFactory.create(AppModule, { logger: ['error', 'warn'] });
app.enableShutdownHooks();
const port = Number(process.env.PORT ?? 3000);
await app.listen(port, '127.0.0.1');
console.log(`listening on http://localhost:${port}`);
