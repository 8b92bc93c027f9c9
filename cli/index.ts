#!/usr/bin/env node
/**
 * `idempotency-kit`: inspect, purge, count, sweep and re-seal stored records from a shell,
 * on any store URL. Exit codes and output are documented in docs/cli.md.
 * @module
 * @example
 * npx idempotency-kit inspect --store redis://127.0.0.1:6379 --key order-42 --scope tenant-7
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { createStore } from '../drivers/create-store.js';
import { isSealed, openRecord, resolveEncryption, sealedKeyId, type Keyring } from '../src/encryption.js';
import { isIdempotencyError } from '../src/errors.js';
import { storageKey, type KeySpace } from '../src/key.js';
import type { CompletedRecord, IdempotencyRecord, IdempotencyStore, StoreStats } from '../src/store.js';
import { withTimeout } from '../src/timers.js';
import { resealStore, type ResealProgress } from './reseal.js';

/** Exit codes (docs/cli.md#exit-codes). */
const EXIT = {
  ok: 0,
  /** inspect / purge: no live record under that key and scope. */
  notFound: 1,
  /** Bad arguments, unknown command, bad or unsupported store URL. */
  usage: 2,
  /** The store could not be reached, timed out or failed. */
  storeUnavailable: 3,
  /** purge refused: the record is still processing and `--force` was not given. */
  refused: 4,
  /** reseal: some records no listed key opens (left in place). */
  unreadable: 5,
} as const;

const USAGE = `Usage: idempotency-kit <command> [options]

Commands:
  inspect --key K [--scope S] [--entry E]   show the record stored for a key
  purge   --key K [--scope S] [--entry E]   delete that record, so the next retry runs again
                                (a record still processing needs --force)
  stats                         records by state and the earliest expiry
  sweep                         delete expired records now
  reseal [URL] --keys-file F    re-seal every live completed record under the first key
                                (after a key rotation, before the old key is dropped)

Options:
  --store URL        sqlite://…, redis[s]://…, redis+cluster://…, postgres://… (default: $IDEMPOTENCY_STORE)
  --namespace NAME   Redis key prefix or SQL table, if the app sets one
  --entry E          inspect, purge: who wrote the key, each its own key space: http (default),
                     function (idempotent()), webhook:<provider> (webhook:stripe, webhook:github,
                     webhook:standard-webhooks), message:<source> (message:nats, message:bullmq,
                     message:mqtt, message:nest:<pattern>#<method>)
  --json             machine-readable output on stdout
  --progress         progress on stderr even when it is not a terminal
  --timeout MS       longest wait for the store, per call (default 5000)
  --force            purge a record that is still processing
  --keys-file FILE   inspect, reseal: the encryption keys, a JSON array, the first one seals
                     [{ "id": "…", "key": "<base64 or hex>" }] (default: $IDEMPOTENCY_KEYS, the same JSON)
  --batch N          reseal: records per store round (default 100)
  --limit N          reseal: stop after about N records visited, printing where to resume
  --from CURSOR      reseal: resume where a previous run stopped
  --dry-run          reseal: count what would change, write nothing
  --encrypt-plaintext  reseal: seal records stored in clear too (default: leave them)
  -h, --help         this text

Exit codes: 0 ok, 1 not found, 2 usage or bad URL, 3 store unavailable, 4 purge refused,
5 reseal left records no listed key opens.`;

class UsageError extends Error {}
class StoreError extends Error {}

interface Output {
  json: boolean;
  progress: boolean;
  out: (text: string) => void;
  err: (text: string) => void;
}

function parse(argv: string[]) {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      strict: true,
      options: {
        store: { type: 'string' },
        key: { type: 'string' },
        scope: { type: 'string' },
        namespace: { type: 'string' },
        entry: { type: 'string' },
        json: { type: 'boolean', default: false },
        progress: { type: 'boolean', default: false },
        timeout: { type: 'string' },
        force: { type: 'boolean', default: false },
        'keys-file': { type: 'string' },
        batch: { type: 'string' },
        limit: { type: 'string' },
        from: { type: 'string' },
        'dry-run': { type: 'boolean', default: false },
        'encrypt-plaintext': { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
    });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  return parsed;
}

