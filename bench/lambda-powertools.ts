/**
 * Side by side with the AWS Lambda Powertools idempotency utility, on one DynamoDB API
 * server (dynalite, in this process), each library on a table of its own: the same
 * scenarios, and per scenario the executions, the answers the callers got and the
 * DynamoDB capacity units consumed (read from `ConsumedCapacity`; a refused conditional
 * write, which DynamoDB bills as a write and reports no capacity for, counts 1 write unit,
 * the bill of an item up to 1 KB). test/adapters/lambda-powertools.test.ts runs it and
 * checks ours; `npx tsx bench/lambda-powertools.ts` prints the table (docs/adapters/lambda.md).
 * @module
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import middy from '@middy/core';
import { IdempotencyConfig, makeIdempotent } from '@aws-lambda-powertools/idempotency';
import { DynamoDBPersistenceLayer } from '@aws-lambda-powertools/idempotency/dynamodb';
import { makeHandlerIdempotent } from '@aws-lambda-powertools/idempotency/middleware';
import { idempotencyMiddleware, idempotent, type LambdaHttpEvent, type LambdaHttpResult } from '../adapters/lambda/index.js';
import { dynamodbStore } from '../drivers/dynamodb.js';
import type { IdempotencyStore } from '../src/store.js';
import { dynalite } from '../test/helpers/dynalite.js';

export type Lib = 'ours' | 'powertools';

export interface Row {
  scenario: string;
  lib: Lib;
  invocations: number;
  /** Handler runs that started. */
  executions: number;
  /** Runs that completed beyond the first for a key: a payment charged twice. */
  doubles: number;
  /** What the callers got, counted. */
  answers: Record<string, number>;
  readUnits: number;
  writeUnits: number;
  /** Anything else the scenario measured. */
  note?: string;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const contextFor = (remainingMs: number) => {
  const deadline = Date.now() + remainingMs;
  return { getRemainingTimeInMillis: () => deadline - Date.now(), functionName: 'bench', awsRequestId: randomUUID() };
};
/** A context kept from an invocation that is over (its remaining time is negative). */
const staleContext = { getRemainingTimeInMillis: () => -1, functionName: 'bench', awsRequestId: 'old' };

/** A DynamoDB client that adds `ReturnConsumedCapacity: TOTAL` to every call and adds up the units. */
function countingClient(endpoint: string) {
  const tally = { read: 0, write: 0 };
  const client = new DynamoDBClient({ region: 'us-east-1', endpoint, credentials: { accessKeyId: 'local', secretAccessKey: 'local' }, maxAttempts: 1 });
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const name = String((context as { commandName?: string }).commandName ?? '');
      const write = /^(Put|Update|Delete)Item/.test(name);
      const read = /^(GetItem|Query|Scan)/.test(name);
      if (write || read) (args.input as Record<string, unknown>).ReturnConsumedCapacity = 'TOTAL';
      try {
        const out = await next(args);
        const units = (out.output as { ConsumedCapacity?: { CapacityUnits?: number } }).ConsumedCapacity?.CapacityUnits ?? 0;
        if (write) tally.write += units;
        if (read) tally.read += units;
        return out;
      } catch (error) {
        if ((error as Error).name === 'ConditionalCheckFailedException') tally.write += 1;
        throw error;
      }
    },
    { step: 'initialize', name: 'countCapacity' },
  );
  return { client, tally };
}

/** One HTTP API event with an Idempotency-Key header. */
const httpEvent = (key: string, body = '{"amount":5}'): LambdaHttpEvent => ({
  version: '2.0',
  routeKey: 'POST /orders',
  rawPath: '/orders',
  rawQueryString: '',
  headers: { 'content-type': 'application/json', 'idempotency-key': key },
  requestContext: { http: { method: 'POST', path: '/orders' }, authorizer: { jwt: { claims: { sub: 'user-1' } } } },
  body,
  isBase64Encoded: false,
});

const answerOf = (outcome: PromiseSettledResult<unknown>, executed?: (value: unknown) => boolean): string => {
  if (outcome.status === 'rejected') return `error ${(outcome.reason as Error).name}`;
  const value = outcome.value as LambdaHttpResult & { run?: string };
  if (typeof value?.statusCode === 'number') return `${value.statusCode}${value.headers?.['idempotent-replayed'] ? ' replayed' : ''}`;
  if (!executed) return 'result';
  return executed(value) ? 'result (ran)' : 'result (stored)';
};

const count = (answers: string[]) => answers.reduce<Record<string, number>>((all, a) => ((all[a] = (all[a] ?? 0) + 1), all), {});

