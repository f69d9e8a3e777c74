import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migCardIndex } from '../../../../src/contracts/sample.js';
import type { ExecutionPlan } from '../../../../src/contracts/worker-protocol.js';
import type { ExecutorOptions } from '../../../../worker/local/executor.js';
import { startExecution } from '../../../../worker/local/executor.js';
import { parseSimMigLayout } from '../../../../worker/samplers/sim-mig-layout.js';
import { SimSampler, simMigMinors } from '../../../../worker/samplers/sim-sampler.js';
import { probeBwrap, systemMounts } from '../../../../worker/sandbox/bwrap.js';
import { makeSimDeviceNodes } from '../../../../worker/sandbox/devices.js';
import type { SandboxSetup } from '../../../../worker/sandbox/setup.js';
import { TaskUidPool } from '../../../../worker/sandbox/task-uids.js';
import { fakeMigMinor, fakeMigMinorsText } from '../../../fixtures/fake-smi.js';
import type { Chunk } from '../../../support/executor-plan.js';
import { makePlan, sh, text } from '../../../support/executor-plan.js';
import { isRoot, requireOrSkip } from '../../../support/require-or-skip.js';
import { SANDBOX_ENGINES } from '../../../support/sandbox-engines.js';

// A task on a MIG slice sees its parent's node, the control nodes and exactly the two capability nodes
// of its slice; slice B's are not in its sandbox (docs/decisions/0046-mig-slices-as-cards.md §6), for
// each sandbox engine, on simulated slices and on a fake nvidia host.

const probe = await probeBwrap({ root: isRoot });
const sandboxed = requireOrSkip(
  'bubblewrap',
  probe.ok && probe.bwrap !== null && probe.env !== null,
  probe.detail,
);

let dataDir: string;
let sandbox: SandboxSetup;
const A = { index: migCardIndex(0, 1, 0), uuid: 'MIG-SIM-slice-a' };
const B = simMigMinors(0, 2, 0);
const minorsA = simMigMinors(0, 1, 0);

beforeAll(async () => {
  if (!sandboxed || probe.bwrap === null || probe.env === null) return;
  dataDir = mkdtempSync(join('/var/tmp', 'gpu-broker-mig-'));
  const sim = new SimSampler({ count: 1, mig: parseSimMigLayout('1g.10gb*7') });
  sandbox = {
    kind: 'bwrap',
    bwrap: probe.bwrap,
    setpriv: isRoot ? probe.setpriv : null,
    envHelper: probe.env,
    uids: isRoot ? new TaskUidPool({ first: 2_000_100_200, last: 2_000_100_299 }) : null,
    hiddenPaths: [dataDir],
    system: systemMounts(),
    simNodes: await makeSimDeviceNodes(join(dataDir, 'devices'), 1, isRoot, sim.capabilityMinors()),
  };
});
afterAll(() => {
  if (dataDir !== undefined) rmSync(dataDir, { recursive: true, force: true });
});

function run(plan: ExecutionPlan, extra: Partial<ExecutorOptions> = {}) {
  const chunks: Chunk[] = [];
  const handle = startExecution(plan, {
    rootDir: join(dataDir, 'executions'),
    workerId: 'worker-1',
    provider: 'sim',
    onLog: (stream, offset, data) => chunks.push({ stream, offset, data }),
    cleanupPollMs: 20,
    sandbox,
    ...extra,
  });
  return { done: handle.done, chunks };
}

const LOOK = [
  'ls /dev | grep ^nvidia',
  'ls /dev/nvidia-caps',
  'echo "vis=$CUDA_VISIBLE_DEVICES nv=$NVIDIA_VISIBLE_DEVICES ids=$GPU_BROKER_GPU_IDS"',
].join('; ');
const tryOpen = (minor: number) =>
  `(exec 3</dev/nvidia-caps/nvidia-cap${minor} && echo "cap${minor} opened") 2>/dev/null || echo "cap${minor} ENOENT"`;

