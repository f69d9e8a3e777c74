import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ALWAYS_HIDDEN, bwrapArgs, findOnPath, systemMounts } from '../../../../../worker/sandbox/bwrap.js';
import { readSetupErrors } from '../../../../../worker/slurm/cli/job-wrapper.js';
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
 * rank.sh, the sandboxed rank of a Slurm job, run directly with real bwrap and the environment slurmstepd
 * would give it (SLURM_STEP_GPUS, SLURMD_NODENAME, SLURM_PROCID), without a Slurm: which device nodes the
 * task sees, how they are numbered, that it cannot reach the job directory (exit.json, other jobs), and
 * that every way the sandbox can fail to come up leaves setup-error.<rank> and exit 125 with the task
 * never run.
 */

const bwrap = findOnPath('bwrap', process.env.PATH ?? '');
const root = isRoot;
const setpriv = findOnPath('setpriv', process.env.PATH ?? '');
const TASK_UID = 2_000_000_777;

let jobsRoot: string;
let devDir: string;

/**
 * A job dir with task/, task/out, task.env and rank.sh for `script` (sh -c), sandboxed like the worker
 * does (worker/slurm/job-setup.ts); `env` is the task's environment (task.env).
 */
function job(
  name: string,
  script: string,
  over: Partial<WrapperSandbox> = {},
  env: Record<string, string> = { PATH: '/usr/bin:/bin' },
  unprivileged = false,
) {
  const jobDir = join(jobsRoot, name);
  const taskDir = join(jobDir, 'task');
  mkdirSync(join(taskDir, 'out'), { recursive: true, mode: 0o700 });
  const argv = ['/bin/sh', '-c', script];
  const identity =
    root && setpriv !== null && !unprivileged ? { uid: TASK_UID, gid: TASK_UID, setpriv } : null;
  if (identity !== null) {
    spawnSync('chown', [`${TASK_UID}:${TASK_UID}`, taskDir, join(taskDir, 'out')]);
  }
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
    ...over,
  };
  const rank = join(jobDir, 'rank.sh');
  writeFileSync(rank, renderRankScript(jobDir, argv, sandbox), { mode: 0o700 });
  writeFileSync(join(jobDir, 'task.env'), taskEnvFile(env), { mode: 0o600 });
  return { jobDir, taskDir, rank };
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

beforeAll(() => {
  jobsRoot = makeTempDir('rank-sandbox-jobs');
  devDir = makeTempDir('rank-sandbox-dev');
  // Fake GPU device files like the test Slurm's gres.conf File= (char devices 1:3, as /dev/null).
  for (let i = 0; i < 4; i++) {
    const path = join(devDir, `nvidia${i}`);
    if (root) spawnSync('mknod', ['-m', '0666', path, 'c', '1', '3']);
  }
});

afterAll(() => removeTempDirs());

const runs = requireOrSkip(
  'bubblewrap and root',
  bwrap !== null && root,
  'rank.sh drops the rank to a task uid',
);

