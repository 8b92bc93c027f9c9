/**
 * Stop a demo server when whatever started it goes away, even when that was killed without
 * passing a signal on. `npm start` runs the script through a shell: npm -> sh -> node. A
 * SIGKILL to npm leaves the shell waiting for the demo, so the demo's own parent never
 * changes; and a SIGTERM to npm reaches the shell, which dies without passing it on. So the
 * whole chain up to npm (npx, `npm run`) is watched: the demo stops when any of those
 * processes has gone, or its own parent changed. Started by anything else (`tsx demo.ts`,
 * a test), only the direct parent is watched.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

interface ProcessInfo {
  ppid: number;
  command: string;
}

/** A process's parent and command line: from /proc on Linux, from `ps` elsewhere; undefined once it is gone. */
function inspect(pid: number): ProcessInfo | undefined {
  try {
    if (process.platform === 'linux') {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      // "pid (command) state ppid ...": the command may hold spaces and parentheses.
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      const command = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').trim();
      return { ppid, command };
    }
    const line = execFileSync('ps', ['-o', 'ppid=,command=', '-p', String(pid)], { encoding: 'utf8' }).trim();
    const match = /^(\d+)\s+(.*)$/.exec(line);
    return match ? { ppid: Number(match[1]), command: match[2]! } : undefined;
  } catch {
    return undefined;
  }
}

/** npm itself, or npx, by the title npm gives its process (`npm start`, `npm exec ...`) or its script. */
const isNpm = (command: string) => /^(npm|npx)(\s|$)/.test(command) || /[/\\](npm|npx)-cli\.js(\s|$)/.test(command);

/** The ancestors to watch: up to the nearest npm (inclusive), else the direct parent alone. */
export function watchedAncestors(): number[] {
  const chain: number[] = [];
  let pid = process.ppid;
  // A few levels at most: npm -> sh -> node, or npx -> sh -> tsx -> node.
  for (let depth = 0; depth < 8 && pid > 1; depth++) {
    const info = inspect(pid);
    if (!info) break;
    chain.push(pid);
    if (isNpm(info.command)) return chain;
    pid = info.ppid;
  }
  return [process.ppid];
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: it exists, under another user.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Calls `stop` once, within about `intervalMs`, when a watched ancestor is gone or the parent changed. */
export function exitWithParent(stop: () => void, intervalMs = 1000): void {
  const parent = process.ppid;
  const ancestors = watchedAncestors();
  const timer = setInterval(() => {
    if (process.ppid !== parent || !ancestors.every(alive)) {
      clearInterval(timer);
      stop();
    }
  }, intervalMs);
  timer.unref();
}
