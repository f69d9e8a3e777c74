import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SlurmRequestError } from '../../../../../worker/slurm/cli/errors.js';
import { parseConfig, parseJobcompLine } from '../../../../../worker/slurm/cli/jobcomp.js';
import { buildSbatchArgs } from '../../../../../worker/slurm/cli/sbatch-args.js';
import type { SlurmSubmitRequest } from '../../../../../worker/slurm/cli/types.js';

const base: SlurmSubmitRequest = {
  scriptPath: '/jobs/t1/job.sh',
  jobName: 'gb-t1',
  comment: 'gpu-broker:w1:t1',
  stdout: '/jobs/t1/stdout.log',
  stderr: '/jobs/t1/stderr.log',
  chdir: '/jobs/t1',
};

describe('buildSbatchArgs', () => {
  it("requests the task's memory per node with --mem, and refuses an operator --mem or a bad count", () => {
    const { args } = buildSbatchArgs({ ...base, nodes: 2, memoryMibPerNode: 4096 });
    expect(args).toContain('--mem=4096M');
    expect(args.indexOf('--mem=4096M')).toBeLessThan(args.indexOf(base.scriptPath));
    expect(buildSbatchArgs(base).args.some((a) => a.startsWith('--mem'))).toBe(false);
    expect(() => buildSbatchArgs({ ...base, memoryMibPerNode: 0 })).toThrow(SlurmRequestError);
    expect(() => buildSbatchArgs({ ...base, memoryMibPerNode: 1.5 })).toThrow(SlurmRequestError);
    for (const extra of ['--mem=1G', '--mem-per-gpu=8G', '--mem-per-cpu=1G'])
      expect(() => buildSbatchArgs({ ...base, extraArgs: [extra] })).toThrow(SlurmRequestError);
  });

  it("asks the task's CPUs with --cpus-per-task after the operator's own (the driver's wins), and refuses a bad count", () => {
    const { args } = buildSbatchArgs({ ...base, cpusPerTask: 4, extraArgs: ['--cpus-per-task=16'] });
    expect(args.indexOf('--cpus-per-task=4')).toBeGreaterThan(args.indexOf('--cpus-per-task=16'));
    expect(args.indexOf('--cpus-per-task=4')).toBeLessThan(args.indexOf(base.scriptPath));
    expect(buildSbatchArgs(base).args.some((a) => a.startsWith('--cpus-per-task'))).toBe(false);
    for (const bad of [0, -1, 1.5, 1e9])
      expect(() => buildSbatchArgs({ ...base, cpusPerTask: bad })).toThrow(SlurmRequestError);
  });

  it('puts operator args first, then the driver options, the script last', () => {
    const { args } = buildSbatchArgs({
      ...base,
      partition: 'gpu',
      account: 'lab',
      qos: 'normal',
      gpusPerNode: 8,
      nodes: 2,
      ntasksPerNode: 8,
      timeLimitSeconds: 3601,
      extraArgs: ['--constraint=a100', '--reservation=r1'],
    });
    expect(args).toEqual([
      '--constraint=a100',
      '--reservation=r1',
      '--parsable',
      '--partition=gpu',
      '--account=lab',
      '--qos=normal',
      '--job-name=gb-t1',
      '--comment=gpu-broker:w1:t1',
      '--nodes=2',
      '--ntasks-per-node=8',
      '--gres=gpu:8',
      '--time=0-01:01:00',
      '--output=/jobs/t1/stdout.log',
      '--error=/jobs/t1/stderr.log',
      '--chdir=/jobs/t1',
      '--export=ALL',
      '/jobs/t1/job.sh',
    ]);
  });

  it("no GPUs: no --gres; the job gets sbatch's own fixed environment (--export=ALL), never NONE", () => {
    // NONE would make Slurm 22.05 load the job user's login environment on the node (su -).
    const { args } = buildSbatchArgs(base);
    expect(args).not.toContain('--gres=gpu:0');
    expect(args.filter((a) => a.startsWith('--export'))).toEqual(['--export=ALL']);
    expect(args.some((a) => a.startsWith('--get-user-env'))).toBe(false);
  });

  it('refuses hostile input before running anything', () => {
    const bad: Array<Partial<SlurmSubmitRequest>> = [
      { jobName: 'has space' },
      { comment: 'a\nb' },
      { comment: '' },
      { partition: 'gpu,debug --x' },
      { stdout: 'relative.log' },
      { stdout: '/jobs/%j.log' },
      { chdir: '/a\nb' },
      { gpusPerNode: -1 },
      { gpusPerNode: 1.5 },
      { nodes: 0 },
      { timeLimitSeconds: 0 },
      { timeLimitSeconds: Number.POSITIVE_INFINITY },
      { extraArgs: ['--get-user-env'] },
      { extraArgs: ['--export-file=/tmp/x'] },
      { extraArgs: ['--export=ALL'] },
      { extraArgs: ['--exp=ALL'] },
      { extraArgs: ['--gres=gpu:8'] },
      { extraArgs: ['--time=99-00:00:00'] },
      { extraArgs: ['-t', '99'] },
      { extraArgs: ['-o/tmp/x'] },
      { extraArgs: ['not-an-option'] },
      { extraArgs: ['--wrap=rm -rf /'] },
      { extraArgs: ['--gpus-per-node=8'] },
      { extraArgs: ['--array=1-100'] },
    ];
    for (const b of bad)
      expect(() => buildSbatchArgs({ ...base, ...b }), JSON.stringify(b)).toThrow(SlurmRequestError);
  });
});

describe('config and jobcomp', () => {
  const fixture = (name: string) =>
    readFileSync(join(import.meta.dirname, '../../../../fixtures/slurm', name), 'utf8');

  it('reads scontrol show config', () => {
    const c = parseConfig(fixture('show-config.txt'));
    expect(c.get('JobCompType')).toBe('jobcomp/filetxt');
    expect(c.get('AccountingStorageType')).toBe('accounting_storage/none');
    expect(c.get('MinJobAge')).toBe('300 sec');
  });

  it('reads a jobcomp/filetxt record', () => {
    // Real lines from slurmctld 22.05's jobcomp/filetxt log (a .txt: *.log is git-ignored).
    const lines = fixture('jobcomp.txt')
      .split('\n')
      .filter((l) => l !== '');
    const records = lines.map((l) => parseJobcompLine(l));
    expect(records.map((r) => r.state)).toEqual(['COMPLETED', 'FAILED', 'TIMEOUT', 'CANCELLED']);
    for (const r of records) {
      expect(r.id).toMatch(/^\d+$/);
      expect(r.endTime).not.toBeNull();
    }
  });
});
