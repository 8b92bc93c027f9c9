/**
 * Inbound webhooks (Stripe, GitHub, Standard Webhooks / Svix): verify the signature over
 * the raw body with the provider's own library first, then run the handler once per
 * provider event id. An unsigned or badly signed request never reaches the store; a
 * redelivered event answers 200 at once without running the handler; a handler that throws
 * answers 500, so the provider retries. Each provider's library is passed in, not imported.
 * @module
 * @example
 * import Stripe from 'stripe';
 * import { stripeWebhook, idempotentWebhookHandler } from 'idempotency-kit/webhooks';
 * const receive = idempotentWebhookHandler(stripeWebhook(new Stripe(key), { secret: process.env.STRIPE_WEBHOOK_SECRET! }), async (event) => {
 *   if (event.type === 'checkout.session.completed') await fulfil(event.data.object);
 * }, { store });
 * app.post('/webhooks/stripe', express.raw({ type: 'application/json' }), receive.node); // Express
 * app.post('/webhooks/stripe', (c) => receive.fetch(c.req.raw)); // Hono, or any fetch handler
 */
import { deprecatedFunction, renamedOption } from '../src/deprecation.js';
import { createHash } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { IdempotencyError, isIdempotencyError, type IdempotencyErrorCode, KeyMissingError } from '../src/errors.js';
import type { IdempotentOptions } from '../src/idempotent.js';
import { failureKind } from '../src/outcome.js';
import { problemResponse, type HttpResponse } from '../src/problem.js';
import type { TransactionalStore } from '../src/transaction.js';
import { assertFunction, assertInteger } from '../src/validate.js';
import { readBody, sendResponse } from '../adapters/internal/node-io.js';
import { consumeBody, toResponse } from '../adapters/internal/web-io.js';
import { onceFor } from './internal/once.js';

const DAY = 86_400_000;

/** The signature did not verify (or is missing): 400, the store is not touched. */
export class WebhookSignatureError extends IdempotencyError {
  override name = 'WebhookSignatureError';
  constructor(message: string, options?: { cause?: unknown }) {
    super('webhook-signature-invalid' as IdempotencyErrorCode, 400, message, options);
  }
}

/** A request's headers, looked up by lower-case name. */
export type WebhookHeaders = (name: string) => string | undefined;

/** A verified delivery: the provider's event, its id, and what it is de-duplicated by. */
export interface VerifiedWebhook<E> {
  /** The delivery's id, as the provider names it (the handler gets it as `delivery.id`). */
  id: string;
  event: E;
  /**
   * What the delivery is de-duplicated by: a value the signature covers. A provider whose
   * delivery id is not signed (GitHub) gives a digest of the signed body here.
   * @default id
   */
  key?: string;
  /**
   * What a repeat under the same key must match (bytes or any value, hashed); another value
   * is refused with 422 `key-reused` and told to `onError`, never answered as a replay.
   * @default nothing: the key alone (Stripe, whose id is inside the signed body)
   */
  fingerprint?: unknown;
}

/** How to trust and identify one provider's deliveries; made by `stripeWebhook()`, `githubWebhook()`, `standardWebhook()`. */
export interface WebhookVerifier<E> {
  /** The provider: the key space of its event ids. */
  readonly name: string;
  /** How long a delivery is remembered by default, in ms: the provider's retry window, with a margin. */
  readonly ttlMs: number;
  /** The largest body the provider sends. */
  readonly maxBodyBytes: number;
  /** Verify the raw body's signature and return the event and its id; throw WebhookSignatureError when it does not verify. */
  verify(body: Uint8Array, headers: WebhookHeaders): Promise<VerifiedWebhook<E>>;
}

const text = (body: Uint8Array) => new TextDecoder().decode(body);
const bytes = (body: Uint8Array) => Buffer.from(body.buffer, body.byteOffset, body.byteLength);

/** The part of the `stripe` package's client the verifier uses. */
export interface StripeLike<E> {
  webhooks: {
    constructEventAsync(payload: string | Buffer, header: string, secret: string, tolerance?: number, cryptoProvider?: never): Promise<E>;
  };
}

/**
 * Stripe: `Stripe-Signature` checked by the Stripe SDK (`stripe.webhooks.constructEventAsync`,
 * which also refuses a timestamp older than `tolerance`), de-duplicated by `event.id`.
 * Stripe retries a failed delivery for up to three days, so deliveries are remembered for
 * four days by default.
 */