describe.each(SANDBOX_ENGINES)('built by $name', ({ native }) => {
  beforeAll(() => {
    if (sandbox?.kind === 'bwrap') sandbox = { ...sandbox, native };
  });

  describe.runIf(sandboxed)('a task on a simulated MIG slice', () => {
    it("sees its parent's node and exactly its two capability nodes, named by its MIG- uuid", async () => {
      const plan = makePlan({ argv: sh(LOOK), cards: [A] });
      const { done, chunks } = run(plan);
      const result = await done;
      expect(result.failure_reason, result.setup_error).toBeNull();
      expect(text(chunks, 'stdout').trim().split('\n')).toEqual([
        'nvidia-caps',
        'nvidia0',
        `nvidia-cap${minorsA.gi}`,
        `nvidia-cap${minorsA.ci}`,
        'vis=MIG-SIM-slice-a nv=MIG-SIM-slice-a ids=0:mig:1/0',
      ]);
    });

    it("cannot open slice B's capability nodes: they are not in its sandbox", async () => {
      const plan = makePlan({
        argv: sh([minorsA.gi, minorsA.ci, B.gi, B.ci, 1, 2].map(tryOpen).join('; ')),
        cards: [A],
      });
      const { done, chunks } = run(plan);
      expect((await done).failure_reason).toBeNull();
      expect(text(chunks, 'stdout').trim().split('\n')).toEqual([
        `cap${minorsA.gi} opened`,
        `cap${minorsA.ci} opened`,
        `cap${B.gi} ENOENT`,
        `cap${B.ci} ENOENT`,
        'cap1 ENOENT',
        'cap2 ENOENT',
      ]);
    });
  });

  describe.runIf(sandboxed && isRoot)('a task on a MIG slice of a (fake) nvidia host', () => {
    it("binds the parent, the control nodes and the driver's two minors, never config, monitor or another slice's", async () => {
      const devDir = mkdtempSync(join(dataDir, 'nv-dev-'));
      mkdirSync(join(devDir, 'nvidia-caps'));
      const caps = [
        1,
        2,
        fakeMigMinor(0, 1),
        fakeMigMinor(0, 1, 0),
        fakeMigMinor(0, 2),
        fakeMigMinor(0, 2, 0),
      ];
      for (const name of [
        'nvidia0',
        'nvidia1',
        'nvidiactl',
        ...caps.map((m) => `nvidia-caps/nvidia-cap${m}`),
      ])
        execFileSync('mknod', ['-m', '0666', join(devDir, name), 'c', '1', '3']);
      const migMinorsPath = join(devDir, 'mig-minors');
      writeFileSync(migMinorsPath, fakeMigMinorsText());
      const plan = makePlan({
        argv: sh(`${LOOK}; ${caps.map(tryOpen).join('; ')}`),
        cards: [{ index: migCardIndex(0, 1, 0), uuid: 'MIG-a686709d-6dc2-542a-8851-0d2508448c10' }],
      });
      const { done, chunks } = run(plan, {
        provider: 'nvidia',
        sandbox: { ...sandbox, devDir, migMinorsPath } as SandboxSetup,
      });
      const result = await done;
      expect(result.failure_reason, result.setup_error).toBeNull();
      const gi = fakeMigMinor(0, 1);
      const ci = fakeMigMinor(0, 1, 0);
      expect(text(chunks, 'stdout').trim().split('\n')).toEqual([
        'nvidia-caps',
        'nvidia0',
        'nvidiactl',
        `nvidia-cap${gi}`,
        `nvidia-cap${ci}`,
        'vis=MIG-a686709d-6dc2-542a-8851-0d2508448c10 nv=MIG-a686709d-6dc2-542a-8851-0d2508448c10 ids=0:mig:1/0',
        'cap1 ENOENT',
        'cap2 ENOENT',
        `cap${gi} opened`,
        `cap${ci} opened`,
        `cap${fakeMigMinor(0, 2)} ENOENT`,
        `cap${fakeMigMinor(0, 2, 0)} ENOENT`,
      ]);
    });

    it('refuses to start a slice the driver lists no minors for (SETUP_FAILED), never binding more', async () => {
      const devDir = mkdtempSync(join(dataDir, 'nv-dev-'));
      execFileSync('mknod', ['-m', '0666', join(devDir, 'nvidia0'), 'c', '1', '3']);
      execFileSync('mknod', ['-m', '0666', join(devDir, 'nvidiactl'), 'c', '1', '3']);
      const migMinorsPath = join(devDir, 'mig-minors');
      writeFileSync(migMinorsPath, 'config 1\nmonitor 2\n');
      const plan = makePlan({ argv: sh('true'), cards: [{ index: migCardIndex(0, 1, 0), uuid: 'MIG-x' }] });
      const result = await run(plan, {
        provider: 'nvidia',
        sandbox: { ...sandbox, devDir, migMinorsPath } as SandboxSetup,
      }).done;
      expect(result.setup_error).toMatch(/no capability minors for MIG slice 0:mig:1\/0/);
    });
  });
});
