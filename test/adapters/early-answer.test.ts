/**
 * The drain after an early answer is bounded (what every adapter passes, an early answer
 * reaching a client still sending, is in ../suites/early-answer.suite.ts, run by each
 * adapter's conformance suite).
 */
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { DRAIN_MAX_BYTES } from '../../adapters/internal/node-io.js';
import { memoryStore } from '../../drivers/memory.js';
import { startApp } from './apps.js';

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
