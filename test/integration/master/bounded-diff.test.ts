import { createHash } from 'node:crypto';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TaskSpecInput } from '../../../src/contracts/task-spec.js';
import { DEFAULT_DIFF_BUDGET } from '../../../src/domain/review/diff-budget.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { expectOk } from '../../support/mcp.js';
import { validSpec } from '../../support/spec.js';

/**
 * ADR 0031: one get_revision over ~1,000 modified files held the master's event loop for 20 s
 * (every file read, re-hashed and compared). Now a call has a budget and yields between files: the
 * loop is never held for long, files past the budget say "not diffed", and paging one of them with
 * diff_path diffs it. Measured in this process, where the master runs: monitorEventLoopDelay.
 */

interface Input {
  path: string;
  sha256: string;
  size: number;
}
interface Created {
  proposal_id: string;
  revision_id: string;
}
interface Change {
  path: string;
  change: string;
  note?: string;
  not_diffed?: { reason: string; unit: string; size: number; budget: number };
  text_diff?: { unified: string; total_lines: number };
}

let m: TestMaster;
let alice: Client;
let rita: Client;

beforeAll(async () => {
  m = await startTestMaster({ config: { policy: { max_input_files: 2000 } } });
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
});

afterAll(async () => {
  await m?.close();
});

/**
 * Stores `content` as `owner`'s upload straight in the master's store: 2,000 files through
 * upload_inputs would test the upload path, not the diff, and take minutes on this machine.
 */
function storeBlob(ownerName: string, path: string, content: string): Input {
  const bytes = Buffer.from(content);
  const sha256 = createHash('sha256').update(bytes).digest('hex');
  const owner = m.store.principals.findByName(ownerName)!;
  m.store.transaction(() => {
    m.store.blobs.put(sha256, bytes, m.deps.clock.now());
    m.store.blobs.recordUpload(owner.id, sha256, m.deps.clock.now());
  });
  return { path, sha256, size: bytes.length };
}

/**
 * A file whose every other line differs between versions: the costliest kind to compare (about n²/2
 * work for n lines), where a rewrite with nothing in common costs nothing.
 */
const fileText = (version: string, i: number, lines: number) =>
  `${Array.from({ length: lines }, (_, k) => `${k % 2 ? version : 'same'} file ${i} line ${k}`).join('\n')}\n`;

async function create(client: Client, spec: TaskSpecInput): Promise<Created> {
  return expectOk(await m.callTool<Created>(client, 'create_proposal', { spec, idempotency_key: m.key() }));
}

async function requestChanges(r: Created, owner: Client = alice): Promise<void> {
  expectOk(
    await m.callTool(owner, 'confirm_revision', {
      proposal_id: r.proposal_id,
      revision_id: r.revision_id,
      idempotency_key: m.key(),
    }),
  );
  expectOk(
    await m.callTool(rita, 'submit_review', {
      proposal_id: r.proposal_id,
      revision_id: r.revision_id,
      decision: 'REQUEST_CHANGES',
      comments: 'change every file',
      idempotency_key: m.key(),
    }),
  );
}

async function getRevision(r: Created, extra: Record<string, unknown> = {}) {
  return expectOk(
    await m.callTool<{ input_changes: Change[] }>(rita, 'get_revision', {
      proposal_id: r.proposal_id,
      revision_id: r.revision_id,
      ...extra,
    }),
  );
}

