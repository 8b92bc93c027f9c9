// `node --import ./bench/nest10/register.mjs`: the bench server's @nestjs/* and
// @node-idempotency/nestjs imports (the bundle's ES imports) resolve to this workspace's
// NestJS 10 and the peer, whatever imports them; NestJS's own CommonJS requires find the
// same copies from where they are installed.
import { register } from 'node:module';

register('./hooks.mjs', import.meta.url);
