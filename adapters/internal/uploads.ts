/**
 * What an upload middleware that ran before the layer left on the request, for the
 * fingerprint: its text fields as it parsed them, and each file it kept, hashed from where
 * it keeps it (a buffer in memory, or a file on disk). Shared by the adapters on Node's
 * `http` (Express with multer, Koa with @koa/multer or koa-body, Fastify with
 * @fastify/multipart, and NestJS on either). Internal: not a package sub-path.
 *
 * A file it kept nowhere this can read (a storage engine that streams uploads elsewhere)
 * cannot be fingerprinted: that is refused with a TypeError that says to put the layer
 * before the middleware, never passed over (a different file with the same key would
 * then replay the first response).
 * @module
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { UploadBody, type UploadedFile } from '../../src/fingerprint.js';

/** A file as multer (`buffer` or `path`), formidable (`filepath`) or @fastify/multipart (`toBuffer()`, its documented method) describes it. */
interface FileLike {
  fieldname?: unknown;
  originalname?: unknown;
  originalFilename?: unknown;
  filename?: unknown;
  mimetype?: unknown;
  buffer?: unknown;
  toBuffer?: unknown;
  path?: unknown;
  filepath?: unknown;
}

const text = (value: unknown): string | null => (typeof value === 'string' ? value : null);

function hashBytes(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('base64url');
}

function hashFile(path: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const hash = createHash('sha256');
    createReadStream(path)
      .on('data', (chunk) => hash.update(chunk))
      .on('error', reject)
      .on('end', () => resolve(hash.digest('base64url')));
  });
}

/** The files of `req.file` / `req.files` in any of their shapes: one file, a list, or lists by field name. */
function listFiles(files: unknown): { file: FileLike; field: string | undefined }[] {
  if (files === undefined || files === null) return [];
  if (Array.isArray(files)) return files.flatMap((f) => listFiles(f));
  if (typeof files !== 'object') return [];
  const one = files as FileLike;
  if ('fieldname' in one || 'originalname' in one || 'originalFilename' in one || 'filepath' in one || typeof one.toBuffer === 'function' || 'buffer' in one) {
    return [{ file: one, field: undefined }];
  }
  // Lists by field name (multer's `.fields()`, formidable), in sorted field order.
  return Object.keys(files)
    .sort()
    .flatMap((field) => listFiles((files as Record<string, unknown>)[field]).map(({ file }) => ({ file, field })));
}

/** The name an adapter gives in the refusal, and where its user's middleware leaves the files. */
export interface UploadSource {
  adapter: string;
  /** Where the files were found, in the user's words (`req.file`, `ctx.request.files`). */
  where: string;
  /** What to write instead, e.g. "app.use(idempotency(...)) before multer". */
  fix: string;
}

async function hashed(file: FileLike, field: string | undefined, source: UploadSource): Promise<UploadedFile> {
  const name = text(file.fieldname) ?? field ?? '';
  const found = (sha256: string): UploadedFile => ({
    name,
    filename: text(file.originalname) ?? text(file.originalFilename) ?? text(file.filename),
    type: text(file.mimetype),
    sha256,
  });
  // @fastify/multipart's `toBuffer()` answers with the bytes it kept (attachFieldsToBody read them all).
  const bytes = file.buffer ?? (typeof file.toBuffer === 'function' ? await (file.toBuffer as () => Promise<unknown>).call(file) : undefined);
  if (bytes instanceof Uint8Array) return found(hashBytes(bytes));
  const path = text(file.filepath) ?? text(file.path);
  if (path !== null) return found(await hashFile(path));
  throw new TypeError(
    `${source.adapter}: the uploaded file in field ${JSON.stringify(name)} (${source.where}) has no content this layer can read ` +
      `(no buffer and no path on disk: its storage sent it elsewhere), so it cannot be part of the request's fingerprint, and a ` +
      `different file with the same key would replay the first response. ${source.fix}; the layer then reads the upload itself ` +
      `and hands it on unchanged. Or keep uploads in memory or on disk (multer's memoryStorage or diskStorage).`,
  );
}

/**
 * The fingerprint's view of a multipart body an upload middleware parsed: `fields` as it
 * left them, and every file of `files` (one or many, any shape), hashed.
 */
export async function uploadBody(fields: unknown, files: unknown, source: UploadSource): Promise<UploadBody> {
  const list = listFiles(files);
  if ((fields === undefined || fields === null) && list.length === 0) {
    throw new TypeError(
      `${source.adapter}: the multipart body was read before the idempotency layer by something that left neither its fields nor its files ` +
        `where the layer looks (${source.where}), so the request cannot be fingerprinted. ${source.fix}.`,
    );
  }
  return new UploadBody(fields, await Promise.all(list.map(({ file, field }) => hashed(file, field, source))));
}

/** Hash a file's bytes, as `uploadBody` does (for adapters that find files of their own shape). */
export { hashBytes };
