/**
 * MQTT QoS 1 on Mosquitto: `idempotentMqttHandler()` on an mqtt.js 5 client. The
 * PUBACK goes out after the effect; packet ids are reused, so the key is the MQTT 5 user
 * property `message-id`; a copy published again, and a message the broker sends again
 * after a reconnect because its PUBACK never went out, replay instead of running (C1–C3).
 * Conflicts and a down store are retried in place (MQTT has no nack), a failing handler a
 * few times, then poison. Then the crash proof (crash-harness.ts): three consumers in a
 * shared subscription, persistent sessions, SIGKILLed and restarted under the same client
 * id, every message published twice; on Redis, and on PostgreSQL with `transaction: true`.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import mqtt from 'mqtt';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { idempotentMqttHandler, userProperty, type MqttSettlement } from '../../consumers/mqtt.js';
import { createStore } from '../../drivers/create-store.js';
import { postgresStore } from '../../drivers/postgres.js';
import { idempotentIn } from '../../src/idempotent.js';
import type { IdempotencyStore } from '../../src/store.js';
import { POSTGRES_URL, REDIS_URL, serviceAvailable } from '../helpers/services.js';
import { bundleWorker, crashProof, Proc, sleep, type Line } from './crash-harness.js';

const MQTT_URL = process.env.MQTT_URL ?? 'mqtt://127.0.0.1:1883';
const available =
  (await serviceAvailable('Mosquitto', MQTT_URL)) && (await serviceAvailable('Redis', REDIS_URL)) && (await serviceAvailable('PostgreSQL', POSTGRES_URL));
const run = randomUUID().slice(0, 8);
type Packet = mqtt.IPublishPacket;
const sessions: string[] = [];

/** A consumer client with a persistent session, not yet connected when returned. */
function consumer(clientId: string): mqtt.MqttClient {
  sessions.push(clientId);
  return mqtt.connect(MQTT_URL, { protocolVersion: 5, clientId, clean: false, properties: { sessionExpiryInterval: 120 }, reconnectPeriod: 0 });
}
const connected = (client: mqtt.MqttClient) => new Promise<void>((resolve) => (client.connected ? resolve() : client.once('connect', () => resolve())));
/** Remove the sessions these tests left in the broker. */
async function dropSessions() {
  for (const clientId of sessions.splice(0)) {
    const c = await mqtt.connectAsync(MQTT_URL, { protocolVersion: 5, clientId, clean: true, properties: { sessionExpiryInterval: 0 } }).catch(() => undefined);
    await c?.endAsync();
  }
}

