/**
 * AWS Lambda entry points: `withIdempotency(handler, options)` for API Gateway (REST and
 * HTTP APIs), Function URL and Application Load Balancer events; `idempotencyMiddleware`
 * for Middy; `idempotent(handler, options)` for any event; `idempotentBatch(event, handler,
 * options)` for SQS (standard and FIFO), Kinesis and DynamoDB Streams batches. A claim
 * holds until the invocation's deadline (its remaining time), so a timed-out invocation's
 * key is taken over only once it can no longer be running.
 * @module
 * @example
 * import { createStore } from 'idempotency-kit';
 * import { withIdempotency } from 'idempotency-kit/lambda';
 *
 * const store = createStore('dynamodb://idempotency'); // the region is the function's
 * export const handler = withIdempotency(
 *   async (event) => ({ statusCode: 201, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ id: 42 }) }),
 *   { store }, // scope: the authorizer's principal (JWT sub, Lambda authorizer, IAM)
 * );
 */
import { idempotentBatch as batchOf, type BatchResult, type IdempotentBatchOptions } from '../../src/batch.js';
import { Idempotency, type HttpClaim, type IdempotencyOptions } from '../../src/http.js';
import { idempotent as idempotentCall, type IdempotentOptions } from '../../src/idempotent.js';
import { failureKind } from '../../src/outcome.js';
import {
  PRINCIPAL_SOURCE,
  capturedResult,
  eventMethod,
  eventPrincipal,
  eventRequestInfo,
  httpEventKind,
  lambdaResult,
  type LambdaEventKind,
  type LambdaHttpEvent,
  type LambdaHttpResult,
} from './lambda-io.js';

export type { LambdaHttpEvent, LambdaHttpResult } from './lambda-io.js';

/** The parts of Lambda's context object the layer reads. */
export interface LambdaContext {
  getRemainingTimeInMillis(): number;
  [name: string]: unknown;
}

/**
 * A claim holds until the invocation's deadline plus this margin (other hosts' clocks
 * may run a little ahead of this one's).
 */
const DEADLINE_MARGIN_MS = 1000;

/**
 * The lease of a claim made in this invocation: its remaining time (plus a margin), with
 * no renewal, so the key frees once the invocation is certainly over; `undefined` without
 * a Lambda context (the options' own lease, renewed).
 */
function deadlineLease(context: unknown): { leaseMs: number; renewLease: false } | undefined {
  const remaining = (context as Partial<LambdaContext> | null | undefined)?.getRemainingTimeInMillis?.();
  if (typeof remaining !== 'number' || !Number.isFinite(remaining) || remaining <= 0) return undefined;
  return { leaseMs: Math.ceil(remaining) + DEADLINE_MARGIN_MS, renewLease: false };
}

const ADAPTER = { name: 'idempotency-kit/lambda', principal: eventPrincipal, principalSource: PRINCIPAL_SOURCE, scopeExample: '(event) => event.requestContext.authorizer.jwt.claims.sub' };

/**
 * Every option of the HTTP layer; `scope` and `fingerprint` receive the event. Without
 * `scope` the key space is the principal API Gateway's authorizer put on the event (an ALB
 * event has none: pass `scope`).
 */
export type LambdaIdempotencyOptions = IdempotencyOptions<LambdaHttpEvent>;

/** An async Lambda handler of HTTP events. */
export type LambdaHttpHandler<E extends LambdaHttpEvent = LambdaHttpEvent, R = LambdaHttpResult, C = LambdaContext> = (event: E, context: C) => Promise<R> | R;

/** The layer of this invocation: the options' own, with the lease bounded by the deadline. */
function layerFor(layer: Idempotency<LambdaHttpEvent>, context: unknown): Idempotency<LambdaHttpEvent> {
  const lease = deadlineLease(context);
  return lease ? layer.with(lease) : layer;
}

/**
 * Wrap an HTTP handler. Covered requests (POST and PATCH by default) with the same
 * `Idempotency-Key` header run it once; repeats get the stored response with
 * `Idempotent-Replayed: true`; the layer's refusals (400, 409 with `Retry-After`, 413, 422,
 * 503) are problem+json results. A handler that throws releases the key (a retry runs
 * again) and its error goes on to Lambda.
 */