export function stripeWebhook<E extends { id: string }>(
  stripe: StripeLike<E>,
  options: {
    /** The endpoint's signing secret (`whsec_…`); several while you roll it: each is tried. */
    secret: string | string[];
    /** Seconds a signature stays valid. @default the SDK's (300) */
    tolerance?: number;
    /** For runtimes without Node's crypto: `Stripe.createSubtleCryptoProvider()`. */
    cryptoProvider?: unknown;
  },
): WebhookVerifier<E> {
  if (typeof stripe?.webhooks?.constructEventAsync !== 'function') {
    throw new TypeError('Expected `stripe` to be a Stripe client (new Stripe(key)), with webhooks.constructEventAsync');
  }
  const secrets = Array.isArray(options?.secret) ? options.secret : [options?.secret];
  if (secrets.length === 0 || secrets.some((s) => typeof s !== 'string' || s === '')) {
    throw new TypeError(`Expected \`secret\` to be the endpoint's signing secret (whsec_…) or a list of them, got ${String(options?.secret)}`);
  }
  return {
    name: 'stripe',
    ttlMs: 4 * DAY,
    maxBodyBytes: 1024 * 1024,
    async verify(body, headers) {
      const signature = headers('stripe-signature');
      if (!signature) throw new WebhookSignatureError('The request has no Stripe-Signature header.');
      let last: unknown;
      for (const secret of secrets as string[]) {
        try {
          const event = await stripe.webhooks.constructEventAsync(bytes(body), signature, secret, options.tolerance, options.cryptoProvider as never);
          return { id: event.id, event };
        } catch (error) {
          last = error;
        }
      }
      throw new WebhookSignatureError('The Stripe-Signature header does not verify for this body.', { cause: last });
    },
  };
}

/** The part of `@octokit/webhooks`' `Webhooks` (or any verifier with its shape) used. */
export interface GitHubVerifierLike {
  verify(payload: string, signature: string): Promise<boolean>;
}

/** A verified GitHub delivery. */
export interface GitHubEvent {
  /** `X-GitHub-Delivery`, the same on a redelivery. */
  id: string;
  /** `X-GitHub-Event`: `push`, `pull_request`... */
  name: string;
  payload: unknown;
}

/**
 * GitHub: `X-Hub-Signature-256` checked by `@octokit/webhooks` (`new Webhooks({ secret })`).
 * GitHub signs the body alone: `X-GitHub-Delivery` and `X-GitHub-Event` are not signed, so
 * anyone holding a captured body could send it under any delivery id. Deliveries are
 * therefore de-duplicated by the SHA-256 of the signed body (a redelivery sends the same
 * bytes), and the event name counts as the fingerprint: a captured body resent under a new
 * delivery id is a replay, not a second run, and one resent under another event name is
 * refused 422 `key-reused`. GitHub does not retry a failed delivery by itself; it can be
 * redelivered (by hand or through the API) for three days, so deliveries are remembered for
 * four days by default. Payloads reach 25 MB.
 */
export function githubWebhook(webhooks: GitHubVerifierLike): WebhookVerifier<GitHubEvent> {
  if (typeof webhooks?.verify !== 'function') {
    throw new TypeError('Expected `webhooks` to be an @octokit/webhooks Webhooks instance (new Webhooks({ secret })), with verify()');
  }
  return {
    name: 'github',
    ttlMs: 4 * DAY,
    maxBodyBytes: 25 * 1024 * 1024,
    async verify(body, headers) {
      const signature = headers('x-hub-signature-256');
      if (!signature) throw new WebhookSignatureError('The request has no X-Hub-Signature-256 header.');
      const payload = text(body);
      let valid: boolean;
      try {
        valid = await webhooks.verify(payload, signature);
      } catch (error) {
        throw new WebhookSignatureError('The X-Hub-Signature-256 header does not verify for this body.', { cause: error });
      }
      if (!valid) throw new WebhookSignatureError('The X-Hub-Signature-256 header does not verify for this body.');
      const id = headers('x-github-delivery');
      if (!id) throw new KeyMissingError('The request has no X-GitHub-Delivery header.');
      let parsed: unknown;
      try {
        parsed = JSON.parse(payload);
      } catch {
        // A form-encoded delivery (content type application/x-www-form-urlencoded) has the JSON in `payload`.
        parsed = JSON.parse(new URLSearchParams(payload).get('payload') ?? 'null');
      }
      const name = headers('x-github-event') ?? '';
      return { id, key: `sha256:${createHash('sha256').update(body).digest('hex')}`, fingerprint: name, event: { id, name, payload: parsed } };
    },
  };
}

