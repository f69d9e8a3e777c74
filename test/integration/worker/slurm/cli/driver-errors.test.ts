import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { SlurmDriver } from '../../../../../worker/slurm/cli/driver.js';
import { SlurmCommandError, SlurmRequestError } from '../../../../../worker/slurm/cli/errors.js';

/** How the driver fails when Slurm's commands misbehave (fake binaries; no Slurm needed). */
const bin = mkdtempSync(join(tmpdir(), 'gpu-broker-slurm-bin-'));
afterAll(() => rmSync(bin, { recursive: true, force: true }));
const fake = (name: string, body: string) => {
  writeFileSync(join(bin, name), `#!/bin/sh\n${body}\n`);
  chmodSync(join(bin, name), 0o755);
};

describe('SlurmDriver command failures', () => {
  it('a hung command is killed at the timeout: SlurmCommandError kind timeout', async () => {
    fake('scontrol', 'exec sleep 30');
    const d = new SlurmDriver({ binDir: bin, timeoutMs: 300, env: { PATH: '/usr/bin:/bin' } });
    const err = await d.jobs().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SlurmCommandError);
    expect((err as SlurmCommandError).kind).toBe('timeout');
  });

  it('a missing binary: kind spawn', async () => {
    const d = new SlurmDriver({ binDir: join(bin, 'nope'), env: { PATH: '/usr/bin:/bin' } });
    const err = await d.nodes().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SlurmCommandError);
    expect((err as SlurmCommandError).kind).toBe('spawn');
  });

  it("a non-zero exit carries the command's stderr", async () => {
    fake('scontrol', 'echo "slurm_load_node error: Unable to contact slurm controller" >&2; exit 1');
    const d = new SlurmDriver({ binDir: bin, env: { PATH: '/usr/bin:/bin' } });
    const err = (await d.nodes().catch((e: unknown) => e)) as SlurmCommandError;
    expect(err.kind).toBe('exit');
    expect(err.exitCode).toBe(1);
    expect(err.stderr).toContain('Unable to contact slurm controller');
  });

  it('sbatch output that is not a job id is refused', async () => {
    fake('sbatch', 'echo "Submitted batch job 12"');
    const d = new SlurmDriver({ binDir: bin, env: { PATH: '/usr/bin:/bin' } });
    const err = (await d
      .submit({
        scriptPath: '/j/job.sh',
        stdout: '/j/o',
        stderr: '/j/e',
        chdir: '/j',
        jobName: 'a',
        comment: 'b',
      })
      .catch((e: unknown) => e)) as SlurmCommandError;
    expect(err.kind).toBe('output');
  });

  it("commands are found once, at start, and run with a fixed env: never the caller's PATH nor its variables", async () => {
    const out = join(bin, 'env.txt');
    // The fake sbatch writes where OUT_FILE says; that variable can only come from the script's own text.
    fake('sbatch', `env > ${out}; echo "42;cluster"`);
    const d = new SlurmDriver({
      env: {
        PATH: `${bin}:/usr/bin:/bin`,
        TZ: 'Europe/Paris',
        SLURM_CONF: '/etc/slurm/x.conf',
        HOME: '/root',
      },
    });
    expect(d.commandPath('sbatch')).toBe(join(bin, 'sbatch'));
    process.env.SBATCH_PARTITION = 'from-the-worker';
    // A later change of PATH (what a spec's PATH once did) does not move the commands.
    const savedPath = process.env.PATH;
    process.env.PATH = '/nonexistent';
    try {
      const id = await d.submit({
        scriptPath: '/j/job.sh',
        stdout: '/j/o',
        stderr: '/j/e',
        chdir: '/j',
        jobName: 'a',
        comment: 'b',
      });
      expect(id).toBe('42');
    } finally {
      process.env.PATH = savedPath;
      delete process.env.SBATCH_PARTITION;
    }
    const { readFileSync } = await import('node:fs');
    const env = readFileSync(out, 'utf8')
      .split('\n')
      .filter((l) => l !== '' && !/^(PWD|SHLVL|_)=/.test(l))
      .sort();
    expect(env).toEqual([
      'LANG=C',
      'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
      'SLURM_CONF=/etc/slurm/x.conf',
      'SLURM_TIME_FORMAT=standard',
      'TZ=UTC',
    ]);
  });

  it('a command missing at start fails as spawn, naming where it was looked for', async () => {
    const d = new SlurmDriver({ binDir: join(bin, 'nope') });
    expect(d.commandPath('scontrol')).toBeNull();
    // Created after the driver was made: still not used.
    fake('scancel', 'echo late');
    const err = (await d.job('1').catch((e: unknown) => e)) as SlurmCommandError;
    expect(err.kind).toBe('spawn');
    expect(err.message).toContain(`not found when the worker started (searched ${join(bin, 'nope')})`);
  });

  it('bad ids and signals are refused before anything runs', async () => {
    const d = new SlurmDriver({ binDir: join(bin, 'nope') });
    await expect(d.job('1; rm -rf /')).rejects.toBeInstanceOf(SlurmRequestError);
    await expect(d.cancel('-1')).rejects.toBeInstanceOf(SlurmRequestError);
    await expect(d.cancel('12', 'TERM --full')).rejects.toBeInstanceOf(SlurmRequestError);
  });
});