describe.skipIf(!available)('MQTT: idempotentMqttHandler()', () => {
  let publisher: mqtt.MqttClient;
  let store: IdempotencyStore;
  beforeAll(async () => {
    publisher = await mqtt.connectAsync(MQTT_URL, { protocolVersion: 5 });
    store = createStore(REDIS_URL, { namespace: `mqtt_${run}` });
  });
  afterAll(async () => {
    await publisher?.endAsync();
    await store?.close();
    await dropSessions();
  });
  const publish = (topic: string, body: unknown, id?: string) =>
    publisher.publishAsync(topic, JSON.stringify(body), { qos: 1, properties: id === undefined ? {} : { userProperties: { 'message-id': id } } });
  async function until(what: string, done: () => boolean, ms = 5000) {
    const end = Date.now() + ms;
    while (!done()) {
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
      await sleep(20);
    }
  }

  it('C1/C2: PUBACK after the effect; the same message-id published again replays, fn runs once', async () => {
    const topic = `ik-test/${run}/once`;
    const client = consumer(`ik-${run}-once`);
    const runs: string[] = [];
    const settled: MqttSettlement[] = [];
    const handle = idempotentMqttHandler(client, async (packet: Packet) => {
      runs.push(userProperty(packet, 'message-id')!);
      return { at: new Date(0) };
    }, { store, onSettle: (_p, s) => settled.push(s) });
    await connected(client);
    await client.subscribeAsync(topic, { qos: 1 });
    await publish(topic, { id: 'o-1' }, 'o-1');
    await publish(topic, { id: 'o-1' }, 'o-1');
    await until('two settlements', () => settled.length === 2);
    expect(settled.map((s) => [s.action, s.outcome])).toEqual([['ack', 'done'], ['ack', 'done']]);
    expect(settled[1]!.result).toEqual({ at: new Date(0) });
    expect(runs).toEqual(['o-1']);
    await handle.stop();
    await client.endAsync();
  });

  it('C2: a message handled and stored whose PUBACK never went out (SIGKILL) comes back with DUP after the restart, and replays', async () => {
    const worker = await bundleWorker(new URL('./mqtt-worker.ts', import.meta.url));
    const db = new pg.Pool({ connectionString: POSTGRES_URL, max: 2 });
    const table = `ik_mqtt_dup_${run}`;
    await db.query(`CREATE TABLE ${table} (id bigserial PRIMARY KEY, message_id text NOT NULL, worker text NOT NULL, pid int NOT NULL)`);
    const topic = `ik-test/${run}/dup`;
    const clientId = `ik-${run}-dup`;
    sessions.push(clientId);
    const env = { MQTT_URL, TOPIC: topic, GROUP: `dup${run}`, CLIENT_ID: clientId, MODE: 'plain', STORE_URL: REDIS_URL, DATABASE_URL: POSTGRES_URL, TABLE: table };
    const lines: Line[] = [];
    const start = (name: string, extra: Record<string, string> = {}) =>
      new Proc(name, spawn(process.execPath, [worker.file], { env: { ...process.env, ...env, WORKER: name, ...extra }, stdio: ['ignore', 'pipe', 'pipe'] }), lines);
    try {
      const doomed = start('doomed', { KILL_BEFORE_ACK: '1' });
      await doomed.waitFor('ready', () => doomed.lines.some((l) => l.ev === 'ready'));
      // A message id of this run's own: the store is shared with earlier runs, and keeps records 10 minutes.
      const id = `d-${run}`;
      await publish(topic, { id, n: 1 }, id);
      expect(await doomed.exited).toBe('SIGKILL');
      expect(doomed.lines.map((l) => l.ev)).toEqual(['ready', 'delivery', 'run', 'effect', 'dying-before-ack']);
      const again = start('again');
      await again.waitFor('the redelivery settled', () => again.lines.some((l) => l.ev === 'settle'));
      const settle = again.lines.find((l) => l.ev === 'settle')!;
      expect(settle).toMatchObject({ id, action: 'ack', outcome: 'done', replayed: true, dup: true });
      again.kill('SIGTERM');
      await again.exited;
      expect((await db.query(`SELECT count(*)::int AS n FROM ${table}`)).rows[0].n).toBe(1);
    } finally {
      await db.query(`DROP TABLE IF EXISTS ${table}`);
      await db.end();
      worker.dispose();
    }
  }, 30_000);

  it('C3: a key in flight elsewhere is retried in place until it settles; a failing handler is retried, then poison (onPoison, PUBACK)', async () => {
    const topic = `ik-test/${run}/retry`;
    const client = consumer(`ik-${run}-retry`);
    const settled: MqttSettlement[] = [];
    const poisoned: string[] = [];
    let calls = 0;
    const payload = JSON.stringify({ id: 'o-2' });
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    // The recipe's own key space: what another consumer instance of the recipe claims.
    const other = idempotentIn('message:mqtt', async () => {
      await held;
      return 'by another consumer';
    }, { store, key: () => 'o-2', fingerprint: () => Buffer.from(payload) });
    const running = other();
    const handle = idempotentMqttHandler(client, async (packet: Packet) => {
      const id = userProperty(packet, 'message-id');
      if (id === 'o-3') throw new Error('always fails');
      if (id === 'o-4' && ++calls === 1) throw new Error('fails once');
      return id;
    }, { store, waitMs: 0, retryDelayMs: 100, maxAttempts: 3, onPoison: (packet) => void poisoned.push(userProperty(packet, 'message-id')!), onSettle: (_p, s) => settled.push(s) });
    await connected(client);
    await client.subscribeAsync(topic, { qos: 1 });
    await publish(topic, { id: 'o-2' }, 'o-2');
    await sleep(400);
    expect(settled).toEqual([]); // still retrying in place
    release();
    await running;
    await publish(topic, { id: 'o-3' }, 'o-3');
    await publish(topic, { id: 'o-4' }, 'o-4');
    await until('three settlements', () => settled.length === 3);
    expect(settled[0]).toMatchObject({ action: 'ack', outcome: 'done', result: 'by another consumer' });
    expect(settled[0]!.attempts).toBeGreaterThan(2);
    expect(settled[1]).toMatchObject({ action: 'poison', outcome: 'failed', attempts: 3 });
    expect(settled[2]).toMatchObject({ action: 'ack', result: 'o-4', attempts: 2 });
    expect(poisoned).toEqual(['o-3']);
    await handle.stop();
    await client.endAsync();
  });

  it('C3: a reused message-id with another payload and a message without one are poison, fn not run', async () => {
    const topic = `ik-test/${run}/reject`;
    const client = consumer(`ik-${run}-reject`);
    const settled: MqttSettlement[] = [];
    let runs = 0;
    const handle = idempotentMqttHandler(client, async () => ++runs, { store, onSettle: (_p, s) => settled.push(s) });
    await connected(client);
    await client.subscribeAsync(topic, { qos: 1 });
    await publish(topic, { id: 'o-5', v: 1 }, 'o-5');
    await publish(topic, { id: 'o-5', v: 2 }, 'o-5');
    await publish(topic, { id: 'o-6' });
    await until('three settlements', () => settled.length === 3);
    expect(settled.map((s) => [s.action, (s.error as { code?: string } | undefined)?.code])).toEqual([
      ['ack', undefined],
      ['poison', 'key-reused'],
      ['poison', 'key-missing'],
    ]);
    expect(runs).toBe(1);
    await handle.stop();
    await client.endAsync();
  });

  it('C3: the store down -> retried in place, then left unacknowledged; the broker sends it again after a reconnect', async () => {
    const topic = `ik-test/${run}/down`;
    const clientId = `ik-${run}-down`;
    const down = createStore('redis://127.0.0.1:1', { namespace: 'down' });
    const first = consumer(clientId);
    const settled: MqttSettlement[] = [];
    let runs = 0;
    const handle = idempotentMqttHandler(first, async () => ++runs, { store: down, storeTimeoutMs: 100, retryDelayMs: 100, maxRetryMs: 400, onSettle: (_p, s) => settled.push(s) });
    await connected(first);
    await first.subscribeAsync(topic, { qos: 1 });
    await publish(topic, { id: 'o-7' }, 'o-7');
    await until('the settlement', () => settled.length === 1);
    expect(settled[0]).toMatchObject({ action: 'unacked', outcome: 'retry' });
    expect(runs).toBe(0);
    await handle.stop();
    await first.endAsync(true);
    await down.close().catch(() => undefined);
    const second = consumer(clientId);
    const later: Array<{ dup: boolean | undefined; result: unknown }> = [];
    idempotentMqttHandler(second, async () => 'handled now', { store, onSettle: (p, s) => later.push({ dup: p.dup, result: s.result }) });
    await until('the redelivery', () => later.length === 1);
    expect(later).toEqual([{ dup: true, result: 'handled now' }]);
    await second.endAsync();
  });

  it('refuses a client without a persistent session, and bad options, with precise TypeErrors', () => {
    const fn = async () => 1;
    const fake = (options: object) => ({ handleMessage: () => {}, options }) as never;
    expect(() => idempotentMqttHandler(fake({ clean: true }), fn, { store })).toThrow(/Expected an MQTT client with a persistent session \(`clean: false`\), got `clean: true`/);
    expect(() => idempotentMqttHandler(fake({ clean: false, protocolVersion: 5 }), fn, { store })).toThrow(/sessionExpiryInterval/);
    expect(() => idempotentMqttHandler(fake({ clean: true }), fn, { store, allowCleanSession: true })).not.toThrow();
    const ok = fake({ clean: false, protocolVersion: 4 });
    expect(() => idempotentMqttHandler(ok, fn, { store, maxAttempts: 0 })).toThrow('Expected `maxAttempts` to be a positive integer, got 0');
    expect(() => idempotentMqttHandler(ok, fn, { store, retryDelayMs: -1 })).toThrow('Expected `retryDelayMs` to be a non-negative integer, got -1');
    expect(() => idempotentMqttHandler(ok, fn, { store, onPoison: 'dlq' as never })).toThrow('Expected `onPoison` to be a function, got "dlq"');
    expect(() => idempotentMqttHandler({} as never, fn, { store })).toThrow(/Expected `client` to be an MQTT client/);
  });

  describe('transaction: true (PostgreSQL)', () => {
    it('fn(packet, client) writes in the record\'s transaction; a copy replays, one row', async () => {
      const db = new pg.Pool({ connectionString: POSTGRES_URL, max: 3 });
      const table = `ik_mqtt_tx_${run}`;
      await db.query(`CREATE TABLE ${table} (id serial PRIMARY KEY, message_id text NOT NULL)`);
      try {
        const txStore = postgresStore({ pool: db, table: `${table}_records` });
        const topic = `ik-test/${run}/tx`;
        const client = consumer(`ik-${run}-tx`);
        const settled: MqttSettlement[] = [];
        let attempt = 0;
        const handle = idempotentMqttHandler(client, async (packet: Packet, tx: pg.PoolClient) => {
          await tx.query(`INSERT INTO ${table} (message_id) VALUES ($1)`, [userProperty(packet, 'message-id')]);
          if (++attempt === 1) throw new Error('rolled back');
          return attempt;
        }, { store: txStore, transaction: true, retryDelayMs: 50, onSettle: (_p, s) => settled.push(s) });
        await connected(client);
        await client.subscribeAsync(topic, { qos: 1 });
        await publish(topic, { id: 't-1' }, 't-1');
        await publish(topic, { id: 't-1' }, 't-1');
        await until('two settlements', () => settled.length === 2);
        expect(settled.map((s) => [s.action, s.result, s.attempts])).toEqual([['ack', 2, 2], ['ack', 2, 1]]);
        expect((await db.query(`SELECT count(*)::int AS n FROM ${table}`)).rows[0].n).toBe(1);
        await handle.stop();
        await client.endAsync();
      } finally {
        await db.query(`DROP TABLE IF EXISTS ${table}`);
        await db.query(`DROP TABLE IF EXISTS ${table}_records`);
        await db.end();
      }
    });
  });
});