/** The part of `standardwebhooks`' (or `svix`'s) `Webhook` used. */
export interface StandardWebhookLike {
  verify(payload: string | Buffer, headers: Record<string, string>): unknown;
}

/**
 * Standard Webhooks (Svix and the providers that send through it): `webhook-signature`
 * (or `svix-signature`) checked by the `standardwebhooks` or `svix` package's
 * `new Webhook(secret)`, de-duplicated by `webhook-id` (`svix-id`), the same on every
 * attempt, fingerprinted over the body. The signature covers the id, the timestamp and the
 * body: the verifier is handed one set of the three, taken from the `webhook-` headers and
 * the `svix-` headers, and the id it verified is the one used. A delivery whose `webhook-`
 * and `svix-` headers disagree is refused (400), since the library could verify one id
 * while another would be used. Svix retries for about 28 hours, so deliveries are
 * remembered for two days by default.
 */
export function standardWebhook<E = unknown>(webhook: StandardWebhookLike, options: { name?: string } = {}): WebhookVerifier<E> {
  if (typeof webhook?.verify !== 'function') {
    throw new TypeError('Expected `webhook` to be a Standard Webhooks verifier (new Webhook(secret) from standardwebhooks or svix)');
  }
  if (options.name !== undefined && (typeof options.name !== 'string' || options.name === '')) {
    throw new TypeError(`Expected \`name\` to be a non-empty string, got ${String(options.name)}`);
  }
  return {
    name: options.name ?? 'standard-webhooks',
    ttlMs: 2 * DAY,
    maxBodyBytes: 1024 * 1024,
    async verify(body, headers) {
      const signed: Record<string, string> = {};
      for (const part of ['id', 'timestamp', 'signature']) {
        const standard = headers(`webhook-${part}`);
        const svix = headers(`svix-${part}`);
        if (standard !== undefined && svix !== undefined && standard !== svix) {
          throw new WebhookSignatureError(`The webhook-${part} and svix-${part} headers disagree; a delivery carries one ${part}.`);
        }
        const value = standard ?? svix;
        // Both spellings, with one value: each library reads the one it knows.
        if (value !== undefined) signed[`webhook-${part}`] = signed[`svix-${part}`] = value;
      }
      if (!signed['webhook-signature']) throw new WebhookSignatureError('The request has no webhook-signature header.');
      let event: unknown;
      try {
        event = await webhook.verify(bytes(body), signed);
      } catch (error) {
        throw new WebhookSignatureError('The webhook-signature header does not verify for this body.', { cause: error });
      }
      const id = signed['webhook-id'];
      if (!id) throw new KeyMissingError('The request has no webhook-id header.');
      // svix 2 verifies without parsing (it returns undefined): the event is the verified body's JSON.
      if (event === undefined && body.byteLength > 0) {
        try {
          event = JSON.parse(text(body));
        } catch {
          event = text(body);
        }
      }
      return { id, event: event as E, fingerprint: body };
    },
  };
}

/** What the handler is told about a delivery besides its event. */
export interface WebhookDelivery {
  id: string;
  provider: string;
  headers: WebhookHeaders;
}

/** The answer to send: status, headers and body bytes. */
export type WebhookResponse = HttpResponse;

export interface WebhookHandlerOptions<E, R = unknown> extends Omit<IdempotentOptions<[VerifiedWebhook<E>], R>, 'key' | 'scope' | 'fingerprint' | 'ttl' | 'ttlMs'> {
  /**
   * How long a delivery is remembered, in ms: longer than the provider retries.
   * @default the verifier's: Stripe 4 days, GitHub 4 days, Standard Webhooks 2 days
   */
  ttlMs?: number;
  /** @deprecated Renamed `ttlMs`; the old name works until the next minor release. */
  ttl?: number;
  /**
   * The key space of the event ids within the provider's, e.g. `(event) => event.account`
   * for Stripe Connect endpoints that receive several accounts' events. An event it gives no
   * scope (`undefined`, `null` or `''`: the platform's own events, which have no `account`)
   * is kept in the provider's own space. Deliveries never share a key space with HTTP
   * requests, message handlers or `idempotent()` callers, whatever the scope.
   * @default the provider's own space
   */
  scope?: (event: E) => string | null | undefined;
  /** @default the verifier's (Stripe, Standard Webhooks 1 MiB; GitHub 25 MiB) */
  maxBodyBytes?: number;
  /** Told of every handler error (answered 500) and store error (503), for your logs. */
  onError?: (error: unknown, delivery: { id?: string; provider: string }) => void;
  /** `true`: `fn(event, delivery, client)` runs in a transaction of the store's PostgreSQL database. */
  transaction?: boolean;
}

