import { once } from 'node:events';
import {
  existsSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  statSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { httpsBlobFetcher } from '../../../../worker/task-io/input-fetch.js';
import { makeTempDir, removeTempDirs } from '../../../support/temp.js';

// The worker's input fetcher against a real HTTP server on loopback that misbehaves the way a broken or
// hostile master could: the declared size is the most that reaches the worker's disk, whatever is sent.

const SHA = 'a'.repeat(64);
const servers: Server[] = [];

afterEach(async () => {
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
  removeTempDirs();
});

/** Whether this process still has `path` open (Linux: /proc/self/fd); a deleted file reads as `path (deleted)`. */
function heldOpen(path: string): boolean {
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      if (readlinkSync(`/proc/self/fd/${fd}`).startsWith(path)) return true;
    } catch {
      // gone since the listing
    }
  }
  return false;
}

async function serve(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<string> {
  const server = createServer(handler);
  servers.push(server);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe('httpsBlobFetcher against a real server', () => {
  it('a body past the declared size is cut: the request is dropped and the file holds at most that size', async () => {
    let sent = 0;
    let closed = false;
    const url = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      const chunk = Buffer.alloc(64 * 1024, 7);
      // Endless: only the worker hanging up ends it.
      const pump = () => {
        while (!res.destroyed && res.write(chunk)) sent += chunk.length;
        if (!res.destroyed) res.once('drain', pump);
      };
      res.on('close', () => {
        closed = true;
      });
      pump();
    });
    const into = join(makeTempDir('fetch-'), 'blob');
    const max = 1024 * 1024;
    await expect(httpsBlobFetcher({ masterUrl: url, token: 't' })('exec-1', SHA, max, into)).rejects.toThrow(
      `the master sent more than the ${max} bytes the spec declares`,
    );
    expect(statSync(into).size).toBeLessThanOrEqual(max);
    await expect.poll(() => closed).toBe(true);
    // The server was stopped early, not after writing gigabytes (a generous bound: socket buffers).
    expect(sent).toBeLessThan(64 * max);
  });

  it("asks for the execution's blob with the worker token, and writes exactly what came", async () => {
    let seen: { url?: string | undefined; auth?: string | undefined } = {};
    const url = await serve((req, res) => {
      seen = { url: req.url, auth: req.headers.authorization };
      res.end('hello');
    });
    const into = join(makeTempDir('fetch-'), 'blob');
    await httpsBlobFetcher({
      masterUrl: `${url.replace('http', 'ws')}/api/v1/workers/connect`,
      token: 'tok',
    })('exec-1', SHA, 5, into);
    expect(seen).toEqual({ url: `/api/v1/executions/exec-1/inputs/${SHA}`, auth: 'Bearer tok' });
    expect(readFileSync(into, 'utf8')).toBe('hello');
  });

  it('an error answer is a rejection with its status and the start of its message, nothing written', async () => {
    const url = await serve((_req, res) => {
      res.writeHead(404);
      res.end(`${'no such input '.repeat(1000)}`);
    });
    const into = join(makeTempDir('fetch-'), 'blob');
    const err = await httpsBlobFetcher({ masterUrl: url, token: 't' })('exec-1', SHA, 10, into).catch(
      (e) => e,
    );
    expect(String(err)).toMatch(/the master answered 404: no such input/);
    expect(String(err).length).toBeLessThan(700);
    expect(existsSync(into)).toBe(false);
  });

  it('never writes through a file that is already there (a planted link or an earlier copy)', async () => {
    const url = await serve((_req, res) => res.end('payload'));
    const dir = makeTempDir('fetch-');
    const into = join(dir, 'blob');
    writeFileSync(into, 'earlier');
    await expect(httpsBlobFetcher({ masterUrl: url, token: 't' })('exec-1', SHA, 100, into)).rejects.toThrow(
      /EEXIST/,
    );
    expect(readFileSync(into, 'utf8')).toBe('earlier');
  });

  it('a master that stops sending mid-body is a timeout, not a hang', async () => {
    const url = await serve((_req, res) => {
      res.writeHead(200, { 'content-length': '100' });
      res.write('only part');
    });
    const into = join(makeTempDir('fetch-'), 'blob');
    await expect(
      httpsBlobFetcher({ masterUrl: url, token: 't', timeoutMs: 300 })('exec-1', SHA, 100, into),
    ).rejects.toThrow();
  });

  it('an endless error answer is dropped after its first KiB, not read to its end', async () => {
    let closed = false;
    const url = await serve((_req, res) => {
      res.writeHead(500);
      res.on('close', () => {
        closed = true;
      });
      const pump = () => {
        while (!res.destroyed && res.write('x'.repeat(16 * 1024)));
        if (!res.destroyed) res.once('drain', pump);
      };
      pump();
    });
    const into = join(makeTempDir('fetch-'), 'blob');
    await expect(httpsBlobFetcher({ masterUrl: url, token: 't' })('exec-1', SHA, 10, into)).rejects.toThrow(
      /the master answered 500: x+$/,
    );
    await expect.poll(() => closed).toBe(true);
  });

  it('a master that trickles bytes forever hits the whole-fetch deadline (idle time + size at the slowest rate)', async () => {
    const timers: NodeJS.Timeout[] = [];
    const url = await serve((_req, res) => {
      res.writeHead(200, { 'content-length': '1000' });
      // A byte every 20 ms: never idle for the 200 ms idle timeout, and never done.
      timers.push(setInterval(() => res.destroyed || res.write('b'), 20));
    });
    const into = join(makeTempDir('fetch-'), 'blob');
    const fetch = httpsBlobFetcher({ masterUrl: url, token: 't', timeoutMs: 200, minBytesPerSecond: 10_000 });
    try {
      // deadline = 200 ms + 1000 bytes at 10,000 B/s = 300 ms
      await expect(fetch('exec-1', SHA, 1000, into)).rejects.toThrow(
        'took longer than 300 ms for at most 1000 bytes',
      );
    } finally {
      for (const t of timers) clearInterval(t);
    }
  });

  it('a signal stops a fetch part-way: the connection is dropped and the fetch rejects at once', async () => {
    const timers: NodeJS.Timeout[] = [];
    let closed = false;
    let firstByte: () => void = () => undefined;
    const writing = new Promise<void>((r) => {
      firstByte = r;
    });
    const url = await serve((_req, res) => {
      res.writeHead(200, { 'content-length': '1000' });
      res.on('close', () => {
        closed = true;
      });
      // A slow master, well inside every timeout: only the signal can end it early.
      timers.push(
        setInterval(() => {
          if (res.destroyed) return;
          res.write('b');
          firstByte();
        }, 20),
      );
    });
    const into = join(makeTempDir('fetch-'), 'blob');
    const stop = new AbortController();
    const fetching = httpsBlobFetcher({ masterUrl: url, token: 't' })('exec-1', SHA, 1000, into, stop.signal);
    try {
      await writing;
      stop.abort();
      await expect(fetching).rejects.toThrow('stopped part-way');
      await expect.poll(() => closed).toBe(true);
    } finally {
      for (const t of timers) clearInterval(t);
    }
  });

  it("a fetch stopped part-way has closed its file when it rejects, so the caller's unlink is final", async () => {
    const timers: NodeJS.Timeout[] = [];
    const url = await serve((_req, res) => {
      res.writeHead(200, { 'content-length': '1000' });
      timers.push(
        setInterval(() => {
          if (!res.destroyed) res.write('b');
        }, 20),
      );
    });
    const into = join(makeTempDir('fetch-'), 'blob');
    const stop = new AbortController();
    const fetching = httpsBlobFetcher({ masterUrl: url, token: 't' })('exec-1', SHA, 1000, into, stop.signal);
    try {
      await expect.poll(() => existsSync(into)).toBe(true);
      stop.abort();
      await expect(fetching).rejects.toThrow('stopped part-way');
      // Rejected while its write stream was still open (or still opening), the fetch would let that stream
      // create or write the file after the caller (inputs.ts) removed it.
      expect(heldOpen(into)).toBe(false);
      unlinkSync(into);
      await new Promise((r) => setTimeout(r, 100));
      expect(existsSync(into)).toBe(false);
    } finally {
      for (const t of timers) clearInterval(t);
    }
  });

  it('a signal already stopped asks the master for nothing', async () => {
    let asked = false;
    const url = await serve((_req, res) => {
      asked = true;
      res.end('x');
    });
    const stop = new AbortController();
    stop.abort();
    const into = join(makeTempDir('fetch-'), 'blob');
    await expect(
      httpsBlobFetcher({ masterUrl: url, token: 't' })('exec-1', SHA, 1, into, stop.signal),
    ).rejects.toThrow('stopped before it began');
    expect(asked).toBe(false);
    expect(existsSync(into)).toBe(false);
  });
});
