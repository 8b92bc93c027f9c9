/**
 * Telemetry through the real OpenTelemetry SDK (in-memory span and metric exporters) and
 * node:diagnostics_channel: what is counted, timed and traced, and that no key, body or
 * (unless asked) scope ever leaves.
 */
import { randomUUID } from 'node:crypto';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
  type ResourceMetrics,
} from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { memoryStore } from '../../drivers/memory.js';
import { RequestInProgressError, KeyReusedError, StoreUnavailableError } from '../../src/errors.js';
import { createIdempotency } from '../../src/http.js';
import { idempotent } from '../../src/idempotent.js';
import type { IdempotencyStore } from '../../src/store.js';
import { EVENT_CHANNEL, STORE_CHANNEL, type EventMessage, type StoreCallMessage, type TelemetryOptions } from '../../src/telemetry.js';

const contextManager = new AsyncLocalStorageContextManager().enable();
beforeAll(() => {
  context.setGlobalContextManager(contextManager);
});
afterAll(() => {
  context.disable();
});

/** A fresh SDK per test: spans and metrics land in memory. */
function sdk() {
  const spans = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });
  const metrics = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  const reader = new PeriodicExportingMetricReader({ exporter: metrics, exportIntervalMillis: 3_600_000 });
  const meterProvider = new MeterProvider({ readers: [reader] });
  return {
    telemetry: { tracerProvider, meterProvider } satisfies TelemetryOptions,
    spans: () => spans.getFinishedSpans(),
    async metrics(): Promise<ResourceMetrics[]> {
      await reader.forceFlush();
      return metrics.getMetrics();
    },
    async shutdown() {
      await tracerProvider.shutdown();
      await meterProvider.shutdown();
    },
  };
}

type Point = { attributes: Record<string, unknown>; value: unknown };
function points(all: ResourceMetrics[], name: string): Point[] {
  const last = all.at(-1);
  const metric = last?.scopeMetrics.flatMap((s) => s.metrics).find((m) => m.descriptor.name === name);
  return (metric?.dataPoints ?? []) as Point[];
}
const count = (all: ResourceMetrics[], type: string) =>
  points(all, 'idempotency.events')
    .filter((p) => p.attributes['idempotency.event.type'] === type)
    .reduce((sum, p) => sum + (p.value as number), 0);
const histogramCount = (p: Point) => (p.value as { count: number }).count;

const deferred = () => {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
};

let current: ReturnType<typeof sdk> | undefined;
afterEach(async () => {
  await current?.shutdown();
  current = undefined;
});

