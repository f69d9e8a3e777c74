import { defineCommand, type Flags } from '../../platform/args.js';
import { JSON_FLAG, LOCAL_ENV, LOCAL_FLAGS } from '../common/shared-specs.js';

/** The commands that run the broker: `start` (all in one), `serve` (the master) and `worker` (see command-specs.ts). */

/** Flags shared by `serve` and `start`. */
const SERVE_FLAGS = {
  listen: { type: 'string', value: 'HOST:PORT', help: 'address to listen on (default 127.0.0.1:8443)' },
  tls: {
    type: 'string',
    value: 'auto|off',
    help: 'auto: HTTPS with a dev CA in the data dir; off: loopback only',
  },
  san: {
    type: 'string',
    value: 'NAME',
    multiple: true,
    help: 'extra DNS name or IP for the dev certificate',
  },
  config: {
    type: 'string',
    value: 'FILE',
    help: 'master config file (JSON or TOML): policy, workers, limits',
  },
  ...LOCAL_FLAGS,
} as const satisfies Flags;

const LOCAL_WORKER_FLAGS = {
  gpus: {
    type: 'string',
    value: 'auto|nvidia|hy|sim:N[:mig=LAYOUT]',
    help: 'which cards to use (default auto: real, else simulated; sim:2:mig=3g.40gb+2g.20gb+1g.10gb: simulated cards in MIG mode)',
  },
  id: { type: 'string', value: 'ID', help: 'worker id (default local-<hostname>)' },
  isolation: { type: 'string', value: 'auto|bwrap|none', help: 'how tasks are sandboxed (default auto)' },
  'sandbox-engine': {
    type: 'string',
    value: 'auto|bwrap|native',
    help: "what builds a root worker's sandboxes (default auto: the native sandbox when built, else bwrap)",
  },
  'run-as': { type: 'string', value: 'USER', help: 'run tasks as this user (with --isolation none only)' },
  'container-engine': {
    type: 'string',
    value: 'auto|podman|docker|none',
    help: 'engine for container tasks (default auto)',
  },
} as const satisfies Flags;

export const START = defineCommand({
  name: 'start',
  usage: ['start [--config FILE] [--listen HOST:PORT] [--gpus auto|nvidia|hy|sim:N] [--data-dir DIR] …'],
  summary:
    'Quick start: the master, one local worker and tokens for an agent and a reviewer, in this process; prints the MCP client configuration. Stops on Ctrl-C.',
  flags: { ...SERVE_FLAGS, ...LOCAL_WORKER_FLAGS },
  env: { ...LOCAL_ENV, GPU_BROKER_LOG_LEVEL: 'log level (default info)' },
  examples: ['start', 'start --config gpu-broker.toml --gpus sim:4'],
});

export const SERVE = defineCommand({
  name: 'serve',
  usage: [
    'serve [--listen HOST:PORT] [--tls auto|off] [--san NAME]… [--config FILE] [--data-dir DIR] [--json]',
  ],
  summary: 'Runs the master alone until SIGINT/SIGTERM; workers connect with `gpu-broker worker`.',
  flags: SERVE_FLAGS,
  env: { ...LOCAL_ENV, GPU_BROKER_LOG_LEVEL: 'log level (default info)' },
  examples: ['serve --listen 0.0.0.0:8443 --san gpu-host.example --config /etc/gpu-broker.toml'],
});