export interface WebhookTransactionOptions<E, Client> extends WebhookHandlerOptions<E> {
  store: TransactionalStore<Client>;
  transaction: true;
}

export interface WebhookHandler {
  /** Verify and handle one delivery from its raw body and headers; resolves with the answer to send. */
  handle(body: Uint8Array | string, headers: WebhookHeaders | Headers | Record<string, string | string[] | undefined>): Promise<WebhookResponse>;
  /** A fetch-API handler: Hono (`(c) => receive.fetch(c.req.raw)`), Next.js route handlers, Bun, Deno, Workers. */
  fetch(request: Request): Promise<Response>;
  /**
   * A Node `http` / Express / Connect handler. It reads the raw body itself, or takes
   * `req.body` when `express.raw()` (a Buffer) or `express.text()` read it first. A body an
   * earlier parser turned into an object cannot be verified: answered 500 with what to change.
   */
  node(req: IncomingMessage & { body?: unknown }, res: ServerResponse): Promise<void>;
}

const json = (status: number, value: unknown, extra: Record<string, string> = {}): WebhookResponse => ({
  status,
  headers: { 'content-type': 'application/json', 'cache-control': 'no-store', ...extra },
  body: new Uint8Array(Buffer.from(JSON.stringify(value))),
});
const internalError = (detail: string): WebhookResponse => ({
  status: 500,
  headers: { 'content-type': 'application/problem+json', 'cache-control': 'no-store' },
  body: new Uint8Array(Buffer.from(JSON.stringify({ type: 'about:blank', title: 'Internal Server Error', status: 500, detail }))),
});

function headerGetter(headers: WebhookHeaders | Headers | Record<string, string | string[] | undefined>): WebhookHeaders {
  if (typeof headers === 'function') return headers;
  if (typeof (headers as Headers).get === 'function') return (name) => (headers as Headers).get(name) ?? undefined;
  const lower = new Map(Object.entries(headers as Record<string, string | string[] | undefined>).map(([k, v]) => [k.toLowerCase(), v]));
  return (name) => {
    const value = lower.get(name);
    return Array.isArray(value) ? value.join(', ') : value;
  };
}

/**
 * With `transaction: true`: `fn(event, delivery, client)` runs in a transaction of the
 * store's PostgreSQL database, which also records the delivery before it commits.
 */
export function idempotentWebhookHandler<E, R, Client>(
  verifier: WebhookVerifier<E>,
  fn: (event: E, delivery: WebhookDelivery, client: Client) => R,
  options: WebhookTransactionOptions<E, Client>,
): WebhookHandler;
/**
 * Receive one provider's webhooks: verify, then run `fn` once per event id.
 *
 * | the delivery | answer |
 * |---|---|
 * | no signature, or one that does not verify | 400 `webhook-signature-invalid`; the store is not touched |
 * | verified, first time | `fn` runs; 200 `{"received":true}` |
 * | an event id handled before (a provider retry, a redelivery) | 200 `{"received":true,"replayed":true}` at once, `fn` not run |
 * | the same id being handled by another delivery right now | 409 with Retry-After (the provider retries) |
 * | `fn` threw | 500 (the key is released, the provider retries and `fn` runs again) |
 * | the store is down | 503 with Retry-After, `fn` not run |
 * | a signed delivery without an event id | 400 `key-missing` |
 */
