/** TypeScript programs (examples, pages' code, servers) run in their own Node process through tsx. */
import { spawn, type ChildProcess } from 'node:child_process';
import { freePort, untilListening } from './ports.js';

export interface TsProcess {
  child: ChildProcess;
  /** Its stdout and stderr so far, interleaved. */
  output(): string;
  /** Its exit code (null when killed by a signal). */
  exited: Promise<number | null>;
}

/** Run `file` with `env` as its whole environment (default: this process's). */
export function runTs(file: string, options: { cwd?: string; env?: NodeJS.ProcessEnv } = {}): TsProcess {
  const child = spawn(process.execPath, ['--import', 'tsx', file], {
    cwd: options.cwd,
    env: options.env ?? process.env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (chunk) => (output += chunk));
  child.stderr!.on('data', (chunk) => (output += chunk));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, exited, output: () => output };
}

/** Start a server program on a free port (given as `PORT`); resolves once it accepts connections. */
export async function startTsServer(
  file: string,
  options: { cwd?: string; env?: NodeJS.ProcessEnv } = {},
): Promise<TsProcess & { url: string; stop(): void }> {
  const port = await freePort();
  const proc = runTs(file, { cwd: options.cwd, env: { ...(options.env ?? process.env), PORT: String(port) } });
  const stop = () => {
    proc.child.kill('SIGTERM');
  };
  try {
    await untilListening(port, () => (proc.child.exitCode === null ? undefined : proc.output()));
  } catch (error) {
    stop();
    throw error;
  }
  return { ...proc, url: `http://127.0.0.1:${port}`, stop };
}
