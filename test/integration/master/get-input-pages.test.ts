import { createHash, randomBytes } from 'node:crypto';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHUNK_BYTES, setVerifiedContentCacheBytes } from '../../../src/broker/verified-blob.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { expectError, expectOk } from '../../support/mcp.js';
import { validSpec } from '../../support/spec.js';

/**
 * docs/performance.md "Noisy neighbours": get_input verifies a blob whole once and then page by page (src/broker/verified-blob.ts
 * verifiedPages), so paging is O(size) in all; what it serves stays exactly the verified bytes. The
 * attack: the blob is changed in the master's store after the first page was read, keeping its size.
 * The memo must not hide it: the page that would serve a changed byte is refused (INTERNAL).
 */

interface Input {
  path: string;
  sha256: string;
  size: number;
}
interface Page {
  content: string;
  encoding: 'utf8' | 'base64';
  offset: number;
  next_offset: number;
  complete: boolean;
  size: number;
}

let m: TestMaster;
let alice: Client;

beforeAll(async () => {
  m = await startTestMaster();
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
});
afterAll(async () => {
  await m?.close();
});

async function proposalWith(
  path: string,
  content: Buffer,
): Promise<{ proposal_id: string; revision_id: string }> {
  const [input] = expectOk(
    await m.callTool<{ inputs: Input[] }>(alice, 'upload_inputs', {
      files: [{ path, content: content.toString('base64'), encoding: 'base64' }],
      idempotency_key: m.key(),
    }),
  ).inputs;
  return expectOk(
    await m.callTool<{ proposal_id: string; revision_id: string }>(alice, 'create_proposal', {
      spec: validSpec({ inputs: [input!] }),
      idempotency_key: m.key(),
    }),
  );
}

async function page(
  r: { proposal_id: string; revision_id: string },
  path: string,
  offset: number,
  maxBytes?: number,
) {
  return m.callTool<Page>(alice, 'get_input', {
    proposal_id: r.proposal_id,
    revision_id: r.revision_id,
    path,
    offset,
    ...(maxBytes === undefined ? {} : { max_bytes: maxBytes }),
  });
}

async function readAll(r: { proposal_id: string; revision_id: string }, path: string, maxBytes?: number) {
  const parts: Buffer[] = [];
  let offset = 0;
  for (;;) {
    const p = expectOk(await page(r, path, offset, maxBytes));
    expect(p.offset).toBe(offset);
    const bytes = Buffer.from(p.content, p.encoding === 'utf8' ? 'utf8' : 'base64');
    expect(bytes.length).toBe(p.next_offset - offset);
    parts.push(bytes);
    offset = p.next_offset;
    if (p.complete) return Buffer.concat(parts);
  }
}

describe('get_input pages across verified chunks', () => {
  it('serves every byte of a binary blob spanning several chunks, at odd page sizes', async () => {
    const blob = randomBytes(3 * CHUNK_BYTES + 12345);
    const r = await proposalWith('data.bin', blob);
    expect((await readAll(r, 'data.bin')).equals(blob)).toBe(true);
    expect((await readAll(r, 'data.bin', 100_003)).equals(blob)).toBe(true);
  });

  it('keeps text pages on character boundaries where a page meets a chunk boundary', async () => {
    // 4-byte characters, offset by one byte so that characters straddle every chunk boundary.
    const text = Buffer.from(`a${'𝄞'.repeat(CHUNK_BYTES / 2)}`);
    const r = await proposalWith('notes.txt', text);
    const p = expectOk(await page(r, 'notes.txt', CHUNK_BYTES - 2, 5));
    expect(p.encoding).toBe('utf8');
    expect(p.content).not.toContain('\uFFFD');
    expect((await readAll(r, 'notes.txt', 99_999)).equals(text)).toBe(true);
  });

  it('serves only the verified bytes when the stored blob is changed after the first page (attack, cached)', async () => {
    const blob = randomBytes(2 * CHUNK_BYTES);
    const r = await proposalWith('cached.bin', blob);
    expectOk(await page(r, 'cached.bin', 0, 1024));
    const changed = Buffer.from(blob);
    changed[CHUNK_BYTES + 7] = changed[CHUNK_BYTES + 7]! ^ 0xff;
    const sha = createHash('sha256').update(blob).digest('hex');
    m.store.db.prepare('UPDATE blobs SET content = ? WHERE sha256 = ?').run(changed, sha);
    // The page over the changed byte comes from the verified copy: never the changed bytes.
    const later = expectOk(await page(r, 'cached.bin', CHUNK_BYTES, 1024));
    expect(Buffer.from(later.content, 'base64').equals(blob.subarray(CHUNK_BYTES, CHUNK_BYTES + 1024))).toBe(
      true,
    );
  });

  it('refuses a page once the stored blob was changed after the first page, same size (attack, uncached)', async () => {
    setVerifiedContentCacheBytes(m.deps, 0);
    const blob = randomBytes(2 * CHUNK_BYTES);
    const r = await proposalWith('model.bin', blob);
    expectOk(await page(r, 'model.bin', 0, 1024));
    const changed = Buffer.from(blob);
    changed[CHUNK_BYTES + 7] = changed[CHUNK_BYTES + 7]! ^ 0xff;
    const sha = createHash('sha256').update(blob).digest('hex');
    m.store.db.prepare('UPDATE blobs SET content = ? WHERE sha256 = ?').run(changed, sha);
    // The first chunk is unchanged: its pages are still the verified bytes.
    const early = expectOk(await page(r, 'model.bin', 1024, 1024));
    expect(Buffer.from(early.content, 'base64').equals(blob.subarray(1024, 2048))).toBe(true);
    // A page over the changed byte is refused, and so is every later read.
    expectError(await page(r, 'model.bin', CHUNK_BYTES, 1024), 'INTERNAL');
    expectError(await page(r, 'model.bin', 0, 1024), 'INTERNAL');
  });

  it('refuses a blob whose stored size changed after the first page (attack)', async () => {
    const blob = randomBytes(CHUNK_BYTES + 10);
    const r = await proposalWith('short.bin', blob);
    expectOk(await page(r, 'short.bin', 0, 1024));
    const sha = createHash('sha256').update(blob).digest('hex');
    m.store.db
      .prepare('UPDATE blobs SET content = ?, size = ? WHERE sha256 = ?')
      .run(blob.subarray(0, CHUNK_BYTES), CHUNK_BYTES, sha);
    expectError(await page(r, 'short.bin', 0, 1024), 'INTERNAL');
  });
});