describe('telemetry: metrics and spans through the OpenTelemetry SDK', () => {
  it('counts executions, replays, mismatches, conflicts and releases; times store calls; traces each acquisition', async () => {
    const otel = (current = sdk());
    const store = memoryStore();
    let calls = 0;
    const gate = deferred();
    const handle = idempotent(
      async (id: string, amount: number) => {
        calls++;
        if (amount < 0) throw new Error('refused');
        if (amount === 999) await gate.promise;
        return { id, amount };
      },
      { store, key: (id) => id, fingerprint: (_id, amount) => amount, waitMs: 0, telemetry: otel.telemetry },
    );
    await handle('k1', 10); // execution
    await handle('k1', 10); // replay
    await expect(handle('k1', 11)).rejects.toBeInstanceOf(KeyReusedError);
    await expect(handle('k2', -1)).rejects.toThrow('refused'); // execution, then release
    const slow = handle('k3', 999); // execution, still running
    await expect(handle('k3', 999)).rejects.toBeInstanceOf(RequestInProgressError); // conflict
    gate.resolve();
    await slow;
    expect(calls).toBe(3);

    const metrics = await otel.metrics();
    expect(count(metrics, 'claimed')).toBe(3);
    expect(count(metrics, 'replayed')).toBe(1);
    expect(count(metrics, 'mismatch')).toBe(1);
    expect(count(metrics, 'conflict')).toBe(1);
    expect(count(metrics, 'released')).toBe(1);
    expect(count(metrics, 'completed')).toBe(2);
    expect(count(metrics, 'store-error')).toBe(0);

    const durations = points(metrics, 'idempotency.store.duration');
    const ops = new Set(durations.map((p) => p.attributes['idempotency.store.operation']));
    expect([...ops].sort()).toEqual(['claim', 'complete', 'release']);
    for (const p of durations) {
      expect(p.attributes).toMatchObject({ 'idempotency.store.name': 'memory', 'idempotency.store.outcome': 'ok' });
    }
    const claims = durations.filter((p) => p.attributes['idempotency.store.operation'] === 'claim');
    // Five claims: the in-flight duplicate of k3 follows the first request in this process
    // and never asks the store.
    expect(claims.reduce((n, p) => n + histogramCount(p), 0)).toBe(5);

    const acquires = otel.spans().filter((s) => s.name === 'idempotency.acquire');
    expect(acquires.map((s) => s.attributes['idempotency.outcome'])).toEqual(['execute', 'replay', 'mismatch', 'execute', 'execute', 'conflict']);
    // Conflicts and mismatches are answers, not failures.
    expect(acquires.every((s) => s.status.code === 0)).toBe(true);
    // Store calls made during an acquisition are its children.
    const storeSpans = otel.spans().filter((s) => s.name.startsWith('idempotency.store '));
    const claimSpan = storeSpans.find((s) => s.name === 'idempotency.store claim')!;
    expect(acquires.some((a) => a.spanContext().spanId === claimSpan.parentSpanContext?.spanId)).toBe(true);
    expect(storeSpans.filter((s) => s.name === 'idempotency.store complete')).toHaveLength(2);
  });

  it('times a duplicate waiting for the first request: completed, then a conflict when it does not finish', async () => {
    const otel = (current = sdk());
    const gate = deferred();
    const started = deferred();
    const handle = idempotent(
      async (id: string) => {
        started.resolve();
        await gate.promise;
        return id;
      },
      { store: memoryStore(), key: (id) => id, waitMs: 5000, telemetry: otel.telemetry },
    );
    const first = handle('w1');
    await started.promise;
    const duplicate = handle('w1');
    setTimeout(() => gate.resolve(), 100);
    expect(await Promise.all([first, duplicate])).toEqual(['w1', 'w1']);

    const never = idempotent(() => new Promise<string>(() => undefined), {
      store: memoryStore(),
      key: () => 'w2',
      waitMs: 60,
      telemetry: otel.telemetry,
    });
    void never();
    await expect(never()).rejects.toBeInstanceOf(RequestInProgressError);

    const waits = points(await otel.metrics(), 'idempotency.wait.duration');
    const completed = waits.find((p) => p.attributes['idempotency.wait.outcome'] === 'completed')!;
    const conflict = waits.find((p) => p.attributes['idempotency.wait.outcome'] === 'conflict')!;
    expect(histogramCount(completed)).toBe(1);
    expect((completed.value as { sum: number }).sum).toBeGreaterThanOrEqual(0.05);
    expect(histogramCount(conflict)).toBe(1);
    expect((conflict.value as { sum: number }).sum).toBeGreaterThanOrEqual(0.04);
  });

  it('H16: store errors and timeouts: counted by operation, error spans, outcome on the duration histogram', async () => {
    const otel = (current = sdk());
    const base = memoryStore();
    let mode: 'fail' | 'hang' = 'fail';
    const store: IdempotencyStore = {
      ...base,
      name: 'flaky',
      claim: (...args) =>
        mode === 'fail' ? Promise.reject(new Error('connection reset')) : mode === 'hang' ? new Promise(() => undefined) : base.claim(...args),
    };
    const layer = createIdempotency({ scope: 'shared', store, storeTimeoutMs: 50, telemetry: otel.telemetry });
    const request = {
      method: 'POST',
      url: '/pay',
      headers: {},
      keyHeaderLines: 'key-1',
      body: () => ({ amount: 1 }),
      raw: {},
    };
    expect(await layer.begin(request)).toMatchObject({ type: 'respond', response: { status: 503 } });
    mode = 'hang';
    expect(await layer.begin(request)).toMatchObject({ type: 'respond', response: { status: 503 } });

    const metrics = await otel.metrics();
    const errors = points(metrics, 'idempotency.events').filter((p) => p.attributes['idempotency.event.type'] === 'store-error');
    expect(errors).toHaveLength(1);
    expect(errors[0]!.attributes['idempotency.store.operation']).toBe('claim');
    expect(errors[0]!.value).toBe(2);
    const outcomes = points(metrics, 'idempotency.store.duration')
      .filter((p) => p.attributes['idempotency.store.operation'] === 'claim')
      .map((p) => p.attributes['idempotency.store.outcome'])
      .sort();
    expect(outcomes).toEqual(['error', 'timeout']);

    const acquires = otel.spans().filter((s) => s.name === 'idempotency.acquire');
    expect(acquires).toHaveLength(2);
    for (const span of acquires) {
      expect(span.attributes['idempotency.outcome']).toBe('store-unavailable');
      expect(span.status.code).toBe(2);
    }
    const claimSpans = otel.spans().filter((s) => s.name === 'idempotency.store claim');
    expect(claimSpans.map((s) => s.attributes['idempotency.store.outcome']).sort()).toEqual(['error', 'timeout']);
    expect(claimSpans.every((s) => s.status.code === 2)).toBe(true);
    expect(claimSpans.find((s) => s.attributes['idempotency.store.outcome'] === 'error')!.events[0]).toMatchObject({ name: 'exception' });
  });

  it('never records the key or a body; the scope only with recordScope', async () => {
    const key = `secret-key-${randomUUID()}`;
    const tenant = `tenant-${randomUUID()}`;
    const bodyText = `card-number-${randomUUID()}`;
    const dump = (spans: ReadableSpan[], metrics: ResourceMetrics[]) =>
      JSON.stringify({
        spans: spans.map((s) => ({ name: s.name, attributes: s.attributes, events: s.events, status: s.status })),
        metrics: metrics.flatMap((m) => m.scopeMetrics.flatMap((s) => s.metrics.map((x) => x.dataPoints.map((p) => p.attributes)))),
      });
    const run = async (telemetry: TelemetryOptions) => {
      const handle = idempotent(async (body: { card: string }) => ({ echoed: body.card }), {
        store: memoryStore(),
        key: () => key,
        scope: () => tenant,
        fingerprint: (body) => body,
        telemetry,
      });
      await handle({ card: bodyText });
      await handle({ card: bodyText });
      await expect(handle({ card: 'other' })).rejects.toBeInstanceOf(KeyReusedError);
    };

    const plain = (current = sdk());
    await run(plain.telemetry);
    const text = dump(plain.spans(), await plain.metrics());
    expect(text).toContain('idempotency.acquire');
    for (const secret of [key, tenant, bodyText]) expect(text).not.toContain(secret);
    await plain.shutdown();

    const scoped = (current = sdk());
    await run({ ...scoped.telemetry, recordScope: true });
    const withScope = dump(scoped.spans(), await scoped.metrics());
    expect(withScope).toContain(`"idempotency.scope":"${tenant}"`);
    for (const secret of [key, bodyText]) expect(withScope).not.toContain(secret);
  });

  it('telemetry: false and api: false report nothing, even with providers given', async () => {
    const otel = (current = sdk());
    for (const telemetry of [false as const, { ...otel.telemetry, api: false as const }]) {
      const handle = idempotent(async () => 1, {
        store: memoryStore(),
        key: () => 'k',
        telemetry: telemetry === false ? false : telemetry,
      });
      await handle();
      await handle();
    }
    expect(otel.spans()).toEqual([]);
    expect(points(await otel.metrics(), 'idempotency.events')).toEqual([]);
  });

  it('with the API but no SDK registered nothing is traced, and an SDK registered later is picked up at the next call', async () => {
    const otel = (current = sdk());
    let n = 0;
    const handle = idempotent(async () => ++n, { store: memoryStore(), key: () => `k${n}` });
    expect(await handle()).toBe(1); // no global tracer provider yet: the API's no-op proxy
    expect(otel.spans()).toEqual([]);
    trace.setGlobalTracerProvider(otel.telemetry.tracerProvider);
    try {
      expect(await handle()).toBe(2);
      const names = otel.spans().map((span) => span.name);
      expect(names).toContain('idempotency.acquire');
      expect(names).toContain('idempotency.store claim');
    } finally {
      trace.disable();
    }
  });

  it('bad telemetry options are precise TypeErrors', () => {
    const store = memoryStore();
    expect(() => createIdempotency({ scope: 'shared', store, telemetry: 'on' as never })).toThrow('Expected `telemetry` to be an object or false, got on');
    expect(() => createIdempotency({ scope: 'shared', store, telemetry: { recordScope: 'yes' as never } })).toThrow(
      'Expected `telemetry.recordScope` to be a boolean, got yes',
    );
    expect(() => createIdempotency({ scope: 'shared', store, telemetry: { api: {} as never } })).toThrow(/telemetry.api/);
    expect(() => createIdempotency({ scope: 'shared', store, telemetry: { meterProvider: {} as never } })).toThrow(/getMeter/);
  });

  it('a throwing exporter or meter does not change what the caller gets', async () => {
    const broken = {
      getTracer: () => ({
        startSpan: () => {
          throw new Error('tracer exploded');
        },
      }),
    };
    const explodes = () => {
      throw new Error('exploded');
    };
    const brokenSpans = {
      getTracer: () => ({ startSpan: () => ({ setAttribute: explodes, setStatus: explodes, recordException: explodes, end: explodes }) }),
    };
    const brokenMeter = { getMeter: () => ({ createCounter: explodes, createHistogram: explodes }) };
    const brokenCounter = {
      getMeter: () => ({ createCounter: () => ({ add: explodes }), createHistogram: () => ({ record: explodes }) }),
    };
    for (const telemetry of [{ tracerProvider: broken }, { tracerProvider: brokenSpans }, { meterProvider: brokenMeter }, { meterProvider: brokenCounter }]) {
      const handle = idempotent(async () => 'value', { store: memoryStore(), key: () => 'k', telemetry });
      await expect(handle()).resolves.toBe('value');
      await expect(handle()).resolves.toBe('value');
    }
  });
});

