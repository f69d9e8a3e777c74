import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type EvidenceDocument, evidenceDigest } from '../../../qualification/verify/evidence.js';
import {
  type Check,
  type PostRecords,
  type RungRecords,
  verdictOf,
  verifyPost,
  verifyRung,
} from '../../../qualification/verify/verifier.js';
import { collectPost, collectRung, runFacts } from '../../../src/broker/tools/qualification-records.js';
import { run as qualify } from '../../../src/cli/operator/qualify.js';
import type { QualificationRunView } from '../../../src/contracts/tools-qualification.js';
import { sha256Hex } from '../../../src/platform/digest.js';
import { type CliResult, runCli } from '../../support/cli.js';
import { callTool, expectOk } from '../../support/mcp.js';
import { type Cluster, startCluster } from './cluster.js';

/**
 * The CI must-hold (docs/qualification.md): a full 1/2/4/8 qualification through the real path — MCP over HTTPS,
 * a submitter and a distinct reviewer principal, the scheduler, a real worker daemon on 8 simulated
 * cards running the real workload under /usr/bin/python3 (gloo) — ends PASSED with simulated: true.
 * Then the verifier is shown to catch tampering with what that run recorded.
 */

let c: Cluster;
let result: CliResult;
let doc: EvidenceDocument;

const cliEnv = () => ({
  GPU_BROKER_URL: c.master.url,
  GPU_BROKER_TOKEN: c.master.bootstrappedOperatorToken ?? '',
  GPU_BROKER_CA_FILE: c.master.caCertPath ?? '',
});

beforeAll(async () => {
  c = await startCluster({ cards: 8 });
  result = await runCli(qualify, ['--worker', c.workerId, '--json'], cliEnv());
  doc = result.json<EvidenceDocument>();
});

afterAll(async () => c?.close());

