/**
 * NATS JetStream: `idempotentJetStreamHandler()` against the real server. Each outcome
 * settles the message as docs/consumers.md says (C1–C3): ack after the effect, nak(delay)
 * on a conflict or an unavailable store, nak then term for a handler that keeps failing,
 * term for a mismatch or a message without a key, working() during a long handler. Then
 * the crash proof (crash-harness.ts): three consumer processes on one store, every message
 * published twice, consumers SIGKILLed while they hold messages, effects = messages; on
 * Redis, and on PostgreSQL with `transaction: true`.
 */
import { randomUUID } from 'node:crypto';
import { spawn } from 'node:child_process';
import { AckPolicy, jetstream, jetstreamManager, type Consumer, type JetStreamClient, type JetStreamManager, type JsMsg } from '@nats-io/jetstream';
import { connect, headers, type NatsConnection } from '@nats-io/transport-node';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, expectTypeOf, it } from 'vitest';
import { idempotentJetStreamHandler, type JetStreamMessage, type JetStreamSettlement } from '../../consumers/nats.js';
import { createStore } from '../../drivers/create-store.js';
import { postgresStore } from '../../drivers/postgres.js';
import { KeyReusedError } from '../../src/errors.js';
import { idempotentIn } from '../../src/idempotent.js';
import type { IdempotencyStore } from '../../src/store.js';
import { POSTGRES_URL, REDIS_URL, serviceAvailable } from '../helpers/services.js';
import { bundleWorker, crashProof, Proc, sleep, type Line } from './crash-harness.js';

const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
const available =
  (await serviceAvailable('NATS', NATS_URL)) && (await serviceAvailable('Redis', REDIS_URL)) && (await serviceAvailable('PostgreSQL', POSTGRES_URL));
const run = randomUUID().slice(0, 8);
const ns = (ms: number) => ms * 1_000_000;

