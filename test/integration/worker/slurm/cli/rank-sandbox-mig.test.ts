import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ALWAYS_HIDDEN, bwrapArgs, findOnPath, systemMounts } from '../../../../../worker/sandbox/bwrap.js';
import {
  hiddenPathList,
  renderRankScript,
  SANDBOX_SETUP_EXIT,
  splitBwrapArgs,
  taskEnvFile,
  type WrapperSandbox,
} from '../../../../../worker/slurm/cli/rank-script.js';
import { isRoot, requireOrSkip } from '../../../../support/require-or-skip.js';
import { makeTempDir, removeTempDirs } from '../../../../support/temp.js';

/**
 * rank.sh on a node whose GPUs are typed GRES with gres.conf files (docs/slurm.md "MIG slices"), run
 * directly with real bwrap and the environment slurmstepd gives a step (SLURM_STEP_GPUS = positions):
 * a rank on slice A binds its parent node and A's two capability nodes and nothing of slice B, whose
 * cap nodes it cannot open (ENOENT: they are not in its sandbox). Stand-in device nodes are char
 * devices 1:3 like the local worker's simulated ones.
 */

const bwrap = findOnPath('bwrap', process.env.PATH ?? '');
const setpriv = findOnPath('setpriv', process.env.PATH ?? '');
const TASK_UID = 2_000_000_778;

let jobsRoot: string;
let devDir: string;

/** The node's gres.conf files by position: a whole card, slice A and slice B of card 0, one without files. */
function layout(): Record<string, Array<string[] | null>> {
  const cap = (m: number) => join(devDir, 'nvidia-caps', `nvidia-cap${m}`);
  return {
    node7: [
      [join(devDir, 'nvidia1')],
      [join(devDir, 'nvidia0'), cap(21), cap(22)],
      [join(devDir, 'nvidia0'), cap(30), cap(31)],
      null,
    ],
  };
}

function job(name: string, script: string, over: Partial<WrapperSandbox> = {}) {
  const jobDir = join(jobsRoot, name);
  const taskDir = join(jobDir, 'task');
  mkdirSync(join(taskDir, 'out'), { recursive: true, mode: 0o700 });
  const argv = ['/bin/sh', '-c', script];
  const identity = setpriv !== null ? { uid: TASK_UID, gid: TASK_UID, setpriv } : null;
  if (identity !== null) spawnSync('chown', [`${TASK_UID}:${TASK_UID}`, taskDir, join(taskDir, 'out')]);
  const args = bwrapArgs({
    system: systemMounts(),
    taskDir,
    hidden: [],
    pinned: [],
    devices: [],
    network: 'none',
    identity,
    statusFd: null,
    argv,
  });
  const sandbox: WrapperSandbox = {
    bwrap: bwrap as string,
    ...splitBwrapArgs(args, argv)!,
    hidden: hiddenPathList([...ALWAYS_HIDDEN, jobsRoot]),
    gpuDevDir: devDir,
    gresFiles: layout(),
    ...over,
  };
  const rank = join(jobDir, 'rank.sh');
  writeFileSync(rank, renderRankScript(jobDir, argv, sandbox), { mode: 0o700 });
  writeFileSync(join(jobDir, 'task.env'), taskEnvFile({ PATH: '/usr/bin:/bin' }), { mode: 0o600 });
  return { jobDir, rank };
}

function runRank(rank: string, env: Record<string, string>) {
  return spawnSync('/bin/bash', ['--noprofile', '--norc', rank], {
    encoding: 'utf8',
    cwd: join(rank, '..', 'task'),
    env: {
      PATH: '/usr/bin:/bin',
      SLURMD_NODENAME: 'node7',
      SLURM_PROCID: '0',
      SLURM_JOB_NUM_NODES: '1',
      ...env,
    },
    timeout: 30_000,
  });
}

/** Lists the GPU nodes the task sees and tries to open each of the node's cap nodes. */
const PROBE = [
  'echo "dev=$(ls /dev | grep ^nvidia | tr "\\n" " ")caps=$(ls /dev/nvidia-caps 2>/dev/null | tr "\\n" " ")"',
  'for m in 21 22 30 31; do if cat /dev/nvidia-caps/nvidia-cap$m >/dev/null 2>/tmp/e; then echo "open $m ok"; else echo "open $m: $(cat /tmp/e)"; fi; done',
  'echo "cvd=$CUDA_VISIBLE_DEVICES ids=$GPU_BROKER_GPU_IDS"',
].join('; ');

beforeAll(() => {
  jobsRoot = makeTempDir('rank-mig-jobs');
  devDir = makeTempDir('rank-mig-dev');
  mkdirSync(join(devDir, 'nvidia-caps'));
  const nodes = ['nvidia0', 'nvidia1', ...[21, 22, 30, 31].map((m) => `nvidia-caps/nvidia-cap${m}`)];
  if (isRoot) for (const n of nodes) spawnSync('mknod', ['-m', '0666', join(devDir, n), 'c', '1', '3']);
});

afterAll(() => removeTempDirs());

const runs = requireOrSkip(
  'bubblewrap and root',
  bwrap !== null && isRoot,
  'the stand-in device nodes need mknod',
);

