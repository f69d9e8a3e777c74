import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cardLabel } from '../../../src/contracts/sample.js';
import { silentLogger } from '../../../src/platform/logger.js';
import { type RunningWorker, startWorker } from '../../../worker/daemon/start-worker.js';
import { findOnPath } from '../../../worker/sandbox/bwrap.js';
import { prepareSandbox } from '../../../worker/sandbox/setup.js';
import type { SlurmBackend } from '../../../worker/slurm/backend.js';
import { SlurmDriver } from '../../../worker/slurm/cli/driver.js';
import { slurmPoolSampler } from '../../../worker/slurm/sampler.js';
import { approveTask, clusterConfig, shellSpec, waitUntilSettled } from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectOk } from '../../support/mcp.js';
import { isRoot, requireOrSkip } from '../../support/require-or-skip.js';
import { MIG_SLURM_LAYOUT, startMigSlurm, stopMigSlurm } from '../../support/slurm.js';
import { makeTempDir, removeTempDirs } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';

/**
 * A MIG slice of a Slurm pool through a real master and a real Slurm (the MIG cluster of
 * test/support/slurm.ts: node `mig1`, `Gres=gpu:h100:1,gpu:3g.40gb:1,gpu:1g.10gb:2`, gres.conf with
 * `MultipleFiles=` of stand-in device nodes): the worker lists the slices as cards with their profile,
 * a spec with `cards.mig_profile` is placed on one, submitted as `--gres=gpu:1g.10gb:1`, and its rank's
 * sandbox holds that slice's parent and cap nodes only (docs/slurm.md "MIG slices").
 */
// Stand-in device nodes need mknod (root), each rank bwrap; startMigSlurm needs a local Slurm (CI: required).
const machineOk = requireOrSkip(
  'root and bubblewrap',
  isRoot && findOnPath('bwrap', process.env.PATH ?? '') !== null,
  'stand-in device nodes need mknod',
);
const avail = machineOk ? startMigSlurm() : { ok: false as const, reason: 'needs root and bubblewrap' };
const WORKER_ID = `slurm-mig-${process.pid}`;

let m: TestMaster;
let alice: Client;
let rita: Client;
let ops: Client;
let worker: RunningWorker;

type CardRow = {
  worker_id: string;
  index: number;
  label: string;
  state: string;
  mig: { profile: string } | null;
};

beforeAll(async () => {
  if (!avail.ok) return;
  m = await startTestMaster({ config: clusterConfig({ timing: { cleanup_timeout_seconds: 60 } }) });
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  ops = await m.mcpClient(m.operatorToken);
  const driver = new SlurmDriver({ env: avail.slurm.env });
  const sampler = slurmPoolSampler({ driver, partition: 'gpu', workerId: WORKER_ID, simulated: true });
  const dataDir = makeTempDir('slurm-mig-data');
  const prepared = await prepareSandbox({
    isolation: 'bwrap',
    dataDir,
    hiddenPaths: [],
    sampler,
    containerEngine: 'none',
  });
  if (prepared.setup.kind !== 'bwrap') throw new Error('bwrap is needed');
  const backend: SlurmBackend = {
    driver,
    partition: 'gpu',
    extraArgs: [],
    jobDir: `${makeTempDir('slurm-mig-jobs')}/jobs`,
    pollMs: 250,
    sandbox: { setup: prepared.setup, gpuDevDir: '/nonexistent' },
    gres: () => sampler.gres(),
  };
  worker = await startWorker({
    masterUrl: m.url,
    token: m.createToken(`w-${WORKER_ID}`, ['worker'], WORKER_ID),
    workerId: WORKER_ID,
    dataDir,
    sampler,
    ...(m.caPem === null ? {} : { ca: m.caPem }),
    logger: silentLogger(),
    sampleIntervalMs: 300,
    backoff: { initialMs: 50, maxMs: 500 },
    sandbox: prepared.setup,
    slurm: { backend, sampler },
  });
  await waitFor(async () => (await cards()).length === 4, {
    timeoutMs: 15_000,
    what: 'the pool of 4 listed',
  });
}, 90_000);

afterAll(async () => {
  await worker?.close();
  await m?.close();
  if (avail.ok && avail.slurm.startedHere) stopMigSlurm();
  removeTempDirs();
});

async function cards(): Promise<CardRow[]> {
  const r = expectOk(await callTool<{ cards: CardRow[] }>(ops, 'list_cards', {}));
  return r.cards.filter((c) => c.worker_id === WORKER_ID);
}

describe.runIf(avail.ok)('a MIG slice of a Slurm pool, end to end', () => {
  it('lists the whole card and the three slices with their profiles', async () => {
    const rows = await cards();
    expect(rows.map((c) => [c.label, c.mig?.profile ?? 'whole'])).toEqual([
      ['0', 'whole'],
      ['0:mig:1/0', '3g.40gb'],
      ['0:mig:2/0', '1g.10gb'],
      ['0:mig:3/0', '1g.10gb'],
    ]);
  });

  it('runs a 1g.10gb task on a slice: its own cap nodes only, the other slice’s absent', async () => {
    const caps = (MIG_SLURM_LAYOUT.caps['1g.10gb'] ?? []).flat();
    const taskId = await approveTask(
      alice,
      rita,
      shellSpec(
        [
          'echo "ids=$GPU_BROKER_GPU_IDS cvd=$CUDA_VISIBLE_DEVICES nvd=$NVIDIA_VISIBLE_DEVICES dev=$(ls /dev | grep ^nvidia | tr "\\n" " ")caps=$(ls /dev/nvidia-caps | tr "\\n" " ")"',
          `for c in ${caps.join(' ')}; do if cat /dev/nvidia-caps/nvidia-cap$c >/dev/null 2>/dev/null; then echo "open $c ok"; else echo "open $c ENOENT"; fi; done`,
        ].join('; '),
        { cards: { count: 1, mig_profile: '1g.10gb' } },
      ),
    );
    const done = await waitUntilSettled(alice, taskId, 90_000);
    const logs = expectOk(await callTool<{ data: string }>(alice, 'get_task_logs', { task_id: taskId }));
    expect(done, logs.data).toMatchObject({ state: 'COMPLETED', exit_code: 0 });
    const position = Number(/ids=(\d+)/.exec(logs.data)?.[1]);
    expect([2, 3]).toContain(position);
    const [mine, theirs] =
      position === 2 ? [caps.slice(0, 2), caps.slice(2)] : [caps.slice(2), caps.slice(0, 2)];
    expect(logs.data).toContain(
      `cvd=0 nvd= dev=nvidia-caps nvidia0 caps=nvidia-cap${mine[0]} nvidia-cap${mine[1]} \n`,
    );
    for (const c of mine) expect(logs.data).toContain(`open ${c} ok`);
    for (const c of theirs) expect(logs.data).toContain(`open ${c} ENOENT`);
    const lease = m.store.leases.latestLeaseForTask(taskId);
    expect(lease?.state).toBe('RELEASED');
    // The broker leased a 1g.10gb slot of the pool (Slurm chose which of the two slices ran it).
    expect(cardLabel(lease?.cards[0]?.index ?? 0)).toMatch(/^0:mig:[23]\/0$/);
  }, 120_000);
});
