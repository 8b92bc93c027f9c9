import { expect } from 'vitest';
import type { AppOptions } from './apps.js';
import { send } from './client.js';
import { startNestApp, type NestPlatform } from './nest-apps.js';
import { httpConformanceSuite, type Scenario } from '../suites/http-conformance.suite.js';
import type { IdempotencyModuleOptions } from '../../adapters/nestjs/index.js';

/** Rows Nest answers its own way: a thrown HttpException is an answer, and a StreamableFile runs unprotected. */
const skip = [
  'a thrown error with a 4xx status releases the key too',
  'a streamed response is captured and replayed byte for byte',
  'a streamed response over maxResponseBytes completes without a body: 409, never a second run',
];

const extra: Scenario[] = [
  {
    rule: 'H10',
    title: 'a thrown HttpException with a 4xx status is an answer: stored and replayed',
    async run(t) {
      const key = t.key();
      const first = await t.send({ path: '/throw-400', key });
      const second = await t.send({ path: '/throw-400', key });
      expect([first.status, second.status]).toEqual([400, 400]);
      expect(second.body.equals(first.body)).toBe(true);
      expect(second.headers['idempotent-replayed']).toBe('true');
      expect(t.app.calls.count('throw-400')).toBe(1);
    },
  },
  {
    rule: 'H12',
    title: 'a StreamableFile runs unprotected: each retry runs, released, never left processing',
    async run(t) {
      const key = t.key();
      for (let i = 1; i <= 2; i++) {
        const reply = await t.send({ path: '/stream', key });
        expect(reply.status).toBe(201);
        expect(reply.text).toBe(`chunk-1;chunk-2;n=${i}`);
        expect(reply.headers['idempotent-replayed']).toBeUndefined();
      }
      expect(t.app.calls.count('stream')).toBe(2);
    },
  },
];

for (const platform of ['express', 'fastify'] as NestPlatform[]) {
  const start = (_adapter: string, appOptions: AppOptions) => {
    const options = ('scope' in appOptions ? appOptions : { scope: 'shared', ...appOptions }) as IdempotencyModuleOptions;
    return startNestApp(platform, options);
  };
  await httpConformanceSuite(`nest-${platform}`, { start }, { skip, extra });
}
void send;
