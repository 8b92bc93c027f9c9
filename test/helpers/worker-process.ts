/**
 * A tsx worker process for multi-process tests: it prints "ready" once connected, starts on
 * "go" (stdin), and prints one JSON line as its last output before exiting.
 */
import { spawn } from 'node:child_process';

export function startWorker<T>(script: string, args: string[]) {
  const child = spawn(process.execPath, ['--import', 'tsx', script, ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk) => (stdout += chunk));
  child.stderr.on('data', (chunk) => (stderr += chunk));
  const exited = new Promise<T>((resolve, reject) => {
    child.on('exit', (code) => {
      const last = stdout.trim().split('\n').at(-1) ?? '';
      if (code !== 0 || !last.startsWith('{')) reject(new Error(`worker exited with ${code}: ${stderr || stdout}`));
      else resolve(JSON.parse(last) as T);
    });
  });
  const ready = new Promise<void>((resolve, reject) => {
    child.stdout.on('data', () => {
      if (stdout.includes('ready\n')) resolve();
    });
    exited.catch(reject);
  });
  // Not awaited by every caller: a failure surfaces through `ready` or `exited`.
  exited.catch(() => undefined);
  return {
    child,
    ready,
    exited,
    send: (line: string) => child.stdin.write(`${line}\n`),
    /** Everything the worker has written to stdout so far. */
    stdout: () => stdout,
    /** What the worker has written so far, for a failure message. */
    output: () => `stderr: ${stderr.slice(-2000) || '(none)'}\nstdout: ${stdout.slice(-500) || '(none)'}`,
  };
}
