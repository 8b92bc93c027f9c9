/**
 * An MQTT consumer process for test/consumers/mqtt.test.ts (lines and effects as
 * crash-harness.ts describes). It joins a shared subscription under a fixed client id with
 * a persistent session, so that when it is SIGKILLed and started again under the same id,
 * Mosquitto sends it again every message whose PUBACK had not gone out (with DUP set).
 *
 * Env: MQTT_URL, TOPIC, GROUP, CLIENT_ID, WORKER, MODE (plain: Redis store STORE_URL;
 * transaction: PostgreSQL store on table RECORDS), DATABASE_URL, TABLE, LEASE_MS, WAIT_MS,
 * CHAOS=1 (the handler throws on its first try for every tenth message), KILL_BEFORE_ACK=1
 * (the process SIGKILLs itself when its first message is handled and stored, before the PUBACK).
 */
import mqtt from 'mqtt';
import pg from 'pg';
import { idempotentMqttHandler, type MqttSettlement } from '../../consumers/mqtt.js';
import { createStore } from '../../drivers/create-store.js';
import { postgresStore } from '../../drivers/postgres.js';

const env = (name: string): string => {
  const value = process.env[name];
  if (!value) throw new Error(`mqtt-worker: ${name} is not set`);
  return value;
};
const worker = env('WORKER');
const table = env('TABLE');
const mode = env('MODE');
const chaos = process.env.CHAOS === '1';
const report = (line: Record<string, unknown>): void => {
  process.stdout.write(`${JSON.stringify({ w: worker, pid: process.pid, t: Date.now(), ...line })}\n`);
};
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

type Packet = mqtt.IPublishPacket;
const db = new pg.Pool({ connectionString: env('DATABASE_URL'), max: 3 });
db.on('error', () => undefined);
const pgStore = mode === 'transaction' ? postgresStore({ pool: db, table: env('RECORDS') }) : undefined;
const store = pgStore ?? createStore(env('STORE_URL'));
const insert = `INSERT INTO ${table} (message_id, worker, pid) VALUES ($1, $2, $3)`;
const ranHere = new WeakSet<Packet>();
const tries = new Map<string, number>();
const body = (packet: Packet) => JSON.parse(packet.payload.toString()) as { id: string; n: number };

async function effect(packet: Packet, client: pg.PoolClient | pg.Pool) {
  const { id, n } = body(packet);
  ranHere.add(packet);
  report({ ev: 'run', id });
  const tried = (tries.get(id) ?? 0) + 1;
  tries.set(id, tried);
  if (chaos && n % 10 === 5 && tried === 1) {
    report({ ev: 'handler-error', id });
    throw new Error('transient failure (test)');
  }
  await sleep(15 + (n % 5) * 10);
  await client.query(insert, [id, worker, process.pid]);
  report({ ev: 'effect', id });
  if (mode === 'transaction') await sleep(10 + (n % 3) * 10);
  return { n, worker, at: new Date() };
}

const client = mqtt.connect(env('MQTT_URL'), {
  protocolVersion: 5,
  clientId: env('CLIENT_ID'),
  clean: false,
  properties: { sessionExpiryInterval: 300 },
  reconnectPeriod: 200,
});
const options = {
  leaseMs: Number(process.env.LEASE_MS ?? 2000),
  waitMs: Number(process.env.WAIT_MS ?? 300),
  retryDelayMs: 100,
  ttlMs: 600_000,
  onEvent: (event: { type: string; key: string }) => {
    if (event.type === 'conflict') report({ ev: 'conflict', id: event.key });
    if (event.type === 'lease-lost') report({ ev: 'idempotency-event', type: event.type, key: event.key });
  },
  onSettle: (packet: Packet, s: MqttSettlement) => {
    // onSettle runs before the PUBACK is sent: dying here leaves the message unacknowledged.
    if (process.env.KILL_BEFORE_ACK === '1' && s.action === 'ack') {
      report({ ev: 'dying-before-ack', id: body(packet).id });
      process.kill(process.pid, 'SIGKILL');
    }
    const code = (s.error as { code?: string } | undefined)?.code;
    report({ ev: 'settle', id: body(packet).id, action: s.action, outcome: s.outcome, code, replayed: s.outcome === 'done' && !ranHere.has(packet), dup: packet.dup });
  },
};
// Installed before the connection is up: the session's unacknowledged messages arrive at once.
const handling = pgStore
  ? idempotentMqttHandler(client, (packet: Packet, tx: pg.PoolClient) => effect(packet, tx), { ...options, store: pgStore, transaction: true })
  : idempotentMqttHandler(client, (packet: Packet) => effect(packet, db), { ...options, store });
const ours = client.handleMessage;
client.handleMessage = (packet, callback) => {
  report({ ev: 'delivery', id: body(packet as Packet).id, dup: packet.dup });
  ours.call(client, packet, callback);
};
client.on('error', (error) => report({ ev: 'worker-error', error: String(error) }));
await new Promise<void>((resolve) => client.once('connect', () => resolve()));
await client.subscribeAsync(`$share/${env('GROUP')}/${env('TOPIC')}`, { qos: 1 });

// Before `ready`: without a listener the default action ends the process the instant the
// signal arrives, even between two statements.
process.once('SIGTERM', () => {
  void (async () => {
    await handling.stop();
    await client.endAsync();
    await store.close();
    await db.end();
    report({ ev: 'stopped' });
    process.exit(0);
  })().catch((error: unknown) => {
    report({ ev: 'worker-error', error: String(error) });
    process.exit(1);
  });
});
report({ ev: 'ready' });
