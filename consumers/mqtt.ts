/**
 * MQTT (QoS 1 and 2, e.g. Mosquitto with mqtt.js 5): run a handler once per message,
 * although the broker sends a message again after a reconnect whenever its PUBACK had not
 * arrived, and publishers resend. The PUBACK goes out after the effect. Packet ids are
 * reused all the time, so the key is a message id the publisher sets: an MQTT 5 user
 * property (default `message-id`) or an id in the payload. mqtt is not imported: the
 * handler is installed on the client you made.
 * @module
 * @example
 * import mqtt from 'mqtt';
 * import { idempotentMqttHandler } from 'idempotency-kit/mqtt';
 * const client = mqtt.connect(url, { protocolVersion: 5, clientId: 'shipper-1', clean: false, properties: { sessionExpiryInterval: 3600 } });
 * idempotentMqttHandler(client, async (packet) => shipOrder(JSON.parse(packet.payload.toString())), { store });
 * client.subscribe('$share/shippers/orders', { qos: 1 });
 */
import { deprecatedFunction } from '../src/deprecation.js';
import { failureKind, type FailureKind } from '../src/outcome.js';
import type { TransactionalStore } from '../src/transaction.js';
import { assertFunction, assertInteger } from '../src/validate.js';
import { onceFor, sleep, type MessageOptions } from './internal/once.js';

/** The part of an mqtt.js `IPublishPacket` the handler uses. */
export interface MqttPacket {
  readonly topic: string;
  readonly payload: Uint8Array | string;
  readonly qos: 0 | 1 | 2;
  /** Set on a message the broker sends again (after a reconnect). */
  readonly dup?: boolean;
  readonly messageId?: number;
  readonly properties?: { readonly userProperties?: Readonly<Record<string, string | string[]>> };
}

/** The part of an mqtt.js `MqttClient` the handler is installed on. */
export interface MqttClientLike {
  handleMessage: (packet: never, callback: (error?: Error) => void) => void;
  readonly options: {
    readonly clean?: boolean;
    readonly protocolVersion?: number;
    readonly properties?: { readonly sessionExpiryInterval?: number };
  };
  readonly disconnecting?: boolean;
}

/** What was done with a message, given to `onSettle`. */
export interface MqttSettlement<R = unknown> {
  /**
   * `ack`: acknowledged after the effect (or the replay); `poison`: acknowledged without it
   * after `onPoison` (trying again cannot help, or the handler kept failing); `unacked`: left
   * unacknowledged, so the broker sends it again after the next reconnect.
   */
  action: 'ack' | 'poison' | 'unacked';
  outcome: 'done' | FailureKind;
  result?: R;
  error?: unknown;
  /** How many times the handler was tried for this delivery. */
  attempts: number;
}

export interface MqttHandlerOptions<P extends MqttPacket = MqttPacket, R = unknown> extends MessageOptions<P, R> {
  /**
   * The message's idempotency key, set by the publisher and the same on every copy; never
   * the packet id, which the client and the broker reuse.
   * @default the MQTT 5 user property `message-id`
   */
  key?: (packet: P) => string | undefined;
  /** @default one key space for every topic */
  scope?: (packet: P) => string | undefined;
  /**
   * @default the payload bytes: a known id with another payload is a mismatch (poison)
   */
  fingerprint?: ((packet: P) => unknown) | false;
  /**
   * MQTT has no negative acknowledgement, and a broker sends an unacknowledged message again
   * only after a reconnect. So a message whose key is in flight elsewhere (or whose store is
   * down, or whose handler threw) is tried again here, after this delay in ms.
   * @default 500
   */
  retryDelayMs?: number;
  /**
   * How long a message whose key stays in flight elsewhere (or whose store stays down) is
   * tried again here before it is left unacknowledged for the broker to send after the
   * next reconnect. While it is retried, this connection receives nothing else: mqtt.js
   * hands over one message at a time, as PUBACKs must go out in order. Keep it well below
   * the client's `keepalive` (60 s by default).
   * @default 30000
   */
  maxRetryMs?: number;
  /** How many times a throwing handler runs for one delivery before the message is poison. @default 3 */
  maxAttempts?: number;
  /**
   * Called for a message that will not succeed (another message under its key, no key, a
   * handler that threw `maxAttempts` times) before it is acknowledged without its effect:
   * publish it to a dead-letter topic, store it, alert. If it throws, the message is left
   * unacknowledged instead.
   */
  onPoison?: (packet: P, error: unknown) => unknown;
  onSettle?: (packet: P, settlement: MqttSettlement<R>) => void;
  /**
   * Set when the client's session does not outlive a disconnect on purpose: then a message
   * whose PUBACK was lost with the connection is not sent again, and is lost.
   * @default false: a client without a persistent session is refused with a TypeError
   */
  allowCleanSession?: boolean;
}

export interface MqttTransactionOptions<P extends MqttPacket, Client> extends MqttHandlerOptions<P> {
  store: TransactionalStore<Client>;
  transaction: true;
}

const OWN = ['retryDelayMs', 'maxRetryMs', 'maxAttempts', 'onPoison', 'onSettle', 'allowCleanSession'] as const;

/** The single value of an MQTT 5 user property (the first, when it was sent more than once). */
export function userProperty(packet: MqttPacket, name: string): string | undefined {
  const value = packet.properties?.userProperties?.[name];
  return Array.isArray(value) ? value[0] : value;
}

export interface MqttHandle {
  /** Put back the client's previous `handleMessage`, once the messages in hand are settled. */
  stop(): Promise<void>;
}

/**
 * With `transaction: true`: `fn(packet, client)` runs in a transaction of the store's
 * PostgreSQL database, which also completes the message's record before it commits.
 */
