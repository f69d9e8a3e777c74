import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { resolve } from 'node:path';
import { startWorker, type WorkerOptions } from '../../worker/daemon/start-worker.js';
import {
  DEFAULT_EXECUTION_RETENTION,
  type ExecutionRetention,
} from '../../worker/executions/dir-retention.js';
import { workerConnectUrl } from '../../worker/link/connection.js';
import type { CardSampler } from '../../worker/samplers/card-sampler.js';
import { parseGpusOption, selectSampler } from '../../worker/samplers/select-sampler.js';
import { type ContainerEngineChoice, parseContainerEngine } from '../../worker/sandbox/container.js';
import { type RunAs, resolveRunAs } from '../../worker/sandbox/run-as.js';
import { type IsolationChoice, parseIsolation, prepareSandbox } from '../../worker/sandbox/setup.js';
import { parseUidRange, type UidRange } from '../../worker/sandbox/task-uids.js';
import type { SlurmBackend } from '../../worker/slurm/backend.js';
import { buildSbatchArgs, SlurmDriver } from '../../worker/slurm/cli/driver.js';
import { slurmPoolSampler } from '../../worker/slurm/sampler.js';
import { type DataMount, parseMount } from '../../worker/task-io/mounts.js';
import { BrokerError } from '../contracts/errors.js';
import { WORKER_ID_RULE, WorkerIdSchema } from '../contracts/worker-protocol.js';
import type { FlagValues } from '../platform/args.js';
import { describeTightened, secureFile } from '../platform/file-modes.js';
import { createLogger } from '../platform/logger.js';
import { parseCommand } from './args.js';
import { WORKER } from './command-specs.js';
import type { CliIo, CommandRunner } from './io.js';
import { escapeField, reportError } from './output.js';

/**
 * `gpu-broker worker --url URL --token-file FILE [--id ID] [--gpus auto|nvidia|hy|sim:N]
 * [--data-dir DIR] [--ca-file FILE] [--isolation auto|bwrap|none] [--task-uids FIRST-LAST] [--hide PATH]…
 * [--container-engine auto|podman|docker|none] [--keep-executions N] [--keep-executions-days D] [--json]`: runs the worker daemon until SIGINT/SIGTERM, then stops it cleanly (running executions are
 * cancelled and reported). Says first whether the cards are real or simulated, and how tasks are
 * isolated; `auto` (the default) refuses to start without a working bubblewrap rather than run tasks
 * unsandboxed (worker/sandbox/setup.ts). `--container-engine auto` (the default) runs `container` tasks with
 * podman when it can start a container here, else docker, else none: never fatal, the banner says which
 * and, with none, that container tasks wait for another worker (worker/sandbox/container.ts).
 */

const USAGE =
  'gpu-broker worker --url https://HOST:PORT --token-file FILE [--id ID] [--gpus auto|nvidia|hy|sim:N] [--data-dir DIR] [--ca-file FILE] [--isolation auto|bwrap|none] [--task-uids FIRST-LAST] [--hide PATH]... [--mount NAME=PATH[:rw]]... [--container-engine auto|podman|docker|none] [--run-as USER (with --isolation none)] [--keep-executions N] [--keep-executions-days D] [--json]';

/** The usage line shown with errors of `--backend slurm` (its flags, not the local worker's). */
const SLURM_USAGE =
  'gpu-broker worker --backend slurm --slurm-partition NAME --slurm-job-dir DIR [--slurm-account NAME] [--slurm-qos NAME] [--slurm-extra-arg ARG]... [--slurm-poll-ms MS] [--slurm-gpu-dev-dir DIR] [--slurm-gpu-kind nvidia|hy] [--slurm-simulated-gpus] [--isolation auto|bwrap|none] [--task-uids FIRST-LAST] [--hide PATH]... --url https://HOST:PORT --token-file FILE [--id ID] [--data-dir DIR] [--json]';

/** Env var holding the worker token when --token-file is not given. */
const TOKEN_ENV = 'GPU_BROKER_WORKER_TOKEN';

