/**
 * Telemetry: OpenTelemetry spans and metrics (when `@opentelemetry/api` is installed) and
 * the same events on `node:diagnostics_channel`. Names and attributes: docs/telemetry.md.
 *
 * Nothing here ever carries the client's idempotency key or a body; the scope (tenant)
 * only when `recordScope` is set.
 * @module
 */
import { channel } from 'node:diagnostics_channel';
import type { IdempotencyEvent, StoreOperation } from './events.js';
import type { IdempotencyRecord } from './store.js';
import { optionalPeer } from './optional-peer.js';

/** The diagnostics channel every engine event is published on. */
export const EVENT_CHANNEL = 'idempotency-kit:event';
/** The diagnostics channel every store call is published on, once settled. */
export const STORE_CHANNEL = 'idempotency-kit:store';

/** What {@link EVENT_CHANNEL} subscribers receive. */
export interface EventMessage {
  type: IdempotencyEvent['type'];
  /** Present only with `telemetry: { recordScope: true }`. */
  scope?: string | undefined;
  operation?: IdempotencyEvent['operation'];
  status?: number;
  error?: unknown;
  /** `record-unreadable`: the encryption key id the record was sealed under. */
  keyId?: string;
  /** `result-not-stored`: `too-large` or `not-storable`. */
  reason?: IdempotencyEvent['reason'];
  /** The store's name (`redis`, `postgres`, …). */
  store: string;
}

/** What {@link STORE_CHANNEL} subscribers receive. */
export interface StoreCallMessage {
  operation: NonNullable<IdempotencyEvent['operation']>;
  store: string;
  outcome: 'ok' | 'error' | 'timeout';
  durationMs: number;
  error?: unknown;
}

// The few parts of @opentelemetry/api used here, typed locally so that the published
// types never require the package.
interface OtelSpan {
  setAttribute(name: string, value: string | number | boolean): unknown;
  setStatus(status: { code: number; message?: string }): unknown;
  recordException(exception: Error | string): unknown;
  end(): void;
}
interface OtelTracer {
  startSpan(name: string, options?: { kind?: number; attributes?: Attributes }, context?: unknown): OtelSpan;
}
interface OtelMeter {
  createCounter(name: string, options?: { description?: string; unit?: string }): { add(value: number, attributes?: Attributes): void };
  createHistogram(
    name: string,
    options?: { description?: string; unit?: string; advice?: { explicitBucketBoundaries?: number[] } },
  ): { record(value: number, attributes?: Attributes): void };
}
type Attributes = Record<string, string | number | boolean>;

/** The shape of `import * as api from '@opentelemetry/api'` this module needs. */
export interface OpenTelemetryApi {
  trace: {
    getTracer(name: string, version?: string): OtelTracer;
    setSpan(context: unknown, span: OtelSpan): unknown;
  };
  metrics: { getMeter(name: string, version?: string): OtelMeter };
  context: { active(): unknown; with<T>(context: unknown, fn: () => T): T };
}

export interface TelemetryOptions {
  /**
   * The OpenTelemetry API to report through. By default `@opentelemetry/api` is loaded
   * (with `require`, in ESM and CommonJS alike) the first time the engine reports, and
   * telemetry stays off when it is not installed; pass `import * as api from
   * '@opentelemetry/api'` to use a specific copy, or `false` to turn OpenTelemetry off.
   * @default the installed @opentelemetry/api, if any
   */
  api?: OpenTelemetryApi | false;
  /** Tracer to use instead of the global provider's (tests, several providers). */
  tracerProvider?: { getTracer(name: string, version?: string): unknown };
  /** Meter provider to use instead of the global one. */
  meterProvider?: { getMeter(name: string, version?: string): unknown };
  /**
   * Put the scope (tenant) on spans, metrics and channel messages as `idempotency.scope`.
   * Off by default: a tenant id may be personal data, and as a metric attribute it
   * multiplies the series by the number of tenants.
   * @default false
   */
  recordScope?: boolean;
}

const NAME = 'idempotency-kit';
// Span kinds and status codes of the OpenTelemetry API (stable numbers).
const SPAN_KIND_INTERNAL = 0;
const SPAN_KIND_CLIENT = 2;
const STATUS_ERROR = 2;

/** Run a telemetry step; a throwing tracer, meter or exporter must never reach the request. */
function guard<T>(step: () => T): T | undefined {
  try {
    return step();
  } catch {
    return undefined;
  }
}

