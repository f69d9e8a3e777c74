import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type EvidenceDocument, evidenceDigest } from '../../../qualification/verify/evidence.js';
import { run as qualify } from '../../../src/cli/operator/qualify.js';
import { runCli } from '../../support/cli.js';
import { ensureSlurm } from '../../support/slurm.js';
import { removeTempDirs } from '../../support/temp.js';
import { type SlurmQualCluster, startSlurmQualCluster } from './qualification-cluster.js';

/**
 * `gpu-broker qualify` on a Slurm worker, end to end (ADR 0017): a real master, a real Slurm worker on
 * the shared single-node Slurm (partition `gpu`, node `localhost`, 8 fake GPUs, marked simulated), the
 * real workload under /usr/bin/python3 with real torch.distributed (gloo on CPU) as sbatch jobs. The
 * full ladder 1, 2, 4, 8, and no two-node rung on one node. Another engineer's jobs on the shared Slurm make the pool not idle: start waits.
 */

const avail = ensureSlurm();
let c: SlurmQualCluster;
let doc: EvidenceDocument;

beforeAll(async () => {
  if (!avail.ok) return;
  c = await startSlurmQualCluster(avail.slurm, `slurm-qual-${process.pid}`);
}, 60_000);

afterAll(async () => {
  await c?.close();
  removeTempDirs();
});

describe.runIf(avail.ok)('qualification on a single-node Slurm pool', () => {
  it('runs 1, 2, 4 and 8 GPUs as Slurm jobs and PASSES, labelled simulated, each rung bound to its job', async () => {
    const v = await c.start({});
    expect(v).toMatchObject({ ladder: [1, 2, 4, 8], span: null, reserved_cards: [0, 1, 2, 3, 4, 5, 6, 7] });
    const run = await c.finished(v.run_id);
    doc = run.evidence as unknown as EvidenceDocument;
    expect(doc.failed_checks, JSON.stringify(doc.failed_checks)).toEqual([]);
    expect(run.state).toBe('PASSED');
    expect(doc.digest).toBe(evidenceDigest(doc));
    expect(doc.worker).toMatchObject({
      worker_id: c.workerId,
      provider: 'sim',
      simulated: true,
      isolation: 'bwrap',
      backend: 'slurm',
    });
    expect(doc.ladder).toEqual({ requested: [1, 2, 4, 8], run: [1, 2, 4, 8], skipped: [], not_run: [] });
    const jobs = new Set<string>();
    for (const r of doc.rungs) {
      const n = r.cards;
      expect(r.summary).toMatchObject({
        backend: 'gloo',
        simulated: true,
        allreduce: { value: (n * (n + 1)) / 2 },
      });
      expect(r.slurm?.job_id).toMatch(/^\d+$/);
      jobs.add(r.slurm!.job_id);
      expect(r.slurm?.nodes).toEqual([{ node: 'localhost', gpus: expect.any(Array) }]);
      expect(r.slurm?.nodes?.[0]?.gpus).toHaveLength(n);
      const names = r.checks.map((k) => k.name);
      for (const name of ['slurm.binding', 'slurm.job_id', 'slurm.nodes', 'slurm.ranks'])
        expect(names).toContain(name);
      expect(names).not.toContain('binding.gpu_ids');
      expect((r.result as { slurm: { job_id: string } }).slurm.job_id).toBe(r.slurm!.job_id);
    }
    expect(jobs.size).toBe(4);
  }, 900_000);

  it('`gpu-broker qualify show` prints where Slurm ran each rung and says the GPUs are simulated', async () => {
    const shown = await runCli(qualify, ['show', doc.run_id], {
      GPU_BROKER_URL: c.master.url,
      GPU_BROKER_TOKEN: c.master.bootstrappedOperatorToken ?? '',
      GPU_BROKER_CA_FILE: c.master.caCertPath ?? '',
    });
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toMatch(/\n8\s+localhost:\d+(,\d+){7}\s+36\/36\s+ok/);
    expect(shown.stdout).toContain('verdict: PASSED (simulated cards: gloo on CPU, not a GPU result)');
    expect(shown.stdout).toMatch(
      /\nworker: slurm-qual-\d+ \([^)]*\); Slurm pool \(each rung a Slurm job\); isolation: bwrap/,
    );
  });

  it('returned the pool on PASSED: no cordon, no live lease', () => {
    const { store } = c.master.deps;
    expect(store.workers.cordons()).toEqual([]);
    expect(store.leases.liveLeases()).toEqual([]);
  });
});
