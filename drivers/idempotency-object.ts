/**
 * The Durable Object class behind the Durable Objects store: each object holds the
 * records of the keys that hash to it, in its own SQLite database, and answers the
 * store's calls over RPC. Bind it in wrangler.toml (`new_sqlite_classes`) and export it
 * from the Worker: `export { IdempotencyObject } from 'idempotency-kit/drivers/durable-objects'`.
 *
 * Why a call is atomic: each method reads and writes its record with synchronous SQL and
 * no `await` in between, and a Durable Object runs one event at a time, so no other call
 * can run between the read and the write; the writes of that stretch commit together as
 * one implicit transaction, and the object's output gate holds the answer until they are
 * durable (a caller never sees a claim that a crash could undo).
 * @module
 */
import { DurableObject } from 'cloudflare:workers';
import type { ClaimRequest, ClaimResult, IdempotencyRecord, StoredResponse } from '../src/store.js';
import { fitsInRow } from './cloudflare-bindings.js';
import { recordFromRow, type StatsGroup } from './sql-store.js';
import { sqliteRecordsSchema } from './utils.js';

type SqlValue = ArrayBuffer | string | number | null;

/** The part of SQLite-backed Durable Object storage the object uses. */
interface ObjectStorage {
  sql: { exec(query: string, ...bindings: unknown[]): { toArray(): Record<string, SqlValue>[] } };
  getAlarm(): Promise<number | null>;
  setAlarm(scheduledTime: number): Promise<void>;
}

/** What the runtime passes the constructor (`DurableObjectState`), as far as the object uses it. */
export interface IdempotencyObjectState {
  storage: ObjectStorage;
  blockConcurrencyWhile<T>(callback: () => Promise<T>): Promise<T>;
}

const TABLE = 'idempotency_kit_records';
const SCHEMA = sqliteRecordsSchema(TABLE);
const COLUMNS = 'state, fingerprint, token, created_at, expires_at, status, headers, body';
const OWNED = `key = ? AND token = ? AND state = 'processing' AND expires_at > ?`;
/** Rows one alarm deletes per statement, and statements per run (the rest waits for the next run, a second later). */
const SWEEP_BATCH = 1000;
const SWEEP_BATCHES = 10;

function recordOf(row: Record<string, SqlValue>): IdempotencyRecord {
  const body = row.body;
  return recordFromRow({
    state: row.state as 'processing' | 'completed',
    fingerprint: row.fingerprint as string,
    token: row.token as string,
    created_at: row.created_at as number,
    expires_at: row.expires_at as number,
    status: row.status as number | null,
    headers: typeof row.headers === 'string' ? (JSON.parse(row.headers) as Record<string, string | string[]>) : null,
    body: body === null || body === undefined ? null : new Uint8Array(body as ArrayBuffer),
  });
}

/** SQL binds a BLOB from an ArrayBuffer: the body's own when the view covers all of it, else a copy of its bytes. */
function blob(body: Uint8Array | null): ArrayBuffer | null {
  if (body === null) return null;
  const { buffer, byteOffset, byteLength } = body;
  return byteOffset === 0 && byteLength === buffer.byteLength && buffer instanceof ArrayBuffer ? buffer : new Uint8Array(body).buffer;
}

function checkKey(key: unknown): asserts key is string {
  if (typeof key !== 'string' || key === '') throw new TypeError(`Expected the key to be a non-empty string, got ${typeof key}`);
}

function checkMs(name: string, value: unknown): asserts value is number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1) {
    throw new TypeError(`Expected \`${name}\` to be a positive integer, got ${String(value)}`);
  }
}

/**
 * The records of one share of the key space. Its methods are the store's calls, made by
 * `durableObjectStore()` over RPC (not meant to be called otherwise). Times are the
 * object's clock: one clock for every Worker that calls it, so leases are fair.
 *
 * The object keeps one alarm, for the earliest end among its records but never sooner
 * than `sweepIntervalMs` after its previous run: a write sets it when none is set, or
 * moves it when the record ends more than an interval before it; each run deletes the
 * expired records and sets the next run. So a record is deleted at most about
 * `sweepIntervalMs` after it ends, a claim whose Worker crashed included, and an object
 * with records runs its alarm at most once an interval.
 */