/**
 * `@opentelemetry/api` if the application has it, resolved once; null when absent. It keeps
 * its state on globalThis, so this copy sees the providers the application registered
 * through its own import.
 */
const installed = optionalPeer<OpenTelemetryApi>('@opentelemetry/api');

interface Instruments {
  tracer: OtelTracer;
  api: OpenTelemetryApi;
  /** Whether spans can be recorded: a tracer provider was passed, or a global one is registered. */
  tracing: () => boolean;
  /** Which instruments record: those of a meter provider with no SDK behind it do nothing, and are skipped. */
  counting: boolean;
  timingStore: boolean;
  timingWait: boolean;
  events: ReturnType<OtelMeter['createCounter']>;
  storeDuration: ReturnType<OtelMeter['createHistogram']>;
  waitDuration: ReturnType<OtelMeter['createHistogram']>;
}

/** Whether an OpenTelemetry object is one of the API's no-ops (nothing registered behind it). */
function isNoop(value: unknown): boolean {
  const name = (value as { constructor?: { name?: unknown } } | null | undefined)?.constructor?.name;
  return typeof name === 'string' && name.startsWith('Noop');
}

/** What the global tracer provider delegates to (the API's proxy hands out its delegate). */
function globalTracerProvider(api: OpenTelemetryApi): unknown {
  const provider = (api.trace as { getTracerProvider?: () => unknown }).getTracerProvider?.();
  const delegate = (provider as { getDelegate?: () => unknown } | undefined)?.getDelegate?.();
  return delegate ?? provider;
}

const eventChannel = channel(EVENT_CHANNEL);
const storeChannel = channel(STORE_CHANNEL);

export type WaitOutcome = 'completed' | 'released' | 'conflict' | 'error';
export type AcquireOutcome =
  | 'execute'
  | 'replay'
  | 'mismatch'
  | 'conflict'
  | 'not-replayable'
  | 'store-unavailable'
  | 'record-unreadable'
  | 'error';

function checkOptions(options: unknown): asserts options is TelemetryOptions | false | undefined {
  if (options === undefined || options === false) return;
  if (typeof options !== 'object' || options === null) {
    throw new TypeError(`Expected \`telemetry\` to be an object or false, got ${String(options)}`);
  }
  const { api, recordScope, tracerProvider, meterProvider } = options as TelemetryOptions;
  if (api !== undefined && api !== false && (typeof api !== 'object' || api === null || typeof api.trace?.getTracer !== 'function')) {
    throw new TypeError('Expected `telemetry.api` to be the @opentelemetry/api module (import * as api from "@opentelemetry/api") or false');
  }
  if (recordScope !== undefined && typeof recordScope !== 'boolean') {
    throw new TypeError(`Expected \`telemetry.recordScope\` to be a boolean, got ${String(recordScope)}`);
  }
  if (tracerProvider !== undefined && typeof tracerProvider?.getTracer !== 'function') {
    throw new TypeError('Expected `telemetry.tracerProvider` to have getTracer()');
  }
  if (meterProvider !== undefined && typeof meterProvider?.getMeter !== 'function') {
    throw new TypeError('Expected `telemetry.meterProvider` to have getMeter()');
  }
}

/**
 * One engine's reporter. Instruments are created at first use, so an SDK started after
 * the engine was built (but before the first request) is still the one reported to.
 */
export class Telemetry {
  readonly #options: TelemetryOptions | false;
  readonly #store: string;
  #instruments: Instruments | null | undefined;

  constructor(options: TelemetryOptions | false | undefined, storeName: string) {
    checkOptions(options);
    this.#options = options ?? {};
    this.#store = storeName;
  }