/** Open the store the URL names, refusing what a separate process cannot use. */
function openStore(url: string, namespace: string | undefined, timeoutMs: number): IdempotencyStore {
  if (/^memory:/i.test(url)) {
    throw new UsageError('memory:// lives inside the process that created it: the command line cannot see it. Use the app\'s sqlite://, redis:// or postgres:// URL');
  }
  if (url.startsWith('sqlite://')) {
    // The driver creates a missing file; here a typo must not look like an empty store.
    const file = url.slice('sqlite://'.length);
    if (file !== ':memory:' && file !== '' && !file.startsWith('file:') && !existsSync(path.resolve(file))) {
      throw new UsageError(`no SQLite database at ${path.resolve(file)}`);
    }
    if (file === ':memory:') throw new UsageError('sqlite://:memory: lives inside one process: the command line cannot see it');
  }
  try {
    return createStore(url, { timeoutMs, sweepIntervalMs: 0, ...(namespace !== undefined ? { namespace } : {}) });
  } catch (error) {
    throw new UsageError((error as Error).message.replace(/^idempotency-kit: /, ''));
  }
}

/** Run one store call; any failure is the store's (exit 3), bounded even if a driver hangs. */
async function storeCall<T>(what: string, timeoutMs: number, run: () => Promise<T>): Promise<T> {
  try {
    // The driver bounds each call by timeoutMs; this outer bound only catches a driver that does not.
    return await withTimeout(run(), timeoutMs * 4 + 1000, `${what} did not finish`);
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    throw new StoreError(`${what} failed: ${message.replace(/^idempotency-kit: /, '')}`, { cause: error });
  }
}

/** Throttled progress on stderr: a rewritten line on a terminal, plain lines otherwise. */
function progressReporter(output: Output, label: string): ((done: number) => void) | undefined {
  if (!output.progress) return undefined;
  const tty = process.stderr.isTTY === true;
  let last = 0;
  return (done) => {
    const now = Date.now();
    if (now - last < 200) return;
    last = now;
    output.err(tty ? `\r${label}: ${done}` : `${label}: ${done}\n`);
  };
}

const iso = (ms: number | undefined) => (ms === undefined ? undefined : new Date(ms).toISOString());

function relative(ms: number, now: number): string {
  const diff = ms - now;
  const abs = Math.abs(diff);
  const unit =
    abs < 60_000 ? `${Math.round(abs / 1000)} s` : abs < 3_600_000 ? `${Math.round(abs / 60_000)} min` : abs < 172_800_000 ? `${Math.round(abs / 3_600_000)} h` : `${Math.round(abs / 86_400_000)} d`;
  return diff >= 0 ? `in ${unit}` : `${unit} ago`;
}

const PREVIEW_BYTES = 200;

/** A short, printable look at a stored body: UTF-8 text when it is text, base64 otherwise. */
function bodyPreview(body: Uint8Array): { encoding: 'utf8' | 'base64'; text: string; truncated: boolean } {
  const head = Buffer.from(body.buffer, body.byteOffset, Math.min(body.byteLength, PREVIEW_BYTES));
  const text = head.toString('utf8');
  const truncated = body.byteLength > PREVIEW_BYTES;
  // A cut in the middle of a multi-byte character shows as U+FFFD at the very end only.
  const printable = !/[\u0000-\u0008\u000e-\u001f\u007f]/.test(text) && !text.slice(0, truncated ? -1 : undefined).includes('\ufffd');
  return printable ? { encoding: 'utf8', text, truncated } : { encoding: 'base64', text: head.toString('base64'), truncated };
}

