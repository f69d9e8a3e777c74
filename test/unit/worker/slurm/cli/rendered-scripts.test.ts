import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { renderBatchScript } from '../../../../../worker/slurm/cli/job-wrapper.js';
import { renderRankScript, type WrapperSandbox } from '../../../../../worker/slurm/cli/rank-script.js';

/**
 * The rendered job.sh and rank.sh, byte for byte, for representative plans. The scripts run on nodes
 * this suite cannot reach without Slurm, so a change to their text must be deliberate: it shows here as
 * a fixture diff in review (test/fixtures/slurm/rendered/). To accept a change, write the new text over
 * the fixture and read the diff.
 */
const FIXTURES = join(import.meta.dirname, '../../../../fixtures/slurm/rendered');
const fixture = (name: string) => readFileSync(join(FIXTURES, name), 'utf8');

const ARGV = ['python3', '-c', "print('it''s')", 'a b', '$HOME'];

const SANDBOX: WrapperSandbox = {
  bwrap: '/usr/bin/bwrap',
  pre: ['--unshare-all', '--die-with-parent', '--ro-bind', '/usr', '/usr'],
  hidden: ['/srv/jobs', "/home/o'neil"],
  post: ['--proc', '/proc', '--dev', '/dev', '--bind', '/srv/jobs/t1/task', '/task'],
  prefix: ['/usr/bin/setpriv', '--reuid=61000', '--regid=61000', '--clear-groups', '--'],
  gpuDevDir: '/dev',
};

const NVIDIA: WrapperSandbox = {
  ...SANDBOX,
  pins: [{ path: '/opt/venv/bin/python3', sha256: 'a'.repeat(64) }],
  rehide: ['/srv/data/keys', '/mnt/data/keys'],
};

const HY: WrapperSandbox = { ...SANDBOX, prefix: [], gpuDevDir: '/srv/devs/%n', gpuKind: 'hy' };

/** Typed GRES from gres.conf: a whole card at position 0, two MIG slices of card 0 (docs/slurm.md). */
const MIG: WrapperSandbox = {
  ...SANDBOX,
  gresFiles: {
    gn1: [
      ['/dev/nvidia1'],
      ['/dev/nvidia0', '/dev/nvidia-caps/nvidia-cap21', '/dev/nvidia-caps/nvidia-cap22'],
      ['/dev/nvidia0', '/dev/nvidia-caps/nvidia-cap30', '/dev/nvidia-caps/nvidia-cap31'],
      null,
    ],
  },
};

describe('rendered Slurm scripts', () => {
  it('rank.sh without a sandbox', () => {
    expect(renderRankScript('/srv/jobs/t1', ARGV)).toBe(fixture('rank-none.sh'));
  });
  it('rank.sh in an nvidia sandbox with a pinned file', () => {
    expect(renderRankScript('/srv/jobs/t1', ARGV, NVIDIA)).toBe(fixture('rank-nvidia.sh'));
  });
  it('rank.sh in an nvidia sandbox binding gres.conf files (MIG slices)', () => {
    expect(renderRankScript('/srv/jobs/t1', ARGV, MIG)).toBe(fixture('rank-mig.sh'));
  });
  it('rank.sh in a hy sandbox with a per-node device dir', () => {
    expect(renderRankScript('/srv/jobs/t1', ARGV, HY)).toBe(fixture('rank-hy.sh'));
  });
  it('job.sh with the defaults', () => {
    expect(renderBatchScript({ jobDir: '/srv/jobs/t1', argv: ARGV })).toBe(fixture('job-default.sh'));
  });
  it('job.sh with resolved Slurm commands, several ranks per node and a port range', () => {
    const script = renderBatchScript({
      jobDir: "/srv/jobs/it's",
      argv: ARGV,
      ntasksPerNode: 4,
      slurmCommands: { srun: '/opt/slurm/bin/srun', scontrol: null },
      masterPortBase: 30000,
      masterPortSpan: 500,
    });
    expect(script).toBe(fixture('job-custom.sh'));
  });
});
