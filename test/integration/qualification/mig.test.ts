import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type EvidenceDocument, evidenceDigest } from '../../../qualification/verify/evidence.js';
import { verifyRung } from '../../../qualification/verify/verifier.js';
import { collectRung, runFacts } from '../../../src/broker/tools/qualification-records.js';
import { run as qualify } from '../../../src/cli/operator/qualify.js';
import { migCardIndex } from '../../../src/contracts/sample.js';
import { type CliResult, runCli } from '../../support/cli.js';
import { type Cluster, startCluster } from './cluster.js';

/**
 * Qualification on MIG slices end to end (docs/decisions/0046-mig-slices-as-cards.md): a real master and
 * worker daemon on one simulated card split `2g.20gb+1g.10gb`, the real workload under /usr/bin/python3 in
 * bubblewrap. `gpu-broker qualify --cards 1,2` runs the single-card rung as one GEMM-only rung per profile,
 * each on its reserved slice (asked for by `cards.mig_profile`, bound by its MIG- uuid), skips 2 with
 * "all_reduce is not offered across MIG instances", and the evidence records each rung's profile, slice
 * and uuid. One run, to keep the suite short.
 */

let c: Cluster;
let result: CliResult;
let doc: EvidenceDocument;

beforeAll(async () => {
  c = await startCluster({ cards: 1, mig: '2g.20gb+1g.10gb' });
  result = await runCli(qualify, ['--worker', c.workerId, '--cards', '1,2'], {
    GPU_BROKER_URL: c.master.url,
    GPU_BROKER_TOKEN: c.master.bootstrappedOperatorToken ?? '',
    GPU_BROKER_CA_FILE: c.master.caCertPath ?? '',
  });
  const runId = /qualification run (qrun_\S+)/.exec(result.stdout)?.[1] ?? '';
  doc = c.master.deps.store.qualifications.get(runId)?.evidence as unknown as EvidenceDocument;
});

afterAll(async () => c?.close());

describe('gpu-broker qualify on one simulated card split 2g.20gb + 1g.10gb', () => {
  it('runs a GEMM-only rung per profile, smallest first, skips 2 cards with the MIG reason: INCONCLUSIVE, nothing failed', () => {
    expect(doc, result.stdout + result.stderr).toBeTruthy();
    expect(doc.digest).toBe(evidenceDigest(doc));
    expect(doc.failed_checks).toEqual([]);
    expect(doc.verdict).toBe('INCONCLUSIVE');
    expect(result.code).toBe(1);
    expect(doc.ladder.run).toEqual([]);
    expect(doc.ladder.slices).toEqual([
      { card: '0:mig:2/0', profile: '1g.10gb' },
      { card: '0:mig:1/0', profile: '2g.20gb' },
    ]);
    expect(doc.ladder.skipped).toEqual([
      {
        cards: 2,
        reason: expect.stringMatching(
          /^all_reduce is not offered across MIG instances: worker sim-host-1 has 0 usable whole card\(s\) .*nvidia-smi -i 0 -mig 0/,
        ),
      },
    ]);
    // The card in MIG mode was never reserved whole; only the two slices were.
    expect(doc.reserved_cards).toEqual([migCardIndex(0, 1, 0), migCardIndex(0, 2, 0)]);
  });

  it('records each rung’s profile, slice and MIG uuid; the lease held exactly that slice', () => {
    expect(doc.rungs.map((r) => r.mig?.profile)).toEqual(['1g.10gb', '2g.20gb']);
    for (const r of doc.rungs) {
      expect(r.ok).toBe(true);
      expect(r.cards).toBe(1);
      expect(r.mig?.card).toBe(r.mig?.profile === '1g.10gb' ? '0:mig:2/0' : '0:mig:1/0');
      expect(r.mig?.uuid).toMatch(/^MIG-/);
      expect(r.gpu_uuids).toEqual([r.mig?.uuid]);
      expect(r.summary).toMatchObject({
        backend: 'none',
        simulated: true,
        allreduce: null,
        busbw_gbps: null,
      });
      expect(r.summary?.gemm.ok).toBe(true);
      const names = r.checks.map((k) => k.name);
      expect(names).toEqual(
        expect.arrayContaining(['mig.slice', 'mig.gemm_only', 'gemm.ok', 'binding.gpu_uuids']),
      );
      expect(names).not.toContain('allreduce.sum');
      expect(r.result).toMatchObject({ mode: 'gemm_only', gpu_labels: [r.mig?.card] });
    }
  });

  it('`qualify` shows the slice rungs: in the header, in each step, and in the table', () => {
    expect(result.stdout).toMatch(
      /^qualification run qrun_\S+ on sim-host-1: GEMM on MIG slice\(s\) 0:mig:2\/0 \(1g\.10gb\), 0:mig:1\/0 \(2g\.20gb\); ladder none; skipped 2 \(all_reduce is not offered across MIG instances/,
    );
    expect(result.stdout).toMatch(
      /1 card: MIG 1g\.10gb slice 0:mig:2\/0: verified: \d+ checks passed \(GEMM only/,
    );
    expect(result.stdout).toMatch(
      /\n1 \(MIG 1g\.10gb\)\s+0:mig:2\/0\s+n\/a \(GEMM only\)\s+ok \(rel err \S+\)\s+n\/a\s+ok/,
    );
    expect(result.stdout).toMatch(/\n1 \(MIG 2g\.20gb\)\s+0:mig:1\/0\s+n\/a \(GEMM only\)/);
    expect(result.stdout).toMatch(
      /\n2\s+-\s+-\s+-\s+-\s+not run: all_reduce is not offered across MIG instances/,
    );
  });

  it('the verifier fails the recorded slice rung once the profile is gone from the master’s record', () => {
    const run = c.master.deps.store.qualifications.get(doc.run_id)!;
    const facts = runFacts(c.master.deps, run, doc.workload);
    const rung = doc.rungs[0]!;
    const records = collectRung(c.master.deps, 1, null, rung.proposal_id, '1g.10gb');
    expect(verifyRung(facts, records).filter((k) => !k.ok)).toEqual([]);
    const stripped = structuredClone(records);
    stripped.lease!.cards = stripped.lease!.cards.map((card) => ({ ...card, mig_profile: null }));
    expect(
      verifyRung(facts, stripped)
        .filter((k) => !k.ok)
        .map((k) => k.name),
    ).toEqual(['mig.slice']);
    // Judged as another profile's rung, the spec and the slice disagree.
    const other = collectRung(c.master.deps, 1, null, rung.proposal_id, '2g.20gb');
    expect(
      verifyRung(facts, other)
        .filter((k) => !k.ok)
        .map((k) => k.name),
    ).toEqual(['spec.expected', 'mig.slice']);
  });

  it('gave the slices back only to the operator: INCONCLUSIVE keeps them cordoned', () => {
    const cordons = c.master.deps.store.workers.cordons().map((k) => k.card_index);
    expect(cordons.sort((a, b) => a - b)).toEqual(doc.reserved_cards);
    expect(c.master.deps.store.leases.liveLeases()).toEqual([]);
  });
});
