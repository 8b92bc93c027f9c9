/**
 * A real Redis Sentinel set-up for tests: one primary, one replica and three sentinels
 * (quorum 2) on free local ports, with `down-after-milliseconds 1000` so a failover takes
 * seconds. Torn down like the cluster (test/helpers/redis-cluster.ts `serverGroup`).
 */
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { serverGroup, type ClusterNode } from './redis-cluster.js';

export const SENTINEL_MASTER = 'idempotency';

export interface RedisSentinelFixture {
  /** `redis+sentinel://127.0.0.1:s1,127.0.0.1:s2,127.0.0.1:s3/idempotency`. */
  url: string;
  sentinelPorts: number[];
  /** The data node ports (primary first at start-up). */
  dataPorts: number[];
  cli(port: number, ...args: string[]): Promise<string>;
  /** The primary's port as the sentinels report it (all must agree). */
  primary(): Promise<number>;
  kill(port: number): void;
  pause(port: number): void;
  resume(port: number): void;
  /** Start a killed data node again; the sentinels turn it into a replica of the new primary. */
  restart(port: number): Promise<void>;
  /** Resolve once all sentinels agree on a primary that is up and has a replica in sync. */
  waitHealthy(timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function startRedisSentinel(): Promise<RedisSentinelFixture> {
  const group = await serverGroup(5, process.env.REDIS_SENTINEL_PORTS);
  const [primary, replica, ...sentinels] = group.nodes as [ClusterNode, ClusterNode, ...ClusterNode[]];
  const data = [primary, replica];
  const replication = ['--repl-diskless-sync', 'yes', '--repl-diskless-sync-delay', '0'];
  const node = (port: number) => group.nodes.find((n) => n.port === port)!;

  const startData = async (n: ClusterNode, replicaOf?: number) =>
    group.start(n, [...replication, ...(replicaOf ? ['--replicaof', '127.0.0.1', String(replicaOf)] : [])]);

  try {
    await startData(primary);
    await startData(replica, primary.port);
    for (const sentinel of sentinels) {
      // Sentinel rewrites its config file, so each one gets its own, in the group's dir.
      const config = path.join(group.dir, `sentinel-${sentinel.port}.conf`);
      await writeFile(
        config,
        [
          `sentinel monitor ${SENTINEL_MASTER} 127.0.0.1 ${primary.port} 2`,
          `sentinel down-after-milliseconds ${SENTINEL_MASTER} 1000`,
          `sentinel failover-timeout ${SENTINEL_MASTER} 5000`,
          '',
        ].join('\n'),
      );
      await group.start(sentinel, [config, '--sentinel']);
    }
  } catch (error) {
    await group.stop();
    throw error;
  }

  const primaryPort = async () => {
    const answers = await Promise.all(
      sentinels.map(async (s) => (await group.cli(s.port, 'sentinel', 'get-master-addr-by-name', SENTINEL_MASTER)).trim().split('\n')[1]),
    );
    if (new Set(answers).size !== 1) throw new Error(`sentinels disagree on the primary: ${answers.join(', ')}`);
    return Number(answers[0]);
  };

  const waitHealthy = async (timeoutMs = 30_000) => {
    const deadline = Date.now() + timeoutMs;
    let last = '';
    while (Date.now() < deadline) {
      try {
        const port = await primaryPort();
        const info = await group.cli(port, 'info', 'replication');
        const others = await Promise.all(sentinels.map(async (s) => (await group.cli(s.port, 'sentinel', 'master', SENTINEL_MASTER)).trim().split('\n')));
        const field = (lines: string[], name: string) => lines[lines.indexOf(name) + 1];
        if (!info.includes('role:master')) last = `${port} is not a primary yet`;
        else if (!/connected_slaves:1/.test(info) || !/slave0:.*state=online/.test(info)) last = `${port} has no replica in sync`;
        else if (others.some((lines) => field(lines, 'num-other-sentinels') !== '2')) last = 'sentinels do not all know each other';
        else if (others.some((lines) => field(lines, 'num-slaves') !== '1' || !field(lines, 'flags')?.startsWith('master'))) last = 'sentinels see no healthy primary + replica';
        else {
          // The replica itself has its link up (a replica of a restarted primary may still be syncing).
          const replicaPort = data.map((n) => n.port).find((p) => p !== port)!;
          if ((await group.cli(replicaPort, 'info', 'replication')).includes('master_link_status:up')) return;
          last = `replica ${replicaPort} not in sync`;
        }
      } catch (error) {
        last = String(error);
      }
      await sleep(100);
    }
    throw new Error(`Redis Sentinel set-up not healthy after ${timeoutMs} ms: ${last}`);
  };

  const fixture: RedisSentinelFixture = {
    url: `redis+sentinel://${sentinels.map((s) => `127.0.0.1:${s.port}`).join(',')}/${SENTINEL_MASTER}`,
    sentinelPorts: sentinels.map((s) => s.port),
    dataPorts: data.map((n) => n.port),
    cli: group.cli,
    primary: primaryPort,
    kill: (port) => node(port).process!.kill('SIGKILL'),
    pause: (port) => node(port).process!.kill('SIGSTOP'),
    resume: (port) => node(port).process!.kill('SIGCONT'),
    async restart(port) {
      const n = node(port);
      if (n.process && n.process.exitCode === null && n.process.signalCode === null) {
        await new Promise((r) => n.process!.once('exit', r));
      }
      // Start it as a replica of the current primary, as a supervisor that read the
      // sentinels would; the sentinels would convert it anyway, after a moment as a stale primary.
      await startData(n, await primaryPort());
    },
    waitHealthy,
    stop: group.stop,
  };
  try {
    await waitHealthy(60_000);
  } catch (error) {
    await group.stop();
    throw error;
  }
  return fixture;
}
