import { type RunningWorker, startWorker } from '../../../worker/daemon/start-worker.js';
import type { CardSampler } from '../../../worker/samplers/card-sampler.js';
import { type PreparedSandbox, prepareSandbox } from '../../../worker/sandbox/setup.js';
import type { SlurmBackend } from '../../../worker/slurm/backend.js';
import { buildSbatchArgs, SlurmDriver } from '../../../worker/slurm/cli/driver.js';
import { slurmPoolSampler } from '../../../worker/slurm/sampler.js';
import { BrokerError } from '../../contracts/errors.js';
import type { CliIo } from '../common/io.js';
import { escapeField } from '../common/output.js';
import { type Settings, SLURM_USAGE, type SlurmSettings, sharedWorkerOptions } from './worker-settings.js';

/** `gpu-broker worker --backend slurm` (ADR 0013): the partition's GPUs are the pool, tasks run as Slurm jobs. */

/**
 * Refuses what a Slurm worker cannot honour, before anything starts: local-only flags (rather than
 * ignoring them), and extra sbatch arguments that would fail every task's setup.
 */
function checkSlurmFlags(settings: Settings, slurm: Omit<SlurmSettings, 'simulatedGpus'>): void {
  if (settings.runAs !== undefined)
    throw new BrokerError(
      'INVALID_INPUT',
      "--run-as is for local workers: a Slurm job runs as the worker's Slurm user (its sandboxed task as a uid of its own)",
      SLURM_USAGE,
    );
  // The operator's extra arguments are checked now, not at the first task (which would fail SETUP_FAILED).
  try {
    buildSbatchArgs({
      scriptPath: '/check/job.sh',
      jobName: 'check',
      comment: 'check',
      stdout: '/check/out',
      stderr: '/check/err',
      chdir: '/check',
      extraArgs: [...slurm.extraArgs],
    });
  } catch (err) {
    throw new BrokerError('INVALID_INPUT', `--slurm-extra-arg: ${(err as Error).message}`, SLURM_USAGE);
  }
}

/** The Slurm driver, once sbatch, scontrol and scancel are found on this process's PATH (each runs with a fixed env). */
function slurmDriver(): SlurmDriver {
  const driver = new SlurmDriver();
  for (const cmd of ['sbatch', 'scontrol', 'scancel'] as const)
    if (driver.commandPath(cmd) === null)
      throw new BrokerError(
        'INVALID_INPUT',
        `${cmd} is not installed on this host's PATH: install Slurm's client commands (apt-get install slurm-client) or add their directory to PATH`,
        SLURM_USAGE,
      );
  return driver;
}

/**
 * The same choice as a local worker's: bwrap unless the operator says --isolation none (null). Checked
 * here on the submit host; each rank checks again on its node and refuses to run the task unsandboxed.
 */
async function slurmSandbox(settings: Settings, sampler: CardSampler): Promise<PreparedSandbox | null> {
  if (settings.isolation === 'none') return null;
  return prepareSandbox({
    isolation: settings.isolation,
    dataDir: settings.dataDir,
    // The token file is hidden in every rank's sandbox wherever the operator keeps it (docs/security.md "Code the reviewer did not read").
    hiddenPaths: [...settings.hide, ...(settings.tokenFile === undefined ? [] : [settings.tokenFile])],
    sampler,
    containerEngine: 'none',
    // Each rank builds its sandbox with bwrap on its node (slurm/cli/job-wrapper.ts).
    sandboxEngine: 'bwrap',
    seccompAllow: settings.seccompAllow,
    ...(settings.taskUids === undefined ? {} : { taskUids: settings.taskUids }),
  }).catch((err: unknown) => {
    throw new BrokerError('INVALID_INPUT', (err as Error).message, SLURM_USAGE);
  });
}

/** What the Slurm worker's banner says of its pool and its tasks' isolation. */
interface SlurmStarted {
  settings: Settings;
  slurm: Omit<SlurmSettings, 'simulatedGpus'>;
  simulatedGpus: boolean;
  sandbox: PreparedSandbox | null;
  worker: RunningWorker;
  pool: { partition: string; nodes: readonly unknown[] };
}