describe('gpu-broker qualify on 8 simulated cards', () => {
  it('runs 1, 2, 4 and 8 cards and PASSES, saying the cards are simulated', () => {
    expect(result.code, result.stderr).toBe(0);
    expect(doc.verdict).toBe('PASSED');
    expect(doc.run_id).toMatch(/^qrun_/);
    expect(doc.digest).toBe(evidenceDigest(doc));
    expect(doc.failed_checks).toEqual([]);
    expect(doc.worker).toMatchObject({ worker_id: c.workerId, provider: 'sim', simulated: true });
    // The cluster's worker sandboxes with bubblewrap; the evidence says so (docs/security.md "The task sandbox").
    expect(doc.worker).toMatchObject({ isolation: 'bwrap', container_engine: null });
    expect(doc.schema).toBe('gpu-broker.qualification-evidence/2');
    expect(doc.postconditions.find((k) => k.name === 'post.isolation_unchanged')).toMatchObject({
      ok: true,
      detail: 'worker isolation bwrap throughout',
    });
    expect(doc.ladder).toEqual({ requested: [1, 2, 4, 8], run: [1, 2, 4, 8], skipped: [], not_run: [] });
    expect(doc.rungs.map((r) => r.cards)).toEqual([1, 2, 4, 8]);
    expect(doc.submitter.principal_id).not.toBe(doc.reviewer.principal_id);
    const epochs = new Set<number>();
    for (const r of doc.rungs) {
      const n = r.cards;
      expect(r.ok).toBe(true);
      expect(r.checks.every((k) => k.ok)).toBe(true);
      expect(r.gpu_ids).toHaveLength(n);
      expect(r.gpu_ids.every((i) => doc.reserved_cards.includes(i))).toBe(true);
      expect(r.reviewer_id).toBe(doc.reviewer.principal_id);
      expect(r.summary).toMatchObject({
        backend: 'gloo',
        simulated: true,
        allreduce: { value: (n * (n + 1)) / 2 },
      });
      expect(r.summary?.busbw_gbps === null).toBe(n === 1);
      expect((r.result as { task_id: string }).task_id).toBe(r.task_id);
      epochs.add(r.lease_epoch ?? 0);
    }
    expect(epochs.size).toBe(4); // every rung ran under a fresh lease epoch
    expect(doc.postconditions.map((k) => [k.name, k.ok])).toEqual([
      ['post.no_residual_leases', true],
      ['post.cards_available', true],
      ['post.audit_chain', true],
      ['post.isolation_unchanged', true],
    ]);
  });

  it('showed a line per step with its elapsed time (on stderr with --json)', () => {
    expect(result.stderr).toMatch(
      /^qualification run qrun_\S+ on sim-host-1: ladder 1,2,4,8; cards 0,1,2,3,4,5,6,7 cordoned/,
    );
    expect(result.stderr).toMatch(/\[\s+\d+\.\ds\] 8 cards: verified: \d+ checks passed \(all_reduce 36\/36/);
    expect(result.stderr).toMatch(/\[\s+\d+\.\ds\] verdict PASSED; evidence sha256 [0-9a-f]{64}/);
  });

  it('returned the cards to the pool and revoked the run principals', () => {
    const { store } = c.master.deps;
    expect(store.workers.cordons()).toEqual([]);
    expect(store.leases.liveLeases()).toEqual([]);
    const run = store.qualifications.get(doc.run_id)!;
    expect(run.state).toBe('PASSED');
    for (const id of [run.submitter_id, run.reviewer_id])
      expect(store.principals.findById(id)?.revoked_at).not.toBeNull();
  });

  it('stores the evidence: get_qualification_run and `qualify show` return the same document', async () => {
    const view = expectOk(
      await callTool<QualificationRunView>(c.operator, 'get_qualification_run', { run_id: doc.run_id }),
    );
    expect(view).toMatchObject({ state: 'PASSED', verdict: 'PASSED', digest: doc.digest });
    expect(view.evidence).toEqual(doc);
    const shown = await runCli(qualify, ['show', doc.run_id, '--json'], cliEnv());
    expect(shown.code).toBe(0);
    expect(shown.json()).toEqual(doc);
    const human = await runCli(qualify, ['show', doc.run_id], cliEnv());
    expect(human.code).toBe(0);
    expect(human.stdout).toMatch(/CARDS\s+GPU IDS\s+ALL_REDUCE\s+GEMM\s+BUSBW GB\/s\s+RESULT/);
    expect(human.stdout).toMatch(/\n8\s+0,1,2,3,4,5,6,7\s+36\/36\s+ok \(rel err/);
    expect(human.stdout).toContain('verdict: PASSED (simulated cards: gloo on CPU, not a GPU result)');
    expect(human.stdout).toContain(`evidence: sha256 ${doc.digest}`);
    expect(human.stdout).toContain(`worker: ${c.workerId}`);
    expect(human.stdout).toContain('isolation: bwrap (each task sandboxed)');
  });

  it('lists the run with its verdict and digest', async () => {
    const listed = expectOk(
      await callTool<{ runs: Array<{ run_id: string; verdict: string | null; digest: string | null }> }>(
        c.operator,
        'list_qualification_runs',
        {},
      ),
    );
    expect(listed.runs.find((r) => r.run_id === doc.run_id)).toMatchObject({
      verdict: 'PASSED',
      digest: doc.digest,
    });
  });
});

describe('the verifier catches tampering with the recorded evidence', () => {
  let records: Map<number, RungRecords>;
  let post: PostRecords;
  const facts = () =>
    runFacts(c.master.deps, c.master.deps.store.qualifications.get(doc.run_id)!, doc.workload);

  beforeAll(() => {
    records = new Map(
      doc.rungs.map((r) => [r.cards, collectRung(c.master.deps, r.cards, null, r.proposal_id)]),
    );
    post = collectPost(c.master.deps, c.master.deps.store.qualifications.get(doc.run_id)!);
  });

  const copy = (n: number): RungRecords => structuredClone(records.get(n)!);
  /** Replaces the uploaded result consistently (bytes, recorded sha256, the execution's report). */
  const withResult = (r: RungRecords, edit: (d: Record<string, unknown>) => void): RungRecords => {
    const d = JSON.parse(Buffer.from(r.output!.content_base64, 'base64').toString('utf8')) as Record<
      string,
      unknown
    >;
    edit(d);
    const bytes = Buffer.from(JSON.stringify(d));
    const sha256 = sha256Hex(bytes);
    r.output = { ...r.output!, content_base64: bytes.toString('base64'), sha256, size: bytes.length };
    r.execution!.outputs = [{ path: r.output.path, sha256, size: bytes.length }];
    return r;
  };
  const judge = (r: RungRecords, p: PostRecords = post) => {
    const checks = verifyRung(facts(), r);
    const postChecks = verifyPost(p, facts());
    return {
      failed: [...checks, ...postChecks].filter((k) => !k.ok).map((k: Check) => k.name),
      verdict: verdictOf([checks], postChecks, 0),
    };
  };

  it('the untouched records pass', () => {
    for (const n of [1, 2, 4, 8]) expect(judge(copy(n))).toEqual({ failed: [], verdict: 'PASSED' });
  });

  it('a worker that came back UNISOLATED mid-run, or is gone', () => {
    expect(judge(copy(1), { ...post, isolation: { mode: 'none', container_engine: null } })).toEqual({
      failed: ['post.isolation_unchanged'],
      verdict: 'FAILED',
    });
    expect(judge(copy(1), { ...post, isolation: null })).toEqual({
      failed: ['post.isolation_unchanged'],
      verdict: 'FAILED',
    });
  });

  it('a wrong all_reduce sum', () => {
    const r = withResult(copy(4), (d) => {
      (d['ranks'] as Array<{ allreduce_sum: { value: number } }>)[2]!.allreduce_sum.value = 11;
    });
    expect(judge(r)).toEqual({ failed: ['allreduce.sum'], verdict: 'FAILED' });
  });

  it('a missing rank record', () => {
    const r = withResult(copy(8), (d) => {
      (d['ranks'] as unknown[]).splice(5, 1);
    });
    expect(judge(r)).toEqual({ failed: ['ranks.complete'], verdict: 'FAILED' });
  });

  it('an output bound to another task’s ids', () => {
    const other = records.get(4)!.output!;
    const r = withResult(copy(4), () => undefined);
    // The 4-card task's own result is replaced, consistently, by the one the 8-card task uploaded.
    const forged = withResult(copy(8), () => undefined).output!;
    r.output = { ...forged, path: other.path };
    r.execution!.outputs = [{ path: other.path, sha256: forged.sha256, size: forged.size }];
    const { failed, verdict } = judge(r);
    expect(verdict).toBe('FAILED');
    expect(failed).toEqual(
      expect.arrayContaining([
        'binding.task_id',
        'binding.execution_id',
        'binding.assignment_id',
        'binding.lease_epoch',
        'binding.gpu_ids',
      ]),
    );
  });

  it('a self-approved proposal', () => {
    const r = copy(2);
    for (const v of r.reviews) v.reviewer_id = r.proposal!.owner_id;
    expect(judge(r)).toEqual({ failed: ['review.independent'], verdict: 'FAILED' });
  });

  it('an approval of another revision than the one that ran', () => {
    const r = copy(2);
    r.reviews[0]!.revision_digest = '0'.repeat(64);
    expect(judge(r)).toEqual({ failed: ['review.revision'], verdict: 'FAILED' });
  });

  it('a lease still active afterwards', () => {
    const r = copy(1);
    r.lease = { ...r.lease!, state: 'ACTIVE', released_by: null };
    const p: PostRecords = {
      ...post,
      residual_leases: [{ lease_id: r.lease.id, task_id: r.task!.id, state: 'ACTIVE', cards: [0] }],
    };
    expect(judge(r, p)).toEqual({ failed: ['lease.released', 'post.no_residual_leases'], verdict: 'FAILED' });
  });

  it('missing evidence fails closed', () => {
    const r = copy(2);
    r.output = null;
    const { failed } = judge(r);
    expect(failed).toContain('output.present');
    expect(failed).toContain('allreduce.sum'); // not checked is not passed
    const none = judge({
      cards: 2,
      per_node: null,
      proposal: null,
      revision: null,
      reviews: [],
      task: null,
      lease: null,
      execution: null,
      output: null,
    });
    expect(none.verdict).toBe('FAILED');
    expect(none.failed).toHaveLength(verifyRung(facts(), copy(2)).length);
  });
});
