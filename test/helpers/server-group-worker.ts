/**
 * Starts one redis-server through `serverGroup` and then idles, so a test can SIGKILL this
 * process and check that the reaper removes the server and its dir. Prints one JSON line.
 */
import { serverGroup } from './redis-cluster.js';

const group = await serverGroup(1, process.argv[2]);
await group.start(group.nodes[0]!, []);
process.stdout.write(`${JSON.stringify({ dir: group.dir, pid: group.nodes[0]!.process!.pid, port: group.nodes[0]!.port })}\n`);
setInterval(() => undefined, 60_000);