/** Prints what runs where: a JSON line on stdout with `--json`, else lines on stderr. */
function printSlurmBanner(s: SlurmStarted, json: boolean | undefined, io: CliIo): void {
  const { settings, slurm, simulatedGpus, sandbox, worker, pool } = s;
  const { gpuDevDir, gpuKind } = slurm;
  const cards = worker.latestCards();
  const summary = `Slurm partition ${pool.partition}: ${pool.nodes.length} node${pool.nodes.length === 1 ? '' : 's'}, ${cards === null ? 'no sample yet' : `${cards.length} GPUs`} (a pool: Slurm places, the broker admits)${simulatedGpus ? '; SIMULATED GPUs (--slurm-simulated-gpus): not real devices' : ''}`;
  const isolationMode = sandbox?.setup.kind === 'bwrap' ? 'bwrap' : 'none';
  const isolation =
    sandbox === null
      ? "UNISOLATED (--isolation none): tasks run as Slurm jobs under this worker's Slurm user, confined only by what the site configured (cgroup ConstrainDevices); the master places no task here unless policy.require_isolation is false"
      : `each rank runs in bwrap on its node with only its GPUs' device nodes (${gpuDevDir}/${gpuKind === 'hy' ? 'dri/renderD<128+N>, kfd' : "nvidia<N>; on typed GRES the files gres.conf gives, a MIG slice's parent and two cap nodes"}) — ${sandbox.summary}`;
  if (json)
    io.stdout(
      `${JSON.stringify({
        worker_id: worker.workerId,
        boot_id: worker.bootId,
        backend: 'slurm',
        partition: pool.partition,
        simulated: simulatedGpus,
        nodes: pool.nodes,
        cards: cards === null ? null : cards.length,
        summary,
        isolation: isolationMode,
        isolation_summary: isolation,
        job_dir: slurm.jobDir,
        data_dir: settings.dataDir,
      })}\n`,
    );
  else
    io.stderr(
      // The partition and node count come from Slurm's own output: shown escaped, like any text the
      // broker does not write itself.
      `gpu-broker worker ${escapeField(settings.workerId)} → ${escapeField(settings.url)}\n${escapeField(summary)}\ntasks: ${escapeField(isolation)}\njob dir: ${escapeField(slurm.jobDir)}\ndata dir: ${escapeField(settings.dataDir)}\n`,
    );
}

/** Runs a Slurm worker until the stop signal; see the module comment. */
export async function runSlurmWorker(
  settings: Settings,
  { simulatedGpus, ...slurm }: SlurmSettings,
  json: boolean | undefined,
  io: CliIo,
): Promise<number> {
  checkSlurmFlags(settings, slurm);
  const driver = slurmDriver();
  const sampler = slurmPoolSampler({
    driver,
    partition: slurm.partition,
    workerId: settings.workerId,
    simulated: simulatedGpus,
    gpuKind: slurm.gpuKind,
  });
  const sandbox = await slurmSandbox(settings, sampler);
  const bwrap = sandbox?.setup.kind === 'bwrap' ? sandbox.setup : null;
  const { gpuDevDir, gpuKind, ...fixed } = slurm;
  const backend: SlurmBackend = {
    ...fixed,
    driver,
    sandbox: bwrap === null ? null : { setup: bwrap, gpuDevDir, gpuKind },
    // Typed GRES (MIG slices): the type to ask for and the nodes' device files (docs/slurm.md).
    gres: () => sampler.gres(),
  };
  const worker = await startWorker({
    ...sharedWorkerOptions(settings, sampler, io),
    sandbox: bwrap ?? { kind: 'none' },
    slurm: { backend, sampler },
    // Named data mounts: paths on the filesystem the compute nodes share, bound into each rank's sandbox.
    ...(settings.mounts.length === 0 ? {} : { mounts: settings.mounts }),
  });
  printSlurmBanner({ settings, slurm, simulatedGpus, sandbox, worker, pool: sampler.pool() }, json, io);
  await (io.stopSignal ?? new Promise<void>(() => undefined));
  await worker.close();
  return 0;
}
