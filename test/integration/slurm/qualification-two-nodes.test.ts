import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type EvidenceDocument, evidenceDigest } from '../../../qualification/verify/evidence.js';
import { verifyRung } from '../../../qualification/verify/verifier.js';
import { collectRung, runFacts } from '../../../src/broker/tools/qualification-records.js';
import { run as qualify } from '../../../src/cli/operator/qualify.js';
import { runCli } from '../../support/cli.js';
import { startMultiNodeSlurm, stopMultiNodeSlurm } from '../../support/slurm.js';
import { removeTempDirs } from '../../support/temp.js';
import { type SlurmQualCluster, startSlurmQualCluster } from './qualification-cluster.js';

/**
 * `gpu-broker qualify --worker <slurm worker>` (the CLI) on a two-node Slurm pool (ADR 0017): the
 * second local cluster (n1, n2 with 4 fake GPUs each, its own slurmctld; test/support/slurm.ts), a real
 * master and Slurm worker, the real workload with real torch.distributed (gloo): rungs 1, 2, 4 within a
 * node, then 8 = 2 × 4 across both nodes, where each node's copy starts 4 ranks and they meet at the
 * job's MASTER_ADDR:MASTER_PORT. Then the verifier, re-run on what the master recorded, catches a
 * tampered binding.
 */

const avail = startMultiNodeSlurm();
let c: SlurmQualCluster;
let doc: EvidenceDocument;

beforeAll(async () => {
  if (!avail.ok) return;
  c = await startSlurmQualCluster(avail.slurm, `slurm-qual-mn-${process.pid}`);
}, 60_000);

afterAll(async () => {
  await c?.close();
  if (avail.ok && avail.slurm.startedHere) stopMultiNodeSlurm();
  removeTempDirs();
});

describe.runIf(avail.ok)('qualification on a two-node Slurm pool', () => {
  it('runs 1, 2, 4 in a node and 8 across two nodes (4 per node) and PASSES', async () => {
    // Through the CLI, as an operator would: this cluster is the test's own, so the pool is idle.
    const cli = await runCli(qualify, ['--worker', c.workerId, '--json'], {
      GPU_BROKER_URL: c.master.url,
      GPU_BROKER_TOKEN: c.master.bootstrappedOperatorToken ?? '',
      GPU_BROKER_CA_FILE: c.master.caCertPath ?? '',
    });
    expect(cli.code, cli.stderr).toBe(0);
    expect(cli.stderr).toMatch(/ladder 1,2,4 then 8 across 2 nodes \(4 per node\)/);
    const v = c.master.deps.store.qualifications.get(cli.json<EvidenceDocument>().run_id)!;
    expect(v).toMatchObject({
      requested: [1, 2, 4],
      ladder: [1, 2, 4],
      span: { cards: 8, per_node: 4 },
      skipped: [],
      reserved_cards: [0, 1, 2, 3, 4, 5, 6, 7],
    });
    const run = await c.finished(v.id);
    doc = run.evidence as unknown as EvidenceDocument;
    expect(cli.json()).toEqual(doc);
    expect(doc.failed_checks, JSON.stringify(doc.failed_checks)).toEqual([]);
    expect(run.state).toBe('PASSED');
    expect(doc.digest).toBe(evidenceDigest(doc));
    expect(doc.worker).toMatchObject({ provider: 'sim', simulated: true, backend: 'slurm' });
    expect(doc.ladder).toEqual({
      requested: [1, 2, 4],
      run: [1, 2, 4],
      span: { cards: 8, per_node: 4 },
      skipped: [],
      not_run: [],
    });
    const steps = c.master.deps.store.qualifications.steps(v.id).map((x) => x.text);
    expect(steps[0]).toMatch(/ladder 1,2,4 then 8 cards across 2 nodes \(4 per node\)/);
    expect(steps).toContain('two-node rung: 8 GPUs as 4 on each of 2 nodes, one Slurm job');
    expect(doc.rungs.map((r) => [r.cards, r.per_node ?? null])).toEqual([
      [1, null],
      [2, null],
      [4, null],
      [8, 4],
    ]);
    for (const r of doc.rungs.slice(0, 3)) expect(r.slurm?.nodes).toHaveLength(1);
    const span = doc.rungs[3]!;
    expect(span.slurm?.nodes?.map((n) => [n.node, n.gpus.length])).toEqual([
      ['n1', 4],
      ['n2', 4],
    ]);
    expect(span.summary).toMatchObject({
      backend: 'gloo',
      simulated: true,
      allreduce: { value: 36, expected: 36 },
    });
    const result = span.result as {
      world_size: number;
      ranks: Array<{ rank: number; node: string; local_rank: number }>;
    };
    expect(result.world_size).toBe(8);
    expect(result.ranks.map((r) => [r.rank, r.node, r.local_rank])).toEqual(
      Array.from({ length: 8 }, (_, i) => [i, i < 4 ? 'n1' : 'n2', i % 4]),
    );
    expect(span.checks.filter((k) => k.name.startsWith('slurm.')).map((k) => [k.name, k.ok])).toEqual([
      ['slurm.binding', true],
      ['slurm.job_id', true],
      ['slurm.nodes', true],
      ['slurm.ranks', true],
    ]);
  }, 900_000);

  it('the verifier catches a recorded binding that differs from what the ranks saw', () => {
    const { deps } = c.master;
    const run = deps.store.qualifications.get(doc.run_id)!;
    const facts = runFacts(deps, run, doc.workload);
    const span = doc.rungs[3]!;
    const records = collectRung(deps, 8, 4, span.proposal_id);
    expect(verifyRung(facts, records).filter((k) => !k.ok)).toEqual([]);
    // The worker reports the nodes the other way round: the ranks on n1 were not rank 0..3 of it.
    const swapped = structuredClone(records);
    swapped.execution!.slurm!.binding!.nodes.reverse();
    expect(
      verifyRung(facts, swapped)
        .filter((k) => !k.ok)
        .map((k) => k.name),
    ).toEqual(['slurm.nodes', 'slurm.ranks']);
    // Another job's id on the execution.
    const other = structuredClone(records);
    other.execution!.slurm!.job_id = String(Number(other.execution!.slurm!.job_id) + 1);
    expect(
      verifyRung(facts, other)
        .filter((k) => !k.ok)
        .map((k) => k.name),
    ).toEqual(['slurm.job_id']);
  });
});