/** Doubles: completed runs beyond one per key. */
const doublesOf = (completed: string[]) => {
  const perKey = count(completed);
  return Object.values(perKey).reduce((sum, n) => sum + Math.max(0, n - 1), 0);
};

export interface Compared {
  rows: Row[];
  close(): Promise<void>;
}

/** Run every scenario on both libraries; `only` picks scenarios by number. */
export async function compare(only?: number[]): Promise<Row[]> {
  const server = await dynalite();
  const ours = countingClient(server.endpoint);
  const pt = countingClient(server.endpoint);
  const oursTable = await server.table('ours');
  const ptTable = await server.table('powertools');
  // Each invocation gets a store object of its own, as each Lambda execution environment
  // has: a duplicate then goes to DynamoDB as it would from another environment, never to
  // an in-process flight of this one.
  const fresh = (): IdempotencyStore => dynamodbStore({ client: ours.client, table: oursTable, onWarning: () => undefined });
  const store = fresh();
  // A layer of its own for each wrapped handler: a Powertools layer keeps the first configuration it is given.
  const persistence = () => new DynamoDBPersistenceLayer({ tableName: ptTable, awsSdkV3Client: pt.client });
  await store.get('warm-up'); // the store's one-time table check is not part of any scenario
  const rows: Row[] = [];
  const tallies: Record<Lib, { read: number; write: number }> = { ours: ours.tally, powertools: pt.tally };

  const scenario = async (n: number, name: string, run: (lib: Lib) => Promise<Omit<Row, 'scenario' | 'lib' | 'readUnits' | 'writeUnits'>>) => {
    if (only && !only.includes(n)) return;
    for (const lib of ['ours', 'powertools'] as const) {
      const tally = tallies[lib];
      tally.read = 0;
      tally.write = 0;
      const row = await run(lib);
      rows.push({ scenario: `${n}. ${name}`, lib, ...row, readUnits: tally.read, writeUnits: tally.write });
    }
  };

  /** A function handler on each library: runs recorded, results carry the run's id. */
  const functionHandler = (lib: Lib, work: (event: { id: string; [name: string]: unknown }) => Promise<unknown>, options: { dataIndex?: boolean; config?: IdempotencyConfig; fingerprint?: boolean } = {}) => {
    if (lib === 'ours') {
      return (event: { id: string; [name: string]: unknown }, context: unknown) =>
        idempotent(async (e: { id: string; [name: string]: unknown }) => work(e), {
          store: fresh(),
          key: (e) => e.id,
          ...(options.fingerprint ? { fingerprint: (e: unknown) => e } : {}),
        })(event, context as never);
    }
    const config = options.config ?? new IdempotencyConfig({ eventKeyJmesPath: 'id' });
    return (event: { id: string; [name: string]: unknown }, context: unknown) => {
      const wrapped = makeIdempotent(work, { persistenceStore: persistence(), config, ...(options.dataIndex ? { dataIndexArgument: 0 } : {}) });
      return options.dataIndex ? wrapped(event) : (wrapped as (e: unknown, c: unknown) => Promise<unknown>)(event, context);
    };
  };

  /**
   * A function that sleeps `event.ms`, wrapped where the deadline its record carries is
   * already past: a context kept from an invocation that is over (Powertools reads the one
   * registered on its shared config; ours gets it as the handler's context).
   */
  const staleHandler = (lib: Lib) => {
    const completed: string[] = [];
    const config = new IdempotencyConfig({ eventKeyJmesPath: 'id' });
    config.registerLambdaContext(staleContext as never);
    const handler = functionHandler(lib, async (event) => {
      const run = randomUUID();
      await sleep(Number(event.ms));
      completed.push(event.id);
      return { run };
    }, { dataIndex: true, config });
    return { completed, handler };
  };

  // 1. A rejected duplicate whose error path runs (Middy): the duplicate is refused while
  // the first runs; a third request comes after it.
  await scenario(1, 'Middy: a duplicate refused while the first runs, then a third request', async (lib) => {
    const runs: string[] = [];
    const handler = async () => {
      runs.push('run');
      await sleep(300);
      return { statusCode: 201, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ run: runs.length }) };
    };
    const key = randomUUID();
    const wrapped = () =>
      lib === 'ours'
        ? middy(handler).use(idempotencyMiddleware({ store: fresh(), waitMs: 0 }))
        : middy(handler).use(makeHandlerIdempotent({ persistenceStore: persistence(), config: new IdempotencyConfig({ eventKeyJmesPath: 'headers."idempotency-key"' }) }));
    const invoke = () => wrapped()(httpEvent(key) as never, contextFor(10_000) as never);
    const first = invoke();
    await sleep(50);
    const second = await Promise.allSettled([invoke()]);
    const third = invoke();
    const settled = [...(await Promise.allSettled([first])), ...second, ...(await Promise.allSettled([third]))];
    await sleep(50);
    const later = await Promise.allSettled([invoke()]);
    const answers = [...settled, ...later].map((o) => answerOf(o));
    return { invocations: 4, executions: runs.length, doubles: Math.max(0, runs.length - 1), answers: count(answers) };
  });

  // 2. An owner still running past the deadline its record carries: a context kept from an
  // invocation that is over (Powertools reads the one registered on its shared config).
  await scenario(2, 'a record in progress whose owner runs past its deadline (a stale context), a duplicate arrives', async (lib) => {
    const { completed, handler } = staleHandler(lib);
    const id = randomUUID();
    const first = handler({ id, ms: 500 }, staleContext);
    await sleep(100);
    const outcomes = await Promise.allSettled([first, handler({ id, ms: 10 }, staleContext)]);
    return { invocations: 2, executions: completed.length, doubles: doublesOf(completed), answers: count(outcomes.map((o) => answerOf(o))) };
  });

  // 3. Orphan recovery racing a completion: 20 keys, each recovered (stale deadline) just
  // as its owner completes. Inconsistent: a caller's answer differs from what the record replays.
  await scenario(3, 'orphan recovery racing the owner\'s completion (20 keys)', async (lib) => {
    const { completed, handler } = staleHandler(lib);
    let inconsistent = 0;
    const answers: string[] = [];
    await Promise.all(
      Array.from({ length: 20 }, async () => {
        const id = randomUUID();
        const owner = handler({ id, ms: 200 }, staleContext);
        await sleep(195);
        const outcomes = await Promise.allSettled([owner, handler({ id, ms: 20 }, staleContext)]);
        await sleep(30);
        const replay = await Promise.allSettled([handler({ id, ms: 0 }, staleContext)]);
        const stored = replay[0]!.status === 'fulfilled' ? (replay[0].value as { run: string }).run : undefined;
        for (const o of outcomes) {
          answers.push(answerOf(o));
          if (o.status === 'fulfilled' && (o.value as { run: string }).run !== stored) inconsistent++;
        }
      }),
    );
    return { invocations: 60, executions: completed.length, doubles: doublesOf(completed), answers: count(answers), note: `${inconsistent} answers differ from the stored record` };
  });

  // 4. A handler that mutates its payload; the retry comes after the first invocation's deadline.
  await scenario(4, 'a handler that mutates its payload, retried after the deadline', async (lib) => {
    const completed: string[] = [];
    const handler = functionHandler(lib, async (event) => {
      event.handledAt = Date.now(); // the handler marks the event it was given
      completed.push(event.id);
      return { run: randomUUID() };
    }, { config: new IdempotencyConfig({}), fingerprint: true });
    const id = randomUUID();
    const outcomes = [await Promise.allSettled([handler({ id, amount: 5 }, contextFor(300))])];
    await sleep(1500); // past the first invocation's deadline (ours: plus its one-second margin)
    outcomes.push(await Promise.allSettled([handler({ id, amount: 5 }, contextFor(300))]));
    return { invocations: 2, executions: completed.length, doubles: doublesOf(completed), answers: count(outcomes.flat().map((o) => answerOf(o))) };
  });

  // 5. A concurrent duplicate through Middy (each library's defaults).
  await scenario(5, 'Middy: a concurrent duplicate (defaults)', async (lib) => {
    let runs = 0;
    const handler = async () => {
      runs++;
      await sleep(300);
      return { statusCode: 201, headers: { 'content-type': 'application/json' }, body: '{"ok":true}' };
    };
    const key = randomUUID();
    const wrapped = () =>
      lib === 'ours'
        ? middy(handler).use(idempotencyMiddleware({ store: fresh() }))
        : middy(handler).use(makeHandlerIdempotent({ persistenceStore: persistence(), config: new IdempotencyConfig({ eventKeyJmesPath: 'headers."idempotency-key"' }) }));
    const first = wrapped()(httpEvent(key) as never, contextFor(10_000) as never);
    await sleep(50);
    const outcomes = await Promise.allSettled([first, wrapped()(httpEvent(key) as never, contextFor(10_000) as never)]);
    return { invocations: 2, executions: runs, doubles: Math.max(0, runs - 1), answers: count(outcomes.map((o) => answerOf(o))) };
  });

  // 6. An invocation SIGKILLed mid-handler (its own process), then its retry every 200 ms.
  await scenario(6, 'an invocation SIGKILLed mid-handler, then retried every 200 ms', async (lib) => {
    const id = randomUUID();
    const worker = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(new URL('./lambda-powertools-worker.ts', import.meta.url)), lib, server.endpoint, lib === 'ours' ? oursTable : ptTable, id, '1500'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    await new Promise<void>((resolve, reject) => {
      let out = '';
      worker.stdout.on('data', (chunk) => {
        out += chunk;
        if (out.includes('started')) resolve();
      });
      worker.once('exit', () => reject(new Error(`worker exited early: ${out}`)));
    });
    worker.kill('SIGKILL');
    const killedAt = Date.now();
    const completed: string[] = [];
    const handler = functionHandler(lib, async (event) => {
      completed.push(event.id);
      return { run: randomUUID() };
    });
    const answers: string[] = [];
    let ranAfter: number | undefined;
    for (let attempt = 0; attempt < 40 && ranAfter === undefined; attempt++) {
      const [outcome] = await Promise.allSettled([handler({ id }, contextFor(10_000))]);
      answers.push(answerOf(outcome!, () => completed.length > 0));
      if (outcome!.status === 'fulfilled') ranAfter = Date.now() - killedAt;
      else await sleep(200);
    }
    return { invocations: answers.length + 1, executions: completed.length + 1, doubles: doublesOf(completed), answers: count(answers), note: `the retry ran ${ranAfter ?? 'never'} ms after the kill` };
  });

  // 7. 200 concurrent invocations over 20 keys.
  await scenario(7, '200 concurrent invocations over 20 keys', async (lib) => {
    const completed: string[] = [];
    const handler = functionHandler(lib, async (event) => {
      await sleep(50);
      completed.push(event.id);
      return { run: randomUUID() };
    });
    const ids = Array.from({ length: 20 }, () => randomUUID());
    const outcomes = await Promise.allSettled(Array.from({ length: 200 }, (_, i) => handler({ id: ids[i % 20]! }, contextFor(30_000))));
    const seen = new Set<string>();
    const answers = outcomes.map((o) => {
      if (o.status === 'rejected') return answerOf(o);
      const run = (o.value as { run: string }).run;
      const first = !seen.has(run);
      seen.add(run);
      return first ? 'result (ran)' : 'result (stored)';
    });
    return { invocations: 200, executions: completed.length, doubles: doublesOf(completed), answers: count(answers) };
  });

  // 8. Capacity: one first execution, then one replay of it.
  await scenario(8, 'one first execution', async (lib) => {
    const handler = functionHandler(lib, async () => ({ run: randomUUID() }));
    const id = `cap-${randomUUID()}`;
    capacityKeys[lib] = id;
    const outcome = await Promise.allSettled([handler({ id }, contextFor(30_000))]);
    return { invocations: 1, executions: 1, doubles: 0, answers: count(outcome.map((o) => answerOf(o, () => true))) };
  });
  await scenario(9, 'one replay', async (lib) => {
    const handler = functionHandler(lib, async () => ({ run: randomUUID() }));
    const outcome = await Promise.allSettled([handler({ id: capacityKeys[lib]! }, contextFor(30_000))]);
    return { invocations: 1, executions: 0, doubles: 0, answers: count(outcome.map((o) => answerOf(o))) };
  });

  await store.close();
  ours.client.destroy();
  pt.client.destroy();
  return rows;
}

const capacityKeys: Partial<Record<Lib, string>> = {};

/** The rows as a Markdown table. */
export function table(rows: Row[]): string {
  const lines = ['| scenario | library | invocations | executions | doubles | answers | read units | write units |', '|---|---|---|---|---|---|---|---|'];
  for (const row of rows) {
    const answers = Object.entries(row.answers)
      .map(([answer, n]) => `${n}× ${answer}`)
      .join(', ');
    const units = (value: number) => `${Number(value.toFixed(2))} (${Number((value / row.invocations).toFixed(2))}/inv.)`;
    lines.push(`| ${row.scenario} | ${row.lib} | ${row.invocations} | ${row.executions} | ${row.doubles} | ${answers}${row.note ? `; ${row.note}` : ''} | ${units(row.readUnits)} | ${units(row.writeUnits)} |`);
  }
  return lines.join('\n');
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const rows = await compare();
  console.log(table(rows));
  process.exit(0);
}