/** The encryption keys given to the command (--keys-file, else $IDEMPOTENCY_KEYS), checked as the engine checks them. */
function loadKeys(file: string | undefined): Keyring | undefined {
  let text: string | undefined;
  if (file !== undefined) {
    try {
      text = readFileSync(file, 'utf8');
    } catch (error) {
      throw new UsageError(`cannot read --keys-file ${file}: ${(error as Error).message}`);
    }
  } else text = process.env.IDEMPOTENCY_KEYS;
  if (text === undefined || text.trim() === '') return undefined;
  const from = file !== undefined ? `--keys-file ${file}` : '$IDEMPOTENCY_KEYS';
  let keys: unknown;
  try {
    keys = JSON.parse(text);
  } catch {
    throw new UsageError(`${from} is not JSON: expected [{ "id": "…", "key": "<base64 or hex>" }]`);
  }
  try {
    return resolveEncryption({ keys }, 'keys');
  } catch (error) {
    throw new UsageError(`${from}: ${(error as Error).message}`);
  }
}

/**
 * How an encrypted record shows: opened with the given keys, or, without them (or with keys
 * that do not open it), as encrypted under its key id with why it was not opened.
 */
function openForView(record: IdempotencyRecord, skey: string, keyring: Keyring | undefined): { record: IdempotencyRecord; encryption: { keyId: string | null; opened: boolean; reason?: string } | undefined } {
  if (record.state !== 'completed' || !isSealed(record.response)) return { record, encryption: undefined };
  const keyId = sealedKeyId(record.response) ?? null;
  if (!keyring) return { record, encryption: { keyId, opened: false, reason: 'no keys given (--keys-file or $IDEMPOTENCY_KEYS)' } };
  try {
    return { record: openRecord(record, skey, keyring), encryption: { keyId, opened: true } };
  } catch (error) {
    if (!isIdempotencyError(error)) throw error;
    return { record, encryption: { keyId, opened: false, reason: (error as { reason?: string }).reason ?? error.code } };
  }
}

/** The key space `--entry` names: `undefined` for HTTP keys. */
function keySpaceOf(entry: string | undefined): KeySpace | undefined {
  if (entry === undefined || entry === 'http') return undefined;
  if (entry === 'function' || /^(webhook|message):./.test(entry)) return entry as KeySpace;
  throw new UsageError(`--entry must be http, function, webhook:<provider> or message:<source>, got ${JSON.stringify(entry)}`);
}

function describeRecord(key: string, scope: string | undefined, space: KeySpace | undefined, record: IdempotencyRecord, encryption?: { keyId: string | null; opened: boolean; reason?: string }) {
  const sealedShut = encryption !== undefined && !encryption.opened;
  const completed = record.state === 'completed' && !sealedShut ? record : undefined;
  const body = completed?.response.body;
  return {
    key,
    scope: scope ?? null,
    entry: space ?? 'http',
    storageKey: storageKey(scope, key, space),
    state: record.state,
    kind: record.fingerprint.startsWith('fn:') ? 'function' : 'http',
    fingerprint: record.fingerprint,
    createdAt: iso(record.createdAt),
    ...(record.state === 'processing' ? { leaseUntil: iso(record.leaseUntil) } : { expiresAt: iso(record.expiresAt) }),
    ...(encryption ? { encryption } : {}),
    ...(record.state === 'completed' && sealedShut ? { bodyBytes: (record as CompletedRecord).response.body?.byteLength ?? null } : {}),
    ...(completed
      ? {
          status: completed.response.status,
          headers: completed.response.headers,
          bodyBytes: body === null || body === undefined ? null : body.byteLength,
          body: body === null || body === undefined ? null : bodyPreview(body),
        }
      : {}),
  };
}

