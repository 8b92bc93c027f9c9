/**
 * A real Redis Cluster for tests: 3 primaries + 3 replicas of `redis-server` on free local
 * ports in a temp dir, joined with `redis-cli --cluster create`, with a short node timeout
 * so a failover takes seconds.
 *
 * Teardown is guaranteed three ways: `stop()` (call it in afterAll); a detached reaper
 * process that kills the nodes and removes the dir as soon as the test process dies, even
 * by SIGKILL; and a sweep at start-up of dirs left by dead owners (owner.json).
 */
import { execFile, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
const DIR_PREFIX = 'idempotency-kit-redis-cluster-';

export interface ClusterNode {
  port: number;
  process: ChildProcess | undefined;
}

export interface RedisClusterFixture {
  dir: string;
  nodes: ClusterNode[];
  /** `redis+cluster://127.0.0.1:p1,127.0.0.1:p2,…` (every node as a seed). */
  url: string;
  /** Seed nodes in node-redis `rootNodes` form. */
  rootNodes: { url: string }[];
  /** Run one redis-cli command on a node; returns its raw output. */
  cli(port: number, ...args: string[]): Promise<string>;
  /** The ports of the current primaries (from a live node's view). */
  primaries(): Promise<number[]>;
  /** The ports of the live replicas of a primary. */
  replicasOf(primary: number): Promise<number[]>;
  /** The primary port serving each hash slot (index = slot). */
  slotOwners(): Promise<number[]>;
  /** SIGKILL a node (no shutdown, no goodbye to the cluster). */
  kill(port: number): void;
  /** SIGSTOP / SIGCONT a node: it neither reads nor answers while paused. */
  pause(port: number): void;
  resume(port: number): void;
  /** Start a killed node again: it rejoins as a replica of whoever took over. */
  restart(port: number): Promise<void>;
  /** Resolve when every live node says cluster_state:ok and every live replica is in sync. */
  waitHealthy(timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

export function redisServerAvailable(): boolean {
  return spawnSync('redis-server', ['--version']).status === 0 && spawnSync('redis-cli', ['--version']).status === 0;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function isRedisServer(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('redis-server');
  } catch {
    return alive(pid); // no /proc: trust the pid file
  }
}

/** Remove clusters whose test process died before cleaning up (and before its reaper could). */
async function sweepStale(): Promise<void> {
  for (const name of await readdir(tmpdir()).catch(() => [] as string[])) {
    if (!name.startsWith(DIR_PREFIX)) continue;
    const dir = path.join(tmpdir(), name);
    let owner: { ownerPid: number; pids: number[] };
    try {
      owner = JSON.parse(readFileSync(path.join(dir, 'owner.json'), 'utf8')) as typeof owner;
    } catch {
      continue; // being created right now, or not ours
    }
    if (alive(owner.ownerPid)) continue;
    for (const pid of owner.pids) if (isRedisServer(pid)) process.kill(pid, 'SIGKILL');
    await rm(dir, { recursive: true, force: true });
  }
}

function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/**
 * Free ports for `count` nodes; the cluster bus of each uses port + 10000, so both must be
 * free. `REDIS_CLUSTER_PORTS=30001` / `REDIS_SENTINEL_PORTS=30101` pin the search start
 * (a shared machine gives each user a range); otherwise it starts at a random port in
 * 20000-24999.
 */
async function freePorts(count: number, from?: string): Promise<number[]> {
  const start = Number(from ?? 20000 + Math.floor(Math.random() * 5000));
  const ports: number[] = [];
  for (let port = start; ports.length < count && port < start + 2000; port++) {
    if ((await portFree(port)) && (await portFree(port + 10000))) ports.push(port);
  }
  if (ports.length < count) throw new Error(`no ${count} free ports (with bus ports) from ${start}`);
  return ports;
}

function waitPort(port: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  return new Promise((resolve, reject) => {
    const attempt = () => {
      const socket = net.connect(port, '127.0.0.1');
      socket.once('connect', () => {
        socket.destroy();
        resolve();
      });
      socket.once('error', () => {
        socket.destroy();
        if (Date.now() > deadline) reject(new Error(`redis-server on ${port} did not come up`));
        else setTimeout(attempt, 50);
      });
    };
    attempt();
  });
}

export interface ServerGroup {
  dir: string;
  nodes: ClusterNode[];
  /** Start (or start again) a redis-server on the node's port with these extra arguments. */
  start(node: ClusterNode, args: string[]): Promise<void>;
  cli(port: number, ...args: string[]): Promise<string>;
  stop(): Promise<void>;
}

/**
 * redis-server processes in one temp dir, always torn down: by `stop()`, by a detached
 * reaper once this process is gone (even SIGKILLed), or by the sweep of the next start.
 */
export async function serverGroup(count: number, firstPort?: string): Promise<ServerGroup> {
  await sweepStale();
  const dir = await mkdtemp(path.join(tmpdir(), DIR_PREFIX));
  const allPids = new Set<number>();
  const writeOwner = () => writeFile(path.join(dir, 'owner.json'), JSON.stringify({ ownerPid: process.pid, pids: [...allPids] }));
  await writeOwner();
  // The reaper outlives a killed test process: once the owner is gone it kills the servers
  // listed in the pid files and removes the dir. It exits by itself when the dir is gone.
  const reaper = spawn(
    'sh',
    [
      '-c',
      `while kill -0 ${process.pid} 2>/dev/null && [ -d "$0" ]; do sleep 1; done
       if [ -d "$0" ]; then
         for f in "$0"/*.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
         rm -rf "$0"
       fi`,
      dir,
    ],
    { detached: true, stdio: 'ignore' },
  );
  reaper.unref();
  const nodes: ClusterNode[] = [];
  const isRunning = (node: ClusterNode) => node.process !== undefined && node.process.exitCode === null && node.process.signalCode === null;
  const stop = async () => {
    await Promise.all(
      nodes.filter(isRunning).map((node) => {
        const exited = new Promise((r) => node.process!.once('exit', r));
        node.process!.kill('SIGKILL');
        return exited;
      }),
    );
    reaper.kill('SIGKILL');
    await rm(dir, { recursive: true, force: true });
  };
  try {
    nodes.push(...(await freePorts(count, firstPort)).map((port) => ({ port, process: undefined })));
  } catch (error) {
    await stop();
    throw error;
  }
  const pidFile = (port: number) => path.join(dir, `${port}.pid`);
  return {
    dir,
    nodes,
    async start(node, args) {
      if (isRunning(node)) throw new Error(`node ${node.port} is running`);
      if (node.process) await rm(pidFile(node.port), { force: true });
      const child = spawn(
        'redis-server',
        [
          ...args,
          '--port', String(node.port),
          '--bind', '127.0.0.1',
          '--save', '',
          '--appendonly', 'no',
          '--dir', dir,
          '--logfile', `${node.port}.log`,
          '--pidfile', pidFile(node.port),
        ],
        { stdio: 'ignore' },
      );
      node.process = child;
      allPids.add(child.pid!);
      await writeOwner();
      await waitPort(node.port, 10_000);
    },
    async cli(port, ...args) {
      return (await run('redis-cli', ['-h', '127.0.0.1', '-p', String(port), ...args], { timeout: 5000 })).stdout;
    },
    stop,
  };
}

export async function startRedisCluster(options: { nodeTimeoutMs?: number } = {}): Promise<RedisClusterFixture> {
  const nodeTimeoutMs = options.nodeTimeoutMs ?? 1000;
  const group = await serverGroup(6, process.env.REDIS_CLUSTER_PORTS);
  const { dir, nodes, cli, stop } = group;
  const ports = nodes.map((n) => n.port);
  const startNode = (node: ClusterNode) =>
    group.start(node, [
      '--cluster-enabled', 'yes',
      '--cluster-config-file', `nodes-${node.port}.conf`,
      '--cluster-node-timeout', String(nodeTimeoutMs),
      // A replica catches up at once instead of after the default 5 s diskless delay.
      '--repl-diskless-sync', 'yes',
      '--repl-diskless-sync-delay', '0',
    ]);
  try {
    for (const node of nodes) await startNode(node);
    await run(
      'redis-cli',
      ['--cluster', 'create', ...ports.map((p) => `127.0.0.1:${p}`), '--cluster-replicas', '1', '--cluster-yes'],
      { timeout: 60_000 },
    );
  } catch (error) {
    await stop();
    throw error;
  }

  const liveNodes = () => nodes.filter((n) => n.process && n.process.exitCode === null && n.process.signalCode === null);

  const clusterNodes = async () => {
    const [node] = liveNodes();
    const text = await cli(node!.port, 'cluster', 'nodes');
    return text
      .trim()
      .split('\n')
      .filter((line) => line.includes(' '))
      .map((line) => {
        const [id, address, flags, master, , , , , ...slots] = line.split(' ');
        return { id: id!, port: Number(address!.split(':')[1]!.split('@')[0]), flags: flags!.split(','), master: master!, slots };
      });
  };

  const waitHealthy = async (timeoutMs = 30_000) => {
    const deadline = Date.now() + timeoutMs;
    let last = '';
    while (Date.now() < deadline) {
      try {
        const checks = await Promise.all(
          liveNodes().map(async (node) => {
            const info = await cli(node.port, 'cluster', 'info');
            if (!info.includes('cluster_state:ok')) return `${node.port}: ${/cluster_state:\w+/.exec(info)?.[0]}`;
            const replication = await cli(node.port, 'info', 'replication');
            if (replication.includes('role:slave') && !replication.includes('master_link_status:up')) return `${node.port}: replica not in sync`;
            const view = (await cli(node.port, 'cluster', 'nodes')).trim().split('\n');
            // Every live node agrees: exactly 3 primaries holding slots, none flagged failed.
            const serving = view.filter((line) => line.includes('master') && !line.includes('fail') && line.split(' ').length > 8);
            if (serving.length !== 3) return `${node.port}: sees ${serving.length} serving primaries`;
            return '';
          }),
        );
        last = checks.filter(Boolean).join('; ');
        if (last === '') return;
      } catch (error) {
        last = String(error);
      }
      await sleep(100);
    }
    throw new Error(`Redis Cluster not healthy after ${timeoutMs} ms: ${last}`);
  };

  const fixture: RedisClusterFixture = {
    dir,
    nodes,
    url: `redis+cluster://${ports.map((p) => `127.0.0.1:${p}`).join(',')}`,
    rootNodes: ports.map((p) => ({ url: `redis://127.0.0.1:${p}` })),
    cli,
    async primaries() {
      return (await clusterNodes()).filter((n) => n.flags.includes('master') && !n.flags.some((f) => f.startsWith('fail')) && n.slots.length > 0).map((n) => n.port);
    },
    async replicasOf(primary: number) {
      const view = await clusterNodes();
      const id = view.find((n) => n.port === primary)?.id;
      return view.filter((n) => n.master === id && !n.flags.some((f) => f.startsWith('fail'))).map((n) => n.port);
    },
    async slotOwners() {
      const owners: number[] = [];
      for (const node of await clusterNodes()) {
        if (!node.flags.includes('master') || node.flags.some((f) => f.startsWith('fail'))) continue;
        for (const range of node.slots) {
          if (range.startsWith('[')) continue; // a slot being migrated
          const [from, to = from] = range.split('-').map(Number);
          for (let slot = from!; slot <= to!; slot++) owners[slot] = node.port;
        }
      }
      return owners;
    },
    kill(port: number) {
      const node = nodes.find((n) => n.port === port);
      if (!node?.process) throw new Error(`no node on ${port}`);
      node.process.kill('SIGKILL');
    },
    pause(port: number) {
      nodes.find((n) => n.port === port)!.process!.kill('SIGSTOP');
    },
    resume(port: number) {
      nodes.find((n) => n.port === port)!.process!.kill('SIGCONT');
    },
    async restart(port: number) {
      const node = nodes.find((n) => n.port === port)!;
      if (node.process && node.process.exitCode === null && node.process.signalCode === null) {
        await new Promise((r) => node.process!.once('exit', r));
      }
      await startNode(node);
    },
    waitHealthy,
    stop,
  };
  try {
    await waitHealthy(60_000);
  } catch (error) {
    await stop();
    throw error;
  }
  return fixture;
}
