import { createHash } from 'node:crypto';
import { existsSync, readdirSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { downloadOutputs } from '../../../../src/cli/agent/task-outputs.js';
import { connectMaster, type MasterClient } from '../../../../src/cli/common/master-client.js';
import { makeTempDir, removeTempDirs } from '../../../support/temp.js';

/**
 * docs/security.md "What a reviewer must read, and what the broker guarantees": a lying master cannot grow `gpu-broker task outputs` (and `run`'s download) without bound.
 * What the listing says bounds what is read: a listed size over the largest output a worker can upload is
 * refused before any page is asked for; each page asks for at most what is left, and a page (or a body)
 * with more than that ends the download with a typed error as soon as it arrives; bytes go to disk as
 * they come, never all held at once. The master here is a real HTTP server that lies.
 */

afterAll(() => removeTempDirs());

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

let server: Server | undefined;
afterEach(async () => {
  server?.closeAllConnections();
  await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
  server = undefined;
});

/** Starts a master answering every request with `answer`; returns a client and how much it sent. */
async function lyingMaster(
  answer: (req: IncomingMessage, res: ServerResponse, url: URL) => void,
): Promise<{ c: MasterClient; asked: URL[] }> {
  const asked: URL[] = [];
  server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    asked.push(url);
    answer(req, res, url);
  });
  await new Promise<void>((r) => server?.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return { c: connectMaster({ url: `http://127.0.0.1:${port}`, token: 't' }), asked };
}

const json = (res: ServerResponse, body: unknown) => {
  res.setHeader('content-type', 'application/json');
  res.end(JSON.stringify(body));
};

const listed = (entries: Array<{ path: string; size: number; sha256: string }>) => ({
  outputs: entries,
  outputs_pruned_at: null,
  file: null,
});

const page = (offset: number, content: Buffer) => ({
  outputs: [],
  outputs_pruned_at: null,
  file: {
    offset,
    next_offset: offset + content.length,
    size: content.length,
    encoding: 'base64',
    content: content.toString('base64'),
  },
});

