/**
 * The layer's contract in OpenAPI (3.0 and 3.1): the `Idempotency-Key` header with the
 * layer's own limits, the `Idempotent-Replayed` and `Retry-After` headers, the problem
 * document of its errors, and one response per error it can give (each with the body the
 * layer really sends as its example). `addIdempotencyContract` adds them to every
 * operation a layer covers in an existing document; `documentOperation` to one operation.
 * What is written follows the layer's options (`required`, `methods`, `maxKeyLength`,
 * `maxBodyBytes`, `onStoreError`, `scope`, `encryption`, `formatError`), so the document
 * never promises what the server does not do. See docs/openapi.md.
 * @module
 * @example
 * import { addIdempotencyContract } from 'idempotency-kit/openapi';
 *
 * // A document from swagger-jsdoc, tsoa or a file, and the options of the layer in front of it:
 * const documented = addIdempotencyContract(document, { maxKeyLength: 128, required: true });
 */
import {
  BodyTooLargeError,
  RequestInProgressError,
  IdempotencyKeyError,
  KeyMissingError,
  KeyReusedError,
  RecordUnreadableError,
  ResponseNotReplayableError,
  ScopeRequiredError,
  StoreUnavailableError,
  type IdempotencyError,
  type IdempotencyErrorCode,
  type KeyInvalidReason,
} from './errors.js';
import { Idempotency, type IdempotencyOptions } from './http.js';
import { keyHeaderPattern, parseIdempotencyKey } from './key.js';
import { problemResponse } from './problem.js';

/** The options of a layer that its contract depends on (the rest do not change what a client sees). */
export type ContractOptions = Pick<
  IdempotencyOptions<never>,
  'methods' | 'required' | 'header' | 'maxKeyLength' | 'maxBodyBytes' | 'scope' | 'formatError' | 'onStoreError' | 'encryption'
>;

/** What the contract reads of a layer (an `Idempotency`, whatever its request type). */
export interface ContractLayer {
  readonly methods: ReadonlySet<string>;
  readonly required: boolean;
  readonly header: string;
  readonly maxKeyLength: number;
  readonly maxBodyBytes: number;
  readonly options: { readonly scope?: unknown; readonly formatError?: unknown; readonly onStoreError?: 'fail' | 'continue'; readonly encryption?: unknown };
}

/** A layer (what an adapter made), or the options a layer is made with. */
export type ContractSource = ContractLayer | ContractOptions;

/** An OpenAPI object, loosely typed: the description works on any document of version 3.0 or 3.1. */
export type OpenApiObject = Record<string, unknown>;

/** An OpenAPI document: `openapi` (3.0.x or 3.1.x), `paths`, `components`, and the rest kept as they are. */
export interface OpenApiDocument {
  openapi: string;
  paths?: Record<string, Record<string, unknown> | undefined>;
  components?: Record<string, Record<string, unknown> | undefined>;
  [field: string]: unknown;
}

/** An operation of a document, as `select` sees it. */
export interface OperationRef {
  /** The path as the document writes it (`/orders/{id}`). */
  path: string;
  /** Lower case, as the document writes it (`post`). */
  method: string;
  operation: OpenApiObject;
}

export interface AddContractOptions {
  /**
   * Which of the operations the layer covers by method carry the contract: return `false`
   * for a route the layer does not protect (one mounted before the layer, or with it
   * turned off).
   * @default every operation whose method the layer covers
   */
  select?: (operation: OperationRef) => boolean;
}

/** The contract of one layer: its components, and what a covered operation gets. */
export interface IdempotencyContract {
  /** `'3.0'` or `'3.1'`. */
  readonly version: '3.0' | '3.1';
  /** The methods the layer covers, upper case. */
  readonly methods: readonly string[];
  /** The reusable parts, by component kind then name (`parameters.IdempotencyKey`, ...). */
  readonly components: {
    parameters: Record<string, OpenApiObject>;
    headers: Record<string, OpenApiObject>;
    schemas: Record<string, OpenApiObject>;
    responses: Record<string, OpenApiObject>;
  };
  /** The `$ref` of the header parameter a covered operation lists. */
  readonly parameter: { $ref: string };
  /** The responses a covered operation gets, by status, as `$ref`s to `components.responses`. */
  readonly responses: Record<string, { $ref: string }>;
  /** The header every other response of a covered operation gets (a replay carries it), as a `$ref`. */
  readonly replayedHeader: { name: string; ref: { $ref: string } };
}