/** `gpu-broker worker`: see the module comment. */
export const run: CommandRunner = async (argv, io) => {
  const parsed = parseCommand(WORKER, argv, io);
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  try {
    const settings = resolveSettings(values, io);
    if (settings.slurm !== undefined) return await runSlurmWorker(settings, settings.slurm, values.json, io);
    const choice = await selectSampler({ gpus: settings.gpus, env: io.env, simSeed: settings.workerId });
    const sandbox = await prepareSandbox({
      isolation: settings.isolation,
      dataDir: settings.dataDir,
      // The token file is hidden in every sandbox wherever the operator keeps it (issue 20).
      hiddenPaths: [...settings.hide, ...(settings.tokenFile === undefined ? [] : [settings.tokenFile])],
      sampler: choice.sampler,
      containerEngine: settings.containerEngine,
      ...(settings.taskUids === undefined ? {} : { taskUids: settings.taskUids }),
    }).catch((err: unknown) => {
      throw new BrokerError('INVALID_INPUT', (err as Error).message, USAGE);
    });
    const worker = await startWorker({
      ...sharedWorkerOptions(settings, choice.sampler, io),
      ...(settings.runAs === undefined ? {} : { runAs: settings.runAs }),
      sandbox: sandbox.setup,
      ...(sandbox.containers === undefined ? {} : { containers: sandbox.containers }),
      ...(settings.mounts.length === 0 ? {} : { mounts: settings.mounts }),
    });
    const cards = worker.latestCards();
    const count = cards === null ? null : cards.length;
    const summary = choice.simulated
      ? `SIMULATED cards: sim:${count ?? '?'} — ${choice.summary.replace(/^SIMULATED cards:\s*/, '')}`
      : `real cards: ${choice.provider} (${count === null ? 'no sample yet' : `${count} card${count === 1 ? '' : 's'}`})`;
    if (values.json) {
      io.stdout(
        `${JSON.stringify({
          worker_id: worker.workerId,
          boot_id: worker.bootId,
          provider: choice.provider,
          simulated: choice.simulated,
          cards: count,
          summary,
          isolation: sandbox.isolation,
          isolation_summary: sandbox.summary,
          container_engine: sandbox.containers?.setup.engine ?? null,
          container_summary: sandbox.containerSummary,
          data_dir: settings.dataDir,
        })}\n`,
      );
    } else {
      io.stderr(
        `gpu-broker worker ${settings.workerId} → ${settings.url}\n${summary}\ntasks: ${sandbox.summary}\n${sandbox.containerSummary}\ndata dir: ${settings.dataDir}\n`,
      );
    }
    await (io.stopSignal ?? new Promise<void>(() => undefined));
    await worker.close();
    return 0;
  } catch (err) {
    return reportError(io, values.json, err);
  }
};

interface Settings {
  url: string;
  token: string;
  /** `--token-file`, absolute; hidden from every task. */
  tokenFile?: string;
  workerId: string;
  gpus: string;
  dataDir: string;
  ca?: string;
  runAs?: RunAs;
  isolation: IsolationChoice;
  taskUids?: UidRange;
  hide: string[];
  containerEngine: ContainerEngineChoice;
  executionRetention: ExecutionRetention;
  mounts: DataMount[];
  /** `--backend slurm`: the operator's Slurm settings (the driver is made at start). */
  slurm?: SlurmSettings;
}

/** The operator's Slurm settings as parsed; the driver and the sandbox are made at start. */
type SlurmSettings = Omit<SlurmBackend, 'driver' | 'sandbox'> & {
  /** `--slurm-gpu-dev-dir`: where the nodes' `nvidia<index>` device files are (`%n`: node name). */
  gpuDevDir: string;
  /** `--slurm-simulated-gpus`: the partition's GPUs are not real devices (a test cluster). */
  simulatedGpus: boolean;
  /** `--slurm-gpu-kind`: NVIDIA or Hygon device files on the nodes. */
  gpuKind: 'nvidia' | 'hy';
};

