/** Ports for test servers started in child processes. */
import net from 'node:net';

/** A port nothing listens on right now (the OS picks it). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** Wait (up to 20 s) until `port` accepts connections; `exited()` returns the output of a process that died. */
export async function untilListening(port: number, exited: () => string | undefined): Promise<void> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const failure = exited();
    if (failure !== undefined) throw new Error(`the server exited:\n${failure}`);
    const open = await new Promise<boolean>((resolve) => {
      const socket = net.connect(port, '127.0.0.1');
      socket.once('connect', () => {
        socket.destroy();
        resolve(true);
      });
      socket.once('error', () => resolve(false));
    });
    if (open) return;
    if (Date.now() > deadline) throw new Error('the server did not start listening');
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
