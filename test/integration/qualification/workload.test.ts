import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  checkWorkloadResult,
  type WorkloadExpectation,
} from '../../../qualification/verify/workload-checks.js';
import { WORKLOAD_RESULT_FILE } from '../../../qualification/workload/location.js';
import { migCardIndex } from '../../../src/contracts/sample.js';
import { WORKLOAD_PYTHON as PYTHON, runWorkload } from '../../support/workload.js';

function bindingEnv(n: number, outputDir: string, simulated: boolean): Record<string, string> {
  const ids = Array.from({ length: n }, (_, i) => i);
  return {
    GPU_BROKER_TASK_ID: `task-${n}`,
    GPU_BROKER_EXECUTION_ID: `exec-${n}`,
    GPU_BROKER_ASSIGNMENT_ID: `asg-${n}`,
    GPU_BROKER_LEASE_EPOCH: String(40 + n),
    GPU_BROKER_GPU_IDS: ids.join(','),
    GPU_BROKER_GPU_UUIDS: ids.map((i) => `SIM-${i}`).join(','),
    GPU_BROKER_WORKER_ID: 'worker-sim',
    GPU_BROKER_OUTPUT_DIR: outputDir,
    CUDA_VISIBLE_DEVICES: ids.join(','),
    ...(simulated ? { GPU_BROKER_SIMULATED: '1' } : {}),
  };
}

function expectation(n: number): WorkloadExpectation {
  const ids = Array.from({ length: n }, (_, i) => i);
  return {
    task_id: `task-${n}`,
    execution_id: `exec-${n}`,
    assignment_id: `asg-${n}`,
    lease_epoch: 40 + n,
    gpu_ids: ids,
    gpu_uuids: ids.map((i) => `SIM-${i}`),
    worker_id: 'worker-sim',
    simulated: true,
  };
}

// One run per card count, sequential in one file: the machines running CI have few cores.
describe('qualification workload (real script, simulated cards, gloo on CPU)', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'gpu-broker-qualify-'));
  });
  afterAll(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it('has torch.distributed with gloo for /usr/bin/python3', async () => {
    const probe = await new Promise<number | null>((resolve, reject) => {
      const child = spawn(PYTHON, ['-c', 'import torch.distributed as d; assert d.is_gloo_available()']);
      child.on('error', reject);
      child.on('close', resolve);
    });
    expect(probe, 'install torch for /usr/bin/python3: apt-get install -y python3-torch').toBe(0);
  });

  for (const n of [1, 2, 4, 8]) {
    it(`passes every check on ${n} simulated card(s)`, async () => {
      const out = join(dir, `n${n}`);
      const run = await runWorkload(bindingEnv(n, out, true));
      expect(run.code, run.stderr).toBe(0);
      for (let rank = 0; rank < n; rank++) {
        expect(run.stdout).toContain(`[rank ${rank}] all_reduce_sum value=${(n * (n + 1)) / 2}`);
      }
      const doc: unknown = JSON.parse(readFileSync(join(out, WORKLOAD_RESULT_FILE), 'utf8'));
      const checks = checkWorkloadResult(doc, expectation(n));
      expect(checks.filter((c) => !c.ok)).toEqual([]);
      expect(checks.map((c) => c.name)).toContain('busbw.consistent');
      expect(doc).toMatchObject({
        backend: 'gloo',
        simulated: true,
        world_size: n,
        hostname: expect.any(String),
      });
    });
  }

  it('refuses to run on CPU when the cards are not declared simulated', async () => {
    const out = join(dir, 'not-simulated');
    const run = await runWorkload(bindingEnv(2, out, false));
    expect(run.code).not.toBe(0);
    expect(run.stderr).toMatch(/no CUDA\/ROCm device is available and GPU_BROKER_SIMULATED is not 1/);
    expect(() => readFileSync(join(out, WORKLOAD_RESULT_FILE))).toThrow();
  });

  it('on a MIG slice runs the GEMM alone (no process group, no all_reduce) and binds to the slice index', async () => {
    const out = join(dir, 'mig');
    const uuid = 'MIG-SIM-0-2-0';
    const run = await runWorkload({
      ...bindingEnv(1, out, true),
      GPU_BROKER_GPU_IDS: '0:mig:2/0',
      GPU_BROKER_GPU_UUIDS: uuid,
      CUDA_VISIBLE_DEVICES: uuid,
    });
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toContain('GEMM only (all_reduce is not offered across MIG instances)');
    expect(run.stdout).not.toContain('all_reduce_sum');
    const doc: unknown = JSON.parse(readFileSync(join(out, WORKLOAD_RESULT_FILE), 'utf8'));
    expect(doc).toMatchObject({ mode: 'gemm_only', backend: 'none', gpu_ids: [migCardIndex(0, 2, 0)] });
    expect(doc).toMatchObject({
      gpu_labels: ['0:mig:2/0'],
      ranks: [{ allreduce_sum: null, bandwidth: null }],
    });
    const checks = checkWorkloadResult(doc, {
      ...expectation(1),
      gpu_ids: [migCardIndex(0, 2, 0)],
      gpu_uuids: [uuid],
      gemm_only: true,
    });
    expect(checks.filter((c) => !c.ok)).toEqual([]);
    // Judged as a whole-card rung, the same document fails: it measured no all_reduce.
    const whole = checkWorkloadResult(doc, {
      ...expectation(1),
      gpu_ids: [migCardIndex(0, 2, 0)],
      gpu_uuids: [uuid],
    });
    expect(whole.filter((c) => !c.ok).map((c) => c.name)).toEqual([
      'allreduce.sum',
      'algbw.consistent',
      'busbw.consistent',
      'backend.matches',
    ]);
  });

  it('refuses a binding of two MIG slices: a rung on slices holds exactly one', async () => {
    const out = join(dir, 'mig-two');
    const run = await runWorkload({ ...bindingEnv(2, out, true), GPU_BROKER_GPU_IDS: '0:mig:1/0,0:mig:2/0' });
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/holds exactly one slice/);
  });
});