export function withIdempotency<E extends LambdaHttpEvent = LambdaHttpEvent, R = LambdaHttpResult, C = LambdaContext>(
  handler: LambdaHttpHandler<E, R, C>,
  options: LambdaIdempotencyOptions | Idempotency<LambdaHttpEvent>,
): (event: E, context: C) => Promise<R | LambdaHttpResult> {
  if (typeof handler !== 'function') throw new TypeError(`Expected \`handler\` to be a function, got ${String(handler)}`);
  const layer = options instanceof Idempotency ? options : new Idempotency<LambdaHttpEvent>(options, ADAPTER);
  return async function idempotency(event: E, context: C): Promise<R | LambdaHttpResult> {
    const kind = httpEventKind(event);
    if (kind === undefined || !layer.covers(eventMethod(event, kind))) return handler(event, context);
    const invocation = layerFor(layer, context);
    const decision = await invocation.begin(eventRequestInfo(event, kind, invocation.headerName, invocation.maxBodyBytes, event));
    if (decision.type === 'respond') return lambdaResult(decision.response, kind, event);
    if (decision.type === 'pass') return handler(event, context);
    let result: R;
    try {
      result = await handler(event, context);
    } catch (error) {
      await decision.claim.fail(error);
      throw error;
    }
    const captured = capturedResult(result, kind);
    if (captured === undefined) await decision.claim.fail(); // nothing that replays: a retry runs again
    else await decision.claim.finish(captured);
    return result;
  };
}

/** The parts of a Middy request the middleware reads and writes. */
interface MiddyRequest {
  event: unknown;
  context: unknown;
  response: unknown;
  error?: unknown;
}

/**
 * The same layer as a Middy middleware (`middy(handler).use(idempotencyMiddleware(options))`):
 * `before` answers replays and refusals itself (a concurrent duplicate gets its 409, never
 * a 500), `after` stores the response, `onError` releases the key, and only a key this
 * request claimed: a refused duplicate's error path never touches the record it did not
 * acquire.
 */
export function idempotencyMiddleware(options: LambdaIdempotencyOptions | Idempotency<LambdaHttpEvent>): {
  before: (request: MiddyRequest) => Promise<LambdaHttpResult | undefined>;
  after: (request: MiddyRequest) => Promise<void>;
  onError: (request: MiddyRequest) => Promise<void>;
} {
  const layer = options instanceof Idempotency ? options : new Idempotency<LambdaHttpEvent>(options, ADAPTER);
  // The claim each request holds, by the request object Middy passes to all three phases.
  const claims = new WeakMap<object, { claim: HttpClaim; kind: LambdaEventKind }>();
  return {
    async before(request) {
      const event = request.event as LambdaHttpEvent;
      const kind = httpEventKind(event);
      if (kind === undefined || !layer.covers(eventMethod(event, kind))) return undefined;
      const invocation = layerFor(layer, request.context);
      const decision = await invocation.begin(eventRequestInfo(event, kind, invocation.headerName, invocation.maxBodyBytes, event));
      if (decision.type === 'respond') return lambdaResult(decision.response, kind, event); // Middy sends it, the handler does not run
      if (decision.type === 'execute') claims.set(request, { claim: decision.claim, kind });
      return undefined;
    },
    async after(request) {
      const held = claims.get(request);
      if (!held) return;
      claims.delete(request);
      const captured = capturedResult(request.response, held.kind);
      if (captured === undefined) await held.claim.fail();
      else await held.claim.finish(captured);
    },
    async onError(request) {
      const held = claims.get(request);
      if (!held) return; // not our claim (a refused duplicate, a request not covered): nothing to release
      claims.delete(request);
      await held.claim.fail(request.error);
    },
  };
}

/**
 * Options of the Lambda `idempotent()`: those of the core `idempotent()`, whose `key`,
 * `scope` and `fingerprint` receive the event and the context.
 */
export type LambdaIdempotentOptions<E, C, R> = IdempotentOptions<[E, C], R>;

/**
 * Wrap any Lambda handler (an EventBridge event, a Step Functions task, a direct invoke):
 * the first invocation with a key runs it and stores its result, later ones return the
 * stored result; one running elsewhere makes a repeat wait, then throw
 * `RequestInProgressError` (Lambda retries it). The claim holds until this invocation's
 * deadline, so a timed-out invocation's key is free for the retry once it is over.
 */
export function idempotent<E, C extends Partial<LambdaContext> | undefined, R>(
  handler: (event: E, context: C) => R,
  options: LambdaIdempotentOptions<E, C, Awaited<R>>,
): (event: E, context: C) => Promise<Awaited<R>> {
  // Made once now, so that bad options throw at cold start; per invocation with its deadline.
  const plain = idempotentCall(handler as (event: E, context: C) => Promise<Awaited<R>>, options);
  return async function idempotentHandler(event: E, context: C): Promise<Awaited<R>> {
    const lease = deadlineLease(context);
    const call = lease ? idempotentCall(handler as (event: E, context: C) => Promise<Awaited<R>>, { ...options, ...lease }) : plain;
    return call(event, context);
  };
}