export function idempotentMqttHandler<P extends MqttPacket, R, Client>(
  client: MqttClientLike,
  fn: (packet: P, client: Client) => R,
  options: MqttTransactionOptions<P, Client>,
): MqttHandle;
/**
 * Handle every message `client` receives with `fn`, once per message key, and acknowledge
 * it after the effect. Install it right after `mqtt.connect()`, before the connection is
 * up: a persistent session's unacknowledged messages arrive as soon as it is, and the
 * client's default handler would acknowledge them unhandled.
 *
 * | outcome | the message |
 * |---|---|
 * | fn ran, or an earlier copy's result was replayed | PUBACK |
 * | the key is in flight elsewhere, the store is down | tried again here every `retryDelayMs`; after `maxRetryMs` left unacknowledged (sent again after a reconnect) |
 * | fn threw (its key released) | tried again here, `maxAttempts` times in all; then poison |
 * | same key with another payload, no key, a repeat of a message whose result was not stored | poison: `onPoison`, then PUBACK |
 *
 * The client needs a session that outlives a disconnect (`clean: false`, and with MQTT 5 a
 * `sessionExpiryInterval` above 0), or an unacknowledged message is lost with its
 * connection; a client without one is refused unless `allowCleanSession` is set.
 */
export function idempotentMqttHandler<P extends MqttPacket, R>(
  client: MqttClientLike,
  fn: (packet: P) => R,
  options: MqttHandlerOptions<P, Awaited<R>>,
): MqttHandle;
export function idempotentMqttHandler<P extends MqttPacket, R>(
  client: MqttClientLike,
  fn: (packet: P, client?: unknown) => R,
  options: MqttHandlerOptions<P, Awaited<R>>,
): MqttHandle {
  if (typeof client?.handleMessage !== 'function' || typeof client.options !== 'object') {
    throw new TypeError(`Expected \`client\` to be an MQTT client (mqtt.connect()), got ${String(client)}`);
  }
  assertFunction('fn', fn);
  const { retryDelayMs = 500, maxRetryMs = 30_000, maxAttempts = 3, onPoison, onSettle, allowCleanSession = false } = options ?? {};
  assertInteger('retryDelayMs', retryDelayMs, 0);
  assertInteger('maxRetryMs', maxRetryMs, 0);
  assertInteger('maxAttempts', maxAttempts, 1);
  if (onPoison !== undefined) assertFunction('onPoison', onPoison);
  if (onSettle !== undefined) assertFunction('onSettle', onSettle);
  const { clean, protocolVersion, properties } = client.options;
  if (!allowCleanSession && (clean !== false || (protocolVersion === 5 && !(Number(properties?.sessionExpiryInterval) > 0)))) {
    throw new TypeError(
      clean !== false
        ? 'Expected an MQTT client with a persistent session (`clean: false`), got `clean: true`: a message whose PUBACK is lost with the connection would not be sent again. Pass `allowCleanSession: true` to accept that.'
        : 'Expected an MQTT 5 client whose session outlives a disconnect (`properties: { sessionExpiryInterval: 3600 }`), got none: with 0 the broker drops the session, and its unacknowledged messages, when the connection ends. Pass `allowCleanSession: true` to accept that.',
    );
  }
  const handle = onceFor(
    'message:mqtt',
    options?.transaction ? (packet: P, tx: unknown) => fn(packet, tx) : (packet: P) => fn(packet),
    options,
    { key: (packet) => userProperty(packet, 'message-id'), fingerprint: (packet) => packet.payload },
    OWN,
  ) as (packet: P) => Promise<Awaited<R>>;

  const previous = client.handleMessage;
  const inHand = new Set<Promise<void>>();
  let stopped = false;

  async function settle(packet: P): Promise<MqttSettlement<Awaited<R>>> {
    const started = Date.now();
    let attempts = 0;
    let failures = 0;
    for (;;) {
      attempts++;
      try {
        return { action: 'ack', outcome: 'done', result: await handle(packet), attempts };
      } catch (error) {
        const kind = failureKind(error);
        const closing = stopped || client.disconnecting === true;
        const poison = kind === 'reject' || (kind === 'failed' && ++failures >= maxAttempts);
        if (poison) {
          try {
            await onPoison?.(packet, error);
          } catch (poisonError) {
            return { action: 'unacked', outcome: kind, error: poisonError, attempts };
          }
          return { action: 'poison', outcome: kind, error, attempts };
        }
        // Shutting down, or in flight elsewhere for too long: the broker sends it again later.
        if (closing || (kind === 'retry' && Date.now() - started + retryDelayMs > maxRetryMs)) {
          return { action: 'unacked', outcome: kind, error, attempts };
        }
        await sleep(retryDelayMs);
      }
    }
  }

  client.handleMessage = function idempotentMessage(packet: P, callback: (error?: Error) => void): void {
    const task = settle(packet).then((settlement) => {
      try {
        onSettle?.(packet, settlement);
      } catch {
        // A failing listener must not change how the message is settled.
      }
      // The PUBACK goes out with the callback; an error leaves the message unacknowledged
      // (mqtt.js moves on to the next one), so the broker sends it again after a reconnect.
      if (settlement.action === 'unacked') callback(settlement.error instanceof Error ? settlement.error : new Error(String(settlement.error)));
      else callback();
    });
    inHand.add(task);
    void task.finally(() => inHand.delete(task));
  } as MqttClientLike['handleMessage'];

  return {
    async stop() {
      stopped = true;
      await Promise.all(inHand);
      client.handleMessage = previous;
    },
  };
}

/** @deprecated Renamed `idempotentMqttHandler`; the old name works until the next minor release. */
export const handleMqttMessages: typeof idempotentMqttHandler = deprecatedFunction(idempotentMqttHandler, 'handleMqttMessages()', 'idempotentMqttHandler()');