function printRecord(output: Output, view: ReturnType<typeof describeRecord>, record: IdempotencyRecord): void {
  const now = Date.now();
  const lines: [string, string][] = [
    ['key', view.key + (view.scope === null ? '' : `  (scope ${view.scope})`)],
    ['storage key', view.storageKey],
    ['state', view.state + (view.kind === 'function' ? '  (idempotent() result)' : '')],
    ['fingerprint', view.fingerprint],
    ['created', `${view.createdAt}  (${relative(record.createdAt, now)})`],
  ];
  if (record.state === 'processing') lines.push(['lease until', `${iso(record.leaseUntil)}  (${relative(record.leaseUntil, now)})`]);
  else if (view.encryption && !view.encryption.opened) {
    lines.push(['expires', `${iso(record.expiresAt)}  (${relative(record.expiresAt, now)})`]);
    lines.push(['encrypted', `under key ${view.encryption.keyId ?? '(unreadable id)'}, ${view.bodyBytes} bytes sealed; not opened: ${view.encryption.reason}`]);
  } else {
    if (view.encryption) lines.push(['encrypted', `under key ${view.encryption.keyId}, opened`]);
    lines.push(['expires', `${iso(record.expiresAt)}  (${relative(record.expiresAt, now)})`]);
    lines.push(['status', String(record.response.status)]);
    const headers = Object.entries(record.response.headers);
    lines.push(['headers', headers.length === 0 ? '(none)' : headers.map(([n, v]) => `${n}: ${Array.isArray(v) ? v.join(', ') : v}`).join('\n             ')]);
    const body = view.body;
    lines.push([
      'body',
      body === null || body === undefined
        ? '(not stored: too large or a stream; a retry gets 409 response-not-replayable)'
        : `${view.bodyBytes} bytes${body.encoding === 'base64' ? ', binary, base64' : ''}: ${body.text}${body.truncated ? '…' : ''}`,
    ]);
  }
  output.out(lines.map(([label, value]) => `${label.padEnd(12)} ${value}`).join('\n') + '\n');
}

function printStats(output: Output, stats: StoreStats): void {
  if (output.json) {
    output.out(JSON.stringify({ ...stats, oldestExpiresAt: iso(stats.oldestExpiresAt) ?? null }) + '\n');
    return;
  }
  const total = stats.processing + stats.completed + stats.expired;
  const oldest = stats.oldestExpiresAt === undefined ? '(no records)' : `${iso(stats.oldestExpiresAt)}  (${relative(stats.oldestExpiresAt, Date.now())})`;
  output.out(
    [
      `records      ${total}`,
      `processing   ${stats.processing}`,
      `completed    ${stats.completed}`,
      `expired      ${stats.expired}${stats.expired > 0 ? '  (awaiting the sweep: idempotency-kit sweep removes them now)' : ''}`,
      `oldest expiry ${oldest}`,
    ].join('\n') + '\n',
  );
}

