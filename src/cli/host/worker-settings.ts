import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { resolve } from 'node:path';
import type { WorkerOptions } from '../../../worker/daemon/start-worker.js';
import {
  DEFAULT_EXECUTION_RETENTION,
  type ExecutionRetention,
} from '../../../worker/executions/dir-retention.js';
import { workerConnectUrl } from '../../../worker/link/connection.js';
import type { CardSampler } from '../../../worker/samplers/card-sampler.js';
import { parseGpusOption } from '../../../worker/samplers/select-sampler.js';
import { type ContainerEngineChoice, parseContainerEngine } from '../../../worker/sandbox/container.js';
import { parseSandboxEngine, type SandboxEngineChoice } from '../../../worker/sandbox/native.js';
import { type RunAs, resolveRunAs } from '../../../worker/sandbox/run-as.js';
import { type IsolationChoice, parseIsolation } from '../../../worker/sandbox/setup.js';
import { parseUidRange, type UidRange } from '../../../worker/sandbox/task-uids.js';
import type { SlurmBackend } from '../../../worker/slurm/backend.js';
import { type DataMount, parseMount } from '../../../worker/task-io/mounts.js';
import { BrokerError } from '../../contracts/errors.js';
import { WORKER_ID_RULE, WorkerIdSchema } from '../../contracts/worker-protocol.js';
import type { FlagValues } from '../../platform/args.js';
import { describeTightened, secureFile } from '../../platform/file-modes.js';
import { createLogger } from '../../platform/logger.js';
import type { CliIo } from '../common/io.js';
import type { WORKER } from './command-specs.js';

/**
 * `gpu-broker worker`'s flags and environment read into settings, every bad value an INVALID_INPUT with
 * the usage line, before anything starts; and the options both backends pass to startWorker alike.
 */

/** The flags of `gpu-broker worker`, as parsed. */
export type WorkerFlags = FlagValues<typeof WORKER.flags>;

/** The usage line shown with errors of the local worker's flags. */
export const USAGE =
  'gpu-broker worker --url https://HOST:PORT --token-file FILE [--id ID] [--gpus auto|nvidia|hy|sim:N] [--data-dir DIR] [--ca-file FILE] [--isolation auto|bwrap|none] [--sandbox-engine auto|bwrap|native] [--seccomp-allow GROUP]... [--task-uids FIRST-LAST] [--hide PATH]... [--mount NAME=PATH[:rw]]... [--container-engine auto|podman|docker|none] [--run-as USER (with --isolation none)] [--keep-executions N] [--keep-executions-days D] [--json]';

/** The usage line shown with errors of `--backend slurm` (its flags, not the local worker's). */
export const SLURM_USAGE =
  'gpu-broker worker --backend slurm --slurm-partition NAME --slurm-job-dir DIR [--slurm-account NAME] [--slurm-qos NAME] [--slurm-extra-arg ARG]... [--slurm-poll-ms MS] [--slurm-gpu-dev-dir DIR] [--slurm-gpu-kind nvidia|hy] [--slurm-simulated-gpus] [--isolation auto|bwrap|none] [--task-uids FIRST-LAST] [--hide PATH]... --url https://HOST:PORT --token-file FILE [--id ID] [--data-dir DIR] [--json]';

/** Env var holding the worker token when --token-file is not given. */
const TOKEN_ENV = 'GPU_BROKER_WORKER_TOKEN';

/** What `gpu-broker worker` runs with. */
export interface Settings {
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
  /** `--sandbox-engine`: what builds a root worker's sandboxes (sandbox/native.ts). */
  sandboxEngine: SandboxEngineChoice;
  taskUids?: UidRange;
  hide: string[];
  /** `--seccomp-allow`: groups of the tasks' syscall filter allowed again (sandbox/seccomp.ts). */
  seccompAllow: string[];
  containerEngine: ContainerEngineChoice;
  executionRetention: ExecutionRetention;
  mounts: DataMount[];
  /** `--backend slurm`: the operator's Slurm settings (the driver is made at start). */
  slurm?: SlurmSettings;
}