/** `--backend slurm`: the partition's GPUs are the pool, tasks run as Slurm jobs (ADR 0013). */
async function runSlurmWorker(
  settings: Settings,
  { simulatedGpus, ...slurm }: SlurmSettings,
  json: boolean | undefined,
  io: CliIo,
): Promise<number> {
  // Flags of a local worker that mean nothing here are refused rather than ignored.
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
  // sbatch, scontrol, … are found once, now, on this process's PATH; each runs with a fixed env.
  const driver = new SlurmDriver();
  for (const cmd of ['sbatch', 'scontrol', 'scancel'] as const)
    if (driver.commandPath(cmd) === null)
      throw new BrokerError(
        'INVALID_INPUT',
        `${cmd} is not installed on this host's PATH: install Slurm's client commands (apt-get install slurm-client) or add their directory to PATH`,
        SLURM_USAGE,
      );
  const sampler = slurmPoolSampler({
    driver,
    partition: slurm.partition,
    workerId: settings.workerId,
    simulated: simulatedGpus,
    gpuKind: slurm.gpuKind,
  });
  // The same choice as a local worker's: bwrap unless the operator says --isolation none. Checked here
  // on the submit host; each rank checks again on its node and refuses to run the task unsandboxed.
  const sandbox =
    settings.isolation === 'none'
      ? null
      : await prepareSandbox({
          isolation: settings.isolation,
          dataDir: settings.dataDir,
          // The token file is hidden in every rank's sandbox wherever the operator keeps it (issue 20).
          hiddenPaths: [...settings.hide, ...(settings.tokenFile === undefined ? [] : [settings.tokenFile])],
          sampler,
          containerEngine: 'none',
          ...(settings.taskUids === undefined ? {} : { taskUids: settings.taskUids }),
        }).catch((err: unknown) => {
          throw new BrokerError('INVALID_INPUT', (err as Error).message, SLURM_USAGE);
        });
  const bwrap = sandbox?.setup.kind === 'bwrap' ? sandbox.setup : null;
  const { gpuDevDir, gpuKind, ...fixed } = slurm;
  const backend: SlurmBackend = {
    ...fixed,
    driver,
    sandbox: bwrap === null ? null : { setup: bwrap, gpuDevDir, gpuKind },
  };
  const worker = await startWorker({
    ...sharedWorkerOptions(settings, sampler, io),
    sandbox: bwrap ?? { kind: 'none' },
    slurm: { backend, sampler },
    // Named data mounts: paths on the filesystem the compute nodes share, bound into each rank's sandbox.
    ...(settings.mounts.length === 0 ? {} : { mounts: settings.mounts }),
  });
  const pool = sampler.pool();
  const cards = worker.latestCards();
  const summary = `Slurm partition ${pool.partition}: ${pool.nodes.length} node${pool.nodes.length === 1 ? '' : 's'}, ${cards === null ? 'no sample yet' : `${cards.length} GPUs`} (a pool: Slurm places, the broker admits)${simulatedGpus ? '; SIMULATED GPUs (--slurm-simulated-gpus): not real devices' : ''}`;
  const isolationMode = bwrap === null ? 'none' : 'bwrap';
  const isolation =
    sandbox === null
      ? "UNISOLATED (--isolation none): tasks run as Slurm jobs under this worker's Slurm user, confined only by what the site configured (cgroup ConstrainDevices); the master places no task here unless policy.require_isolation is false"
      : `each rank runs in bwrap on its node with only its GPUs' device nodes (${gpuDevDir}/${gpuKind === 'hy' ? 'dri/renderD<128+N>, kfd' : 'nvidia<N>'}) — ${sandbox.summary}`;
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
  await (io.stopSignal ?? new Promise<void>(() => undefined));
  await worker.close();
  return 0;
}

/** The worker options both backends pass alike: the master, this worker's identity, its sampler and logger. */
function sharedWorkerOptions(
  settings: Settings,
  sampler: CardSampler,
  io: CliIo,
): Pick<
  WorkerOptions,
  'masterUrl' | 'token' | 'workerId' | 'dataDir' | 'sampler' | 'logger' | 'executionRetention' | 'ca'
> {
  return {
    masterUrl: settings.url,
    token: settings.token,
    workerId: settings.workerId,
    dataDir: settings.dataDir,
    sampler,
    logger: createLogger(io.env['GPU_BROKER_LOG_LEVEL'] ?? 'info'),
    executionRetention: settings.executionRetention,
    ...(settings.ca === undefined ? {} : { ca: settings.ca }),
  };
}