describe.runIf(runs)('rank.sh on MIG slices: exactly the files gres.conf gives the GPU Slurm named', () => {
  it('a rank on slice A gets its parent and its two cap nodes; slice B’s cap nodes do not exist for it', () => {
    const { rank } = job('slice-a', PROBE);
    const r = runRank(rank, { SLURM_STEP_GPUS: '1', CUDA_VISIBLE_DEVICES: '1' });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toContain('dev=nvidia-caps nvidia0 caps=nvidia-cap21 nvidia-cap22 \n');
    expect(r.stdout).toContain('open 21 ok');
    expect(r.stdout).toContain('open 22 ok');
    expect(r.stdout).toMatch(/open 30: .*No such file or directory/);
    expect(r.stdout).toMatch(/open 31: .*No such file or directory/);
    expect(r.stdout).toContain('cvd=0 ids=1');
  });

  it('and the other way round: slice B cannot open slice A’s cap nodes', () => {
    const { rank } = job('slice-b', PROBE);
    const r = runRank(rank, { SLURM_STEP_GPUS: '2' });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toContain('caps=nvidia-cap30 nvidia-cap31 \n');
    expect(r.stdout).toMatch(/open 21: .*No such file or directory/);
    expect(r.stdout).toContain('open 30 ok');
  });

  it('two slices of one card: the parent once, both pairs of caps; a whole card by its own file, not nvidia<position>', () => {
    const both = runRank(job('slices-ab', PROBE).rank, { SLURM_STEP_GPUS: '1,2' });
    expect(both.status, both.stderr).toBe(0);
    expect(both.stdout).toContain(
      'dev=nvidia-caps nvidia0 caps=nvidia-cap21 nvidia-cap22 nvidia-cap30 nvidia-cap31 \n',
    );
    expect(both.stdout).toContain('cvd=0,1 ids=1,2');
    const whole = runRank(job('whole', PROBE).rank, { SLURM_STEP_GPUS: '0' });
    expect(whole.status, whole.stderr).toBe(0);
    // Position 0 is /dev/nvidia1 in gres.conf: bound as nvidia1, and no cap node at all.
    expect(whole.stdout).toContain('dev=nvidia1 caps=\n');
  });

  it('keeps a MIG- uuid Slurm set for the step (AutoDetect=nvml) as the task’s CUDA_VISIBLE_DEVICES', () => {
    const uuid = 'MIG-5c2f1a3e-0b7d-5e2a-9c11-3f4e5d6c7b8a';
    const r = runRank(job('uuid', PROBE).rank, { SLURM_STEP_GPUS: '1', CUDA_VISIBLE_DEVICES: uuid });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toContain(`cvd=${uuid} ids=1`);
  });

  it('a position gres.conf gives no files, a missing node or a foreign file fails the rank; the task never runs', () => {
    const none = job('no-files', 'echo ran');
    const r = runRank(none.rank, { SLURM_STEP_GPUS: '3' });
    expect(r.status).toBe(SANDBOX_SETUP_EXIT);
    expect(r.stdout).not.toContain('ran');
    expect(readFileSync(join(none.jobDir, 'setup-error.0'), 'utf8')).toContain(
      'gres.conf names no usable device files for GPU 3 of node node7',
    );
    // A file named in gres.conf but absent on the node.
    const gone = job('gone', 'echo ran', {
      gresFiles: {
        node7: [
          [
            join(devDir, 'nvidia0'),
            join(devDir, 'nvidia-caps/nvidia-cap39'),
            join(devDir, 'nvidia-caps/nvidia-cap40'),
          ],
        ],
      },
    });
    const g = runRank(gone.rank, { SLURM_STEP_GPUS: '0' });
    expect(g.status).toBe(SANDBOX_SETUP_EXIT);
    expect(readFileSync(join(gone.jobDir, 'setup-error.0'), 'utf8')).toContain(
      'nvidia-cap39 of GPU 0 is missing',
    );
    // A gres.conf that names something other than nvidia nodes is never bound (left out when rendered).
    const odd = job('odd', 'echo ran', { gresFiles: { node7: [['/etc/shadow']] } });
    const o = runRank(odd.rank, { SLURM_STEP_GPUS: '0' });
    expect(o.status).toBe(SANDBOX_SETUP_EXIT);
    expect(o.stdout).not.toContain('ran');
  });

  it('gres.conf text cannot inject shell: a quoted path is data, a node name with $(…) is left out', () => {
    const marker = join(jobsRoot, 'pwned');
    const evil = `${devDir}/x'$(touch ${marker})'/nvidia0`;
    const quoted = job('inject-path', 'echo ran', { gresFiles: { node7: [[evil]] } });
    const r = runRank(quoted.rank, { SLURM_STEP_GPUS: '0' });
    expect(r.status).toBe(SANDBOX_SETUP_EXIT);
    expect(readFileSync(join(quoted.jobDir, 'setup-error.0'), 'utf8')).toContain('is missing');
    const named = job('inject-node', 'echo "dev=$(ls /dev | grep ^nvidia | tr "\\n" " ")"', {
      gresFiles: { [`node7$(touch ${marker})`]: [[join(devDir, 'nvidia0')]] },
    });
    const n = runRank(named.rank, { SLURM_STEP_GPUS: '1' });
    // The node is not in the map, so the rank keeps <gpuDevDir>/nvidia1 for position 1.
    expect(n.status, n.stderr).toBe(0);
    expect(n.stdout).toContain('dev=nvidia1 ');
    expect(existsSync(marker)).toBe(false);
  });

  it('a node gres.conf does not cover keeps <gpuDevDir>/nvidia<position>', () => {
    const r = runRank(job('other-node', PROBE).rank, { SLURM_STEP_GPUS: '1', SLURMD_NODENAME: 'node8' });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toContain('dev=nvidia1 caps=\n');
  });
});