describe.skipIf(!available)('MQTT crash proof: consumers SIGKILLed while holding messages, restarted under their client id', () => {
  // Fewer than on NATS and BullMQ: an MQTT connection hands over one message at a time.
  const MESSAGES = Number(process.env.CONSUMER_CRASH_MESSAGES ?? 60);
  let worker: Awaited<ReturnType<typeof bundleWorker>>;
  let db: pg.Pool;
  let publisher: mqtt.MqttClient;
  const dropped: string[] = [];
  beforeAll(async () => {
    worker = await bundleWorker(new URL('./mqtt-worker.ts', import.meta.url));
    db = new pg.Pool({ connectionString: POSTGRES_URL, max: 3 });
    publisher = await mqtt.connectAsync(MQTT_URL, { protocolVersion: 5 });
  });
  afterAll(async () => {
    for (const table of dropped) await db?.query(`DROP TABLE IF EXISTS ${table}`);
    await db?.end();
    await publisher?.endAsync();
    await dropSessions();
    worker?.dispose();
  });

  for (const mode of ['plain', 'transaction'] as const) {
    it(`C2/C3/H9/H17: ${MESSAGES} messages published twice, 3 consumers (${mode === 'plain' ? 'Redis store' : 'PostgreSQL store, transaction: true'}) SIGKILLed and restarted -> one effect each`, async () => {
      const id = `${run}_${mode}`;
      const table = `ik_mqtt_effects_${id}`;
      dropped.push(table, `${table}_records`);
      await db.query(`CREATE TABLE ${table} (id bigserial PRIMARY KEY, message_id text NOT NULL, worker text NOT NULL, pid int NOT NULL)`);
      const topic = `ik-test/${id}/orders`;
      const ids = Array.from({ length: MESSAGES }, (_, n) => `${id}-m${n}`);
      const env = (name: string) => {
        sessions.push(`ik-${id}-${name}`);
        return {
          MQTT_URL,
          TOPIC: topic,
          GROUP: `g${id}`,
          CLIENT_ID: `ik-${id}-${name}`,
          WORKER: name,
          MODE: mode,
          STORE_URL: REDIS_URL,
          RECORDS: `${table}_records`,
          DATABASE_URL: POSTGRES_URL,
          TABLE: table,
          LEASE_MS: '2000',
          WAIT_MS: '300',
          CHAOS: '1',
        };
      };
      const publishOne = (n: number) =>
        publisher.publishAsync(topic, JSON.stringify({ id: ids[n], n }), { qos: 1, properties: { userProperties: { 'message-id': ids[n]! } } });
      let lastDelivery = Date.now();
      const { figures, problems } = await crashProof({
        system: 'mqtt',
        mode,
        ids,
        db,
        table,
        workers: ['w1', 'w2', 'w3'],
        start: (name: string, sink: Line[]) => {
          const proc = new Proc(name, spawn(process.execPath, [worker.file], { env: { ...process.env, ...env(name) }, stdio: ['ignore', 'pipe', 'pipe'] }), sink);
          proc.child.stdout!.on('data', () => (lastDelivery = Date.now()));
          return proc;
        },
        published: 2 * MESSAGES,
        async publish() {
          // Every message twice, as a publisher that resends after a lost PUBACK does: a new
          // PUBLISH (its own packet id), the same message-id.
          for (let n = 0; n < MESSAGES; n++) {
            await publishOne(n);
            if (n % 4 === 3) await sleep(40);
          }
          for (let n = 0; n < MESSAGES; n++) {
            await publishOne(n);
            if (n % 4 === 3) await sleep(30);
          }
        },
        // Mosquitto says nothing of what it still holds: quiet for a second counts as drained.
        drained: async () => Date.now() - lastDelivery > 1000,
        kills: 6,
        killEveryMs: [500, 1100],
        restartAfterMs: 200,
        timeoutMs: 60_000,
      });
      console.log(`mqtt consumers crash proof: ${JSON.stringify(figures)}`);
      expect(problems).toEqual([]);
      expect(figures.distinctIds).toBe(MESSAGES);
      if (mode === 'transaction') expect(figures.effects).toBe(MESSAGES);
      else expect(figures.effects).toBe(MESSAGES + figures.windowHits);
      expect(figures.minDeliveriesPerMessage).toBeGreaterThanOrEqual(2);
      expect(figures.kills).toBeGreaterThanOrEqual(3);
      expect(figures.killsHolding).toBe(figures.kills);
      expect(figures.killsInHandler).toBeGreaterThan(0);
      expect(figures.replays).toBeGreaterThanOrEqual(MESSAGES);
      expect(figures.handlerErrors).toBeGreaterThan(0);
      expect(figures.recoveredFromKilled).toBeGreaterThan(0);
    }, 90_000);
  }
});