describe('telemetry: node:diagnostics_channel', () => {
  it(`publishes every event on ${EVENT_CHANNEL} and every store call on ${STORE_CHANNEL}, without the key`, async () => {
    const events: EventMessage[] = [];
    const calls: StoreCallMessage[] = [];
    const onEvent = (message: unknown) => events.push(message as EventMessage);
    const onCall = (message: unknown) => calls.push(message as StoreCallMessage);
    subscribe(EVENT_CHANNEL, onEvent);
    subscribe(STORE_CHANNEL, onCall);
    try {
      const key = `secret-${randomUUID()}`;
      const handle = idempotent(async () => 'ok', { store: memoryStore(), key: () => key, scope: () => 'tenant-a', telemetry: false });
      await handle();
      await handle();
      expect(events.map((e) => e.type)).toEqual(['claimed', 'completed', 'replayed']);
      expect(events[1]).toMatchObject({ type: 'completed', status: 200, store: 'memory' });
      expect(events.every((e) => !('scope' in e))).toBe(true);
      expect(calls.map((c) => c.operation)).toEqual(['claim', 'complete', 'claim']);
      expect(calls.every((c) => c.outcome === 'ok' && c.durationMs >= 0 && c.store === 'memory')).toBe(true);
      expect(JSON.stringify([events, calls])).not.toContain(key);

      events.length = 0;
      const scoped = idempotent(async () => 'ok', {
        store: memoryStore(),
        key: () => key,
        scope: () => 'tenant-a',
        telemetry: { recordScope: true, api: false },
      });
      await scoped();
      expect(events[0]).toMatchObject({ type: 'claimed', scope: 'tenant-a' });

      const failing = idempotent(async () => 'ok', {
        store: { ...memoryStore(), claim: () => Promise.reject(new Error('down')) },
        key: () => key,
        telemetry: false,
      });
      calls.length = 0;
      events.length = 0;
      await expect(failing()).rejects.toBeInstanceOf(StoreUnavailableError);
      expect(calls[0]).toMatchObject({ operation: 'claim', outcome: 'error' });
      expect(events.map((e) => [e.type, e.operation])).toContainEqual(['store-error', 'claim']);
    } finally {
      unsubscribe(EVENT_CHANNEL, onEvent);
      unsubscribe(STORE_CHANNEL, onCall);
    }
  });
});
