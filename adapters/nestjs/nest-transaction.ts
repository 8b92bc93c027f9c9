/**
 * The NestJS adapter's PostgreSQL transaction: `@IdempotentTransaction()` gives a handler a
 * function that runs its writes in a transaction on the store's database and stores the
 * response in that same transaction (what `inTransaction(req, work)` does on the other
 * adapters), then sends that committed response as it is stored.
 * @module
 */
import type { ServerResponse } from 'node:http';
import { createParamDecorator, type ExecutionContext, type HttpException } from '@nestjs/common';
import { isIdempotencyError, type IdempotencyError } from '../../src/errors.js';
import { problemResponse, type HttpResponse } from '../../src/problem.js';
import {
  hasRequestTransaction,
  inTransaction,
  transactionProblem,
  type TransactionClient,
  type TransactionResponse,
} from '../../src/transaction.js';
import { setRejectionHeaders, type PlatformResponse } from './nest-http.js';
import { sendResponse } from '../internal/node-io.js';

/**
 * What `work` returns: the response to store and send. `status` defaults to the handler's
 * own (`@HttpCode()`, else 201 for POST and 200 otherwise); a `Buffer` / `Uint8Array` or
 * string body is sent as it is, anything else as JSON.
 */
export interface NestTransactionResponse extends Omit<TransactionResponse, 'status'> {
  status?: number;
}

/**
 * The function `@IdempotentTransaction()` gives a handler. It runs `work` with the
 * transaction's client, stores the response `work` returns in that transaction, sends it,
 * and resolves to it (`{ status, headers, body: Uint8Array }`) once it is committed. Call
 * it once per request; what the handler returns afterwards is not sent.
 */
export type NestTransaction<C = TransactionClient> = (work: (client: C) => Promise<NestTransactionResponse>) => Promise<HttpResponse>;


/** Send `response` as it is (the committed one), then make Nest's own reply to the handler's value a no-op. */
function sendWhole(res: PlatformResponse, response: HttpResponse): void {
  const { status, headers, body } = response;
  if (res.raw) {
    (res as unknown as { code(n: number): { headers(h: object): { send(b: Buffer): void } } })
      .code(status)
      .headers(headers)
      .send(Buffer.from(body.buffer, body.byteOffset, body.byteLength));
  } else sendResponse(res as unknown as ServerResponse, response);
  const self = () => res;
  for (const name of ['status', 'code', 'send', 'json', 'redirect', 'render', 'end']) {
    if (typeof res[name] === 'function') Object.defineProperty(res, name, { value: self, configurable: true, writable: true });
  }
}

/**
 * The parameter decorator, given how the adapter turns the layer's errors into its
 * `HttpException` (`IdempotencyRejection`), so that a lost lease, a conflict that outlasted
 * the retries or a failed commit is a 409 / 503 with problem details, not a 500.
 */
export function transactionDecorator(reject: (response: HttpResponse, error: IdempotencyError) => HttpException): () => ParameterDecorator {
  return createParamDecorator((_data: unknown, context: ExecutionContext): NestTransaction<unknown> => {
    const http = context.getType() === 'http' ? context.switchToHttp() : undefined;
    const req = http?.getRequest<object>();
    const res = http?.getResponse<PlatformResponse>();
    let used = false;
    return async (work) => {
      if (typeof work !== 'function') throw new TypeError(`Expected the transaction's work to be a function, got ${typeof work}`);
      if (!req || !res) throw new TypeError('@IdempotentTransaction() runs in HTTP handlers only');
      // Before the layer's own check: once the transaction's response is sent, the layer
      // no longer knows the request.
      if (used) throw new TypeError('@IdempotentTransaction(): the transaction can run once per request');
      if (!hasRequestTransaction(req)) {
        throw new TypeError(
          '@IdempotentTransaction() found no idempotency layer on this request: mark the handler or its controller @Idempotent() ' +
            '(the layer covers POST and PATCH by default) and import IdempotencyModule in the root module',
        );
      }
      used = true;
      let response: HttpResponse;
      try {
        response = await inTransaction(req, async (client) => {
          const value = await work(client);
          if (typeof value !== 'object' || value === null || value.status !== undefined) return value as TransactionResponse;
          // The handler's status as Nest set it before the handler ran (`@HttpCode()`, else by method).
          return { ...value, status: (res.raw ?? (res as unknown as ServerResponse)).statusCode };
        });
      } catch (error) {
        // The layer's own errors (the lease lost, a conflict, the store failed at commit):
        // answered with their status and problem details (through `formatError`), as the
        // layer's other refusals.
        if (!isIdempotencyError(error)) throw error;
        const problem = transactionProblem(error) ?? problemResponse(error);
        const rejection = reject(problem, error);
        setRejectionHeaders(res, problem.headers, rejection.getResponse());
        throw rejection;
      }
      sendWhole(res, response);
      return response;
    };
  }) as () => ParameterDecorator;
}
