/**
 * The webhook receivers attacked as an outsider would: the attacker holds captured
 * deliveries (signed by the provider, with the providers' own libraries: svix,
 * standardwebhooks, @octokit/webhooks, stripe), can add or change any header the signature
 * does not cover, and can send requests to the app's other entry points on the same store
 * (an API user whose id is a provider's name). Over real HTTP (Node http), on every store.
 */
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhooks } from '@octokit/webhooks';
import { Webhook as StandardWebhook } from 'standardwebhooks';
import Stripe from 'stripe';
import { Webhook as SvixWebhook } from 'svix';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { githubWebhook, standardWebhook, stripeWebhook, idempotentWebhookHandler, type WebhookHandler } from '../../consumers/webhooks.js';
import { withIdempotency } from '../../adapters/node.js';
import { createStore } from '../../drivers/create-store.js';
import { memoryStore } from '../../drivers/memory.js';
import { idempotent } from '../../src/idempotent.js';
import type { IdempotencyStore } from '../../src/store.js';
import { MYSQL_URL, POSTGRES_URL, REDIS_URL, serviceAvailable } from '../helpers/services.js';

const run = randomUUID().slice(0, 8);
const SECRET = `whsec_${Buffer.from('a standard webhooks secret, 32 b').toString('base64')}`;
const svix = new SvixWebhook(SECRET);
const standard = new StandardWebhook(SECRET);
const octokit = new Webhooks({ secret: 'github secret for the hostile tests' });
const stripe = new Stripe('sk_test_not_used');
const STRIPE_SECRET = 'whsec_hostile_stripe_secret';

const stores: Array<[string, boolean, () => IdempotencyStore]> = [
  ['memory', true, () => memoryStore()],
  ['redis', await serviceAvailable('Redis', REDIS_URL), () => createStore(REDIS_URL, { namespace: `hostile_wh_${run}` })],
  ['postgres', await serviceAvailable('PostgreSQL', POSTGRES_URL), () => createStore(POSTGRES_URL, { namespace: `hostile_wh_${run}` })],
  ['mysql', await serviceAvailable('MySQL', MYSQL_URL), () => createStore(MYSQL_URL, { namespace: `hostile_wh_${run}` })],
];

/** A delivery as the provider sends it: svix-* headers, signed over id, timestamp and body. */
function svixDelivery(id: string, payload: string) {
  const timestamp = new Date();
  return {
    'content-type': 'application/json',
    'svix-id': id,
    'svix-timestamp': String(Math.floor(timestamp.getTime() / 1000)),
    'svix-signature': svix.sign(id, timestamp, payload),
  };
}

interface Receiver {
  base: string;
  handled: string[];
  errors: string[];
}

const servers: http.Server[] = [];
async function serve(make: (handled: string[], errors: string[]) => WebhookHandler['node'] | http.RequestListener): Promise<Receiver> {
  const handled: string[] = [];
  const errors: string[] = [];
  const server = http.createServer(make(handled, errors) as http.RequestListener);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { base: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, handled, errors };
}
const post = (url: string, headers: Record<string, string>, body: string) => fetch(url, { method: 'POST', headers, body });
const codeOf = async (response: Response) => ((await response.json()) as { code?: string }).code;

afterAll(async () => {
  await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
});

