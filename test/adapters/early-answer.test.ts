/**
 * The drain after an early answer is bounded (what every adapter passes, an early answer
 * reaching a client still sending, is in ../suites/early-answer.suite.ts, run by each
 * adapter's conformance suite), and Hono and fetch handlers served by @hono/node-server
 * get it too: a client that writes its whole body before it reads gets the 413, never a
 * reset, every time.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { DRAIN_MAX_BYTES } from '../../adapters/internal/node-io.js';
import { memoryStore } from '../../drivers/memory.js';
import { startApp } from './apps.js';

const ROUNDS = 60;

/** A request as raw bytes, its body 3 MiB (with a Content-Length or chunked). */
function hugeRequest(key: string, chunked: boolean): Buffer {
  const body = Buffer.alloc(3 * 1024 * 1024, 'a');
  const head = ['POST /payments HTTP/1.1', 'Host: 127.0.0.1', 'Connection: close', 'Content-Type: application/json', `Idempotency-Key: ${key}`];
  head.push(chunked ? 'Transfer-Encoding: chunked' : `Content-Length: ${body.length}`);
  const parts = [Buffer.from(`${head.join('\r\n')}\r\n\r\n`, 'latin1')];
  if (!chunked) parts.push(body);
  else {
    for (let at = 0; at < body.length; at += 16 * 1024) {
      const piece = body.subarray(at, at + 16 * 1024);
      parts.push(Buffer.from(`${piece.length.toString(16)}\r\n`, 'latin1'), piece, Buffer.from('\r\n', 'latin1'));
    }
    parts.push(Buffer.from('0\r\n\r\n', 'latin1'));
  }
  return Buffer.concat(parts);
}

/** Write `bytes` in one go and only then look at what came back: the status line, or the socket error with nothing read. */
function sendAll(port: number, bytes: Buffer): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    let answer = '';
    socket.on('data', (d: Buffer) => (answer += d.toString('latin1')));
    socket.on('error', (error: NodeJS.ErrnoException) => resolve(answer === '' ? `${error.code ?? error.message}, nothing read` : answer.split('\r\n')[0]!));
    socket.on('end', () => resolve(answer.split('\r\n')[0]!));
    socket.setTimeout(15_000, () => socket.destroy(new Error('no answer in 15 s')));
    socket.write(bytes);
  });
}

const serverScript = fileURLToPath(new URL('./early-answer-server.ts', import.meta.url));

/** The adapter's server in a process of its own; its port. */
async function startServer(adapter: string, children: ChildProcess[]): Promise<number> {
  const child = spawn(process.execPath, ['--import', 'tsx', serverScript, adapter], { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let output = '';
  child.stderr!.on('data', (d) => (output += d));
  return new Promise<number>((resolve, reject) => {
    child.stdout!.on('data', (d) => {
      const match = /listening (\d+)/.exec(String(d));
      if (match) resolve(Number(match[1]));
    });
    child.once('exit', (code) => reject(new Error(`server exited with ${code}: ${output}`)));
  });
}

describe('on @hono/node-server, an early 413 reaches a client that writes its whole body before it reads', () => {
  const children: ChildProcess[] = [];
  afterAll(() => children.forEach((child) => child.kill()));
  for (const adapter of ['hono', 'fetch']) {
    for (const chunked of [false, true]) {
      it(`${adapter}: ${ROUNDS} bodies of 3 MiB (${chunked ? 'chunked' : 'Content-Length'}) over a 256 KiB limit, ${ROUNDS} answers 413`, async () => {
        const port = await startServer(adapter, children);
        const answers: string[] = [];
        for (let i = 0; i < ROUNDS; i++) answers.push(await sendAll(port, hugeRequest(`huge-${i}`, chunked)));
        expect(answers).toEqual(Array.from({ length: ROUNDS }, () => 'HTTP/1.1 413 Payload Too Large'));
      }, 120_000);
    }
  }
});

describe('the drain is bounded', () => {
  it('a body far past the drain bound is cut off: the server closes instead of reading forever', async () => {
    const app = await startApp('node', { store: memoryStore() });
    try {
      const socket = await new Promise<net.Socket>((resolve, reject) => {
        const s = net.connect(app.port, '127.0.0.1', () => resolve(s));
        s.once('error', reject);
      });
      const head =
        'POST /payments HTTP/1.1\r\nHost: x\r\nIdempotency-Key: endless\r\ncontent-type: application/json\r\n' +
        `content-length: ${DRAIN_MAX_BYTES * 4}\r\n\r\n`;
      socket.write(head);
      let answer = '';
      let closed = false;
      socket.on('data', (d: Buffer) => (answer += d.toString('latin1')));
      socket.on('error', () => undefined);
      socket.on('close', () => (closed = true));
      const chunk = Buffer.alloc(256 * 1024, 'x');
      let sent = 0;
      while (!closed && sent < DRAIN_MAX_BYTES * 4) {
        if (!socket.write(chunk)) await new Promise((resolve) => socket.once('drain', resolve).once('close', resolve));
        sent += chunk.length;
      }
      await new Promise((resolve) => (closed ? resolve(undefined) : socket.once('close', resolve)));
      expect(answer).toMatch(/^HTTP\/1\.1 413 /);
      expect(sent).toBeLessThan(DRAIN_MAX_BYTES * 4);
    } finally {
      await app.close();
    }
  });
});