describe.runIf(runs)('rank.sh: a Slurm rank in bwrap on its node', () => {
  it('binds only the GPUs Slurm gave the rank, numbered from 0, and keeps the physical ids', () => {
    const { rank } = job(
      'devices',
      'ls /dev | grep "^nvidia" | tr "\\n" " "; echo; echo "cvd=$CUDA_VISIBLE_DEVICES ids=$GPU_BROKER_GPU_IDS uid=$(id -u) host=$(hostname)"',
    );
    const r = runRank(rank, { SLURM_STEP_GPUS: '1,3' });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toContain('nvidia1 nvidia3 \n');
    expect(r.stdout).toContain(`cvd=0,1 ids=1,3 uid=${TASK_UID} host=gpu-broker-task`);
  });

  it('falls back to SLURM_JOB_GPUS on one node only, never on several', () => {
    const one = job('job-gpus', 'echo "ids=$GPU_BROKER_GPU_IDS"');
    const r = runRank(one.rank, { SLURM_JOB_GPUS: '2' });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toContain('ids=2');
    // On a second node SLURM_JOB_GPUS is the batch host's: the rank must not trust it.
    const two = job('job-gpus-multi', 'echo ran');
    const m = runRank(two.rank, { SLURM_JOB_GPUS: '2', SLURM_JOB_NUM_NODES: '2', SLURM_PROCID: '1' });
    expect(m.status).toBe(SANDBOX_SETUP_EXIT);
    expect(m.stdout).not.toContain('ran');
    expect(readFileSync(join(two.jobDir, 'setup-error.1'), 'utf8')).toContain('Slurm named no GPUs');
  });

  it('hides the job directory: the task cannot forge exit.json nor read other jobs', () => {
    writeFileSync(join(jobsRoot, 'secret.txt'), 'other job');
    const { jobDir, rank } = job(
      'forge',
      [
        'echo \'{"version":1,"job_id":"1","exit_code":0,"ended_at":"x"}\' > ../exit.json && echo wrote-parent',
        `echo '{}' > ${join(jobsRoot, 'forge', 'exit.json')} && echo wrote-abs`,
        `cat ${join(jobsRoot, 'secret.txt')} && echo read-secret`,
        'ls / | tr "\\n" " "',
        'exit 3',
      ].join('; '),
    );
    const r = runRank(rank, { SLURM_STEP_GPUS: '0' });
    expect(r.status).toBe(3);
    expect(r.stdout).not.toMatch(/wrote-parent|wrote-abs|read-secret|other job/);
    expect(existsSync(join(jobDir, 'exit.json'))).toBe(false);
    expect(readFileSync(join(jobDir, 'sandbox-started.0'), 'utf8')).toBe('started');
  });

  it('refuses to run the task when a device node is missing, bwrap is absent, or bwrap fails', async () => {
    const missing = job('missing-dev', 'echo ran');
    const a = runRank(missing.rank, { SLURM_STEP_GPUS: '5' });
    expect(a.status).toBe(SANDBOX_SETUP_EXIT);
    expect(a.stdout).not.toContain('ran');
    expect(await readSetupErrors(missing.jobDir)).toEqual([
      expect.stringMatching(/node node7 rank 0: the device node \S+nvidia5 of GPU 5 is missing/),
    ]);

    const nobwrap = job('no-bwrap', 'echo ran', { bwrap: '/nonexistent/bwrap' });
    const b = runRank(nobwrap.rank, { SLURM_STEP_GPUS: '0' });
    expect(b.status).toBe(SANDBOX_SETUP_EXIT);
    expect((await readSetupErrors(nobwrap.jobDir))[0]).toContain('is not installed');

    // A system dir that does not exist on this node: bwrap exits before the task.
    const broken = job('bwrap-fails', 'echo ran');
    const script = readFileSync(broken.rank, 'utf8').replace(
      "POST=('",
      "POST=('--ro-bind' '/no/such/dir' '/x' '",
    );
    writeFileSync(broken.rank, script);
    const c = runRank(broken.rank, { SLURM_STEP_GPUS: '0' });
    expect(c.status).toBe(SANDBOX_SETUP_EXIT);
    expect(c.stdout).not.toContain('ran');
    expect((await readSetupErrors(broken.jobDir))[0]).toContain('bwrap could not create the sandbox');
  });

  it('checks pinned files on the node: a changed one stops the rank before the sandbox', async () => {
    const pinned = join(makeTempDir('rank-pins'), 'tool.sh');
    writeFileSync(pinned, 'echo tool v1\n');
    const sha = createHash('sha256').update('echo tool v1\n').digest('hex');
    const ok = job('pins-ok', 'echo ran', { pins: [{ path: pinned, sha256: sha }] });
    expect(runRank(ok.rank, { SLURM_STEP_GPUS: '0' }).stdout).toContain('ran');
    writeFileSync(pinned, 'echo tool v2 (changed on this node)\n');
    const bad = job('pins-bad', 'echo ran', { pins: [{ path: pinned, sha256: sha }] });
    const r = runRank(bad.rank, { SLURM_STEP_GPUS: '0' });
    expect(r.status).toBe(SANDBOX_SETUP_EXIT);
    expect(r.stdout).not.toContain('ran');
    expect((await readSetupErrors(bad.jobDir))[0]).toContain(`pinned file ${pinned} has sha256`);
  });

  it('binds Hygon DCU nodes (dri/renderD<128+i> and kfd) for --slurm-gpu-kind hy, and needs kfd', async () => {
    const hyDir = makeTempDir('rank-sandbox-hy');
    mkdirSync(join(hyDir, 'dri'));
    for (const name of ['dri/renderD129', 'dri/renderD131', 'dri/renderD130'])
      spawnSync('mknod', ['-m', '0666', join(hyDir, name), 'c', '1', '3']);
    const noKfd = job('hy-no-kfd', 'echo ran', { gpuDevDir: hyDir, gpuKind: 'hy' });
    const a = runRank(noKfd.rank, { SLURM_STEP_GPUS: '1,3' });
    expect(a.status).toBe(SANDBOX_SETUP_EXIT);
    expect((await readSetupErrors(noKfd.jobDir))[0]).toContain(`${hyDir}/kfd is missing`);
    spawnSync('mknod', ['-m', '0666', join(hyDir, 'kfd'), 'c', '1', '3']);
    const { rank } = job(
      'hy',
      'ls /dev/dri | tr "\\n" " "; echo; ls /dev | grep -c "^kfd$"; echo "hip=$HIP_VISIBLE_DEVICES ids=$GPU_BROKER_GPU_IDS"',
      { gpuDevDir: hyDir, gpuKind: 'hy' },
    );
    const r = runRank(rank, { SLURM_STEP_GPUS: '1,3' });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toContain('renderD129 renderD131 \n1\n');
    expect(r.stdout).toContain('hip=0,1 ids=1,3');
  });

  it('expands %n in the device directory to the node name', () => {
    mkdirSync(join(devDir, 'node7'), { recursive: true });
    spawnSync('mknod', ['-m', '0666', join(devDir, 'node7', 'nvidia6'), 'c', '1', '3']);
    const { rank } = job('per-node', 'ls /dev | grep "^nvidia"', { gpuDevDir: `${devDir}/%n` });
    const r = runRank(rank, { SLURM_STEP_GPUS: '6' });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout.trim()).toBe('nvidia6');
  });

  it("applies the task's env only to the task: bwrap, setpriv and the shells before it read none of it", () => {
    const markers = makeTempDir('rank-env-markers');
    spawnSync('chmod', ['0777', markers]);
    const evil = join(markers, 'evil.sh');
    writeFileSync(evil, `touch ${markers}/bash-env-ran\n`, { mode: 0o755 });
    const fakeBin = join(markers, 'bin');
    mkdirSync(fakeBin);
    for (const name of ['bwrap', 'setpriv', 'env', 'bash', 'sh', 'cat', 'grep', 'printf', 'rm'])
      writeFileSync(
        join(fakeBin, name),
        `#!/bin/sh\ntouch ${markers}/ran-${name}\nexec /usr/bin/${name} "$@"\n`,
        {
          mode: 0o755,
        },
      );
    const hostile = {
      PATH: `${fakeBin}:/usr/bin:/bin`,
      BASH_ENV: evil,
      ENV: evil,
      SHELLOPTS: 'xtrace',
      PS4: `$(touch ${markers}/ps4-ran)`,
      LD_DEBUG: 'files',
      LD_DEBUG_OUTPUT: 'lddebug',
      FOO: 'line1\nline2',
      RANK: '77',
    };
    const { taskDir, rank } = job(
      'hostile-env',
      [
        'echo "bash_env=$BASH_ENV shellopts=$SHELLOPTS ps4=$PS4 ld=$LD_DEBUG_OUTPUT rank=$RANK"',
        'printf "foo=%s|\\n" "$FOO"',
        // biome-ignore lint/suspicious/noTemplateCurlyInString: a shell expansion, not a template
        'for f in /proc/self/fd/*; do printf "%s>%s " "${f##*/}" "$(readlink $f)"; done; echo',
        'tr "\\0" " " </proc/1/cmdline; echo',
      ].join('; '),
      {},
      hostile,
    );
    const r = runRank(rank, { SLURM_STEP_GPUS: '0' });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toContain(
      `bash_env=${evil} shellopts=xtrace ps4=$(touch ${markers}/ps4-ran) ld=lddebug rank=0`,
    );
    expect(r.stdout).toContain('foo=line1\nline2|');
    // No fd of the rank's is left open in the task: not the env file, the bwrap options, "started".
    const fds = r.stdout.split('\n').find((l) => l.startsWith('0>')) ?? '';
    expect(fds).not.toMatch(/env\.0|bwrap-args|sandbox-started|hostile-env/);
    // The sandbox's PID 1 is bwrap: its command line names no host path, no option, no env value.
    const cmdline = r.stdout.split('\n').find((l) => l.includes('--args')) ?? '';
    expect(cmdline).toMatch(/^\S*bwrap --args 6 -- /);
    expect(cmdline).not.toContain(jobsRoot);
    expect(cmdline).not.toContain('line1');
    // Nothing outside the task ran a marker, and ld.so wrote debug files for the task's programs only.
    expect(readdirSync(markers).sort()).toEqual(['bin', 'evil.sh']);
    const debug = readdirSync(taskDir).filter((n) => n.startsWith('lddebug'));
    expect(debug.length).toBeGreaterThan(0);
    for (const name of debug) {
      const text = readFileSync(join(taskDir, name), 'utf8');
      expect(text, name).not.toMatch(/setpriv|bwrap|\/bash|\/env\b/);
    }
  });

  it('hides the token file and data dir; a hidden path missing on this node is skipped, not fatal', () => {
    const secrets = makeTempDir('rank-secrets');
    const token = join(secrets, 'worker.token');
    writeFileSync(token, 'SECRET-TOKEN\n', { mode: 0o644 });
    const dataDir = makeTempDir('rank-data');
    writeFileSync(join(dataDir, 'worker.db'), 'db');
    spawnSync('chmod', ['0755', secrets, dataDir]);
    const { rank } = job('hidden', `cat ${token}; ls ${dataDir}; echo done`, {
      hidden: hiddenPathList([token, dataDir, '/nonexistent/gpu-broker/worker.token', jobsRoot, '/root']),
    });
    const r = runRank(rank, { SLURM_STEP_GPUS: '0' });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toContain('done');
    expect(r.stdout).not.toMatch(/SECRET-TOKEN|worker\.db/);
  });

  it('an unprivileged bwrap (user namespace, no setpriv) applies the env the same way: only in the task', () => {
    const markers = makeTempDir('rank-env-userns');
    const evil = join(markers, 'evil.sh');
    writeFileSync(evil, `touch ${markers}/bash-env-ran\n`, { mode: 0o755 });
    const { rank } = job(
      'userns-env',
      'echo "bash_env=$BASH_ENV ld=$LD_DEBUG_OUTPUT uid=$(id -u)"; tr "\\0" " " </proc/1/cmdline; echo',
      {},
      {
        PATH: '/usr/bin:/bin',
        BASH_ENV: evil,
        SHELLOPTS: 'xtrace',
        PS4: `$(touch ${markers}/ps4-ran)`,

        LD_DEBUG_OUTPUT: join(markers, 'ld'),
      },
      true,
    );
    const r = runRank(rank, { SLURM_STEP_GPUS: '0' });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toContain(`bash_env=${evil} ld=${join(markers, 'ld')} uid=0`);
    expect(r.stdout).toMatch(/bwrap --args 6 -- \/bin\/bash --noprofile --norc -c /);
    expect(readdirSync(markers)).toEqual(['evil.sh']);
  });
});