async function command(argv: string[], output: Output): Promise<number> {
  // Every answer follows --json, even an error in the arguments themselves.
  output.json = argv.includes('--json');
  const { values, positionals } = parse(argv);
  if (values.help) {
    output.out(USAGE + '\n');
    return EXIT.ok;
  }
  if (positionals.length === 0) {
    if (values.json) throw new UsageError('no command: inspect, purge, stats, sweep or reseal');
    output.err(USAGE + '\n');
    return EXIT.usage;
  }
  const [name, ...extra] = positionals;
  // reseal takes the store URL as its argument too (`reseal <store-url>`).
  const positionalUrl = name === 'reseal' && extra.length > 0 ? extra.shift() : undefined;
  if (extra.length > 0) throw new UsageError(`unexpected argument ${JSON.stringify(extra[0])}`);
  if (!['inspect', 'purge', 'stats', 'sweep', 'reseal'].includes(name!)) throw new UsageError(`unknown command ${JSON.stringify(name)}`);
  if (positionalUrl !== undefined && values.store !== undefined) throw new UsageError('give the store once: as the argument or as --store');
  if (name !== 'reseal') {
    const only = (['batch', 'limit', 'from', 'dry-run', 'encrypt-plaintext'] as const).find((option) => values[option] !== undefined && values[option] !== false);
    if (only) throw new UsageError(`--${only} is for reseal only`);
  }
  const reseal = name === 'reseal' ? resealOptions(values) : undefined;
  const needsKey = name === 'inspect' || name === 'purge';
  if (needsKey && (values.key === undefined || values.key === '')) throw new UsageError(`${name} needs --key`);
  if (!needsKey && (values.key !== undefined || values.scope !== undefined || values.entry !== undefined)) {
    throw new UsageError(`${name} takes no --key, --scope or --entry`);
  }
  const space = keySpaceOf(values.entry);
  const timeoutMs = values.timeout === undefined ? 5000 : Number(values.timeout);
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1) throw new UsageError(`--timeout must be a positive integer (ms), got ${JSON.stringify(values.timeout)}`);
  const url = positionalUrl ?? values.store ?? process.env.IDEMPOTENCY_STORE;
  if (url === undefined || url === '') throw new UsageError('no store: pass --store URL or set IDEMPOTENCY_STORE');

  if (values['keys-file'] !== undefined && name !== 'inspect' && name !== 'reseal') throw new UsageError(`${name} takes no --keys-file`);
  const keyring = name === 'inspect' || name === 'reseal' ? loadKeys(values['keys-file']) : undefined;
  if (name === 'reseal' && !keyring) throw new UsageError('reseal needs the encryption keys: --keys-file FILE or $IDEMPOTENCY_KEYS, the new key first');
  output.progress = values.progress || process.stderr.isTTY === true;
  const store = openStore(url, values.namespace, timeoutMs);
  try {
    const key = values.key!;
    const scope = values.scope;
    const skey = needsKey ? storageKey(scope, key, space) : '';
    switch (name) {
      case 'inspect': {
        const stored = await storeCall('get', timeoutMs, () => store.get(skey));
        if (!stored) return notFound(output, key, scope);
        const { record, encryption } = openForView(stored, skey, keyring);
        const view = describeRecord(key, scope, space, record, encryption);
        if (output.json) output.out(JSON.stringify(view) + '\n');
        else printRecord(output, view, record);
        return EXIT.ok;
      }
      case 'purge': {
        const record = await storeCall('get', timeoutMs, () => store.get(skey));
        if (record?.state === 'processing' && !values.force) {
          const message =
            'the record is still processing (a handler may be running): purging it lets a retry run beside it. Pass --force to purge anyway';
          if (output.json) output.out(JSON.stringify({ purged: false, error: { code: 'refused', message }, record: describeRecord(key, scope, space, record) }) + '\n');
          else output.err(`idempotency-kit: ${message}\n`);
          return EXIT.refused;
        }
        const deleted = await storeCall('delete', timeoutMs, () => requireMethod(store, 'delete').delete!(skey));
        if (!record && !deleted) return notFound(output, key, scope);
        if (output.json) output.out(JSON.stringify({ purged: true, record: record ? describeRecord(key, scope, space, record) : null }) + '\n');
        else {
          const what = record ? `${record.state}${record.state === 'completed' ? ` ${record.response.status}` : ''} record` : 'expired record';
          output.out(`purged the ${what} for key ${key}${scope === undefined ? '' : ` (scope ${scope})`}: the next request with it runs again\n`);
        }
        return EXIT.ok;
      }
      case 'reseal':
        return await runReseal(output, store, keyring!, reseal!, timeoutMs);
      case 'stats': {
        const onProgress = progressReporter(output, 'records visited');
        const stats = await storeCall('stats', timeoutMs, () => requireMethod(store, 'stats').stats!(onProgress ? { onProgress } : {}));
        if (onProgress && process.stderr.isTTY) output.err('\n');
        printStats(output, stats);
        return EXIT.ok;
      }
      default: {
        const onProgress = progressReporter(output, 'expired records deleted');
        const deleted = await storeCall('sweep', timeoutMs, () => requireMethod(store, 'sweep').sweep!(onProgress ? { onProgress } : {}));
        if (onProgress && process.stderr.isTTY) output.err('\n');
        output.out(output.json ? JSON.stringify({ deleted }) + '\n' : `deleted ${deleted} expired record${deleted === 1 ? '' : 's'}${store.name === 'redis' ? ' (Redis expires records itself)' : ''}\n`);
        return EXIT.ok;
      }
    }
  } finally {
    await withTimeout(store.close(), 2000, 'close').catch(() => undefined);
  }
}