export class IdempotencyObject extends DurableObject {
  /**
   * Least time between two runs of the alarm, in ms. Override it in a subclass to run the
   * alarm more or less often (each run is a billed request to the object).
   * @default 60000
   */
  sweepIntervalMs = 60_000;
  readonly #storage: ObjectStorage;
  /** When the alarm is set for (null: none), as this object set it. */
  #alarmAt: number | null = null;
  /** When the alarm last ran, in this object's lifetime (0: not yet). */
  #lastRun = 0;

  constructor(ctx: IdempotencyObjectState, env: unknown) {
    super(ctx, env);
    this.#storage = ctx.storage;
    void ctx.blockConcurrencyWhile(async () => {
      try {
        for (const statement of SCHEMA) this.#storage.sql.exec(statement);
      } catch (error) {
        throw new Error(
          'idempotency-kit: IdempotencyObject needs SQLite storage: declare the class under `new_sqlite_classes` in a ' +
            'wrangler.toml migration (enableSql = true in a workerd config); see docs/drivers/cloudflare.md',
          { cause: error },
        );
      }
      this.#alarmAt = await this.#storage.getAlarm();
    });
  }

  #rows(query: string, ...bindings: unknown[]): Record<string, SqlValue>[] {
    return this.#storage.sql.exec(query, ...bindings).toArray();
  }

  /** Set the alarm for a record ending at `at` if none is set, or move it there when that is more than an interval sooner. */
  async #arm(at: number): Promise<void> {
    const current = this.#alarmAt;
    if (current !== null && at >= current - this.sweepIntervalMs) return;
    const next = this.#lastRun === 0 ? at : Math.max(at, this.#lastRun + this.sweepIntervalMs);
    this.#alarmAt = next;
    await this.#storage.setAlarm(next);
  }

  /**
   * Create a processing record unless a live one holds the key; the live one otherwise.
   * A claim with the token of the live processing record is the same claim sent again
   * (its first answer was lost) and wins again.
   */
  async claim(key: string, request: ClaimRequest, leaseMs: number): Promise<ClaimResult> {
    checkKey(key);
    checkMs('leaseMs', leaseMs);
    const { fingerprint, token, createdAt } = request;
    if (typeof fingerprint !== 'string' || typeof token !== 'string' || typeof createdAt !== 'number') {
      throw new TypeError('Expected a claim request with a fingerprint, a token and createdAt');
    }
    const now = Date.now();
    const [row] = this.#rows(`SELECT ${COLUMNS} FROM ${TABLE} WHERE key = ? AND expires_at > ?`, key, now);
    if (row !== undefined) {
      const record = recordOf(row);
      return { claimed: record.state === 'processing' && record.token === token, record } as ClaimResult;
    }
    const leaseUntil = now + leaseMs;
    this.#rows(
      `INSERT OR REPLACE INTO ${TABLE} (key, state, fingerprint, token, created_at, expires_at) VALUES (?, 'processing', ?, ?, ?, ?)`,
      key,
      fingerprint,
      token,
      createdAt,
      leaseUntil,
    );
    await this.#arm(leaseUntil);
    return { claimed: true, record: { state: 'processing', fingerprint, token, createdAt, leaseUntil } };
  }

  /** The live record at `key`, if any. */
  read(key: string): IdempotencyRecord | undefined {
    checkKey(key);
    const [row] = this.#rows(`SELECT ${COLUMNS} FROM ${TABLE} WHERE key = ? AND expires_at > ?`, key, Date.now());
    return row === undefined ? undefined : recordOf(row);
  }

  /** Processing -> completed, only while `token` owns the live record. */
  async complete(key: string, token: string, response: StoredResponse, ttlMs: number): Promise<boolean> {
    checkKey(key);
    checkMs('ttlMs', ttlMs);
    const headers = JSON.stringify(response.headers);
    const body = response.body;
    const fits = fitsInRow(body, headers);
    const now = Date.now();
    const expiresAt = now + ttlMs;
    const done = this.#rows(
      `UPDATE ${TABLE} SET state = 'completed', expires_at = ?, status = ?, headers = ?, body = ? WHERE ${OWNED} RETURNING 1 AS n`,
      expiresAt,
      response.status,
      headers,
      fits ? blob(body) : null,
      key,
      token,
      now,
    );
    if (done.length === 0) return false;
    await this.#arm(expiresAt);
    return true;
  }

  /** Delete the processing record, only while `token` owns it. */
  release(key: string, token: string): boolean {
    checkKey(key);
    return this.#rows(`DELETE FROM ${TABLE} WHERE ${OWNED} RETURNING 1 AS n`, key, token, Date.now()).length === 1;
  }

  /** Push the lease to now + leaseMs, only while `token` owns the processing record. */
  extend(key: string, token: string, leaseMs: number): boolean {
    checkKey(key);
    checkMs('leaseMs', leaseMs);
    const now = Date.now();
    return this.#rows(`UPDATE ${TABLE} SET expires_at = ? WHERE ${OWNED} RETURNING 1 AS n`, now + leaseMs, key, token, now).length === 1;
  }

  /** Maintenance: delete the record at `key` whatever its state; whether there was one. */
  remove(key: string): boolean {
    checkKey(key);
    return this.#rows(`DELETE FROM ${TABLE} WHERE key = ? RETURNING 1 AS n`, key).length === 1;
  }

  /** Maintenance: up to `limit` live records with a key after `after` ('' for the first), by key. */
  scan(after: string, limit: number): Array<{ key: string; record: IdempotencyRecord }> {
    if (typeof after !== 'string') throw new TypeError(`Expected \`after\` to be a string, got ${typeof after}`);
    checkMs('limit', limit);
    return this.#rows(`SELECT key, ${COLUMNS} FROM ${TABLE} WHERE key > ? AND expires_at > ? ORDER BY key LIMIT ?`, after, Date.now(), limit).map((row) => ({
      key: row.key as string,
      record: recordOf(row),
    }));
  }

  /** Maintenance: replace the response of the live completed record, only while it has `token`; fingerprint and times stay. */
  replaceResponse(key: string, token: string, response: StoredResponse): boolean {
    checkKey(key);
    const headers = JSON.stringify(response.headers);
    // complete() keeps an oversized response without its body; this record already replays.
    if (!fitsInRow(response.body, headers)) throw new Error('idempotency-kit: the new response does not fit a Durable Object row');
    return (
      this.#rows(
        `UPDATE ${TABLE} SET status = ?, headers = ?, body = ? WHERE key = ? AND token = ? AND state = 'completed' AND expires_at > ? RETURNING 1 AS n`,
        response.status,
        headers,
        blob(response.body),
        key,
        token,
        Date.now(),
      ).length === 1
    );
  }

  /** Maintenance: records by state ('expired' past their end), with the earliest end. */
  stats(): StatsGroup[] {
    return this.#rows(
      `SELECT CASE WHEN expires_at <= ? THEN 'expired' ELSE state END AS state, count(*) AS n, min(expires_at) AS oldest FROM ${TABLE} GROUP BY 1`,
      Date.now(),
    ) as unknown as StatsGroup[];
  }

  /** Delete up to `limit` expired records (never a live one); how many went. */
  sweep(limit: number): number {
    checkMs('limit', limit);
    return this.#sweep(Date.now(), limit);
  }

  #sweep(now: number, limit: number): number {
    return this.#rows(
      `DELETE FROM ${TABLE} WHERE key IN (SELECT key FROM ${TABLE} WHERE expires_at <= ? ORDER BY expires_at LIMIT ?) RETURNING 1 AS n`,
      now,
      limit,
    ).length;
  }

  /** The alarm: delete the expired records and set the next run. */
  async alarm(): Promise<void> {
    this.#alarmAt = null;
    const now = Date.now();
    let backlog = false;
    for (let batch = 0; batch < SWEEP_BATCHES; batch++) {
      backlog = this.#sweep(now, SWEEP_BATCH) === SWEEP_BATCH;
      if (!backlog) break;
    }
    this.#lastRun = now;
    const next = this.#rows(`SELECT min(expires_at) AS at FROM ${TABLE}`)[0]?.at;
    if (typeof next !== 'number') return;
    const at = backlog ? now + 1000 : Math.max(next, now + this.sweepIntervalMs);
    this.#alarmAt = at;
    await this.#storage.setAlarm(at);
  }
}