  #otel(): Instruments | null {
    if (this.#instruments !== undefined) return this.#instruments;
    const options = this.#options;
    const api = options === false || options.api === false ? null : (options.api ?? installed());
    if (!api || options === false) return (this.#instruments = null);
    return (this.#instruments = guard(() => this.#create(api, options)) ?? null);
  }

  #create(api: OpenTelemetryApi, options: TelemetryOptions): Instruments {
    const tracer = (options.tracerProvider ?? api.trace).getTracer(NAME) as OtelTracer;
    const meter = (options.meterProvider ?? api.metrics).getMeter(NAME) as OtelMeter;
    const instruments: Instruments = {
      api,
      tracer,
      // The global tracer provider is a proxy until an SDK registers one: look each time
      // (a property read), so spans start with the SDK whenever it comes.
      tracing: options.tracerProvider ? () => true : () => !isNoop(globalTracerProvider(api)),
      counting: true,
      timingStore: true,
      timingWait: true,
      events: meter.createCounter('idempotency.events', {
        description: 'Engine events by type: claimed (an execution), replayed, conflict, mismatch, released, store-error, …',
        unit: '{event}',
      }),
      storeDuration: meter.createHistogram('idempotency.store.duration', {
        description: 'Duration of one store call (claim, get, complete, release, extend)',
        unit: 's',
        advice: { explicitBucketBoundaries: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5] },
      }),
      waitDuration: meter.createHistogram('idempotency.wait.duration', {
        description: 'Time a duplicate spent waiting for the first request to settle',
        unit: 's',
        advice: { explicitBucketBoundaries: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30] },
      }),
    };
    // Instruments of the API's no-op meter (no SDK when they were made) stay no-ops.
    instruments.counting = !isNoop(instruments.events);
    instruments.timingStore = !isNoop(instruments.storeDuration);
    instruments.timingWait = !isNoop(instruments.waitDuration);
    return instruments;
  }

  /** Whether an event would reach anyone: a recording counter or a channel subscriber. */
  observed(): boolean {
    return eventChannel.hasSubscribers || this.#otel()?.counting === true;
  }

  #scoped(attributes: Attributes, scope: string | undefined): Attributes {
    if (scope !== undefined && this.#options !== false && this.#options.recordScope) attributes['idempotency.scope'] = scope;
    return attributes;
  }

  /** Every engine event: the events counter and the event channel. */
  event(event: IdempotencyEvent): void {
    const otel = this.#otel();
    if (otel?.counting) {
      const attributes: Attributes = { 'idempotency.event.type': event.type, 'idempotency.store.name': this.#store };
      if (event.operation) attributes['idempotency.store.operation'] = event.operation;
      if (event.keyId !== undefined) attributes['idempotency.encryption.key_id'] = event.keyId;
      if (event.reason !== undefined) attributes['idempotency.result.not_stored_reason'] = event.reason;
      guard(() => otel.events.add(1, this.#scoped(attributes, event.scope)));
    }
    if (eventChannel.hasSubscribers) {
      const message: EventMessage = { type: event.type, store: this.#store };
      if (this.#options !== false && this.#options.recordScope) message.scope = event.scope;
      if (event.operation) message.operation = event.operation;
      if (event.status !== undefined) message.status = event.status;
      if (event.error !== undefined) message.error = event.error;
      if (event.keyId !== undefined) message.keyId = event.keyId;
      if (event.reason !== undefined) message.reason = event.reason;
      eventChannel.publish(message);
    }
  }

  /** Whether store calls are reported at all (a span, the duration histogram or a channel subscriber); else storeCall only runs them. */
  watchesStoreCalls(): boolean {
    if (storeChannel.hasSubscribers) return true;
    const instruments = this.#otel();
    return instruments !== null && (instruments.timingStore || guard(instruments.tracing) === true);
  }

  /** One store call, timed: a client span, the store duration histogram and the store channel. */
  storeCall<T>(operation: StoreOperation, run: () => Promise<T>, isTimeout: (error: unknown) => boolean): Promise<T> {
    const instruments = this.#otel();
    const tracing = instruments !== null && guard(instruments.tracing) === true;
    const otel = instruments && (tracing || instruments.timingStore) ? instruments : null;
    if (!otel && !storeChannel.hasSubscribers) return run();
    return this.#reportedStoreCall(operation, run, isTimeout, otel, tracing);
  }

  async #reportedStoreCall<T>(
    operation: StoreOperation,
    run: () => Promise<T>,
    isTimeout: (error: unknown) => boolean,
    otel: Instruments | null,
    tracing: boolean,
  ): Promise<T> {
    const span = guard(() =>
      !tracing ? undefined : otel?.tracer.startSpan(`idempotency.store ${operation}`, {
        kind: SPAN_KIND_CLIENT,
        attributes: { 'idempotency.store.operation': operation, 'idempotency.store.name': this.#store },
      }),
    );
    const started = performance.now();
    let outcome: StoreCallMessage['outcome'] = 'ok';
    let failure: unknown;
    try {
      return await run();
    } catch (error) {
      failure = error;
      outcome = isTimeout(error) ? 'timeout' : 'error';
      throw error;
    } finally {
      const durationMs = performance.now() - started;
      if (otel?.timingStore) {
        guard(() =>
          otel.storeDuration.record(durationMs / 1000, {
            'idempotency.store.operation': operation,
            'idempotency.store.name': this.#store,
            'idempotency.store.outcome': outcome,
          }),
        );
      }
      if (span) {
        guard(() => {
          span.setAttribute('idempotency.store.outcome', outcome);
          if (outcome !== 'ok') {
            span.setStatus({ code: STATUS_ERROR, message: outcome === 'timeout' ? 'store call timed out' : 'store call failed' });
            // The driver's message (a host, a SQL state), never the key: keys are hashed before the driver sees them.
            if (failure instanceof Error) span.recordException(failure);
          }
        });
        guard(() => span.end());
      }
      if (storeChannel.hasSubscribers) {
        const message: StoreCallMessage = { operation, store: this.#store, outcome, durationMs };
        if (failure !== undefined) message.error = failure;
        storeChannel.publish(message);
      }
    }
  }

  /**
   * The span around one acquisition (claim, wait, replay or refusal). Store calls made
   * inside become its children when a context manager is registered.
   */
  acquire<T extends { type: string }>(scope: string | undefined, run: () => Promise<T>, outcomeOf: (error: unknown) => AcquireOutcome): Promise<T> {
    const instruments = this.#otel();
    // Not traced: the acquisition alone, with no span and no async wrapper around it.
    if (!instruments || guard(instruments.tracing) !== true) return run();
    return this.#acquireTraced(instruments, scope, run, outcomeOf);
  }

  async #acquireTraced<T extends { type: string }>(
    otel: Instruments,
    scope: string | undefined,
    run: () => Promise<T>,
    outcomeOf: (error: unknown) => AcquireOutcome,
  ): Promise<T> {
    const span = guard(() =>
      otel.tracer.startSpan('idempotency.acquire', {
        kind: SPAN_KIND_INTERNAL,
        attributes: this.#scoped({ 'idempotency.store.name': this.#store }, scope),
      }),
    );
    if (!span) return run();
    try {
      const result = await this.#within(otel.api, span, run);
      guard(() => span.setAttribute('idempotency.outcome', result.type));
      return result;
    } catch (error) {
      const outcome = outcomeOf(error);
      guard(() => {
        span.setAttribute('idempotency.outcome', outcome);
        // Conflicts and mismatches are the layer working as designed; only failures are errors.
        const keyId = (error as { keyId?: unknown } | null)?.keyId;
        if (outcome === 'record-unreadable' && typeof keyId === 'string') span.setAttribute('idempotency.encryption.key_id', keyId);
        if (outcome === 'store-unavailable' || outcome === 'record-unreadable' || outcome === 'error') {
          span.setStatus({ code: STATUS_ERROR, message: outcome });
          if (error instanceof Error) span.recordException(error);
        }
      });
      throw error;
    } finally {
      guard(() => span.end());
    }
  }

  /** `run` with `span` active, or plainly if the context API fails; `run` starts exactly once. */
  #within<T>(api: OpenTelemetryApi, span: OtelSpan, run: () => Promise<T>): Promise<T> {
    let started = false;
    try {
      return api.context.with(api.trace.setSpan(api.context.active(), span), () => {
        started = true;
        return run();
      });
    } catch (error) {
      if (started) throw error;
      return run();
    }
  }

  /**
   * A duplicate waiting for the first request (in this process or in the store): the
   * wait duration histogram. `recordOf` reads the settled record from what `run` resolves.
   */
  async waiting<T>(
    scope: string | undefined,
    run: () => Promise<T>,
    recordOf: (result: T) => IdempotencyRecord | undefined,
    conflictOf: (error: unknown) => boolean,
  ): Promise<T> {
    const otel = this.#otel();
    if (!otel?.timingWait) return run();
    const started = performance.now();
    let outcome: WaitOutcome = 'error';
    try {
      const result = await run();
      outcome = recordOf(result)?.state === 'completed' ? 'completed' : 'released';
      return result;
    } catch (error) {
      outcome = conflictOf(error) ? 'conflict' : 'error';
      throw error;
    } finally {
      const seconds = (performance.now() - started) / 1000;
      guard(() => otel.waitDuration.record(seconds, this.#scoped({ 'idempotency.wait.outcome': outcome, 'idempotency.store.name': this.#store }, scope)));
    }
  }
}