/** The reseal options, checked. */
function resealOptions(values: { batch?: string; limit?: string; from?: string; 'dry-run'?: boolean; 'encrypt-plaintext'?: boolean }) {
  const count = (option: 'batch' | 'limit', fallback: number | undefined, max: number) => {
    const text = values[option];
    if (text === undefined) return fallback;
    const n = Number(text);
    if (!/^\d+$/.test(text) || !Number.isSafeInteger(n) || n < 1 || n > max) throw new UsageError(`--${option} must be an integer from 1 to ${max}, got ${JSON.stringify(text)}`);
    return n;
  };
  if (values.from === '') throw new UsageError('--from needs the cursor a previous reseal printed');
  return {
    batch: count('batch', 100, 10_000)!,
    limit: count('limit', undefined, Number.MAX_SAFE_INTEGER),
    from: values.from,
    dryRun: values['dry-run'] === true,
    encryptPlaintext: values['encrypt-plaintext'] === true,
  };
}

async function runReseal(output: Output, store: IdempotencyStore, keyring: Keyring, options: ReturnType<typeof resealOptions>, timeoutMs: number): Promise<number> {
  const missing = (['scan', 'replaceResponse'] as const).filter((method) => typeof store[method] !== 'function');
  if (missing.length > 0) throw new UsageError(`the ${store.name} store does not support reseal (it lacks ${missing.join(' and ')}; see docs/writing-a-store.md)`);
  const tty = process.stderr.isTTY === true;
  let last: ResealProgress | undefined;
  let shownAt = 0;
  const line = (p: ResealProgress) =>
    `${options.dryRun ? 'would reseal' : 'resealed'} ${p.resealed}, current ${p.current}, unreadable ${p.unreadable} of ${p.visited} visited${p.cursor === undefined ? '' : `; cursor ${p.cursor}`}`;
  let result: ResealProgress;
  try {
    result = await resealStore(store, keyring, {
      ...options,
      call: async (what, run) => {
        try {
          return await storeCall(what, timeoutMs, run);
        } catch (error) {
          // A cursor the store does not know is the caller's mistake, not the store's.
          if (what === 'scan' && (error as Error).cause instanceof TypeError) throw new UsageError(`--from: ${((error as Error).cause as Error).message}`);
          throw error;
        }
      },
      onBatch: (p) => {
        last = p;
        if (!output.progress) return;
        const now = Date.now();
        if (now - shownAt < 200 && p.cursor !== undefined) return;
        shownAt = now;
        output.err(tty ? `\r${line(p)}` : `${line(p)}\n`);
      },
    });
  } catch (error) {
    if (output.progress && tty && last) output.err('\n');
    // Everything before the last cursor is done: say where to go on.
    const from = last?.cursor ?? options.from;
    if (error instanceof StoreError && from !== undefined) {
      throw new StoreError(`${error.message}. ${last ? `${last.resealed} resealed so far; ` : ''}resume with --from ${from}`, { cause: error });
    }
    throw error;
  }
  if (output.progress && tty) output.err('\n');
  const key = keyring.sealingKeyId;
  const unreadableMessage =
    result.unreadable === 0
      ? undefined
      : `${result.unreadable} record${result.unreadable === 1 ? '' : 's'} no listed key opens ${result.unreadable === 1 ? 'was' : 'were'} left in place (never deleted): add the key they name to the keys and reseal again, or keep the old key until they expire`;
  if (output.json) {
    output.out(
      JSON.stringify({
        sealingKeyId: key,
        dryRun: options.dryRun,
        ...result,
        cursor: result.cursor ?? null,
        done: result.cursor === undefined,
        ...(unreadableMessage ? { error: { code: 'unreadable', message: unreadableMessage } } : {}),
      }) + '\n',
    );
  } else {
    const lines: [string, string][] = [
      ['visited', `${result.visited} live record${result.visited === 1 ? '' : 's'}`],
      [options.dryRun ? 'would reseal' : 'resealed', `${result.resealed}${options.dryRun ? ' (dry run: nothing written)' : ''} under key ${key}`],
      ['current', `${result.current} (already under key ${key})`],
      ['plaintext', `${result.plaintext}${result.plaintext > 0 && !options.encryptPlaintext ? ' (left in clear: --encrypt-plaintext seals them)' : ''}`],
      ['processing', `${result.processing}${result.processing > 0 ? ' (still running: sealed under the first key of the app when they complete)' : ''}`],
      ['changed', `${result.changed}${result.changed > 0 ? ' (changed meanwhile: left as they are now)' : ''}`],
      ['unreadable', `${result.unreadable}${result.unreadable > 0 ? ' (no listed key opens them: left in place)' : ''}`],
    ];
    for (const record of result.unreadableRecords) lines.push(['', `${record.key}  key ${record.keyId ?? '(none)'}  ${record.reason}`]);
    output.out(lines.map(([label, value]) => `${label.padEnd(12)} ${value}`).join('\n') + '\n');
    output.out(result.cursor === undefined ? 'done: every live record visited\n' : `stopped at --limit: resume with --from ${result.cursor}\n`);
    if (unreadableMessage) output.err(`idempotency-kit: ${unreadableMessage}\n`);
  }
  return unreadableMessage ? EXIT.unreadable : EXIT.ok;
}