describe.skipIf(!available)('NATS JetStream: idempotentJetStreamHandler()', () => {
  let nc: NatsConnection;
  let js: JetStreamClient;
  let jsm: JetStreamManager;
  let store: IdempotencyStore;
  const streams: string[] = [];

  /** A fresh stream (100 ms duplicate window) and durable consumer. */
  async function streamFor(name: string, consumer: Partial<{ ack_wait: number; max_deliver: number }> = {}): Promise<{ subject: string; consumer: Consumer; stream: string }> {
    const stream = `ik_${run}_${name}`.replace(/[^a-zA-Z0-9_]/g, '_');
    streams.push(stream);
    await jsm.streams.add({ name: stream, subjects: [`${stream}.>`], duplicate_window: ns(100), max_age: ns(300_000) });
    await jsm.consumers.add(stream, { durable_name: 'c', ack_policy: AckPolicy.Explicit, ack_wait: ns(consumer.ack_wait ?? 5000), max_deliver: consumer.max_deliver ?? -1 });
    return { subject: `${stream}.orders`, consumer: await js.consumers.get(stream, 'c'), stream };
  }
  const publish = (subject: string, body: unknown, msgID?: string) =>
    js.publish(subject, JSON.stringify(body), msgID === undefined ? {} : { msgID });
  const next = async (consumer: Consumer, expires = 3000): Promise<JsMsg> => {
    const msg = await consumer.next({ expires });
    if (!msg) throw new Error('no message within the wait');
    return msg;
  };
  /** The consumer's pending and unacknowledged counts, once acks sent (asynchronously) have arrived. */
  const pending = async (stream: string) => {
    const deadline = Date.now() + 2000;
    for (;;) {
      const info = await jsm.consumers.info(stream, 'c');
      const counts = { pending: info.num_pending, unacked: info.num_ack_pending };
      if ((counts.pending === 0 && counts.unacked === 0) || Date.now() > deadline) return counts;
      await sleep(50);
    }
  };

  beforeAll(async () => {
    nc = await connect({ servers: NATS_URL });
    js = jetstream(nc);
    jsm = await jetstreamManager(nc);
    store = createStore(REDIS_URL, { namespace: `nats_${run}` });
  });
  afterAll(async () => {
    for (const stream of streams) await jsm?.streams.delete(stream).catch(() => undefined);
    await nc?.close();
    await store?.close();
  });

  it('C1/C2: ack after the effect; a copy published again (same Nats-Msg-Id) is acked with the stored result, fn not run', async () => {
    const { subject, consumer, stream } = await streamFor('ack');
    const runs: string[] = [];
    const handle = idempotentJetStreamHandler(async (msg: JsMsg) => {
      runs.push(msg.json<{ id: string }>().id);
      return { shipped: true, at: new Date(0) };
    }, { store });
    expect((await publish(subject, { id: 'o-1' }, 'o-1')).duplicate).toBe(false);
    // Within the stream's duplicate window JetStream drops the copy itself...
    expect((await publish(subject, { id: 'o-1' }, 'o-1')).duplicate).toBe(true);
    const first = await handle(await next(consumer));
    expect(first).toMatchObject({ action: 'ack', outcome: 'done', delivery: 1, result: { shipped: true, at: new Date(0) } });
    // ...after it, the copy is a new stream message: the store answers it.
    await sleep(150);
    expect((await publish(subject, { id: 'o-1' }, 'o-1')).duplicate).toBe(false);
    const copy = await handle(await next(consumer));
    expect(copy).toMatchObject({ action: 'ack', outcome: 'done', result: { shipped: true } });
    expect(copy.result!.at).toBeInstanceOf(Date);
    expect(runs).toEqual(['o-1']);
    expect(await pending(stream)).toEqual({ pending: 0, unacked: 0 });
  });

  it('C3: the key in flight elsewhere -> nak(retryDelayMs), redelivered after the delay and then acked with the result', async () => {
    const { subject, consumer, stream } = await streamFor('conflict');
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    // Another consumer (same store, same stream scope and payload) is running o-2 now.
    const body = JSON.stringify({ id: 'o-2' });
    // The recipe's own key space: what another consumer instance of the recipe claims.
    const other = idempotentIn('message:nats', async () => {
      await held;
      return 'by the other consumer';
    }, { store, key: () => 'o-2', scope: () => stream, fingerprint: () => new TextEncoder().encode(body) });
    const running = other();
    await sleep(50);
    const settled: JetStreamSettlement[] = [];
    const handle = idempotentJetStreamHandler(async () => 'here', { store, waitMs: 0, retryDelayMs: 400, onSettle: (_m, s) => settled.push(s) });
    await publish(subject, { id: 'o-2' }, 'o-2');
    const started = Date.now();
    const first = await handle(await next(consumer));
    expect(first).toMatchObject({ action: 'nak', outcome: 'retry', delayMs: 400 });
    expect((first.error as { code: string }).code).toBe('request-in-progress');
    release();
    expect(await running).toBe('by the other consumer');
    const again = await next(consumer);
    expect(Date.now() - started).toBeGreaterThanOrEqual(350);
    expect(again.info.deliveryCount).toBe(2);
    expect(await handle(again)).toMatchObject({ action: 'ack', outcome: 'done', result: 'by the other consumer', delivery: 2 });
    expect(settled.map((s) => s.action)).toEqual(['nak', 'ack']);
    expect(await pending(stream)).toEqual({ pending: 0, unacked: 0 });
  });

  it('C3: a handler that throws is nak\'d with its backoff and run again; on delivery maxDeliveries it is termed', async () => {
    const { subject, consumer, stream } = await streamFor('failing');
    let attempts = 0;
    const handle = idempotentJetStreamHandler(async () => {
      attempts++;
      throw new Error('downstream is down');
    }, { store, maxDeliveries: 3, failureDelayMs: (delivery) => delivery * 100 });
    await publish(subject, { id: 'o-3' }, 'o-3');
    const settlements: JetStreamSettlement[] = [];
    for (let i = 0; i < 3; i++) settlements.push(await handle(await next(consumer)));
    expect(settlements.map((s) => [s.action, s.outcome, s.delivery, s.delayMs])).toEqual([
      ['nak', 'failed', 1, 100],
      ['nak', 'failed', 2, 200],
      ['term', 'failed', 3, undefined],
    ]);
    expect(attempts).toBe(3);
    expect((settlements[2]!.error as Error).message).toBe('downstream is down');
    expect(await consumer.next({ expires: 1000 })).toBeNull(); // termed: never again
    expect(await pending(stream)).toEqual({ pending: 0, unacked: 0 });
    // A transient failure: the redelivery runs fn again, and succeeds.
    let calls = 0;
    const flaky = idempotentJetStreamHandler(async () => (++calls === 1 ? Promise.reject(new Error('once')) : 'ok'), { store, failureDelayMs: 0 });
    await publish(subject, { id: 'o-4' }, 'o-4');
    expect((await flaky(await next(consumer))).action).toBe('nak');
    expect(await flaky(await next(consumer))).toMatchObject({ action: 'ack', result: 'ok', delivery: 2 });
  });

  it('C3: the same Nats-Msg-Id with another payload is termed as a mismatch; a message without a key is termed, fn never run', async () => {
    const { subject, consumer } = await streamFor('reject');
    let runs = 0;
    const handle = idempotentJetStreamHandler(async () => ++runs, { store });
    await publish(subject, { id: 'o-5', amount: 1 }, 'o-5');
    expect((await handle(await next(consumer))).action).toBe('ack');
    await sleep(150);
    await publish(subject, { id: 'o-5', amount: 999 }, 'o-5');
    const mismatch = await handle(await next(consumer));
    expect(mismatch).toMatchObject({ action: 'term', outcome: 'reject' });
    expect(mismatch.error).toBeInstanceOf(KeyReusedError);
    await publish(subject, { id: 'o-6' }); // no Nats-Msg-Id
    const keyless = await handle(await next(consumer));
    expect(keyless).toMatchObject({ action: 'term', outcome: 'reject' });
    expect((keyless.error as { code: string }).code).toBe('key-missing');
    expect(runs).toBe(1);
    // A payload id instead of the header; `fingerprint: false` lets a changed payload replay.
    const byPayload = idempotentJetStreamHandler(async (msg: JsMsg) => msg.json<{ id: string; v: number }>().v, {
      store,
      key: (msg) => msg.json<{ id: string }>().id,
      fingerprint: false,
    });
    await publish(subject, { id: 'o-7', v: 1 });
    await publish(subject, { id: 'o-7', v: 2 });
    expect((await byPayload(await next(consumer))).result).toBe(1);
    expect((await byPayload(await next(consumer))).result).toBe(1);
  });

  it('C3: the store down -> nak, fn not run; a long handler sends working() so ack_wait never redelivers it', async () => {
    const { subject, consumer, stream } = await streamFor('working', { ack_wait: 1000 });
    const down = createStore('redis://127.0.0.1:1', { namespace: 'down' });
    let runs = 0;
    const failing = idempotentJetStreamHandler(async () => ++runs, { store: down, storeTimeoutMs: 300, retryDelayMs: 100 });
    await publish(subject, { id: 'o-8' }, 'o-8');
    const unavailable = await failing(await next(consumer));
    expect(unavailable).toMatchObject({ action: 'nak', outcome: 'retry', delayMs: 100 });
    expect((unavailable.error as { code: string }).code).toBe('store-unavailable');
    expect(runs).toBe(0);
    await down.close().catch(() => undefined);
    // 2.5 s of work against an ack_wait of 1 s: working() every 300 ms keeps the delivery.
    const slow = idempotentJetStreamHandler(async () => {
      await sleep(2500);
      return 'slow';
    }, { store, workingMs: 300 });
    const msg = await next(consumer);
    expect(msg.info.deliveryCount).toBe(2);
    const settled = await slow(msg);
    expect(settled).toMatchObject({ action: 'ack', result: 'slow', delivery: 2 });
    expect(await consumer.next({ expires: 1500 })).toBeNull();
    expect(await pending(stream)).toEqual({ pending: 0, unacked: 0 });
  }, 20_000);

  it('bad options are precise TypeErrors; types follow the handler', () => {
    const fn = async (msg: JsMsg) => msg.seq;
    expect(() => idempotentJetStreamHandler(fn, { store, retryDelayMs: -1 })).toThrow('Expected `retryDelayMs` to be a non-negative integer (ms) or a function returning one, got -1');
    expect(() => idempotentJetStreamHandler(fn, { store, maxDeliveries: 0 })).toThrow('Expected `maxDeliveries` to be a positive integer, got 0');
    expect(() => idempotentJetStreamHandler(fn, { store, workingMs: 0 })).toThrow('Expected `workingMs` to be a positive integer, got 0');
    expect(() => idempotentJetStreamHandler(fn, { store, key: 'Nats-Msg-Id' as never })).toThrow('Expected `key` to be a function, got "Nats-Msg-Id"');
    expect(() => idempotentJetStreamHandler(fn, { store, leaseMs: -1 })).toThrow('Expected `leaseMs` to be a positive integer, got -1');
    expect(() => idempotentJetStreamHandler('fn' as never, { store })).toThrow('Expected `fn` to be a function');
    expect(() => idempotentJetStreamHandler(fn, undefined as never)).toThrow(/Expected options with a `store`/);
    const handle = idempotentJetStreamHandler(fn, { store });
    expectTypeOf(handle).returns.resolves.toEqualTypeOf<JetStreamSettlement<number>>();
    expectTypeOf<JsMsg>().toMatchTypeOf<JetStreamMessage>();
  });

  describe('transaction: true (PostgreSQL)', () => {
    let db: pg.Pool;
    const table = `ik_nats_tx_${run}`;
    beforeAll(async () => {
      db = new pg.Pool({ connectionString: POSTGRES_URL, max: 4 });
      await db.query(`CREATE TABLE ${table} (id serial PRIMARY KEY, message_id text NOT NULL)`);
    });
    afterAll(async () => {
      await db?.query(`DROP TABLE IF EXISTS ${table}`);
      await db?.query(`DROP TABLE IF EXISTS ${table}_records`);
      await db?.end();
    });

    it('fn gets the transaction\'s client; a throw rolls its write back and naks; the redelivery commits once', async () => {
      const { subject, consumer } = await streamFor('tx');
      const txStore = postgresStore({ pool: db, table: `${table}_records` });
      let attempt = 0;
      const handle = idempotentJetStreamHandler(async (msg: JsMsg, client: pg.PoolClient) => {
        await client.query(`INSERT INTO ${table} (message_id) VALUES ($1)`, [msg.headers!.get('Nats-Msg-Id')]);
        if (++attempt === 1) throw new Error('after the write');
        return attempt;
      }, { store: txStore, transaction: true, failureDelayMs: 0 });
      await publish(subject, { id: 'tx-1' }, 'tx-1');
      expect((await handle(await next(consumer))).action).toBe('nak');
      expect((await db.query(`SELECT count(*)::int AS n FROM ${table}`)).rows[0].n).toBe(0);
      expect(await handle(await next(consumer))).toMatchObject({ action: 'ack', result: 2 });
      await sleep(150);
      await publish(subject, { id: 'tx-1' }, 'tx-1');
      expect(await handle(await next(consumer))).toMatchObject({ action: 'ack', result: 2 });
      expect((await db.query(`SELECT count(*)::int AS n FROM ${table}`)).rows[0].n).toBe(1);
    });
  });
});

