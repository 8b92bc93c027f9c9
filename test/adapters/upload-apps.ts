/**
 * Upload apps: every adapter with the upload middleware its users reach for, the layer
 * placed before it or after it, each route written the way that framework's docs write it.
 * Listening on 127.0.0.1, ephemeral port; `layer: false` builds the same app without the
 * idempotency layer (the control a malformed body's answer is compared with).
 *
 *   POST /upload   multipart: 201 { n, fields, files: [{ field, filename, size, sha256 }] }
 *                  from what the handler received (fields as strings, repeated ones as lists)
 *   POST /form     urlencoded: 201 { n, fields }
 *   POST /raw      the raw body: 201 { n, size, sha256 } (the handler reads the bytes itself)
 *
 * Another adapter joins the upload suite (test/adapters/uploads.test.ts) by adding its
 * configurations to UPLOAD_APPS (the NestJS adapter: `nestjs` over Express with multer
 * and over Fastify with @fastify/multipart).
 */
import { createHash, randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import formbody from '@fastify/formbody';
import fastifyMultipart from '@fastify/multipart';
import koaMulter from '@koa/multer';
import Router from '@koa/router';
import { bodyParser } from '@koa/bodyparser';
import { createAdaptorServer } from '@hono/node-server';
import express5 from 'express';
import express4 from 'express4';
import Fastify from 'fastify';
import { Hono, type Context as HonoContext } from 'hono';
import Koa3 from 'koa';
import Koa2 from 'koa2';
import { koaBody } from 'koa-body';
import multer from 'multer';
import { idempotency as expressIdempotency } from '../../adapters/express.js';
import { idempotency as fastifyIdempotency } from '../../adapters/fastify.js';
import { withIdempotency as withFetchIdempotency } from '../../adapters/fetch.js';
import { idempotency as honoIdempotency } from '../../adapters/hono/index.js';
import { idempotency as koaIdempotency } from '../../adapters/koa/index.js';
import { withIdempotency } from '../../adapters/node.js';
import type { IdempotencyOptions } from '../../src/http.js';
import { Calls, readAll } from './apps.js';
import { fetchServer } from './fetch-server.js';

export interface UploadAppOptions extends IdempotencyOptions<unknown> {
  /** `false`: the same app without the idempotency layer. @default true */
  layer?: boolean;
}

export interface RunningUploadApp {
  url: string;
  calls: Calls;
  close(): Promise<void>;
}

export interface UploadAppConfig {
  /** The adapter it runs on (`express4` is express 4). */
  adapter: string;
  /** Where the layer sits relative to the upload middleware. */
  layer: 'before' | 'after';
  /** What parses the upload, in words. */
  middleware: string;
  /** The middleware keeps the client's filenames (keyValues mode does not). */
  filenames: boolean;
  /** `/raw` receives the raw body (the upload middleware does not run on it). */
  raw: boolean;
  /** The middleware keeps files where the layer cannot read them: a covered upload is refused (500). */
  refuses?: boolean;
  start(options: UploadAppOptions): Promise<RunningUploadApp>;
}

export interface ReceivedFile {
  field: string;
  filename: string | null;
  size: number;
  sha256: string;
}

export const sha256Hex = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');

/** What every /upload answers: the fields and files the handler got, in one order for all frameworks. */
export function received(n: number, fields: Record<string, unknown>, files: ReceivedFile[]) {
  const plain: Record<string, unknown> = {};
  for (const key of Object.keys(fields).sort()) plain[key] = fields[key];
  return { n, fields: plain, files: [...files].sort((a, b) => (a.field + (a.filename ?? '')).localeCompare(b.field + (b.filename ?? ''))) };
}

const file = (field: string, filename: string | null, bytes: Uint8Array): ReceivedFile => ({ field, filename, size: bytes.byteLength, sha256: sha256Hex(bytes) });

/** multer's file objects (memory: `buffer`; disk: `path`) as the routes answer them. */
function multerFiles(files: unknown): ReceivedFile[] {
  const list = (Array.isArray(files) ? files : Object.values((files ?? {}) as Record<string, unknown[]>).flat()) as Express.Multer.File[];
  return list.map((f) => file(f.fieldname, f.originalname, f.buffer ?? readFileSync(f.path)));
}

/** A plain object of a parser's fields (multer's have no prototype). */
const fieldsOf = (body: unknown): Record<string, unknown> => ({ ...((body ?? {}) as Record<string, unknown>) });

async function listen(server: http.Server, cleanup?: () => Promise<void> | void): Promise<{ url: string; close(): Promise<void> }> {
  if (!server.listening) await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
      await cleanup?.();
    },
  };
}

