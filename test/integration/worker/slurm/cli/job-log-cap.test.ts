import { spawn, spawnSync } from 'node:child_process';
import {
  chmodSync,
  closeSync,
  existsSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { logTruncatedMarker } from '../../../../../src/contracts/worker-protocol.js';
import { readExit, writeJobFiles } from '../../../../../worker/slurm/cli/job-wrapper.js';
import { JOB_PATH } from '../../../../../worker/slurm/cli/rank-script.js';
import { waitFor } from '../../../../support/wait.js';

/**
 * The job's own stdout.log / stderr.log are capped by job.sh (docs/performance.md "Noisy neighbours"): the real job.sh and rank.sh run
 * here with a stand-in srun that runs its command once (no Slurm needed); sbatch's --output/--error are
 * the files job.sh is started with. The real Slurm runs the same in test/integration/slurm/log-cap.test.ts.
 */
const root = mkdtempSync(join(tmpdir(), 'gpu-broker-slurm-logcap-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

// Drops srun's options and runs the command; scontrol answers nothing (job.sh falls back).
const fakeSrun = join(root, 'srun');
// biome-ignore lint/suspicious/noTemplateCurlyInString: bash text
writeFileSync(fakeSrun, '#!/bin/bash\nwhile [[ "${1:-}" == --* ]]; do shift; done\nexec "$@"\n');
chmodSync(fakeSrun, 0o755);
const fakeScontrol = join(root, 'scontrol');
writeFileSync(fakeScontrol, '#!/bin/bash\nexit 1\n');
chmodSync(fakeScontrol, 0o755);

const CAP = 64 * 1024;
const MARKER = logTruncatedMarker(CAP);

/** Slurm's variables for a one-node batch step. */
const SLURM_ENV = {
  PATH: '/usr/bin:/bin',
  SLURM_JOB_NODELIST: 'n1',
  SLURMD_NODENAME: 'n1',
  SLURM_JOB_NUM_NODES: '1',
};

/** job.sh and rank.sh for a task `bash -c script`, and the output files Slurm would hand it (fds 1, 2). */
async function writeJob(name: string, script: string, o: { cap?: number; scontrol?: string } = {}) {
  const cap = o.cap ?? CAP;
  const f = await writeJobFiles({
    jobDir: join(root, name),
    argv: ['/bin/bash', '-c', script],
    taskEnv: { PATH: JOB_PATH, LANG: 'C.UTF-8' },
    slurmCommands: { srun: fakeSrun, scontrol: o.scontrol ?? fakeScontrol },
    logCap: { bytes: cap, marker: logTruncatedMarker(cap) },
  });
  return { f, out: openSync(f.stdout, 'w'), err: openSync(f.stderr, 'w') };
}

/** Runs a job whose task is `bash -c script` as Slurm would. */
async function runJob(name: string, script: string, cap = CAP) {
  const { f, out, err } = await writeJob(name, script, { cap });
  const r = spawnSync(f.script, [], {
    cwd: f.jobDir,
    stdio: ['ignore', out, err],
    env: { ...SLURM_ENV, SLURM_JOB_ID: '41' },
    timeout: 60_000,
  });
  closeSync(out);
  closeSync(err);
  return { status: r.status, f, stdout: readFileSync(f.stdout), stderr: readFileSync(f.stderr) };
}

describe('job.sh caps the task output it leaves on the shared file system', () => {
  it('a task writing far past the cap on both streams leaves cap + marker per file, and its exit code', async () => {
    // 8 MiB on stdout, 4 MiB on stderr, then exit 7: the task must never block on the dropped rest.
    const r = await runJob(
      'flood',
      'head -c 8388608 /dev/zero | tr "\\0" o; head -c 4194304 /dev/zero | tr "\\0" e >&2; exit 7',
    );
    expect(r.status).toBe(7);
    expect((await readExit(r.f.jobDir))?.exit_code).toBe(7);
    expect(r.stdout.length).toBe(CAP + Buffer.byteLength(MARKER));
    expect(r.stdout.subarray(0, CAP).equals(Buffer.alloc(CAP, 'o'))).toBe(true);
    expect(r.stdout.subarray(CAP).toString()).toBe(MARKER);
    expect(r.stderr.length).toBe(CAP + Buffer.byteLength(MARKER));
    expect(r.stderr.subarray(CAP).toString()).toBe(MARKER);
    // The FIFOs are gone with the step.
    expect(() => statSync(join(r.f.jobDir, 'stdout.fifo'))).toThrow(/ENOENT/);
  });

  it('output up to the cap is kept exactly, with no marker; a task that exits at once leaves empty files', async () => {
    const exact = await runJob('exact', `head -c ${CAP} /dev/zero | tr "\\0" x; printf abc >&2`);
    expect(exact.status).toBe(0);
    expect(exact.stdout.equals(Buffer.alloc(CAP, 'x'))).toBe(true);
    expect(exact.stderr.toString()).toBe('abc');
    const quiet = await runJob('quiet', 'exit 0');
    expect(quiet.status).toBe(0);
    expect(quiet.stdout.length + quiet.stderr.length).toBe(0);
  });

  it('a task that closes its stdout early, or leaves a child writing, still ends with its code', async () => {
    // Closing stdout must not end the reader early for the other stream, nor hang job.sh.
    const r = await runJob('closer', `exec 1>&-; head -c ${4 * CAP} /dev/zero | tr "\\0" e >&2; exit 3`);
    expect(r.status).toBe(3);
    expect(r.stderr.length).toBe(CAP + Buffer.byteLength(MARKER));
    expect(r.stdout.length).toBe(0);
  });

  it('output lands in the file as it comes; SIGTERM to the whole batch step (a plain scancel) still leaves it and exit.json', async () => {
    const job = await startJob('term', 'echo before; sleep 20; echo after');
    await waitFor(() => (readFileSync(job.f.stdout, 'utf8').includes('before') ? true : null), {
      timeoutMs: 20_000,
      intervalMs: 50,
      what: 'the first line',
    });
    process.kill(-job.pid, 'SIGTERM');
    const code = await job.exited;
    // The task died of SIGTERM (128 + 15); job.sh lived on to record it, and the readers to copy what came.
    expect(code).toBe(143);
    expect((await readExit(job.f.jobDir))?.exit_code).toBe(143);
    expect(readFileSync(job.f.stdout, 'utf8')).toBe('before\n');
  });

  it('a SIGTERM before the task step (a cancel right after the job started) means the task never starts', async () => {
    // scontrol (step 1) takes its time: the cancel lands while job.sh waits for it. job.sh used to swallow
    // that SIGTERM and start the task anyway, which then ran until Slurm's SIGKILL after KillWait.
    const ran = join(root, 'early-ran');
    const job = await startJob('early', `touch ${ran}; sleep 20`, slowScontrol);
    await waitFor(() => existsSync(join(root, 'scontrol-called')) || null, { what: 'scontrol to be called' });
    process.kill(-job.pid, 'SIGTERM');
    expect(await job.exited).toBe(143);
    expect((await readExit(job.f.jobDir))?.exit_code).toBe(143);
    expect(existsSync(ran)).toBe(false);
    expect(() => statSync(join(job.f.jobDir, 'stdout.fifo'))).toThrow(/ENOENT/);
  });

  it('a SIGTERM at any moment around the start of the task step never leaves job.sh hanging (race)', async () => {
    // The window between binding.json and the step's srun: the log readers and the step are being
    // started. Each run gets one SIGTERM a little later than the last; each must end with exit.json.
    for (let i = 0; i < 12; i++) {
      const job = await startJob(`race-${i}`, 'echo up; sleep 20');
      await waitFor(() => existsSync(join(job.f.jobDir, 'binding.json')) || null, {
        intervalMs: 1,
        what: 'binding.json',
      });
      if (i > 0) await new Promise((r) => setTimeout(r, i % 6));
      process.kill(-job.pid, 'SIGTERM');
      const code = await Promise.race([job.exited, new Promise((r) => setTimeout(() => r('hung'), 10_000))]);
      if (code === 'hung') process.kill(-job.pid, 'SIGKILL');
      expect(code, `run ${i}`).not.toBe('hung');
      expect((await readExit(job.f.jobDir))?.exit_code, `run ${i}`).toBe(143);
    }
  }, 180_000);
});

// Like fakeScontrol, after it has said it was called and waited 2 s.
const slowScontrol = join(root, 'scontrol-slow');
writeFileSync(slowScontrol, `#!/bin/bash\ntouch ${join(root, 'scontrol-called')}\nsleep 2\nexit 1\n`);
chmodSync(slowScontrol, 0o755);

/** Starts a job in its own process group (Slurm signals the whole batch step); `exited` is its code. */
async function startJob(name: string, script: string, scontrol = fakeScontrol) {
  const { f, out, err } = await writeJob(name, script, { scontrol });
  const child = spawn(f.script, [], {
    cwd: f.jobDir,
    detached: true,
    stdio: ['ignore', out, err],
    env: { ...SLURM_ENV, SLURM_JOB_ID: '42' },
  });
  closeSync(out);
  closeSync(err);
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { f, pid: child.pid!, exited };
}