export function idempotentWebhookHandler<E, R>(
  verifier: WebhookVerifier<E>,
  fn: (event: E, delivery: WebhookDelivery) => R,
  options: WebhookHandlerOptions<E, Awaited<R>>,
): WebhookHandler;
export function idempotentWebhookHandler<E, R>(
  verifier: WebhookVerifier<E>,
  fn: (event: E, delivery: WebhookDelivery, client?: unknown) => R,
  options: WebhookHandlerOptions<E, Awaited<R>>,
): WebhookHandler {
  if (typeof verifier?.verify !== 'function' || typeof verifier.name !== 'string') {
    throw new TypeError('Expected `verifier` to be a webhook verifier: stripeWebhook(), githubWebhook() or standardWebhook()');
  }
  assertFunction('fn', fn);
  const { scope, onError, maxBodyBytes = verifier.maxBodyBytes } = options ?? {};
  const ttlMs = (options ? renamedOption<number>(options, 'ttl', 'ttlMs') : undefined) ?? verifier.ttlMs;
  if (scope !== undefined) assertFunction('scope', scope);
  if (onError !== undefined) assertFunction('onError', onError);
  assertInteger('maxBodyBytes', maxBodyBytes, 1);
  // `ran` tells a first run from a replay, per delivery.
  type Call = { verified: VerifiedWebhook<E>; delivery: WebhookDelivery; ran: boolean };
  const scopeOf = (call: Call): string => {
    const given = scope?.(call.verified.event);
    return given === undefined || given === null || given === '' ? verifier.name : given;
  };
  const run = onceFor(
    `webhook:${verifier.name}`,
    options?.transaction
      ? (call: Call, client: unknown) => ((call.ran = true), fn(call.verified.event, call.delivery, client))
      : (call: Call) => ((call.ran = true), fn(call.verified.event, call.delivery)),
    // The user's `scope` is applied by scopeOf (a platform event has none).
    { ...(options as object), ttl: undefined, ttlMs, scope: undefined } as never,
    {
      key: (call: Call) => call.verified.key ?? call.verified.id,
      scope: scopeOf,
      // Only where the verifier names one: a Stripe event's id is inside its signed body.
      fingerprint: (call: Call) => call.verified.fingerprint ?? null,
    },
    ['onError', 'maxBodyBytes'],
  ) as (call: Call) => Promise<unknown>;
  const tell = (error: unknown, id?: string) => {
    try {
      onError?.(error, { id, provider: verifier.name });
    } catch {
      // A failing listener must not change the answer.
    }
  };

  async function handle(body: Uint8Array | string, rawHeaders: Parameters<WebhookHandler['handle']>[1]): Promise<WebhookResponse> {
    const headers = headerGetter(rawHeaders);
    const raw = typeof body === 'string' ? new Uint8Array(Buffer.from(body)) : body;
    let verified: VerifiedWebhook<E>;
    try {
      verified = await verifier.verify(raw, headers);
    } catch (error) {
      if (isIdempotencyError(error)) return problemResponse(error, 'X-GitHub-Delivery');
      return problemResponse(new WebhookSignatureError('The webhook signature does not verify.', { cause: error }));
    }
    const call: Call = { verified, delivery: { id: verified.id, provider: verifier.name, headers }, ran: false };
    try {
      await run(call);
      return call.ran ? json(200, { received: true }) : json(200, { received: true, replayed: true }, { 'idempotent-replayed': 'true' });
    } catch (error) {
      if (failureKind(error) === 'failed') {
        tell(error, verified.id);
        return internalError('The webhook handler failed; the delivery can be retried.');
      }
      // A store failure, or another delivery under a used id (a forged or re-sent one): for the logs.
      const code = (error as IdempotencyError).code;
      if (code === 'store-unavailable' || code === 'key-reused') tell(error, verified.id);
      return problemResponse(error as IdempotencyError, 'webhook-id');
    }
  }

  return {
    handle,
    async fetch(request: Request): Promise<Response> {
      let body: Uint8Array;
      try {
        const consumed = await consumeBody(request, maxBodyBytes);
        body = consumed instanceof Uint8Array ? consumed : consumed.bytes();
      } catch (error) {
        if (isIdempotencyError(error)) return toResponse(problemResponse(error));
        throw error;
      }
      return toResponse(await handle(body, request.headers));
    },
    async node(req, res): Promise<void> {
      let body: Uint8Array;
      const parsed = req.body;
      if (parsed instanceof Uint8Array) body = parsed;
      else if (typeof parsed === 'string') body = new Uint8Array(Buffer.from(parsed));
      else if (typeof parsed === 'object' && parsed !== null && (req.readableEnded || req.complete)) {
        sendResponse(res, internalError('The request body was parsed before its signature could be verified: mount express.raw({ type: "application/json" }) (or no body parser) on this route.'));
        return;
      } else {
        try {
          body = (await readBody(req, maxBodyBytes)).bytes();
        } catch (error) {
          if (isIdempotencyError(error)) {
            sendResponse(res, problemResponse(error));
            return;
          }
          throw error;
        }
      }
      sendResponse(res, await handle(body, req.headers as Record<string, string | string[] | undefined>));
    },
  };
}

/** @deprecated Renamed `idempotentWebhookHandler`; the old name works until the next minor release. */
export const webhookHandler: typeof idempotentWebhookHandler = deprecatedFunction(idempotentWebhookHandler, 'webhookHandler()', 'idempotentWebhookHandler()');
