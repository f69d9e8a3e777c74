import { createHash } from 'node:crypto';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { diffShareOf } from '../../../src/broker/tools/revision-diff.js';
import { QuotasConfigSchema } from '../../../src/platform/config.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { expectOk } from '../../support/mcp.js';
import { validSpec } from '../../support/spec.js';
import { waitFor } from '../../support/wait.js';

/**
 * docs/performance.md "Noisy neighbours": one reader's flood of get_revision calls delays that reader, not everyone. Each reader has
 * its own lane: at most quotas.diff_calls_per_reader of its diffs run at once, the rest wait in its queue, and
 * another reader's call is served beside them. Through the real master (HTTPS, MCP SDK clients); the
 * share's counters and the order of answers are checked, never times.
 */

interface Created {
  proposal_id: string;
  revision_id: string;
}
interface View {
  input_changes: Array<{ path: string; text_diff?: unknown }>;
}

const FILES = 600;
// The defaults of quotas.diff_calls_per_reader and quotas.diff_queued_per_reader.
const { diff_calls_per_reader: DIFF_CALLS_PER_READER, diff_queued_per_reader: DIFF_QUEUED_PER_READER } =
  QuotasConfigSchema.parse({});

let m: TestMaster;
let alice: Client;
let rita: Client;
let rex: Client;
let big: Created;

/** `owner`'s upload stored straight in the master's store (the upload path is not under test here). */
function storeBlob(owner: string, path: string, content: string) {
  const bytes = Buffer.from(content);
  const sha256 = createHash('sha256').update(bytes).digest('hex');
  const id = m.store.principals.findByName(owner)!.id;
  m.store.transaction(() => {
    m.store.blobs.put(sha256, bytes, m.deps.clock.now());
    m.store.blobs.recordUpload(id, sha256, m.deps.clock.now());
  });
  return { path, sha256, size: bytes.length };
}

const text = (v: string, i: number) =>
  `${Array.from({ length: 8 }, (_, k) => `${v} ${i} ${k}`).join('\n')}\n`;

beforeAll(async () => {
  // The dispatcher's heavy lane (docs/security.md "What a reviewer must read, and what the broker guarantees") is opened wide here, so the diff's own share is what holds.
  m = await startTestMaster({
    config: {
      policy: { max_input_files: 2000 },
      quotas: { heavy_calls_per_principal: 64, heavy_queued_per_principal: 64, heavy_ms_per_second: 1000 },
    },
  });
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  rex = await m.mcpClient(m.createToken('rex', ['reviewer']));
  const files = (v: string) =>
    Array.from({ length: FILES }, (_, i) => storeBlob('alice', `f${i}.txt`, text(v, i)));
  const r1 = expectOk(
    await m.callTool<Created>(alice, 'create_proposal', {
      spec: validSpec({ inputs: files('old') }),
      idempotency_key: m.key(),
    }),
  );
  const ids1 = { proposal_id: r1.proposal_id, revision_id: r1.revision_id };
  expectOk(await m.callTool(alice, 'confirm_revision', { ...ids1, idempotency_key: m.key() }));
  expectOk(
    await m.callTool(rita, 'submit_review', {
      ...ids1,
      decision: 'REQUEST_CHANGES',
      comments: 'change every file',
      idempotency_key: m.key(),
    }),
  );
  const r2 = expectOk(
    await m.callTool<Created>(alice, 'revise_proposal', {
      proposal_id: r1.proposal_id,
      spec: validSpec({ inputs: files('new') }),
      idempotency_key: m.key(),
    }),
  );
  big = { proposal_id: r1.proposal_id, revision_id: r2.revision_id };
}, 120_000);

afterAll(async () => {
  await m?.close();
});

const read = (c: Client) => m.callTool<View>(c, 'get_revision', { ...big });

describe('get_revision: a share per reader', () => {
  it('runs at most k of one reader’s calls at once, queues the rest, and serves another reader beside them', async () => {
    const share = diffShareOf(m.deps);
    const ritaId = m.store.principals.findByName('rita')!.id;
    const answered: string[] = [];
    const calls = Array.from({ length: DIFF_CALLS_PER_READER + DIFF_QUEUED_PER_READER }, (_, i) =>
      read(rita).then((o) => {
        answered.push(`rita${i}`);
        return o;
      }),
    );
    // Rita's calls fill her lane and her queue.
    await waitFor(() => share.stats(ritaId).queued >= DIFF_QUEUED_PER_READER / 2, {
      intervalMs: 1,
      what: 'rita’s calls queued',
    });
    const seen = share.stats(ritaId);
    expect(seen.running).toBe(DIFF_CALLS_PER_READER);
    // Rex is served now, beside rita's running calls, not after her queue.
    const rexView = expectOk(await read(rex));
    const ritaLeft = share.stats(ritaId);
    answered.push('rex');
    expect(ritaLeft.running + ritaLeft.queued).toBeGreaterThan(0);
    expect(answered.filter((a) => a.startsWith('rita')).length).toBeLessThan(calls.length);
    const views = (await Promise.all(calls)).map(expectOk);
    // Every one of rita's calls was answered, in full, and she never ran more than her share at once.
    for (const v of views) expect(v.input_changes).toHaveLength(FILES);
    expect(rexView.input_changes).toHaveLength(FILES);
    expect(share.peakRunning()).toBe(DIFF_CALLS_PER_READER);
    expect(share.stats(ritaId)).toEqual({ running: 0, queued: 0, peakRunning: 0 });
  }, 120_000);
});