describe.skipIf(!available)('NATS JetStream crash proof: consumers SIGKILLed while holding messages', () => {
  const MESSAGES = Number(process.env.CONSUMER_CRASH_MESSAGES ?? 120);
  let worker: Awaited<ReturnType<typeof bundleWorker>>;
  let nc: NatsConnection;
  let js: JetStreamClient;
  let jsm: JetStreamManager;
  let db: pg.Pool;
  const dropped: string[] = [];
  const streams: string[] = [];
  beforeAll(async () => {
    worker = await bundleWorker(new URL('./nats-worker.ts', import.meta.url));
    nc = await connect({ servers: NATS_URL });
    js = jetstream(nc);
    jsm = await jetstreamManager(nc);
    db = new pg.Pool({ connectionString: POSTGRES_URL, max: 3 });
  });
  afterAll(async () => {
    for (const stream of streams) await jsm?.streams.delete(stream).catch(() => undefined);
    for (const table of dropped) await db?.query(`DROP TABLE IF EXISTS ${table}`);
    await db?.end();
    await nc?.close();
    worker?.dispose();
  });

  for (const mode of ['plain', 'transaction'] as const) {
    it(`C2/C3/H9/H17: ${MESSAGES} messages published twice, 3 consumers (${mode === 'plain' ? 'Redis store' : 'PostgreSQL store, transaction: true'}) SIGKILLed at random -> one effect each`, async () => {
      const id = `${run}_${mode}`;
      const stream = `ik_crash_${id}`;
      const table = `ik_nats_effects_${id}`;
      streams.push(stream);
      dropped.push(table, `${table}_records`);
      await db.query(`CREATE TABLE ${table} (id bigserial PRIMARY KEY, message_id text NOT NULL, worker text NOT NULL, pid int NOT NULL)`);
      await jsm.streams.add({ name: stream, subjects: [`${stream}.>`], duplicate_window: ns(100), max_age: ns(600_000) });
      // A killed consumer's unacked messages come back after ack_wait, before its claims'
      // leases (3 s) have run out: those redeliveries meet a conflict and are nak'd until then.
      await jsm.consumers.add(stream, { durable_name: 'workers', ack_policy: AckPolicy.Explicit, ack_wait: ns(1200), max_ack_pending: 200 });
      const ids = Array.from({ length: MESSAGES }, (_, n) => `${id}-m${n}`);
      const env = (name: string) => ({
        NATS_URL,
        STREAM: stream,
        CONSUMER: 'workers',
        WORKER: name,
        MODE: mode,
        STORE_URL: `${REDIS_URL}`,
        RECORDS: `${table}_records`,
        DATABASE_URL: POSTGRES_URL,
        TABLE: table,
        LEASE_MS: '3000',
        WAIT_MS: '300',
        WORKING_MS: '300',
        CONCURRENCY: '4',
        CHAOS: '1',
      });
      const publishOne = (n: number) => js.publish(`${stream}.orders`, JSON.stringify({ id: ids[n], n }), { msgID: ids[n] });
      const { figures, problems } = await crashProof({
        system: 'nats',
        mode,
        ids,
        db,
        table,
        workers: ['w1', 'w2', 'w3'],
        start: (name: string, sink: Line[]) =>
          new Proc(name, spawn(process.execPath, [worker.file], { env: { ...process.env, ...env(name) }, stdio: ['ignore', 'pipe', 'pipe'] }), sink),
        published: 2 * MESSAGES,
        async publish() {
          // Paced, so that consumers are busy while they are killed; every copy outside the
          // stream's 100 ms duplicate window, so JetStream stores (and delivers) it again.
          for (let n = 0; n < MESSAGES; n++) {
            await publishOne(n);
            if (n % 4 === 3) await sleep(60);
          }
          await sleep(150);
          for (let n = 0; n < MESSAGES; n++) {
            const ack = await publishOne(n);
            if (ack.duplicate) throw new Error(`copy of ${ids[n]} was dropped by the duplicate window`);
            if (n % 4 === 3) await sleep(40);
          }
        },
        drained: async () => {
          const info = await jsm.consumers.info(stream, 'workers');
          return info.num_pending === 0 && info.num_ack_pending === 0;
        },
        kills: 6,
        killEveryMs: [500, 1100],
        timeoutMs: 60_000,
      });
      console.log(`nats consumers crash proof: ${JSON.stringify(figures)}`);
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
      // The killed consumers' messages came back and were settled by others. (A redelivery that
      // comes back within the dead consumer's lease meets a conflict and is nak'd: `conflicts`;
      // how many do depends on the server's redelivery timing. The path is proven above.)
      expect(figures.recoveredFromKilled).toBeGreaterThan(0);
    }, 90_000);
  }
});