const CODES: readonly IdempotencyErrorCode[] = [
  'key-missing',
  'key-invalid',
  'key-reused',
  'request-in-progress',
  'response-not-replayable',
  'body-too-large',
  'store-unavailable',
  'scope-required',
  'record-unreadable',
];
const REASONS: readonly KeyInvalidReason[] = ['empty', 'too-long', 'non-printable', 'non-ascii', 'malformed-quoting', 'several-values'];

const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

function optionsOf(source: ContractSource): ContractOptions {
  // A layer of this copy of the package, or of another one (its ESM and CommonJS builds).
  if (source instanceof Idempotency || (typeof source === 'object' && source !== null && (source as { methods?: unknown }).methods instanceof Set)) {
    const layer = source as ContractLayer;
    // The layer's own checked values where it keeps them; the rest as given.
    return {
      ...(layer.options as ContractOptions),
      methods: [...layer.methods],
      required: layer.required,
      header: layer.header,
      maxKeyLength: layer.maxKeyLength,
      maxBodyBytes: layer.maxBodyBytes,
    };
  }
  if (typeof source !== 'object' || source === null) {
    throw new TypeError(`Expected a layer (\`createIdempotency(...)\`) or its options, got ${String(source)}`);
  }
  return source as ContractOptions;
}

function versionOf(openapi: unknown): '3.0' | '3.1' {
  if (typeof openapi === 'string' && /^3\.0\.\d+$/.test(openapi)) return '3.0';
  if (typeof openapi === 'string' && /^3\.1\.\d+$/.test(openapi)) return '3.1';
  throw new TypeError(`Expected \`openapi\` to be an OpenAPI version 3.0.x or 3.1.x, got ${JSON.stringify(openapi)}`);
}

