import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { SlurmRequestError } from '../../../../../worker/slurm/cli/errors.js';
import {
  bashQuote,
  masterPortFor,
  readBinding,
  readExit,
  renderBatchScript,
  writeJobFiles,
} from '../../../../../worker/slurm/cli/job-wrapper.js';
import { JOB_PATH, renderRankScript } from '../../../../../worker/slurm/cli/rank-script.js';

const root = mkdtempSync(join(tmpdir(), 'gpu-broker-slurm-wrap-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('job wrapper script', () => {
  it('bash gets back exactly the words quoted (any text without NUL)', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.string({ unit: 'binary' }).filter((s) => !s.includes('\0')),
          { maxLength: 5 },
        ),
        (words) => {
          const out = execFileSync('bash', ['-c', `printf '%s\\0' ${words.map(bashQuote).join(' ')} END`], {
            encoding: 'utf8',
          });
          expect(out.split('\0').slice(0, -2)).toEqual(words);
        },
      ),
      { numRuns: 60 },
    );
  });

  it('job.sh and rank.sh are valid bash; argv is embedded in rank.sh as quoted words, never in job.sh', () => {
    const spec = { jobDir: '/jobs/t1', argv: ['python3', '-c', "print('$(id)')", 'a\nb'], ntasksPerNode: 4 };
    const script = renderBatchScript(spec);
    writeFileSync(join(root, 's.sh'), script);
    execFileSync('bash', ['-n', join(root, 's.sh')]);
    expect(script).toContain('NTASKS_PER_NODE=4');
    expect(script).not.toContain('python3');
    const rank = renderRankScript(spec.jobDir, spec.argv);
    writeFileSync(join(root, 'r.sh'), rank);
    execFileSync('bash', ['-n', join(root, 'r.sh')]);
    expect(rank).toContain(`ARGV=('python3' '-c' 'print('\\''$(id)'\\'')' 'a\nb')`);
  });

  it("job.sh starts again under env -i with only Slurm's variables; its steps run bash without startup files", () => {
    const script = renderBatchScript({
      jobDir: '/j',
      argv: ['true'],
      slurmCommands: { srun: '/opt/slurm/bin/srun', scontrol: '/opt/slurm/bin/scontrol' },
    });
    expect(script.split('\n')[0]).toBe('#!/bin/bash --norc');
    expect(script).toContain(`exec /usr/bin/env -i GPU_BROKER_JOB_ENV=clean PATH='${JOB_PATH}' LANG=C`);
    expect(script).toContain("SRUN='/opt/slurm/bin/srun'");
    expect(script).not.toMatch(/^\s*(srun|scontrol) /m);
    expect(script).toContain('/bin/bash --noprofile --norc "$JOB_DIR/rank.sh"');
    expect(() =>
      renderBatchScript({ jobDir: '/j', argv: ['true'], slurmCommands: { srun: 'srun' } }),
    ).toThrow(SlurmRequestError);
  });

  it("re-executed under a hostile environment, job.sh keeps only Slurm's variables", () => {
    // The clean-start prologue on its own (the rest needs a Slurm): what would the steps inherit?
    const script = renderBatchScript({ jobDir: '/j', argv: ['true'] });
    const prologue = `${script.slice(0, script.indexOf('set -u'))}env | sort\n`;
    writeFileSync(join(root, 'pro.sh'), prologue, { mode: 0o700 });
    const out = execFileSync(join(root, 'pro.sh'), {
      encoding: 'utf8',
      env: {
        PATH: '/usr/bin:/bin',
        SLURM_JOB_ID: '7',
        SLURMD_NODENAME: 'n1',
        CUDA_VISIBLE_DEVICES: '0',
        LD_DEBUG_OUTPUT: join(root, 'ld'),
        BASH_ENV_X: 'y',
        HOME: '/root',
      },
    });
    expect(out.split('\n').filter((l) => l !== '' && !/^(PWD|SHLVL|_)=/.test(l))).toEqual([
      'CUDA_VISIBLE_DEVICES=0',
      'LANG=C',
      `PATH=${JOB_PATH}`,
      'SLURMD_NODENAME=n1',
      'SLURM_JOB_ID=7',
    ]);
  });

  it('rank.sh (unsandboxed) gives the task exactly task.env + the binding; its own bash reads none of it', async () => {
    const dir = join(root, 'rank-env');
    const marker = join(root, 'rank-bash-env-ran');
    writeFileSync(join(root, 'evil2.sh'), `touch ${marker}\n`);
    const f = await writeJobFiles({
      jobDir: dir,
      argv: ['/usr/bin/env'],
      taskEnv: {
        PATH: '/usr/bin:/bin',
        BASH_ENV: join(root, 'evil2.sh'),
        ENV: join(root, 'evil2.sh'),
        RANK: '99',
        FOO: 'a\nb=c',
      },
    });
    expect(statSync(f.env).mode & 0o777).toBe(0o600);
    const out = execFileSync('/bin/bash', ['--noprofile', '--norc', f.rank], {
      encoding: 'utf8',
      cwd: dir,
      env: {
        PATH: '/usr/bin:/bin',
        SLURM_PROCID: '1',
        SLURM_NTASKS: '2',
        SLURM_JOB_ID: '5',
        SLURM_CONF: '/x',
      },
    });
    expect(out).toContain('FOO=a\nb=c\n');
    expect(out).toContain(`BASH_ENV=${join(root, 'evil2.sh')}\n`);
    expect(out).toContain('RANK=1\n');
    expect(out).not.toContain('RANK=99');
    expect(out).toContain('SLURM_JOB_ID=5\n');
    expect(out).not.toContain('SLURM_CONF');
    // /usr/bin/env is not a shell: nothing ran BASH_ENV.
    expect(existsSync(marker)).toBe(false);
  });

  it('refuses what it cannot embed safely', () => {
    expect(() => renderRankScript('/a', ['/opt/x=y/run'])).toThrow(/contains "="/);
    expect(() => renderRankScript('/a', ['x\0y'])).toThrow(SlurmRequestError);
    const bad = [
      { jobDir: 'rel', argv: ['true'] },
      { jobDir: '/a\nb', argv: ['true'] },
      { jobDir: '/a', argv: [] },
      { jobDir: '/a', argv: ['true'], ntasksPerNode: 0 },
      { jobDir: '/a', argv: ['true'], masterPortBase: 80 },
      { jobDir: '/a', argv: ['true'], masterPortBase: 60000, masterPortSpan: 10000 },
    ];
    for (const b of bad) expect(() => renderBatchScript(b), JSON.stringify(b)).toThrow(SlurmRequestError);
  });

  it('rendezvous port: base + id mod span, same as the script', () => {
    expect(masterPortFor('12345')).toBe(22345);
    expect(masterPortFor('7_3')).toBe(20007);
    const script = renderBatchScript({ jobDir: '/j', argv: ['true'] });
    // biome-ignore lint/suspicious/noTemplateCurlyInString: bash text
    expect(script).toContain('MASTER_PORT=$(( 20000 + ${SLURM_JOB_ID%%[!0-9]*} % 10000 ))');
  });

  it('job dir 0700, scripts 0700, task.env 0600, never reused; binding/exit readers', async () => {
    const dir = join(root, 'job1');
    const f = await writeJobFiles({ jobDir: dir, argv: ['true'] });
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(statSync(f.script).mode & 0o777).toBe(0o700);
    await expect(writeJobFiles({ jobDir: dir, argv: ['true'] })).rejects.toThrow(/EEXIST/);
    expect(await readBinding(dir)).toBeNull();
    expect(await readExit(dir)).toBeNull();
    writeFileSync(f.binding, '{"version":2}');
    await expect(readBinding(dir)).rejects.toBeInstanceOf(SlurmRequestError);
    writeFileSync(f.exit, '{"version":1,"job_id":"5","exit_code":3,"ended_at":"x"}');
    expect(await readExit(dir)).toMatchObject({ exit_code: 3 });
  });
});
