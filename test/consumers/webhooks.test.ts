/**
 * Inbound webhooks over real HTTP: Express (with express.raw() and with
 * no body parser) and Hono on @hono/node-server (fetch), bodies signed by the providers'
 * own libraries (the Stripe SDK's generateTestHeaderString, @octokit/webhooks' sign,
 * standardwebhooks' sign) and sent with fetch. The signature is checked first, so an
 * unsigned or badly signed request never reaches the store; a redelivered event answers
 * 200 at once without running the handler; a handler failure answers 500 and the retry
 * runs it again; concurrent copies of one event run it once.
 */
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { createAdaptorServer } from '@hono/node-server';
import { Webhooks } from '@octokit/webhooks';
import express from 'express';
import { Hono } from 'hono';
import pg from 'pg';
import { Webhook } from 'standardwebhooks';
import Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { githubWebhook, standardWebhook, stripeWebhook, idempotentWebhookHandler, WebhookSignatureError, type WebhookDelivery } from '../../consumers/webhooks.js';
import { createStore } from '../../drivers/create-store.js';
import { postgresStore } from '../../drivers/postgres.js';
import type { IdempotencyStore } from '../../src/store.js';
import { POSTGRES_URL, REDIS_URL, serviceAvailable } from '../helpers/services.js';

const available = (await serviceAvailable('Redis', REDIS_URL)) && (await serviceAvailable('PostgreSQL', POSTGRES_URL));
const run = randomUUID().slice(0, 8);
const STRIPE_SECRET = 'whsec_test_secret_for_idempotency_kit';
const GITHUB_SECRET = 'it is a secret to everybody';
const STANDARD_SECRET = `whsec_${Buffer.from('a standard webhooks secret, 32 b').toString('base64')}`;
const stripe = new Stripe('sk_test_not_used');
const octokit = new Webhooks({ secret: GITHUB_SECRET });
const standard = new Webhook(STANDARD_SECRET);
const servers: http.Server[] = [];