function requireMethod(store: IdempotencyStore, method: 'delete' | 'stats' | 'sweep'): IdempotencyStore {
  if (typeof store[method] !== 'function') throw new UsageError(`the ${store.name} store does not support ${method}`);
  return store;
}

function notFound(output: Output, key: string, scope: string | undefined): number {
  const message = `no record for key ${JSON.stringify(key)}${scope === undefined ? ' without a scope' : ` in scope ${JSON.stringify(scope)}`} (never stored, expired, or released)`;
  if (output.json) output.out(JSON.stringify({ error: { code: 'not-found', message } }) + '\n');
  else output.err(`idempotency-kit: ${message}\n`);
  return EXIT.notFound;
}

/** Run the command line with `argv` (without node and the script); resolves the exit code. */
async function main(argv: string[], output: Output): Promise<number> {
  try {
    return await command(argv, output);
  } catch (error) {
    const code = error instanceof UsageError ? EXIT.usage : EXIT.storeUnavailable;
    const kind = code === EXIT.usage ? 'usage' : 'store-unavailable';
    const message = error instanceof Error ? error.message : String(error);
    if (output.json) output.out(JSON.stringify({ error: { code: kind, message } }) + '\n');
    else output.err(`idempotency-kit: ${message}\n${code === EXIT.usage ? 'Run idempotency-kit --help for usage.\n' : ''}`);
    return code;
  }
}

const output: Output = {
  json: false,
  progress: false,
  out: (text) => void process.stdout.write(text),
  err: (text) => void process.stderr.write(text),
};
// No top-level await: the same file builds to CommonJS too.
void main(process.argv.slice(2), output).then((code) => {
  process.exitCode = code;
  // A driver's socket or pool must not keep a finished command alive: leave shortly after
  // output is flushed even if one does (the timer itself does not hold the process).
  setTimeout(() => process.exit(code), 1000).unref();
});