function resolveSettings(values: FlagValues<typeof WORKER.flags>, io: CliIo): Settings {
  const url = values.url ?? io.env['GPU_BROKER_URL'];
  if (!url) throw new BrokerError('INVALID_INPUT', 'no master URL', `Pass --url https://host:8443. ${USAGE}`);
  let token: string | undefined;
  if (values['token-file']) {
    try {
      token = readFileSync(values['token-file'], 'utf8').trim();
      const tightened = secureFile(values['token-file']);
      if (tightened.length > 0)
        io.stderr(`warning: token file was readable by others; tightened ${describeTightened(tightened)}\n`);
    } catch (err) {
      if (err instanceof BrokerError) throw err;
      throw new BrokerError(
        'INVALID_INPUT',
        `cannot read --token-file ${values['token-file']}: ${(err as Error).message}`,
        'Create a worker token on the master with `gpu-broker token create --role worker --worker-id ID`.',
      );
    }
  } else {
    token = io.env[TOKEN_ENV]?.trim();
  }
  if (!token)
    throw new BrokerError('INVALID_INPUT', 'no worker token', `Pass --token-file FILE, or set ${TOKEN_ENV}.`);
  const caFile = values['ca-file'] ?? io.env['GPU_BROKER_CA_FILE'];
  let ca: string | undefined;
  if (caFile) {
    try {
      ca = readFileSync(caFile, 'utf8');
    } catch (err) {
      throw new BrokerError(
        'INVALID_INPUT',
        `cannot read --ca-file ${caFile}: ${(err as Error).message}`,
        'Pass the CA certificate the master printed at start (ca.pem).',
      );
    }
  }
  let runAs: RunAs | undefined;
  let isolation: IsolationChoice;
  let taskUids: UidRange | undefined;
  let containerEngine: ContainerEngineChoice;
  let executionRetention: ExecutionRetention;
  let mounts: DataMount[] = [];
  try {
    containerEngine = parseContainerEngine(values['container-engine'] ?? 'auto');
    // Checked here so that a bad value is an input error (exit 2) with the reason, not a crash.
    isolation = parseIsolation(values.isolation ?? 'auto');
    if (values['task-uids'] !== undefined) taskUids = parseUidRange(values['task-uids']);
    if (values['run-as'] !== undefined) {
      if (isolation !== 'none')
        throw new Error(
          '--run-as applies to --isolation none only: sandboxed tasks each get a uid of their own (--task-uids)',
        );
      runAs = resolveRunAs(values['run-as']);
    }
    for (const path of values.hide ?? [])
      if (!path.startsWith('/')) throw new Error(`--hide ${JSON.stringify(path)}: give an absolute path`);
    mounts = (values.mount ?? []).map(parseMount);
    workerConnectUrl(url);
    parseGpusOption(values.gpus ?? 'auto');
    executionRetention = parseExecutionRetention(values['keep-executions'], values['keep-executions-days']);
  } catch (err) {
    throw new BrokerError('INVALID_INPUT', (err as Error).message, USAGE);
  }
  const slurm = parseSlurmSettings(values);
  const workerId = values.id ?? hostname();
  if (!WorkerIdSchema.safeParse(workerId).success)
    throw new BrokerError(
      'INVALID_INPUT',
      `${values.id === undefined ? 'this host name' : '--id'} ${JSON.stringify(workerId)}: ${WORKER_ID_RULE}`,
      USAGE,
    );
  return {
    url,
    token,
    ...(values['token-file'] === undefined ? {} : { tokenFile: resolve(values['token-file']) }),
    workerId,
    gpus: values.gpus ?? 'auto',
    dataDir: resolve(values['data-dir'] ?? '.gpu-broker-worker'),
    ...(ca === undefined ? {} : { ca }),
    ...(runAs === undefined ? {} : { runAs }),
    isolation,
    ...(taskUids === undefined ? {} : { taskUids }),
    hide: values.hide ?? [],
    containerEngine,
    executionRetention,
    mounts,
    ...(slurm === undefined ? {} : { slurm }),
  };
}