for (const [name, available, makeStore] of stores) {
  describe.skipIf(!available)(`hostile webhook deliveries on ${name}`, () => {
    let store: IdempotencyStore;
    let svixReceiver: Receiver;
    let standardReceiver: Receiver;
    let github: Receiver;
    beforeAll(async () => {
      store = makeStore();
      const onError = (errors: string[]) => (error: unknown, delivery: { id?: string }) => errors.push(`${delivery.id}:${(error as { code?: string }).code}`);
      svixReceiver = await serve((handled, errors) =>
        idempotentWebhookHandler(standardWebhook<{ type: string }>(svix, { name: 'svix' }), (event, delivery) => void handled.push(`${delivery.id}:${event.type}`), {
          store,
          onError: onError(errors),
        }).node,
      );
      standardReceiver = await serve((handled, errors) =>
        idempotentWebhookHandler(standardWebhook<{ type: string }>(standard, { name: 'acme' }), (event, delivery) => void handled.push(`${delivery.id}:${event.type}`), {
          store,
          onError: onError(errors),
        }).node,
      );
      github = await serve((handled, errors) =>
        idempotentWebhookHandler(githubWebhook(octokit), (event) => void handled.push(`${event.id}:${event.name}:${(event.payload as { n: number }).n}`), {
          store,
          onError: onError(errors),
        }).node,
      );
    });
    afterAll(async () => {
      await store?.close();
    });

    it('C6 (svix): a captured delivery resent with an added webhook-id is refused 400, never run again', async () => {
      const id = `msg_${randomUUID()}`;
      const payload = JSON.stringify({ type: 'invoice.paid' });
      const headers = svixDelivery(id, payload);
      expect((await post(svixReceiver.base, headers, payload)).status).toBe(200);
      for (const forged of ['anything', `msg_${randomUUID()}`]) {
        const answer = await post(svixReceiver.base, { ...headers, 'webhook-id': forged }, payload);
        expect(answer.status).toBe(400);
        expect(await codeOf(answer)).toBe('webhook-signature-invalid');
      }
      expect(svixReceiver.handled.filter((h) => h.startsWith(id))).toEqual([`${id}:invoice.paid`]);
    });

    it('C6 (svix): an attacker cannot claim a future delivery id first: the real delivery runs, not a replay', async () => {
      const captured = `msg_${randomUUID()}`;
      const future = `msg_${randomUUID()}`;
      const payload = JSON.stringify({ type: 'invoice.created' });
      const headers = svixDelivery(captured, payload);
      expect((await post(svixReceiver.base, headers, payload)).status).toBe(200);
      expect((await post(svixReceiver.base, { ...headers, 'webhook-id': future }, payload)).status).toBe(400);
      const realPayload = JSON.stringify({ type: 'invoice.paid' });
      const real = await post(svixReceiver.base, svixDelivery(future, realPayload), realPayload);
      expect(real.status).toBe(200);
      expect(await real.json()).toEqual({ received: true });
      expect(svixReceiver.handled).toContain(`${future}:invoice.paid`);
    });

    it('C6 (svix): both spellings with one id are one delivery; the svix-* headers alone verify with standardwebhooks too', async () => {
      const id = `msg_${randomUUID()}`;
      const payload = JSON.stringify({ type: 'customer.created' });
      const headers = svixDelivery(id, payload);
      const both = await post(svixReceiver.base, { ...headers, 'webhook-id': id }, payload);
      expect(both.status).toBe(200);
      expect(await (await post(svixReceiver.base, headers, payload)).json()).toEqual({ received: true, replayed: true });
      const other = `msg_${randomUUID()}`;
      expect((await post(standardReceiver.base, svixDelivery(other, payload), payload)).status).toBe(200);
      expect(standardReceiver.handled).toContain(`${other}:customer.created`);
    });

    it('C6 (standard webhooks): another body signed under a used id is 422 key-reused and told to onError, never a silent replay', async () => {
      const id = `msg_${randomUUID()}`;
      const first = JSON.stringify({ type: 'order.created', n: 1 });
      expect((await post(standardReceiver.base, svixDelivery(id, first), first)).status).toBe(200);
      const second = JSON.stringify({ type: 'order.created', n: 2 });
      const answer = await post(standardReceiver.base, svixDelivery(id, second), second);
      expect(answer.status).toBe(422);
      expect(await codeOf(answer)).toBe('key-reused');
      expect(standardReceiver.errors).toContain(`${id}:key-reused`);
      expect(standardReceiver.handled.filter((h) => h.startsWith(id))).toHaveLength(1);
    });

    const githubHeaders = async (payload: string, delivery: string, event = 'issues') => ({
      'content-type': 'application/json',
      'x-github-event': event,
      'x-github-delivery': delivery,
      'x-hub-signature-256': await octokit.sign(payload),
    });

    it('C6 (GitHub): a signed body sent first under the real delivery id does not drop the real event: it runs', async () => {
      const target = randomUUID();
      const captured = JSON.stringify({ action: 'opened', n: 1, at: randomUUID() });
      expect((await post(github.base, await githubHeaders(captured, target), captured)).status).toBe(200);
      const real = JSON.stringify({ action: 'closed', n: 2, at: randomUUID() });
      const answer = await post(github.base, await githubHeaders(real, target), real);
      expect(answer.status).toBe(200);
      expect(await answer.json()).toEqual({ received: true });
      expect(github.handled).toContain(`${target}:issues:2`);
    });

    it('C6 (GitHub): a captured body resent under a new delivery id replays; under another event name it is 422, told to onError', async () => {
      const payload = JSON.stringify({ action: 'created', n: 3, at: randomUUID() });
      const delivery = randomUUID();
      expect((await post(github.base, await githubHeaders(payload, delivery), payload)).status).toBe(200);
      const resent = await post(github.base, await githubHeaders(payload, randomUUID()), payload);
      expect(await resent.json()).toEqual({ received: true, replayed: true });
      const swapped = await post(github.base, await githubHeaders(payload, randomUUID(), 'deployment'), payload);
      expect(swapped.status).toBe(422);
      expect(github.errors.some((e) => e.endsWith(':key-reused'))).toBe(true);
      expect(github.handled.filter((h) => h.endsWith(':3'))).toEqual([`${delivery}:issues:3`]);
    });

    it('C6: key spaces cannot meet: an API user named "stripe" and an idempotent() caller with the event id do not touch the Stripe delivery', async () => {
      const eventId = `evt_${randomUUID().replaceAll('-', '')}`;
      // The app's API on the same store: the principal is the user id, which an attacker chose.
      const api = await serve(() =>
        withIdempotency((_req, res) => void res.writeHead(201, { 'content-type': 'application/json' }).end('{"ok":true}'), {
          store,
          scope: (req) => req.headers['x-user'] as string,
        }),
      );
      const byApi = await post(api.base, { 'content-type': 'application/json', 'x-user': 'stripe', 'idempotency-key': eventId }, '{"amount":1}');
      expect(byApi.status).toBe(201);
      let functionRuns = 0;
      const charge = idempotent(async (_id: string) => ++functionRuns, { store, key: (id) => id, scope: () => 'stripe' });
      expect(await charge(eventId)).toBe(1);

      const handled: string[] = [];
      const stripeReceiver = await serve(() =>
        idempotentWebhookHandler(stripeWebhook<{ id: string; type: string }>(stripe as never, { secret: STRIPE_SECRET }), (event) => void handled.push(event.id), { store }).node,
      );
      const payload = JSON.stringify({ id: eventId, object: 'event', type: 'charge.succeeded', data: { object: {} } });
      const delivered = await post(
        stripeReceiver.base,
        { 'content-type': 'application/json', 'stripe-signature': stripe.webhooks.generateTestHeaderString({ payload, secret: STRIPE_SECRET }) },
        payload,
      );
      expect(delivered.status).toBe(200);
      expect(await delivered.json()).toEqual({ received: true });
      expect(handled).toEqual([eventId]);
      // And the other way round: each entry point still replays its own record.
      expect(await charge(eventId)).toBe(1);
      const again = await post(api.base, { 'content-type': 'application/json', 'x-user': 'stripe', 'idempotency-key': eventId }, '{"amount":1}');
      expect(again.headers.get('idempotent-replayed')).toBe('true');
    });

    it('C6 (Stripe Connect): the documented `scope: (event) => event.account` handles the platform\'s own events, once each', async () => {
      const handled: string[] = [];
      const connect = await serve(() =>
        idempotentWebhookHandler(
          stripeWebhook<{ id: string; account?: string }>(stripe as never, { secret: STRIPE_SECRET }),
          (event) => void handled.push(`${event.account ?? 'platform'}:${event.id}`),
          { store, scope: (event) => event.account },
        ).node,
      );
      const send = (event: object) => {
        const payload = JSON.stringify({ object: 'event', type: 'account.updated', data: { object: {} }, ...event });
        return post(connect.base, { 'content-type': 'application/json', 'stripe-signature': stripe.webhooks.generateTestHeaderString({ payload, secret: STRIPE_SECRET }) }, payload);
      };
      const id = `evt_${randomUUID().replaceAll('-', '')}`;
      const platform = await send({ id });
      expect(platform.status).toBe(200);
      expect(await (await send({ id })).json()).toEqual({ received: true, replayed: true });
      expect((await send({ id, account: 'acct_1' })).status).toBe(200);
      expect(handled).toEqual([`platform:${id}`, `acct_1:${id}`]);
    });
  });
}