/** The body the layer sends for `error`, parsed: the example of its response. */
function bodyOf(error: IdempotencyError, header: string): unknown {
  const { body } = problemResponse(error, header);
  return JSON.parse(Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8'));
}

interface ErrorDoc {
  status: number;
  code: IdempotencyErrorCode;
  error: IdempotencyError;
  /** What it means for the client, and what to do. */
  summary: string;
}

/**
 * The contract of a layer (or of its options) in OpenAPI `version` (`'3.0'` or `'3.1'`,
 * or a document's full `openapi` value).
 */
export function idempotencyContract(source: ContractSource, version: '3.0' | '3.1' | string = '3.1'): IdempotencyContract {
  const v = version === '3.0' || version === '3.1' ? version : versionOf(version);
  const options = optionsOf(source);
  const header = options.header ?? 'Idempotency-Key';
  const required = options.required ?? true;
  const maxKeyLength = options.maxKeyLength ?? 255;
  const maxBodyBytes = options.maxBodyBytes ?? 1024 * 1024;
  const methods = (options.methods ?? ['POST', 'PATCH']).map((m) => m.toUpperCase());
  const failsClosed = (options.onStoreError ?? 'fail') === 'fail';
  const scoped = options.scope !== 'shared';
  const encrypted = options.encryption !== undefined;
  const formatted = options.formatError !== undefined;

  const tooLong = parseIdempotencyKey('k'.repeat(maxKeyLength + 1), maxKeyLength);
  const errors: ErrorDoc[] = [
    ...(required
      ? [{ status: 400, code: 'key-missing' as const, error: new KeyMissingError(''), summary: `The request has no ${header}. Send one (a new random value per operation) and retry.` }]
      : []),
    {
      status: 400,
      code: 'key-invalid',
      error: (tooLong as { error: IdempotencyKeyError }).error,
      summary: `The ${header} is not one the server accepts (\`reason\` says why). Fix the key; retrying it unchanged fails the same way.`,
    },
    {
      status: 409,
      code: 'request-in-progress',
      error: new RequestInProgressError(),
      summary: 'A request with this key is still running. Retry after `Retry-After` seconds with the same key and the same request: it then gets the first request\'s response.',
    },
    {
      status: 409,
      code: 'response-not-replayable',
      error: new ResponseNotReplayableError(),
      summary: 'The request with this key ran, but its response could not be stored to replay. Do not retry with this key: the operation happened; read its result another way.',
    },
    {
      status: 413,
      code: 'body-too-large',
      error: new BodyTooLargeError(maxBodyBytes),
      summary: `The body is over ${maxBodyBytes} bytes, the most the server reads to compare requests. Nothing ran.`,
    },
    {
      status: 422,
      code: 'key-reused',
      error: new KeyReusedError(),
      summary: 'This key was used with a different request (method, path, query or body). Nothing ran. A new operation needs a new key.',
    },
    ...(failsClosed
      ? [
          {
            status: 503,
            code: 'store-unavailable' as const,
            error: new StoreUnavailableError(new Error('unreachable')),
            summary: 'The server could not check the key, so nothing ran. Retry after `Retry-After` seconds with the same key.',
          },
        ]
      : []),
    ...(scoped
      ? [
          {
            status: 500,
            code: 'scope-required' as const,
            error: new ScopeRequiredError('No authenticated user on this request, so its key cannot be kept apart from other clients\' keys.'),
            summary: 'The server is misconfigured (no user to keep this key apart from other clients\' keys). Nothing ran.',
          },
        ]
      : []),
    ...(encrypted
      ? [
          {
            status: 500,
            code: 'record-unreadable' as const,
            error: new RecordUnreadableError('k1', 'key-missing'),
            summary: 'The stored result of this key cannot be opened by the server. Nothing ran again; do not retry with this key.',
          },
        ]
      : []),
  ];

  const schemaRef = { $ref: '#/components/schemas/IdempotencyProblem' };
  const headerRef = (name: string) => ({ $ref: `#/components/headers/${name}` });
  const problemSchema: OpenApiObject = {
    type: 'object',
    description: 'An RFC 9457 problem document, as the idempotency layer writes it.',
    required: ['type', 'title', 'status', 'detail', 'code', 'retryable'],
    properties: {
      type: { type: 'string', description: '`urn:idempotency-kit:problem:<code>`.', example: 'urn:idempotency-kit:problem:request-in-progress' },
      title: { type: 'string' },
      status: { type: 'integer', minimum: 400, maximum: 599 },
      detail: { type: 'string' },
      code: { type: 'string', enum: [...CODES], description: 'What went wrong; switch on this.' },
      retryable: { type: 'boolean', description: 'Whether the same request with the same key can succeed later (after `Retry-After`).' },
      reason: { type: 'string', enum: [...REASONS], description: 'Why the key was refused (`key-invalid` only).' },
    },
  };
  const content = (docs: ErrorDoc[]): OpenApiObject => {
    const examples = Object.fromEntries(docs.map((d) => [d.code, { summary: d.summary, value: bodyOf(d.error, header) }]));
    if (formatted) {
      // formatError reshapes the body into the API's own error envelope: its shape is the API's, `code` is kept.
      return { 'application/json': { schema: { description: 'The API\'s own error body (`formatError`); it carries the `code`.' } } };
    }
    return { 'application/problem+json': { schema: schemaRef, examples } };
  };

  const byStatus = new Map<number, ErrorDoc[]>();
  for (const doc of errors) byStatus.set(doc.status, [...(byStatus.get(doc.status) ?? []), doc]);
  const names: Record<number, string> = {
    400: 'IdempotencyKeyRefused',
    409: 'IdempotencyConflict',
    413: 'IdempotencyBodyTooLarge',
    422: 'IdempotencyKeyReused',
    500: 'IdempotencyServerError',
    503: 'IdempotencyStoreUnavailable',
  };
  const responses: Record<string, OpenApiObject> = {};
  const refs: Record<string, { $ref: string }> = {};
  for (const [status, docs] of [...byStatus].sort(([a], [b]) => a - b)) {
    const retry = docs.some((d) => d.error instanceof RequestInProgressError || d.error instanceof StoreUnavailableError);
    const response: OpenApiObject = {
      description: docs.map((d) => `\`${d.code}\`: ${d.summary}`).join('\n\n'),
      headers: {
        'Cache-Control': { description: 'Always `no-store`: an error is never cached.', schema: { type: 'string', enum: ['no-store'] } },
        ...(retry ? { 'Retry-After': headerRef('IdempotencyRetryAfter') } : {}),
      },
      content: content(docs),
    };
    responses[names[status]!] = response;
    refs[String(status)] = { $ref: `#/components/responses/${names[status]}` };
  }

  const example = '8e03978e-40d5-43e8-bc93-6894a57f9324';
  const parameter: OpenApiObject = {
    name: header,
    in: 'header',
    required,
    description:
      `A value unique to this operation, the same on every retry of it: the server runs the operation once per key and answers a repeat ` +
      `with the stored response (marked \`Idempotent-Replayed: true\`). 1 to ${maxKeyLength} printable ASCII characters, ` +
      `sent as they are (\`${example}\`) or as an RFC 9651 quoted string (\`"${example}"\`, the same key; parameters after it are ignored). ` +
      `A bare value is the key exactly as sent: \`;\` is part of it.` +
      (required ? '' : ' Optional: without it the request runs unprotected.'),
    schema: { type: 'string', minLength: 1, pattern: keyHeaderPattern(maxKeyLength), example },
  };

  return {
    version: v,
    methods,
    components: {
      parameters: { IdempotencyKey: parameter },
      headers: {
        IdempotentReplayed: {
          description: 'Present, with the value `true`, on a response replayed from the first request with this key (the operation did not run again).',
          schema: { type: 'string', enum: ['true'] },
        },
        IdempotencyRetryAfter: {
          description: 'Seconds to wait before retrying with the same key.',
          schema: { type: 'integer', minimum: 0 },
        },
      },
      schemas: formatted ? {} : { IdempotencyProblem: problemSchema },
      responses,
    },
    parameter: { $ref: '#/components/parameters/IdempotencyKey' },
    responses: refs,
    replayedHeader: { name: 'Idempotent-Replayed', ref: headerRef('IdempotentReplayed') },
  };
}

/** What `documentOperation` adds to a document's components, and where it put each part (a name may be taken). */
class ComponentNames {
  readonly #renamed = new Map<string, string>();

  constructor(private readonly components: Record<string, Record<string, unknown> | undefined>) {}

  /**
   * Put each part of `contract` in `components`, under its own name, or under a numbered one
   * (`IdempotencyKey2`) when the name holds something else (another layer's limits).
   */
  add(contract: IdempotencyContract): void {
    for (const [kind, parts] of Object.entries(contract.components) as [string, Record<string, OpenApiObject>][]) {
      const target = (this.components[kind] ??= {});
      for (const [name, value] of Object.entries(parts)) {
        const text = JSON.stringify(this.#rewrite(value));
        let chosen = name;
        for (let n = 2; target[chosen] !== undefined && JSON.stringify(target[chosen]) !== text; n++) chosen = `${name}${n}`;
        target[chosen] = JSON.parse(text);
        this.#renamed.set(`#/components/${kind}/${name}`, `#/components/${kind}/${chosen}`);
      }
    }
  }

  /** `value` with its `$ref`s to renamed parts pointing at their new names. */
  #rewrite<T>(value: T): T {
    return JSON.parse(JSON.stringify(value), (key, v: unknown) => (key === '$ref' && typeof v === 'string' ? (this.#renamed.get(v) ?? v) : v)) as T;
  }

  ref(ref: { $ref: string }): { $ref: string } {
    return { $ref: this.#renamed.get(ref.$ref) ?? ref.$ref };
  }
}

/**
 * Add the contract to one operation (in place): the header parameter, the layer's error
 * responses (a status the operation documents already keeps its own), and the
 * `Idempotent-Replayed` header on its other responses. `components` is the document's
 * `components` object, which receives the parts the operation refers to.
 */
export function documentOperation(
  operation: OpenApiObject,
  contract: IdempotencyContract,
  components: Record<string, Record<string, unknown> | undefined>,
): OpenApiObject {
  const names = new ComponentNames(components);
  names.add(contract);
  applyContract(operation, contract, names);
  return operation;
}

function applyContract(operation: OpenApiObject, contract: IdempotencyContract, names: ComponentNames): void {
  const parameter = names.ref(contract.parameter);
  const headerName = (contract.components.parameters.IdempotencyKey!.name as string).toLowerCase();
  const parameters = ((operation.parameters as OpenApiObject[] | undefined) ?? []).filter(
    (p) => !(p.in === 'header' && typeof p.name === 'string' && p.name.toLowerCase() === headerName) && !String(p.$ref ?? '').startsWith('#/components/parameters/IdempotencyKey'),
  );
  operation.parameters = [...parameters, parameter];
  const responses = ((operation.responses as Record<string, OpenApiObject> | undefined) ??= {});
  // The operation's own responses: a replay of each carries the replay header.
  for (const [status, response] of Object.entries(responses)) {
    if (typeof response !== 'object' || response === null || '$ref' in response) continue;
    if (status.startsWith('5') && status !== '5XX') continue; // 5xx is never stored, never replayed
    const headers = ((response.headers as Record<string, unknown> | undefined) ??= {});
    headers[contract.replayedHeader.name] = names.ref(contract.replayedHeader.ref);
  }
  for (const [status, ref] of Object.entries(contract.responses)) if (responses[status] === undefined) responses[status] = names.ref(ref);
}

/**
 * A copy of `document` with the contract of `source` (a layer, or its options) on every
 * operation the layer covers: by its methods, and by `select` when given.
 */
export function addIdempotencyContract<T extends OpenApiDocument>(document: T, source: ContractSource, options: AddContractOptions = {}): T {
  if (typeof document !== 'object' || document === null) throw new TypeError(`Expected an OpenAPI document, got ${String(document)}`);
  const { select } = options;
  if (select !== undefined && typeof select !== 'function') throw new TypeError(`Expected \`select\` to be a function, got ${String(select)}`);
  const contract = idempotencyContract(source, document.openapi);
  const copy = structuredClone(document);
  const covered = new Set(contract.methods.map((m) => m.toLowerCase()));
  const names = new ComponentNames((copy.components ??= {}));
  names.add(contract);
  for (const [path, item] of Object.entries(copy.paths ?? {})) {
    if (typeof item !== 'object' || item === null) continue;
    for (const method of HTTP_METHODS) {
      const operation = item[method] as OpenApiObject | undefined;
      if (typeof operation !== 'object' || operation === null || !covered.has(method)) continue;
      if (select && !select({ path, method, operation })) continue;
      applyContract(operation, contract, names);
    }
  }
  return copy;
}

/**
 * The parts a covered operation gets, with no `$ref`: for generators that build their own
 * components (`@nestjs/swagger` decorators, `@hono/zod-openapi` routes).
 */
export interface InlineContract {
  /** The header parameter object. */
  parameter: OpenApiObject & { name: string; required: boolean; description: string; schema: OpenApiObject };
  /** The error responses, by status. */
  responses: Record<string, OpenApiObject & { description: string }>;
  /** The replay header, by name, for the operation's own responses. */
  replayedHeader: { name: string; header: OpenApiObject };
}

/** `contract`'s operation parts with every `$ref` replaced by what it names. */
export function inlineContract(contract: IdempotencyContract): InlineContract {
  const components = contract.components as Record<string, Record<string, unknown>>;
  const resolve = (value: unknown): unknown => {
    if (Array.isArray(value)) return value.map(resolve);
    if (typeof value !== 'object' || value === null) return value;
    const ref = (value as { $ref?: unknown }).$ref;
    if (typeof ref === 'string') {
      const [, , kind, name] = ref.split('/');
      return resolve(components[kind!]![name!]);
    }
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, resolve(v)]));
  };
  return {
    parameter: resolve(contract.parameter) as InlineContract['parameter'],
    responses: resolve(contract.responses) as InlineContract['responses'],
    replayedHeader: { name: contract.replayedHeader.name, header: resolve(contract.replayedHeader.ref) as OpenApiObject },
  };
}