/** `--backend` and the `--slurm-*` flags; undefined for the local backend. Throws INVALID_INPUT. */
function parseSlurmSettings(values: FlagValues<typeof WORKER.flags>): SlurmSettings | undefined {
  const backend = values.backend ?? 'local';
  const slurmFlags = [
    'slurm-partition',
    'slurm-account',
    'slurm-qos',
    'slurm-extra-arg',
    'slurm-job-dir',
    'slurm-poll-ms',
    'slurm-gpu-dev-dir',
    'slurm-gpu-kind',
    'slurm-simulated-gpus',
  ] as const;
  const bad = (message: string) =>
    new BrokerError('INVALID_INPUT', message, backend === 'slurm' ? SLURM_USAGE : USAGE);
  if (backend === 'local') {
    const given = slurmFlags.filter((f) => values[f] !== undefined);
    if (given.length > 0) throw bad(`--${given[0]} needs --backend slurm`);
    return undefined;
  }
  if (backend !== 'slurm') throw bad(`--backend ${JSON.stringify(backend)}: give local or slurm`);
  const name = /^[A-Za-z0-9._-]{1,200}$/;
  const partition = values['slurm-partition'];
  if (partition === undefined || !name.test(partition))
    throw bad('--backend slurm needs --slurm-partition NAME (letters, digits, . _ -)');
  for (const f of ['slurm-account', 'slurm-qos'] as const) {
    const v = values[f];
    if (v !== undefined && !name.test(v))
      throw bad(`--${f} ${JSON.stringify(v)}: letters, digits, . _ - only`);
  }
  const jobDir = values['slurm-job-dir'];
  if (jobDir === undefined || !jobDir.startsWith('/'))
    throw bad(
      '--backend slurm needs --slurm-job-dir DIR, an absolute path on a filesystem the compute nodes share',
    );
  const pollText = values['slurm-poll-ms'] ?? '1000';
  const pollMs = Number(pollText);
  if (!/^\d+$/.test(pollText) || pollMs < 100 || pollMs > 60_000)
    throw bad(`--slurm-poll-ms ${JSON.stringify(pollText)}: give whole milliseconds from 100 to 60000`);
  const gpuDevDir = values['slurm-gpu-dev-dir'] ?? '/dev';
  if (!gpuDevDir.startsWith('/') || /[\0\n\r]/.test(gpuDevDir))
    throw bad(
      `--slurm-gpu-dev-dir ${JSON.stringify(gpuDevDir)}: give the absolute directory of the nodes' nvidia<N> device files (gres.conf File=), %n for the node's name`,
    );
  const gpuKind = values['slurm-gpu-kind'] ?? 'nvidia';
  if (gpuKind !== 'nvidia' && gpuKind !== 'hy')
    throw bad(`--slurm-gpu-kind ${JSON.stringify(gpuKind)}: give nvidia or hy`);
  const extraArgs = values['slurm-extra-arg'] ?? [];
  for (const a of extraArgs)
    if (!a.startsWith('-') || /[\0\n\r]/.test(a))
      throw bad(`--slurm-extra-arg ${JSON.stringify(a)}: give one sbatch option such as --constraint=a100`);
  return {
    partition,
    ...(values['slurm-account'] === undefined ? {} : { account: values['slurm-account'] }),
    ...(values['slurm-qos'] === undefined ? {} : { qos: values['slurm-qos'] }),
    extraArgs,
    jobDir: resolve(jobDir),
    pollMs,
    gpuDevDir,
    gpuKind,
    simulatedGpus: values['slurm-simulated-gpus'] === true,
  };
}

/** `--keep-executions N` and `--keep-executions-days D` over the defaults (worker/executions/dir-retention.ts). */
function parseExecutionRetention(count: string | undefined, days: string | undefined): ExecutionRetention {
  const retention = { ...DEFAULT_EXECUTION_RETENTION };
  if (count !== undefined) {
    if (!/^\d+$/.test(count))
      throw new Error(`--keep-executions ${JSON.stringify(count)}: give a whole number`);
    retention.keep_count = Number(count);
  }
  if (days !== undefined) {
    const d = Number(days);
    if (!/^\d+(\.\d+)?$/.test(days) || !Number.isFinite(d))
      throw new Error(`--keep-executions-days ${JSON.stringify(days)}: give a number of days`);
    retention.keep_seconds = Math.round(d * 86_400);
  }
  return retention;
}