/** One record of an SQS, Kinesis or DynamoDB Streams event. */
export interface StreamRecord {
  eventSource?: string;
  eventSourceARN?: string;
  /** SQS */
  messageId?: string;
  attributes?: { MessageGroupId?: string; [name: string]: unknown };
  /** Kinesis and DynamoDB Streams */
  eventID?: string;
  kinesis?: { sequenceNumber?: string; [name: string]: unknown };
  dynamodb?: { SequenceNumber?: string; [name: string]: unknown };
  [name: string]: unknown;
}

/** Options of the Lambda `idempotentBatch()`: the core batch options with defaults for each event source. */
export interface LambdaBatchOptions<M extends StreamRecord, R> extends Omit<IdempotentBatchOptions<M, R>, 'key'> {
  /**
   * The idempotency key of a record.
   * @default SQS: `messageId`; Kinesis: `eventID` (shard and sequence number); DynamoDB Streams: `eventID`
   */
  key?: (record: M) => string;
  /** The invocation's context: claims then hold until its deadline. */
  context?: Partial<LambdaContext>;
}

const sourceOf = (record: StreamRecord): string => String(record.eventSource ?? '');

/** The id Lambda reads back from `batchItemFailures` for a record of each source. */
function itemId(record: StreamRecord): string | undefined {
  if (sourceOf(record) === 'aws:sqs') return record.messageId;
  if (sourceOf(record) === 'aws:kinesis') return record.kinesis?.sequenceNumber;
  if (sourceOf(record) === 'aws:dynamodb') return record.dynamodb?.SequenceNumber;
  return record.messageId ?? record.kinesis?.sequenceNumber ?? record.dynamodb?.SequenceNumber;
}

/** The default key of a record: what stays the same when the source delivers it again. */
function defaultKey(record: StreamRecord): string {
  const key = sourceOf(record) === 'aws:sqs' ? record.messageId : (record.eventID ?? record.messageId);
  if (typeof key !== 'string' || key === '') throw new TypeError('This record has no messageId or eventID to key it by: pass `key` (e.g. (record) => JSON.parse(record.body).orderId)');
  return key;
}

const isFifo = (records: readonly StreamRecord[]): boolean =>
  records.some((record) => sourceOf(record) === 'aws:sqs' && (String(record.eventSourceARN ?? '').endsWith('.fifo') || record.attributes?.MessageGroupId !== undefined));

/**
 * Handle a batch event (`{ Records }`) record by record, each claimed on its own key, and
 * return `{ batchItemFailures }` in the shape Lambda reads with `ReportBatchItemFailures`:
 * the event source then redelivers only the failed records, and records done before
 * replay. SQS FIFO batches run in order and stop at the first failure: it and every later
 * record are reported, so no message runs before one of its group that failed.
 */
export async function idempotentBatch<M extends StreamRecord, R>(
  event: { Records: M[] },
  handler: (record: M) => R,
  options: LambdaBatchOptions<M, Awaited<R>>,
): Promise<BatchResult<M, Awaited<R>>> {
  if (typeof event !== 'object' || event === null || !Array.isArray(event.Records)) {
    throw new TypeError(`Expected an SQS, Kinesis or DynamoDB Streams event with \`Records\`, got ${event === null ? 'null' : typeof event}`);
  }
  const { context, ...rest } = options ?? ({} as LambdaBatchOptions<M, Awaited<R>>);
  const batchOptions = {
    key: defaultKey,
    itemIdentifier: (record: M) => itemId(record) ?? defaultKey(record),
    ...rest,
    ...deadlineLease(context),
  } as IdempotentBatchOptions<M, Awaited<R>>;
  const records = event.Records;
  if (!isFifo(records)) return batchOf(records, handler, batchOptions);

  // FIFO: one at a time, in order, until the first failure.
  const handle = idempotentCall(handler as (record: M) => Promise<Awaited<R>>, batchOptions);
  const identify = batchOptions.itemIdentifier!;
  const result: BatchResult<M, Awaited<R>> = { succeeded: [], failed: [], batchItemFailures: [] };
  let stopped: unknown;
  for (const [index, record] of records.entries()) {
    if (stopped === undefined) {
      try {
        result.succeeded.push({ message: record, index, result: await handle(record) });
        continue;
      } catch (error) {
        stopped = error;
        result.failed.push({ message: record, index, error, kind: failureKind(error) });
      }
    } else {
      const error = new Error('Not run: an earlier message of this FIFO batch failed, so this one waits for its redelivery (order is kept)', { cause: stopped });
      result.failed.push({ message: record, index, error, kind: 'retry' });
    }
    result.batchItemFailures.push({ itemIdentifier: identify(record) });
  }
  return result;
}

