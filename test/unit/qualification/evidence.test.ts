import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { agentCommand, agentPrompt, findExecutable } from '../../../qualification/run/agent-submitter.js';
import {
  type EvidenceBody,
  evidenceDigest,
  isolationLine,
  sealEvidence,
  summaryRows,
} from '../../../qualification/verify/evidence.js';
import { verdictOf, verifyPost, type WorkerIsolation } from '../../../qualification/verify/verifier.js';
import { qualificationSpec, qualificationSpecDigest } from '../../../qualification/workload/spec.js';
import { canonicalJson } from '../../../src/contracts/canonical-json.js';
import { sha256Hex } from '../../../src/platform/digest.js';
import { makeTempDir, removeTempDirs } from '../../support/temp.js';

afterAll(() => removeTempDirs());

const PIN = {
  interpreter: '/usr/bin/python3',
  script: '/opt/gpu-broker/qualification/workload/qualify.py',
  sha256: 'f'.repeat(64),
};

function body(over: Partial<EvidenceBody> = {}): EvidenceBody {
  return {
    schema: 'gpu-broker.qualification-evidence/2',
    run_id: 'qrun_1',
    verdict: 'PASSED',
    worker: {
      worker_id: 'w',
      hostname: 'h',
      provider: 'sim',
      simulated: true,
      isolation: 'bwrap',
      container_engine: null,
    },
    submitter: { kind: 'scripted', principal: 's', principal_id: 'prin_s' },
    reviewer: { principal: 'r', principal_id: 'prin_r' },
    workload: PIN,
    ladder: { requested: [1, 2], run: [1], skipped: [{ cards: 2, reason: 'one card' }], not_run: [] },
    reserved_cards: [0],
    started_at: '2026-01-01T00:00:00.000Z',
    finished_at: '2026-01-01T00:00:09.000Z',
    rungs: [],
    postconditions: [],
    failed_checks: [],
    ...over,
  };
}

describe('the evidence document', () => {
  it('has digest = sha256 of its canonical JSON without the digest, and any change shows', () => {
    const doc = sealEvidence(body());
    const { digest, ...rest } = doc;
    expect(digest).toBe(sha256Hex(canonicalJson(rest)));
    expect(evidenceDigest(doc)).toBe(digest);
    expect(evidenceDigest({ ...doc, verdict: 'FAILED' })).not.toBe(digest);
    expect(evidenceDigest(JSON.parse(JSON.stringify(doc)))).toBe(digest); // survives a JSON round trip
  });

  it('says how the worker isolated tasks, loudly when it did not, and when an old document lacks it', () => {
    expect(isolationLine(body().worker)).toBe('isolation: bwrap (each task sandboxed)');
    expect(isolationLine({ isolation: 'none', container_engine: 'podman' })).toBe(
      'isolation: none — UNISOLATED worker: tasks ran as plain processes on the host; container engine podman',
    );
    expect(isolationLine({ isolation: null })).toMatch(/unknown/);
    expect(isolationLine({ worker_id: 'w' })).toMatch(/not recorded/);
  });

  it('an unisolated worker is recorded, not failed; a change of isolation mid-run fails closed', () => {
    const post = { residual_leases: [], cards: [], audit: { ok: true, events: 1, detail: null } };
    const none: WorkerIsolation = { mode: 'none', container_engine: null };
    const bwrap: WorkerIsolation = { mode: 'bwrap', container_engine: null };
    const check = (start: WorkerIsolation | null, end: WorkerIsolation | null) =>
      verifyPost({ ...post, isolation: end }, { isolation: start }).find(
        (k) => k.name === 'post.isolation_unchanged',
      );
    expect(check(none, none)).toEqual({
      name: 'post.isolation_unchanged',
      ok: true,
      detail: 'worker isolation none (UNISOLATED) throughout',
    });
    expect(check(bwrap, none)?.ok).toBe(false);
    expect(check(bwrap, none)?.detail).toContain('changed during the run');
    expect(check(null, bwrap)?.ok).toBe(false);
    expect(verdictOf([[{ name: 'a', ok: true, detail: '' }]], [check(none, none)!], 0)).toBe('PASSED');
  });

  it('summarises skipped counts in the table', () => {
    expect(summaryRows(body())).toEqual([[2, '-', '-', '-', '-', 'not run: one card']]);
  });

  it('verdict: a failure beats everything; a skipped count without failures is INCONCLUSIVE', () => {
    const good = [{ name: 'a', ok: true, detail: '' }];
    const bad = [{ name: 'a', ok: false, detail: '' }];
    expect(verdictOf([good], good, 0)).toBe('PASSED');
    expect(verdictOf([good], good, 1)).toBe('INCONCLUSIVE');
    expect(verdictOf([], good, 0)).toBe('INCONCLUSIVE');
    expect(verdictOf([good], bad, 1)).toBe('FAILED');
    expect(verdictOf([bad], good, 0)).toBe('FAILED');
  });
});

