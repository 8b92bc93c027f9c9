/**
 * The demo behind `npm start` and `npm run demo:storm`, on every adapter, on the embedded
 * SQLite store it uses by default; and `npm start` itself, stopped by killing npm.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { ADAPTERS, startDemo } from '../examples/demo.js';
import { storm } from '../examples/storm.js';
import { freePort } from './helpers/ports.js';

const dir = mkdtempSync(join(tmpdir(), 'idempotency-demo-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe.each(ADAPTERS)('demo on %s', (adapter) => {
  it('H9: the storm runs the protected debit once (balance 9 000); the unprotected route runs it more', async () => {
    const demo = await startDemo({ adapter, storeUrl: `sqlite://${join(dir, `${adapter}-storm.sqlite`)}`, workMs: 50 });
    try {
      const protectedRow = await storm(demo.url, 'protected');
      expect(protectedRow).toMatchObject({ executions: 1, balance: 9000, conflicts: 0, errors: 0, replays: 54 });
      const unprotected = await storm(demo.url, 'unprotected');
      expect(unprotected.executions).toBeGreaterThan(1);
    } finally {
      await demo.close();
    }
  });

  it('H7: a retry after restarting the demo still replays from the SQLite file', async () => {
    const storeUrl = `sqlite://${join(dir, `${adapter}-restart.sqlite`)}`;
    const balancesFile = join(dir, `${adapter}-balances.json`);
    const debit = (url: string) =>
      fetch(`${url}/accounts/acc_restart/debits`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': 'restart-1' },
        body: JSON.stringify({ amount: 1000 }),
      });
    const first = await startDemo({ adapter, storeUrl, balancesFile, workMs: 1 });
    const original = await debit(first.url);
    const originalBody = await original.text();
    expect(original.status).toBe(201);
    await first.close();

    const second = await startDemo({ adapter, storeUrl, balancesFile, workMs: 1 });
    try {
      const retry = await debit(second.url);
      expect(retry.status).toBe(201);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(await retry.text()).toBe(originalBody);
      const account = (await (await fetch(`${second.url}/accounts/acc_restart`)).json()) as { balance: number };
      expect(account.balance).toBe(9000);
    } finally {
      await second.close();
    }
  });
});

/** The parent of a live process (a zombie counts as gone), from /proc. */
function parentOf(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const [state, ppid] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return state === 'Z' ? undefined : Number(ppid);
  } catch {
    return undefined;
  }
}

/** Every live process below `pid`. */
function descendants(pid: number): number[] {
  const parents = new Map<number, number>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const ppid = parentOf(Number(name));
    if (ppid !== undefined) parents.set(Number(name), ppid);
  }
  const below = (of: number): number[] => [...parents].filter(([, ppid]) => ppid === of).flatMap(([child]) => [child, ...below(child)]);
  return below(pid);
}

const accepts = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => (socket.destroy(), resolve(true)));
    socket.once('error', () => resolve(false));
  });

async function within(ms: number, what: string, check: () => boolean | Promise<boolean>): Promise<number> {
  const started = performance.now();
  while (!(await check())) {
    if (performance.now() - started > ms) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return performance.now() - started;
}

// The README says the demo stops when the process that started it goes away. npm runs it
// through a shell (npm -> sh -> node), and a killed npm passes nothing on: SIGKILL kills npm
// alone, SIGTERM kills the shell, which does not pass it to the demo. (/proc: Linux only.)
describe.runIf(process.platform === 'linux')('npm start', () => {
  const root = fileURLToPath(new URL('../', import.meta.url));

  for (const signal of ['SIGTERM', 'SIGKILL'] as const) {
    it(`${signal} to npm stops the demo: its port is freed within a few seconds, and nothing it started is left`, async () => {
      const port = await freePort();
      const npm = spawn('npm', ['start'], {
        cwd: root,
        env: { ...process.env, PORT: String(port), IDEMPOTENCY_STORE: `sqlite://${join(dir, `npm-start-${signal}.sqlite`)}` },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let output = '';
      let family: number[] = [];
      npm.stdout.on('data', (chunk) => (output += chunk));
      npm.stderr.on('data', (chunk) => (output += chunk));
      try {
        await within(60_000, `npm start did not serve on ${port}:\n${output}`, () => output.includes(`on http://127.0.0.1:${port}`));
        expect((await fetch(`http://127.0.0.1:${port}/accounts/acc_1`)).status).toBe(200);
        family = descendants(npm.pid!);
        expect(family.length, 'npm runs the demo through a shell').toBeGreaterThanOrEqual(2);

        npm.kill(signal);
        const freed = await within(8_000, `port ${port} still served after ${signal} to npm`, async () => !(await accepts(port)));
        await within(8_000, `processes left after ${signal} to npm`, () => family.every((pid) => parentOf(pid) === undefined));
        console.log(`npm start, ${signal} to npm: port freed after ${Math.round(freed)} ms`);
      } finally {
        // Whatever is left if the test failed: it must not keep the port.
        for (const pid of [npm.pid!, ...family]) if (parentOf(pid) !== undefined) process.kill(pid, 'SIGKILL');
      }
    }, 120_000);
  }
});
