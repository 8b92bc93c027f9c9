/**
 * examples/nestjs/app.ts runs as its header says, in its own process, on Redis when it is
 * up (through the app's own connection, forRootAsync) and on memory otherwise: a user's
 * repeat is a replay, another user's same key is their own payment, no token is a 401.
 */
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import { startTsServer } from '../helpers/ts-process.js';
import { REDIS_URL, serviceAvailable } from '../helpers/services.js';
import { send } from './client.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const redis = await serviceAvailable('Redis', REDIS_URL);

it(`examples/nestjs/app.ts: H7 H15 behind a Passport JWT guard (${redis ? 'Redis' : 'memory'})`, async () => {
  const server = await startTsServer('examples/nestjs/app.ts', { cwd: root, env: { ...process.env, ...(redis ? { REDIS_URL } : {}) } });
  const output = server.output;
  try {
    const url = server.url;
    const token = async (user: string) => (await send(url, { path: '/login', body: { user } })).json<{ token: string }>().token;
    const alice = { authorization: `Bearer ${await token('alice')}` };
    const bob = { authorization: `Bearer ${await token('bob')}` };
    const key = `example-${randomUUID()}`;
    const first = await send(url, { path: '/payments', key, body: { amount: 40 }, headers: alice });
    expect(first.status, output()).toBe(201);
    expect(first.json()).toMatchObject({ user: 'alice', amount: 40 });
    const again = await send(url, { path: '/payments', key, body: { amount: 40 }, headers: alice });
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body.equals(first.body)).toBe(true);
    const other = await send(url, { path: '/payments', key, body: { amount: 40 }, headers: bob });
    expect(other.json()).toMatchObject({ user: 'bob' });
    expect(other.json().id).not.toBe(first.json().id);
    const anonymous = await send(url, { path: '/payments', key, body: { amount: 40 } });
    expect(anonymous.status).toBe(401);
  } finally {
    server.stop();
  }
}, 60_000);