describe('get_revision over ~1,000 modified files', () => {
  it('never holds the event loop for long, and says which files it did not diff', async () => {
    const FILES = 1000;
    const LINES = 1000; // ~500k work a file: under the per-file limit, so only the call's budget stops it
    const v1 = Array.from({ length: FILES }, (_, i) =>
      storeBlob('alice', `f${i}.txt`, fileText('old', i, LINES)),
    );
    const v2 = Array.from({ length: FILES }, (_, i) =>
      storeBlob('alice', `f${i}.txt`, fileText('new', i, LINES)),
    );
    const r1 = await create(alice, validSpec({ inputs: v1 }));
    await requestChanges(r1);
    const r2 = expectOk(
      await m.callTool<Created>(alice, 'revise_proposal', {
        proposal_id: r1.proposal_id,
        spec: validSpec({ inputs: v2 }),
        idempotency_key: m.key(),
      }),
    );

    const delay = monitorEventLoopDelay({ resolution: 10 });
    delay.enable();
    const view = await getRevision(r2);
    delay.disable();
    const maxBlockMs = delay.max / 1e6;
    // Bounded, not unbounded: it was 20 s on main. One file's slice is ~10 ms idle; the largest gap
    // seen was 80–310 ms on this 2-core machine at load average 13 (answer validation and JSON of a
    // 1,000-file answer, GC), and 1.9 s once in a fresh-clone CI run (this process descheduled while
    // the whole suite ran on 2 cores), so the bound is a quarter of the unbounded call (docs/performance.md).
    expect(maxBlockMs).toBeLessThan(5000);

    const changes = view.input_changes;
    expect(changes).toHaveLength(FILES);
    const diffed = changes.filter((c) => c.text_diff);
    const notDiffed = changes.filter((c) => c.not_diffed);
    expect(diffed.length).toBeGreaterThan(0);
    expect(diffed.length + notDiffed.length).toBe(FILES);
    expect(notDiffed.length).toBeGreaterThan(FILES / 2);
    const first = notDiffed[0]!;
    expect(first.not_diffed).toMatchObject({ reason: 'call_budget_spent' });
    expect(first.note).toMatch(
      /^not diffed: too large for this answer \(.*budget .* left\); page it with diff_path/,
    );
    expect(notDiffed.at(-1)?.note).toMatch(/^not diffed: this answer's comparison budget is spent; page it/);

    // The same file paged with diff_path is diffed (it goes first), and the REST answer is the same one.
    const paged = await getRevision(r2, { diff_path: first.path, diff_lines: 50 });
    const again = paged.input_changes.find((c) => c.path === first.path)!;
    expect(again.not_diffed).toBeUndefined();
    expect(again.text_diff?.total_lines).toBeGreaterThan(LINES);
    const rest = await m
      .rest(m.createToken('rex', ['reviewer']))
      .get(
        `/api/v1/proposals/${r2.proposal_id}/revisions/${r2.revision_id}?diff_path=${first.path}&diff_lines=50`,
      );
    const restChange = (rest.body as { input_changes: Change[] }).input_changes.find(
      (c) => c.path === first.path,
    );
    expect(restChange?.text_diff?.unified).toBe(again.text_diff?.unified);
  }, 240_000);

  it('a file over the per-file limit is not diffed, and says so with its size', async () => {
    const big = 'x'.repeat(80) + '\n';
    const huge = big.repeat(Math.ceil((DEFAULT_DIFF_BUDGET.file_bytes + 1) / big.length));
    const r = await create(alice, validSpec({ inputs: [storeBlob('alice', 'big.txt', huge)] }));
    const [change] = (await getRevision(r)).input_changes;
    expect(change?.not_diffed).toEqual({
      reason: 'file_too_large',
      unit: 'bytes',
      size: huge.length,
      budget: DEFAULT_DIFF_BUDGET.file_bytes,
    });
    expect(change?.note).toMatch(
      /^not diffed: too large \(.* bytes, budget 524,288 bytes per file\); read it with get_input$/,
    );
  });
});

describe('the diff memo', () => {
  it('never shows another principal’s bytes through a digest pair it memoised', async () => {
    const secret = 'API_KEY=hunter2-only-alice-has-this\n';
    const input = storeBlob('alice', 'secret.env', secret);
    const r = await create(alice, validSpec({ inputs: [input] }));
    expect(JSON.stringify((await getRevision(r)).input_changes)).toContain('hunter2'); // memoised now
    // Mallory reviews and submits; she names alice's digest without ever uploading those bytes.
    const mallory = await m.mcpClient(m.createToken('mallory', ['submitter', 'reviewer']));
    const own = await create(mallory, validSpec({ inputs: [input] }));
    const view = expectOk(
      await m.callTool<{ input_changes: Change[] }>(mallory, 'get_revision', {
        proposal_id: own.proposal_id,
        revision_id: own.revision_id,
      }),
    );
    expect(JSON.stringify(view)).not.toContain('hunter2');
    expect(view.input_changes[0]?.text_diff).toBeUndefined();
  });

  it('asks ownership once per call, per digest: in one revision mixing her own files with alice’s memoised one, only hers are shown', async () => {
    // Alice's file, memoised as "added" by a reviewer's read of her revision.
    const aliceCfg = storeBlob('alice', 'cfg.env', 'TOKEN=alice-secret-cfg\n');
    const a1 = await create(alice, validSpec({ inputs: [aliceCfg] }));
    expect(JSON.stringify((await getRevision(a1)).input_changes)).toContain('alice-secret-cfg');
    const aliceMix = storeBlob('alice', 'mix.env', 'TOKEN=alice-secret-mix\n');
    // Mallory's decided revision holds only her own files; her next one changes hers and, in the same
    // call, names alice's memoised digest (added) and alice's digest as the new version of her file.
    const mallory = await m.mcpClient(m.createToken('mallory2', ['submitter']));
    const mineOld = storeBlob('mallory2', 'mine.txt', 'mallory line 1\n');
    const mineNew = storeBlob('mallory2', 'mine.txt', 'mallory line 2\n');
    const mixOld = storeBlob('mallory2', 'mix.env', 'TOKEN=mallory-own\n');
    const m1 = await create(mallory, validSpec({ inputs: [mineOld, mixOld] }));
    await requestChanges(m1, mallory);
    const m2 = expectOk(
      await m.callTool<Created>(mallory, 'revise_proposal', {
        proposal_id: m1.proposal_id,
        spec: validSpec({ inputs: [aliceCfg, mineNew, aliceMix] }),
        idempotency_key: m.key(),
      }),
    );
    const view = await getRevision(m2);
    const byPath = new Map(view.input_changes.map((c) => [c.path, c]));
    expect(byPath.get('mine.txt')?.text_diff?.unified).toContain('+mallory line 2');
    expect(byPath.get('cfg.env')?.change).toBe('added');
    expect(byPath.get('cfg.env')?.text_diff).toBeUndefined();
    expect(byPath.get('cfg.env')?.note).toBe('content not stored any more');
    expect(byPath.get('mix.env')?.change).toBe('modified');
    expect(byPath.get('mix.env')?.text_diff).toBeUndefined();
    expect(JSON.stringify(view)).not.toContain('alice-secret');
  });
});