describe('task outputs from a lying master', () => {
  it('stops at the first page that holds more bytes than the listing said, and writes nothing', async () => {
    const good = Buffer.from('0123456789');
    const { c, asked } = await lyingMaster((_req, res, url) => {
      if (!url.searchParams.has('path'))
        return json(res, listed([{ path: 'm.bin', size: 10, sha256: sha(good) }]));
      // Asked for 10: sends 20, then 4 MiB (past the page body's bound).
      json(res, page(0, Buffer.alloc(asked.length <= 2 ? 20 : 4 * 1024 * 1024, 1)));
    });
    const dir = makeTempDir('outputs-lie');
    await expect(downloadOutputs(c, 'task_1', dir)).rejects.toMatchObject({ code: 'DIGEST_MISMATCH' });
    expect(asked.filter((u) => u.searchParams.has('path'))).toHaveLength(1);
    expect(asked[1]?.searchParams.get('max_bytes')).toBe('10');
    expect(readdirSync(join(dir, 'gpu-broker-outputs', 'task_1'))).toEqual([]);
    await expect(downloadOutputs(c, 'task_1', dir)).rejects.toMatchObject({ code: 'PAYLOAD_TOO_LARGE' });
    expect(readdirSync(join(dir, 'gpu-broker-outputs', 'task_1'))).toEqual([]);
    await c.close();
  });

  it('stops when pages that each look small add up to more than listed', async () => {
    const { c, asked } = await lyingMaster((_req, res, url) => {
      if (!url.searchParams.has('path'))
        return json(res, listed([{ path: 'm.bin', size: 10, sha256: 'a'.repeat(64) }]));
      const offset = Number(url.searchParams.get('offset'));
      json(res, page(offset, Buffer.alloc(6, 2))); // 6, then 6 more where 4 were left
    });
    const dir = makeTempDir('outputs-drip');
    await expect(downloadOutputs(c, 'task_1', dir)).rejects.toMatchObject({ code: 'DIGEST_MISMATCH' });
    expect(asked.map((u) => u.searchParams.get('max_bytes'))).toEqual([null, '10', '4']);
    expect(existsSync(join(dir, 'gpu-broker-outputs', 'task_1', 'm.bin'))).toBe(false);
    await c.close();
  });

  it('refuses a listed size over the largest output a worker uploads before asking for a page', async () => {
    const { c, asked } = await lyingMaster((_req, res) =>
      json(res, listed([{ path: 'huge.bin', size: 64 * 1024 ** 3, sha256: 'a'.repeat(64) }])),
    );
    await expect(downloadOutputs(c, 'task_1', makeTempDir('outputs-huge'))).rejects.toMatchObject({
      code: 'PAYLOAD_TOO_LARGE',
    });
    expect(asked).toHaveLength(1);
    await c.close();
  });

  it('refuses more outputs than a task may declare, and a malformed entry', async () => {
    const many = Array.from({ length: 65 }, (_, i) => ({ path: `f${i}`, size: 1, sha256: 'a'.repeat(64) }));
    const first = await lyingMaster((_req, res) => json(res, listed(many)));
    await expect(downloadOutputs(first.c, 'task_1', makeTempDir('outputs-many'))).rejects.toMatchObject({
      code: 'PAYLOAD_TOO_LARGE',
    });
    await first.c.close();
    server?.closeAllConnections();
    await new Promise<void>((r) => server?.close(() => r()));
    const second = await lyingMaster((_req, res) =>
      json(res, listed([{ path: 'x', size: -1 as number, sha256: 'not a digest' }])),
    );
    await expect(downloadOutputs(second.c, 'task_1', makeTempDir('outputs-bad'))).rejects.toMatchObject({
      code: 'DIGEST_MISMATCH',
    });
    await second.c.close();
  });

  it('stops reading a body that never ends, holding at most its bound', async () => {
    let sent = 0;
    let closed = false;
    const { c } = await lyingMaster((req, res, url) => {
      if (!url.searchParams.has('path'))
        return json(res, listed([{ path: 'm.bin', size: 10, sha256: 'a'.repeat(64) }]));
      res.setHeader('content-type', 'application/json');
      res.write('{"file":{"content":"');
      const chunk = Buffer.alloc(1024 * 1024, 0x41);
      const pump = () => {
        while (!closed && sent < 2 * 1024 ** 3 && res.write(chunk)) sent += chunk.length;
        if (!closed) res.once('drain', pump);
      };
      req.socket.on('close', () => {
        closed = true;
      });
      pump();
    });
    await expect(downloadOutputs(c, 'task_1', makeTempDir('outputs-endless'))).rejects.toMatchObject({
      code: 'PAYLOAD_TOO_LARGE',
    });
    // The page asked for 10 bytes: its bound is a few MiB of JSON at most, not the 2 GiB on offer.
    expect(sent).toBeLessThan(64 * 1024 * 1024);
    await c.close();
  });

  it('still downloads an honest output over several pages, and an empty one', async () => {
    const bytes = Buffer.from(Array.from({ length: 300 }, (_, i) => i % 256));
    const { c } = await lyingMaster((_req, res, url) => {
      if (!url.searchParams.has('path'))
        return json(
          res,
          listed([
            { path: 'w.bin', size: bytes.length, sha256: sha(bytes) },
            { path: 'empty', size: 0, sha256: sha(Buffer.alloc(0)) },
          ]),
        );
      const offset = Number(url.searchParams.get('offset'));
      const max = Math.min(Number(url.searchParams.get('max_bytes')), 128); // a master with small pages
      json(res, page(offset, bytes.subarray(offset, offset + max)));
    });
    const dir = makeTempDir('outputs-honest');
    const got = await downloadOutputs(c, 'task_1', dir);
    expect(got.files.map((f) => f.path)).toEqual(['w.bin', 'empty']);
    expect(readdirSync(got.root).sort()).toEqual(['empty', 'w.bin']);
    await c.close();
  });
});