describe('the rung spec and the agent launch', () => {
  it('the spec pins the worker, the card count and the workload; its digest is reproducible', () => {
    const spec = qualificationSpec('qrun_1', 'w', 4, PIN);
    expect(spec).toMatchObject({
      cards: { count: 4 },
      worker: 'w',
      runtime: { kind: 'process', argv: [PIN.interpreter, PIN.script] },
      outputs: [{ path: 'qualification.json', required: true }],
    });
    expect(qualificationSpecDigest('qrun_1', 'w', 4, PIN)).toBe(
      qualificationSpecDigest('qrun_1', 'w', 4, PIN),
    );
    expect(qualificationSpecDigest('qrun_1', 'w', 4, PIN)).not.toBe(
      qualificationSpecDigest('qrun_1', 'w', 2, PIN),
    );
  });

  it('claude and codex get the kit config, the token only in the environment, the CA', () => {
    const prompt = agentPrompt('qrun_1', 2, qualificationSpec('qrun_1', 'w', 2, PIN));
    expect(prompt).toContain('qualification run qrun_1');
    expect(prompt).toContain('idempotency_key "qrun_1-2-create"');
    const base = {
      kitDir: '/kit',
      workDir: '/work',
      token: 'gpb_secret',
      caFile: '/ca.pem',
      prompt,
      env: { PATH: '/bin', HOME: '/home/op' },
      timeoutMs: 1000,
    };
    const claude = agentCommand({ ...base, kind: 'claude' });
    expect(claude.command).toBe('claude');
    expect(claude.args.slice(0, 4)).toEqual(['-p', prompt, '--mcp-config', '/kit/claude-code/.mcp.json']);
    expect(claude.env).toMatchObject({
      GPU_BROKER_TOKEN: 'gpb_secret',
      NODE_EXTRA_CA_CERTS: '/ca.pem',
      PATH: '/bin',
    });
    const codex = agentCommand({ ...base, kind: 'codex' });
    expect(codex.args[0]).toBe('exec');
    expect(codex.args.at(-1)).toBe(prompt);
    expect(codex.env).toMatchObject({ CODEX_HOME: '/work/codex-home', CODEX_CA_CERTIFICATE: '/ca.pem' });
    for (const c of [claude, codex]) expect(c.args.join(' ')).not.toContain('gpb_secret');
  });

  it('finds executables on PATH', () => {
    const dir = makeTempDir('bin');
    mkdirSync(join(dir, 'claude-dir'));
    writeFileSync(join(dir, 'claude'), '#!/bin/sh\n', { mode: 0o755 });
    writeFileSync(join(dir, 'codex'), 'not executable', { mode: 0o644 });
    expect(findExecutable('claude', `/nonexistent:${dir}`)).toBe(join(dir, 'claude'));
    expect(findExecutable('codex', dir)).toBeNull();
    expect(findExecutable('claude-dir', dir)).toBeNull();
  });
});