async function listen(server: http.Server): Promise<string> {
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** A store that counts the calls that reach it (the real Redis store underneath). */
function counting(store: IdempotencyStore) {
  const calls: string[] = [];
  const wrapped = new Proxy(store, {
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver) as unknown;
      if (typeof value !== 'function' || property === 'close') return value;
      return (...args: unknown[]) => {
        calls.push(String(property));
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { store: wrapped, calls };
}

const stripeEvent = (id: string, type = 'checkout.session.completed') =>
  JSON.stringify({ id, object: 'event', type, api_version: '2024-06-20', created: 1_700_000_000, data: { object: { id: `cs_${id}`, amount_total: 4200 } } });
const stripeHeaders = (payload: string, secret = STRIPE_SECRET) => ({
  'content-type': 'application/json',
  'stripe-signature': stripe.webhooks.generateTestHeaderString({ payload, secret }),
});

describe.skipIf(!available)('webhooks over real HTTP', () => {
  let redis: IdempotencyStore;
  beforeAll(() => {
    redis = createStore(REDIS_URL, { namespace: `webhooks_${run}` });
  });
  afterAll(async () => {
    await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
    await redis?.close();
  });

  describe('Stripe on Express (express.raw)', () => {
    let base: string;
    const { store, calls } = { ...counting(createStore(REDIS_URL, { namespace: `webhooks_stripe_${run}` })) };
    const handled: string[] = [];
    let failNext = false;
    beforeAll(async () => {
      const receive = idempotentWebhookHandler(
        stripeWebhook(stripe, { secret: ['whsec_an_old_secret', STRIPE_SECRET] }),
        async (event: Stripe.Event) => {
          if (failNext) {
            failNext = false;
            throw new Error('fulfilment service down');
          }
          handled.push(event.id);
          await new Promise((resolve) => setTimeout(resolve, 100));
          return { fulfilled: event.id };
        },
        { store },
      );
      const app = express();
      app.post('/webhooks/stripe', express.raw({ type: 'application/json' }), receive.node);
      // An app that parsed JSON first: the signature cannot be checked on a re-serialised body.
      app.post('/webhooks/parsed', express.json(), receive.node);
      base = await listen(http.createServer(app));
    });
    afterAll(() => store.close());

    it('a signed event runs once; Stripe\'s retry (same event, signed again) answers 200 at once, replayed', async () => {
      const payload = stripeEvent(`evt_${run}_1`);
      const first = await fetch(`${base}/webhooks/stripe`, { method: 'POST', headers: stripeHeaders(payload), body: payload });
      expect(first.status).toBe(200);
      expect(await first.json()).toEqual({ received: true });
      const started = Date.now();
      const retry = await fetch(`${base}/webhooks/stripe`, { method: 'POST', headers: stripeHeaders(payload), body: payload });
      expect(Date.now() - started).toBeLessThan(100); // the 100 ms handler did not run again
      expect(retry.status).toBe(200);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(await retry.json()).toEqual({ received: true, replayed: true });
      expect(handled).toEqual([`evt_${run}_1`]);
    });

    it('an unsigned, a badly signed and a tampered request answer 400 and never reach the store', async () => {
      const payload = stripeEvent(`evt_${run}_2`);
      const before = calls.length;
      const answers = await Promise.all([
        fetch(`${base}/webhooks/stripe`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: payload }),
        fetch(`${base}/webhooks/stripe`, { method: 'POST', headers: stripeHeaders(payload, 'whsec_wrong'), body: payload }),
        fetch(`${base}/webhooks/stripe`, { method: 'POST', headers: stripeHeaders(payload), body: payload.replace('4200', '1') }),
      ]);
      for (const answer of answers) {
        expect(answer.status).toBe(400);
        expect(answer.headers.get('content-type')).toBe('application/problem+json');
        expect(await answer.json()).toMatchObject({ type: 'urn:idempotency-kit:problem:webhook-signature-invalid', status: 400 });
      }
      expect(calls.length).toBe(before);
      expect(handled).not.toContain(`evt_${run}_2`);
    });

    it('a handler failure answers 500 (no detail leaked); Stripe\'s retry runs the handler again', async () => {
      const payload = stripeEvent(`evt_${run}_3`);
      failNext = true;
      const failed = await fetch(`${base}/webhooks/stripe`, { method: 'POST', headers: stripeHeaders(payload), body: payload });
      expect(failed.status).toBe(500);
      expect(JSON.stringify(await failed.json())).not.toContain('fulfilment service down');
      const retry = await fetch(`${base}/webhooks/stripe`, { method: 'POST', headers: stripeHeaders(payload), body: payload });
      expect(retry.status).toBe(200);
      expect(await retry.json()).toEqual({ received: true });
      expect(handled.filter((id) => id === `evt_${run}_3`)).toHaveLength(1);
    });

    it('20 concurrent copies of one event: the handler runs once, every copy gets 200', async () => {
      const payload = stripeEvent(`evt_${run}_4`);
      const answers = await Promise.all(
        Array.from({ length: 20 }, () => fetch(`${base}/webhooks/stripe`, { method: 'POST', headers: stripeHeaders(payload), body: payload })),
      );
      expect(answers.map((a) => a.status)).toEqual(Array(20).fill(200));
      expect(handled.filter((id) => id === `evt_${run}_4`)).toHaveLength(1);
    });

    it('a body parsed before the handler (express.json()) is refused with 500 and what to change', async () => {
      const payload = stripeEvent(`evt_${run}_5`);
      const answer = await fetch(`${base}/webhooks/parsed`, { method: 'POST', headers: stripeHeaders(payload), body: payload });
      expect(answer.status).toBe(500);
      expect(((await answer.json()) as { detail: string }).detail).toMatch(/express\.raw/);
    });
  });

  describe('GitHub on Hono (fetch)', () => {
    let base: string;
    const handled: Array<{ id: string; name: string }> = [];
    beforeAll(async () => {
      const receive = idempotentWebhookHandler(githubWebhook(octokit), async (event, delivery: WebhookDelivery) => {
        handled.push({ id: delivery.id, name: event.name });
        return (event.payload as { action: string }).action;
      }, { store: redis });
      const app = new Hono();
      app.post('/webhooks/github', (c) => receive.fetch(c.req.raw));
      base = await listen(createAdaptorServer({ fetch: app.fetch }) as http.Server);
    });
    const send = async (payload: string, delivery: string | undefined, signature?: string) => {
      const headers: Record<string, string> = {
        'content-type': 'application/json',
        'x-github-event': 'issues',
        'x-hub-signature-256': signature ?? (await octokit.sign(payload)),
      };
      if (delivery) headers['x-github-delivery'] = delivery;
      return fetch(`${base}/webhooks/github`, { method: 'POST', headers, body: payload });
    };

    it('a signed delivery runs once; its redelivery (same X-GitHub-Delivery) replays', async () => {
      const payload = JSON.stringify({ action: 'opened', issue: { number: 1 } });
      const delivery = randomUUID();
      expect((await send(payload, delivery)).status).toBe(200);
      const again = await send(payload, delivery);
      expect(again.status).toBe(200);
      expect(await again.json()).toEqual({ received: true, replayed: true });
      expect(handled).toEqual([{ id: delivery, name: 'issues' }]);
    });

    it('a bad signature answers 400; a signed delivery without X-GitHub-Delivery answers 400 key-missing', async () => {
      const payload = JSON.stringify({ action: 'closed' });
      const bad = await send(payload, randomUUID(), 'sha256=' + '0'.repeat(64));
      expect(bad.status).toBe(400);
      expect(((await bad.json()) as { code: string }).code).toBe('webhook-signature-invalid');
      const keyless = await send(payload, undefined);
      expect(keyless.status).toBe(400);
      expect(((await keyless.json()) as { code: string }).code).toBe('key-missing');
      expect(handled.some((h) => h.name === 'closed')).toBe(false);
    });
  });

  describe('Standard Webhooks on Express (no body parser) and on fetch', () => {
    const handled: string[] = [];
    let expressBase: string;
    let fetchBase: string;
    beforeAll(async () => {
      const receive = idempotentWebhookHandler(standardWebhook<{ type: string }>(standard, { name: 'acme' }), async (event, delivery) => {
        handled.push(`${delivery.id}:${event.type}`);
      }, { store: redis });
      const app = express();
      app.post('/hooks', receive.node);
      expressBase = await listen(http.createServer(app));
      const hono = new Hono();
      hono.post('/hooks', (c) => receive.fetch(c.req.raw));
      fetchBase = await listen(createAdaptorServer({ fetch: hono.fetch }) as http.Server);
    });
    const signed = (id: string, payload: string, secret = standard) => {
      const timestamp = new Date();
      return {
        'content-type': 'application/json',
        'webhook-id': id,
        'webhook-timestamp': String(Math.floor(timestamp.getTime() / 1000)),
        'webhook-signature': secret.sign(id, timestamp, payload),
      };
    };

    it('each attempt is signed anew with the same webhook-id: the first runs, the next (on the other server) replays', async () => {
      const id = `msg_${run}_1`;
      const payload = JSON.stringify({ type: 'invoice.paid' });
      const first = await fetch(`${expressBase}/hooks`, { method: 'POST', headers: signed(id, payload), body: payload });
      expect(first.status).toBe(200);
      const second = await fetch(`${fetchBase}/hooks`, { method: 'POST', headers: signed(id, payload), body: payload });
      expect(second.status).toBe(200);
      expect(await second.json()).toEqual({ received: true, replayed: true });
      expect(handled).toEqual([`${id}:invoice.paid`]);
    });

    it('another sender\'s signature, a stale timestamp or no signature answer 400', async () => {
      const payload = JSON.stringify({ type: 'invoice.paid' });
      const stranger = new Webhook(`whsec_${Buffer.from('somebody else entirely, 32 bytes').toString('base64')}`);
      const stale = { ...signed(`msg_${run}_3`, payload), 'webhook-timestamp': String(Math.floor(Date.now() / 1000) - 3600) };
      for (const [base, headers] of [
        [expressBase, signed(`msg_${run}_2`, payload, stranger)],
        [fetchBase, stale],
        [expressBase, { 'content-type': 'application/json', 'webhook-id': `msg_${run}_4` }],
      ] as const) {
        const answer = await fetch(`${base}/hooks`, { method: 'POST', headers, body: payload });
        expect(answer.status).toBe(400);
        expect(((await answer.json()) as { code: string }).code).toBe('webhook-signature-invalid');
      }
      expect(handled).toHaveLength(1);
    });
  });

  it('the store down answers 503 with Retry-After, handler not run; bad setup is a precise TypeError', async () => {
    const down = createStore('redis://127.0.0.1:1', { namespace: 'down' });
    let runs = 0;
    const receive = idempotentWebhookHandler(stripeWebhook(stripe, { secret: STRIPE_SECRET }), () => void runs++, { store: down, storeTimeoutMs: 200 });
    const payload = stripeEvent(`evt_${run}_down`);
    const answer = await receive.handle(payload, stripeHeaders(payload));
    expect(answer.status).toBe(503);
    expect(answer.headers['retry-after']).toBe('1');
    expect(runs).toBe(0);
    await down.close().catch(() => undefined);
    expect(() => stripeWebhook(stripe, { secret: '' })).toThrow(/Expected `secret` to be the endpoint's signing secret/);
    expect(() => stripeWebhook({} as never, { secret: STRIPE_SECRET })).toThrow(/Expected `stripe` to be a Stripe client/);
    expect(() => githubWebhook({} as never)).toThrow(/@octokit\/webhooks/);
    expect(() => idempotentWebhookHandler({} as never, () => 1, { store: redis })).toThrow(/Expected `verifier` to be a webhook verifier/);
    expect(() => idempotentWebhookHandler(githubWebhook(octokit), () => 1, { store: redis, maxBodyBytes: 0 })).toThrow('Expected `maxBodyBytes` to be a positive integer, got 0');
    expect(new WebhookSignatureError('x').code).toBe('webhook-signature-invalid');
  });

  it('the default ttl covers each provider\'s retries: Stripe 4 days, GitHub 4 days, Standard Webhooks 2 days', () => {
    const day = 86_400_000;
    expect(stripeWebhook(stripe, { secret: STRIPE_SECRET }).ttlMs).toBe(4 * day);
    expect(githubWebhook(octokit).ttlMs).toBe(4 * day);
    expect(standardWebhook(standard).ttlMs).toBe(2 * day);
  });

  it('transaction: true: the handler writes in the transaction that records the event; a failure leaves nothing', async () => {
    const db = new pg.Pool({ connectionString: POSTGRES_URL, max: 3 });
    const table = `ik_webhook_tx_${run}`;
    await db.query(`CREATE TABLE ${table} (id serial PRIMARY KEY, event_id text NOT NULL)`);
    try {
      let attempt = 0;
      const receive = idempotentWebhookHandler(
        stripeWebhook(stripe, { secret: STRIPE_SECRET }),
        async (event: Stripe.Event, _delivery, client: pg.PoolClient) => {
          await client.query(`INSERT INTO ${table} (event_id) VALUES ($1)`, [event.id]);
          if (++attempt === 1) throw new Error('after the write');
        },
        { store: postgresStore({ pool: db, table: `${table}_records` }), transaction: true },
      );
      const payload = stripeEvent(`evt_${run}_tx`);
      expect((await receive.handle(payload, stripeHeaders(payload))).status).toBe(500);
      expect((await receive.handle(payload, stripeHeaders(payload))).status).toBe(200);
      expect((await receive.handle(payload, stripeHeaders(payload))).headers['idempotent-replayed']).toBe('true');
      expect((await db.query(`SELECT count(*)::int AS n FROM ${table}`)).rows[0].n).toBe(1);
    } finally {
      await db.query(`DROP TABLE IF EXISTS ${table}`);
      await db.query(`DROP TABLE IF EXISTS ${table}_records`);
      await db.end();
    }
  });
});