export const WORKER = defineCommand({
  name: 'worker',
  usage: [
    'worker --url https://HOST:PORT --token-file FILE [--id ID] [--gpus auto|nvidia|hy|sim:N] [--data-dir DIR] [--ca-file FILE] [--isolation auto|bwrap|none] [--sandbox-engine auto|bwrap|native] [--seccomp-allow GROUP]… [--task-uids FIRST-LAST] [--hide PATH]… [--container-engine auto|podman|docker|none] [--mount NAME=PATH[:rw]]… [--keep-executions N] [--keep-executions-days D] [--run-as USER] [--json]',
    'worker --backend slurm --slurm-partition NAME --slurm-job-dir DIR [--slurm-account NAME] [--slurm-qos NAME] [--slurm-extra-arg ARG]… [--slurm-poll-ms MS] [--slurm-gpu-dev-dir DIR] [--slurm-gpu-kind nvidia|hy] [--slurm-simulated-gpus] [--isolation auto|bwrap|none] --url https://HOST:PORT --token-file FILE [--id ID] [--data-dir DIR] [--json]',
  ],
  summary:
    'Runs the worker daemon on a GPU host until SIGINT/SIGTERM. Refuses to start unsandboxed under --isolation auto when bubblewrap does not work.',
  flags: {
    url: { type: 'string', value: 'URL', help: 'the master (default $GPU_BROKER_URL)' },
    'token-file': {
      type: 'string',
      value: 'FILE',
      help: 'file holding the worker token (default $GPU_BROKER_WORKER_TOKEN); hidden in every task sandbox',
    },
    id: {
      type: 'string',
      value: 'ID',
      help: "worker id; must match the token's worker (default the hostname)",
    },
    gpus: LOCAL_WORKER_FLAGS.gpus,
    'data-dir': { type: 'string', value: 'DIR', help: "the worker's state dir" },
    'ca-file': {
      type: 'string',
      value: 'FILE',
      help: "the master's CA certificate (default $GPU_BROKER_CA_FILE)",
    },
    isolation: LOCAL_WORKER_FLAGS.isolation,
    'sandbox-engine': LOCAL_WORKER_FLAGS['sandbox-engine'],
    'seccomp-allow': {
      type: 'string',
      value: 'GROUP',
      multiple: true,
      help: "allow a group of the tasks' syscall filter again (e.g. io_uring, perf; audited at every connection)",
    },
    'task-uids': {
      type: 'string',
      value: 'FIRST-LAST',
      help: 'uid range for tasks of a root worker, one new uid per execution, never reused (default 2000000000-3999999999)',
    },
    hide: {
      type: 'string',
      value: 'PATH',
      multiple: true,
      help: 'path to hide from tasks inside the sandbox',
    },
    'container-engine': LOCAL_WORKER_FLAGS['container-engine'],
    'run-as': LOCAL_WORKER_FLAGS['run-as'],
    mount: {
      type: 'string',
      value: 'NAME=PATH[:rw]',
      multiple: true,
      help: 'a named data mount tasks may ask for (read-only unless :rw)',
    },
    'keep-executions': {
      type: 'string',
      value: 'N',
      help: 'finished execution dirs to keep at least (default 200)',
    },
    'keep-executions-days': {
      type: 'string',
      value: 'D',
      help: 'keep finished execution dirs younger than D days (default 3)',
    },
    backend: {
      type: 'string',
      value: 'local|slurm',
      help: 'run tasks on this host (default local) or as Slurm jobs through sbatch (slurm)',
    },
    'slurm-partition': { type: 'string', value: 'NAME', help: 'the Slurm partition whose GPUs are the pool' },
    'slurm-account': { type: 'string', value: 'NAME', help: 'sbatch --account for every job' },
    'slurm-qos': { type: 'string', value: 'NAME', help: 'sbatch --qos for every job' },
    'slurm-extra-arg': {
      type: 'string',
      value: 'ARG',
      multiple: true,
      help: 'an sbatch argument fixed by the operator (e.g. --constraint=a100); agents cannot change it',
    },
    'slurm-job-dir': {
      type: 'string',
      value: 'DIR',
      help: 'shared directory (visible on the compute nodes) for the job files',
    },
    'slurm-poll-ms': { type: 'string', value: 'MS', help: 'how often Slurm is polled (default 1000)' },
    'slurm-gpu-dev-dir': {
      type: 'string',
      value: 'DIR',
      help: "where the nodes' nvidia<N> GPU device files are (gres.conf File=; %n = node name; default /dev)",
    },
    'slurm-gpu-kind': {
      type: 'string',
      value: 'nvidia|hy',
      help: "the nodes' GPUs: nvidia (default; nvidia<N> files) or hy (Hygon DCU: dri/renderD<128+N> and kfd)",
    },
    'slurm-simulated-gpus': {
      type: 'boolean',
      help: "the partition's GPUs are not real devices (a test cluster): cards are labelled simulated",
    },
    ...JSON_FLAG,
  },
  env: {
    GPU_BROKER_URL: 'the master URL when --url is not given',
    GPU_BROKER_WORKER_TOKEN: 'the worker token when --token-file is not given',
    GPU_BROKER_CA_FILE: 'CA certificate when --ca-file is not given',
    GPU_BROKER_LOG_LEVEL: 'log level (default info)',
  },
  examples: [
    'worker --url https://gpu-master:8443 --token-file /root/.gpu-broker/worker.token --ca-file ca.pem',
    'worker --backend slurm --slurm-partition gpu --slurm-job-dir /shared/gpu-broker/jobs --url https://gpu-master:8443 --token-file worker.token',
  ],
});