/** The options as each adapter takes them, in the one key space these apps have. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const withScope = (options: UploadAppOptions): any => {
  const { layer: _layer, ...rest } = options;
  return { scope: 'shared', ...rest };
};

// ---------------------------------------------------------------- Node http (multer on the plain request)

async function nodeApp(options: UploadAppOptions): Promise<RunningUploadApp> {
  const calls = new Calls();
  const upload = multer({ storage: multer.memoryStorage() }).any();
  const json = (res: http.ServerResponse, status: number, body: unknown) => res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  const handler = async (req: http.IncomingMessage & { body?: unknown; files?: unknown }, res: http.ServerResponse) => {
    if (req.url === '/raw') {
      const bytes = await readAll(req);
      return json(res, 201, { n: calls.hit('raw'), size: bytes.length, sha256: sha256Hex(bytes) });
    }
    if (req.url === '/form') return json(res, 201, { n: calls.hit('form'), fields: req.body ?? Object.fromEntries(new URLSearchParams((await readAll(req)).toString())) });
    // The adapter left the upload readable: multer reads the stream and sets its own req.body.
    await new Promise<void>((resolve, reject) => upload(req as never, res as never, (error?: unknown) => (error ? reject(error) : resolve())));
    json(res, 201, received(calls.hit('upload'), fieldsOf(req.body), multerFiles(req.files)));
  };
  const onError = (error: unknown, res: http.ServerResponse) => {
    if (!res.headersSent) json(res, 400, { error: String(error) });
  };
  const wrapped = options.layer === false ? undefined : withIdempotency(handler, { ...withScope(options), onError: (error, _req, res) => onError(error, res) });
  const server = http.createServer((req, res) => {
    const run = wrapped ? wrapped(req, res) : handler(req, res);
    Promise.resolve(run).catch((error) => onError(error, res));
  });
  return { calls, ...(await listen(server)) };
}

// ---------------------------------------------------------------- Express 5 and 4 with multer

type MulterStorage = 'memory' | 'disk' | 'elsewhere';

function multerFor(storage: MulterStorage, dir: string): multer.Multer {
  if (storage === 'memory') return multer({ storage: multer.memoryStorage() });
  if (storage === 'disk') return multer({ dest: dir });
  // A storage engine that sends files elsewhere (as multer-s3 does) and keeps neither a buffer nor a path.
  const elsewhere: multer.StorageEngine = {
    _handleFile(_req, upload, callback) {
      const hash = createHash('sha256');
      let size = 0;
      upload.stream.on('data', (chunk: Buffer) => {
        hash.update(chunk);
        size += chunk.length;
      });
      upload.stream.on('end', () => callback(null, { size, location: `memory://${hash.digest('hex')}` } as Partial<Express.Multer.File>));
    },
    _removeFile(_req, _upload, callback) {
      callback(null);
    },
  };
  return multer({ storage: elsewhere });
}

async function expressApp(express: typeof express5, layer: 'before' | 'after', storage: MulterStorage, options: UploadAppOptions): Promise<RunningUploadApp> {
  const calls = new Calls();
  const dir = mkdtempSync(join(tmpdir(), 'idem-uploads-'));
  const upload = multerFor(storage, dir);
  const app = express();
  app.set('env', 'test');
  const protect = options.layer === false ? [] : [expressIdempotency(withScope(options))];
  const answerUpload: express5.RequestHandler = (req, res) => {
    const files = storage === 'elsewhere' ? [] : multerFiles(req.files);
    res.status(201).json(received(calls.hit('upload'), fieldsOf(req.body), files));
  };
  if (layer === 'before') app.post('/upload', ...protect, upload.any(), answerUpload);
  else app.post('/upload', upload.any(), ...protect, answerUpload);
  app.post('/form', ...protect, express.urlencoded({ extended: false }), (req, res) => {
    res.status(201).json({ n: calls.hit('form'), fields: fieldsOf(req.body) });
  });
  app.post('/raw', ...protect, (req, res, next) => {
    readAll(req).then((bytes) => res.status(201).json({ n: calls.hit('raw'), size: bytes.length, sha256: sha256Hex(bytes) }), next);
  });
  return { calls, ...(await listen(http.createServer(app), () => rmSync(dir, { recursive: true, force: true }))) };
}

// ---------------------------------------------------------------- Koa 3 and 2 with @koa/multer or koa-body

async function koaApp(KoaClass: typeof Koa3, layer: 'before' | 'after', parser: 'koa-multer' | 'koa-body', options: UploadAppOptions): Promise<RunningUploadApp> {
  const calls = new Calls();
  const dir = mkdtempSync(join(tmpdir(), 'idem-uploads-'));
  const app = new KoaClass();
  app.silent = true;
  const router = new Router();
  const protect = options.layer === false ? [] : [koaIdempotency(withScope(options))];
  type Files = Record<string, { filepath: string; originalFilename: string | null } | { filepath: string; originalFilename: string | null }[]>;
  const upload =
    parser === 'koa-multer'
      ? koaMulter({ storage: koaMulter.memoryStorage() }).any()
      : koaBody({ multipart: true, formidable: { uploadDir: dir, maxFileSize: 64 * 1024 * 1024 } });
  const answer = (ctx: Koa3.Context) => {
    const request = ctx.request as Koa3.Request & { body?: unknown; files?: unknown };
    const files =
      parser === 'koa-multer'
        ? multerFiles(request.files)
        : Object.entries((request.files ?? {}) as unknown as Files).flatMap(([field, value]) =>
            (Array.isArray(value) ? value : [value]).map((f) => file(field, f.originalFilename, readFileSync(f.filepath))),
          );
    ctx.status = 201;
    ctx.body = received(calls.hit('upload'), fieldsOf(request.body), files);
  };
  if (layer === 'before') router.post('/upload', ...protect, upload, answer);
  else router.post('/upload', upload, ...protect, answer);
  router.post('/form', ...protect, bodyParser(), (ctx) => {
    ctx.status = 201;
    ctx.body = { n: calls.hit('form'), fields: fieldsOf((ctx.request as { body?: unknown }).body) };
  });
  router.post('/raw', ...protect, async (ctx) => {
    const bytes = await readAll(ctx.req);
    ctx.status = 201;
    ctx.body = { n: calls.hit('raw'), size: bytes.length, sha256: sha256Hex(bytes) };
  });
  app.use(async (ctx, next) => {
    try {
      await next();
    } catch (error) {
      ctx.status = (error as { status?: number }).status ?? 500;
      ctx.body = { error: String(error) };
    }
  });
  app.use(router.routes());
  return { calls, ...(await listen(http.createServer(app.callback()), () => rmSync(dir, { recursive: true, force: true }))) };
}

// ---------------------------------------------------------------- Fastify with @fastify/multipart

async function fastifyApp(mode: 'parts' | 'attach' | 'keyValues', options: UploadAppOptions): Promise<RunningUploadApp> {
  const calls = new Calls();
  const app = Fastify({ logger: false, bodyLimit: 64 * 1024 * 1024 });
  if (options.layer !== false) await app.register(fastifyIdempotency, withScope(options));
  await app.register(formbody);
  await app.register(fastifyMultipart, {
    limits: { fileSize: 64 * 1024 * 1024 },
    ...(mode === 'parts' ? {} : { attachFieldsToBody: mode === 'attach' ? true : 'keyValues' }),
  });
  app.post('/upload', async (request, reply) => {
    const fields: Record<string, unknown> = {};
    const files: ReceivedFile[] = [];
    const addField = (name: string, value: unknown) => {
      fields[name] = name in fields ? [fields[name], value].flat() : value;
    };
    if (mode === 'parts') {
      for await (const part of request.parts()) {
        if (part.type === 'file') files.push(file(part.fieldname, part.filename, await part.toBuffer()));
        else addField(part.fieldname, part.value);
      }
    } else {
      for (const [name, entry] of Object.entries((request.body ?? {}) as Record<string, unknown>)) {
        for (const item of Array.isArray(entry) ? entry : [entry]) {
          const part = item as { type?: string; value?: unknown; filename?: string; toBuffer?: () => Promise<Buffer> };
          if (Buffer.isBuffer(item)) files.push(file(name, null, item));
          else if (part.type === 'file') files.push(file(name, part.filename ?? null, await part.toBuffer!()));
          else addField(name, part.type === 'field' ? part.value : item);
        }
      }
    }
    return reply.code(201).send(received(calls.hit('upload'), fields, files));
  });
  app.post('/form', async (request, reply) => reply.code(201).send({ n: calls.hit('form'), fields: fieldsOf(request.body) }));
  app.post('/raw', async (request, reply) => {
    const bytes = await readAll(request.raw);
    return reply.code(201).send({ n: calls.hit('raw'), size: bytes.length, sha256: sha256Hex(bytes) });
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.server.address() as AddressInfo;
  return { calls, url: `http://127.0.0.1:${port}`, close: () => app.close() };
}

// ---------------------------------------------------------------- Hono (parseBody) and fetch (formData)

async function formDataAnswer(n: number, form: FormData | Record<string, unknown>): Promise<ReturnType<typeof received>> {
  const fields: Record<string, unknown> = {};
  const files: ReceivedFile[] = [];
  const entries = form instanceof FormData ? [...form] : Object.entries(form).flatMap(([k, v]) => (Array.isArray(v) ? v.map((x) => [k, x] as const) : [[k, v] as const]));
  for (const [name, value] of entries) {
    if (typeof value === 'string') fields[name] = name in fields ? [fields[name], value].flat() : value;
    else files.push(file(name, (value as File).name, new Uint8Array(await (value as File).arrayBuffer())));
  }
  return received(n, fields, files);
}

async function honoApp(layer: 'before' | 'after', read: 'parseBody' | 'formData', options: UploadAppOptions): Promise<RunningUploadApp> {
  const calls = new Calls();
  const app = new Hono();
  const protect = options.layer === false ? undefined : honoIdempotency(withScope(options));
  // Read first by a middleware (a validator does the same): the layer then finds the body in Hono's cache.
  if (layer === 'after') {
    app.use('/upload', async (c, next) => {
      await (read === 'parseBody' ? c.req.parseBody({ all: true }) : c.req.formData());
      await next();
    });
  }
  if (protect) app.use(protect);
  const form = (c: HonoContext) => (read === 'parseBody' ? c.req.parseBody({ all: true }) : c.req.formData());
  app.post('/upload', async (c) => c.json(await formDataAnswer(calls.hit('upload'), await form(c)), 201));
  app.post('/form', async (c) => c.json({ n: calls.hit('form'), fields: await c.req.parseBody({ all: true }) }, 201));
  app.post('/raw', async (c) => {
    const bytes = new Uint8Array(await c.req.arrayBuffer());
    return c.json({ n: calls.hit('raw'), size: bytes.byteLength, sha256: sha256Hex(bytes) }, 201);
  });
  app.onError((error, c) => c.json({ error: String(error) }, 400));
  return { calls, ...(await listen(createAdaptorServer({ fetch: app.fetch }) as http.Server)) };
}

async function fetchApp(options: UploadAppOptions): Promise<RunningUploadApp> {
  const calls = new Calls();
  const routes = async (request: Request): Promise<Response> => {
    const path = new URL(request.url).pathname;
    if (path === '/raw') {
      const bytes = new Uint8Array(await request.arrayBuffer());
      return Response.json({ n: calls.hit('raw'), size: bytes.byteLength, sha256: sha256Hex(bytes) }, { status: 201 });
    }
    if (path === '/form') return Response.json({ n: calls.hit('form'), fields: Object.fromEntries(await request.formData()) }, { status: 201 });
    return Response.json(await formDataAnswer(calls.hit('upload'), await request.formData()), { status: 201 });
  };
  const handler = options.layer === false ? routes : withFetchIdempotency(routes, withScope(options));
  const server = fetchServer(async (request) => {
    try {
      return await handler(request);
    } catch (error) {
      return Response.json({ error: String(error) }, { status: 400 });
    }
  });
  return { calls, ...(await listen(server)) };
}

// ---------------------------------------------------------------- the registry

const config = (adapter: string, layer: 'before' | 'after', middleware: string, start: UploadAppConfig['start'], more: Partial<UploadAppConfig> = {}): [string, UploadAppConfig] => [
  `${adapter}, layer ${layer} ${middleware}`,
  { adapter, layer, middleware, filenames: true, raw: true, start, ...more },
];

/** Every adapter's upload configurations, by name. Another adapter adds its own here. */
export const UPLOAD_APPS: Record<string, UploadAppConfig> = Object.fromEntries([
  config('node', 'before', 'multer (memory) in the handler', nodeApp),
  config('express', 'before', 'multer (memory)', (o) => expressApp(express5, 'before', 'memory', o)),
  config('express', 'after', 'multer (memory)', (o) => expressApp(express5, 'after', 'memory', o)),
  config('express', 'after', 'multer (disk)', (o) => expressApp(express5, 'after', 'disk', o)),
  config('express', 'after', 'multer (a storage that keeps no buffer or path)', (o) => expressApp(express5, 'after', 'elsewhere', o), { refuses: true }),
  config('express4', 'before', 'multer (disk)', (o) => expressApp(express4, 'before', 'disk', o)),
  config('express4', 'after', 'multer (memory)', (o) => expressApp(express4, 'after', 'memory', o)),
  config('koa', 'before', '@koa/multer', (o) => koaApp(Koa3, 'before', 'koa-multer', o)),
  config('koa', 'after', '@koa/multer', (o) => koaApp(Koa3, 'after', 'koa-multer', o)),
  config('koa', 'after', 'koa-body (formidable, disk)', (o) => koaApp(Koa3, 'after', 'koa-body', o)),
  config('koa2', 'before', 'koa-body (formidable, disk)', (o) => koaApp(Koa2 as typeof Koa3, 'before', 'koa-body', o)),
  config('koa2', 'after', '@koa/multer', (o) => koaApp(Koa2 as typeof Koa3, 'after', 'koa-multer', o)),
  config('fastify', 'before', '@fastify/multipart (request.parts() in the handler)', (o) => fastifyApp('parts', o)),
  config('fastify', 'after', '@fastify/multipart (attachFieldsToBody)', (o) => fastifyApp('attach', o), { raw: false }),
  config('fastify', 'after', "@fastify/multipart (attachFieldsToBody: 'keyValues')", (o) => fastifyApp('keyValues', o), { raw: false, filenames: false }),
  config('hono', 'before', 'c.req.parseBody()', (o) => honoApp('before', 'parseBody', o)),
  config('hono', 'after', 'c.req.parseBody() in a middleware', (o) => honoApp('after', 'parseBody', o)),
  config('hono', 'after', 'c.req.formData() in a middleware', (o) => honoApp('after', 'formData', o)),
  config('fetch', 'before', 'request.formData() in the handler', fetchApp),
]);

export const uniqueKey = () => `up-${randomUUID()}`;