/** The operator's Slurm settings as parsed; the driver and the sandbox are made at start. */
export type SlurmSettings = Omit<SlurmBackend, 'driver' | 'sandbox'> & {
  /** `--slurm-gpu-dev-dir`: where the nodes' `nvidia<index>` device files are (`%n`: node name). */
  gpuDevDir: string;
  /** `--slurm-simulated-gpus`: the partition's GPUs are not real devices (a test cluster). */
  simulatedGpus: boolean;
  /** `--slurm-gpu-kind`: NVIDIA or Hygon device files on the nodes. */
  gpuKind: 'nvidia' | 'hy';
};

/** The worker token: from `--token-file` (tightened to 0600 when others could read it), else the env. */
function readWorkerToken(values: WorkerFlags, io: CliIo): string {
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
  return token;
}

/** The master's CA certificate from `--ca-file` or GPU_BROKER_CA_FILE; undefined when neither is set. */
function readCa(values: WorkerFlags, io: CliIo): string | undefined {
  const caFile = values['ca-file'] ?? io.env['GPU_BROKER_CA_FILE'];
  if (!caFile) return undefined;
  try {
    return readFileSync(caFile, 'utf8');
  } catch (err) {
    throw new BrokerError(
      'INVALID_INPUT',
      `cannot read --ca-file ${caFile}: ${(err as Error).message}`,
      'Pass the CA certificate the master printed at start (ca.pem).',
    );
  }
}

/** The sandbox, container, mount and retention flags, and the URL's and `--gpus`' form. */
type TaskFlags = Pick<
  Settings,
  'runAs' | 'isolation' | 'sandboxEngine' | 'taskUids' | 'containerEngine' | 'executionRetention' | 'mounts'
>;

/** Parses the flags of how tasks run; a bad value is an input error (exit 2) with the reason, not a crash. */
function parseTaskFlags(values: WorkerFlags, url: string): TaskFlags {
  let runAs: RunAs | undefined;
  let taskUids: UidRange | undefined;
  try {
    const containerEngine = parseContainerEngine(values['container-engine'] ?? 'auto');
    const isolation = parseIsolation(values.isolation ?? 'auto');
    const sandboxEngine = parseSandboxEngine(values['sandbox-engine'] ?? 'auto');
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
    const mounts = (values.mount ?? []).map(parseMount);
    workerConnectUrl(url);
    parseGpusOption(values.gpus ?? 'auto');
    const executionRetention = parseExecutionRetention(
      values['keep-executions'],
      values['keep-executions-days'],
    );
    return {
      ...(runAs === undefined ? {} : { runAs }),
      isolation,
      sandboxEngine,
      ...(taskUids === undefined ? {} : { taskUids }),
      containerEngine,
      executionRetention,
      mounts,
    };
  } catch (err) {
    throw new BrokerError('INVALID_INPUT', (err as Error).message, USAGE);
  }
}

/** `--id`, else this host's name; either must be a valid worker id. */
function workerIdOf(values: WorkerFlags): string {
  const workerId = values.id ?? hostname();
  if (!WorkerIdSchema.safeParse(workerId).success)
    throw new BrokerError(
      'INVALID_INPUT',
      `${values.id === undefined ? 'this host name' : '--id'} ${JSON.stringify(workerId)}: ${WORKER_ID_RULE}`,
      USAGE,
    );
  return workerId;
}

/** Reads every flag and the environment into settings, in the order the errors are reported. */
export function resolveSettings(values: WorkerFlags, io: CliIo): Settings {
  const url = values.url ?? io.env['GPU_BROKER_URL'];
  if (!url) throw new BrokerError('INVALID_INPUT', 'no master URL', `Pass --url https://host:8443. ${USAGE}`);
  const token = readWorkerToken(values, io);
  const ca = readCa(values, io);
  const { runAs, isolation, sandboxEngine, taskUids, containerEngine, executionRetention, mounts } =
    parseTaskFlags(values, url);
  const slurm = parseSlurmSettings(values);
  const workerId = workerIdOf(values);
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
    sandboxEngine,
    ...(taskUids === undefined ? {} : { taskUids }),
    hide: values.hide ?? [],
    seccompAllow: values['seccomp-allow'] ?? [],
    containerEngine,
    executionRetention,
    mounts,
    ...(slurm === undefined ? {} : { slurm }),
  };
}

/** `--backend` and the `--slurm-*` flags; undefined for the local backend. Throws INVALID_INPUT. */
function parseSlurmSettings(values: WorkerFlags): SlurmSettings | undefined {
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

/** The worker options both backends pass alike: the master, this worker's identity, its sampler and logger. */
export function sharedWorkerOptions(
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
