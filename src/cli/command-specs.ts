import { defineCommand, type Flags } from '../platform/args.js';

/**
 * Every `gpu-broker` command's flags, environment and examples: the one source for the parser and for
 * `--help` (src/cli/args.ts, src/platform/args.ts). Kept apart from the command files so `--help` and the
 * test that checks it load no command code. `mcp-stdio`'s spec is the stdio bridge's own
 * (client-kit/stdio-bridge-spec.ts), which the bridge bundle carries without the CLI.
 */

const JSON_FLAG = { json: { type: 'boolean', help: 'print machine-readable JSON on stdout' } } as const;

/** Flags of every command that talks to a running master over HTTPS (also grant-commands.ts). */
export const REMOTE_FLAGS = {
  url: {
    type: 'string',
    value: 'URL',
    help: 'the master, e.g. https://gpu-host:8443 (default $GPU_BROKER_URL)',
  },
  token: {
    type: 'string',
    value: 'TOKEN',
    help: 'bearer token (prefer --token-file or $GPU_BROKER_TOKEN: argv is visible in ps)',
  },
  'token-file': { type: 'string', value: 'FILE', help: 'file holding the bearer token' },
  'ca-file': {
    type: 'string',
    value: 'FILE',
    help: 'CA certificate to trust for the master (its <data-dir>/tls/ca.pem; default $GPU_BROKER_CA_FILE)',
  },
  ...JSON_FLAG,
} as const satisfies Flags;

export const REMOTE_ENV = {
  GPU_BROKER_URL: 'the master URL when --url is not given',
  GPU_BROKER_TOKEN: 'bearer token when neither --token nor --token-file is given',
  GPU_BROKER_TOKEN_FILE: 'file holding the bearer token when --token-file is not given',
  GPU_BROKER_CA_FILE: 'CA certificate when --ca-file is not given',
};

/** `--data-dir` of commands that open the master's database directly. */
const LOCAL_FLAGS = {
  'data-dir': {
    type: 'string',
    value: 'DIR',
    help: "the master's data dir (default $GPU_BROKER_HOME, then ./.gpu-broker)",
  },
  ...JSON_FLAG,
} as const satisfies Flags;

const LOCAL_ENV = { GPU_BROKER_HOME: 'data dir when --data-dir is not given (default ./.gpu-broker)' };

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
    value: 'auto|nvidia|hy|sim:N',
    help: 'which cards to use (default auto: real, else simulated)',
  },
  id: { type: 'string', value: 'ID', help: 'worker id (default local-<hostname>)' },
  isolation: { type: 'string', value: 'auto|bwrap|none', help: 'how tasks are sandboxed (default auto)' },
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
    'worker --url https://HOST:PORT --token-file FILE [--id ID] [--gpus auto|nvidia|hy|sim:N] [--data-dir DIR] [--ca-file FILE] [--isolation auto|bwrap|none] [--task-uids FIRST-LAST] [--hide PATH]… [--container-engine auto|podman|docker|none] [--mount NAME=PATH[:rw]]… [--keep-executions N] [--keep-executions-days D] [--run-as USER] [--json]',
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

export const TOKEN = defineCommand({
  name: 'token',
  usage: [
    'token create --name NAME --role ROLE [--role ROLE]… [--worker-id ID] [--data-dir DIR] [--json]',
    'token list [--data-dir DIR] [--json]',
    'token revoke NAME [--data-dir DIR] [--json]',
  ],
  summary:
    "Creates, lists and revokes bearer tokens in the master's database (run on the master host). Roles: submitter, reviewer, operator, worker, agent_reviewer (an LLM reviewer: approves only within review.agent_ceiling).",
  flags: {
    name: { type: 'string', value: 'NAME', help: 'principal name (unique)' },
    role: {
      type: 'string',
      value: 'ROLE',
      multiple: true,
      help: 'submitter, reviewer, operator, worker or agent_reviewer',
    },
    'worker-id': {
      type: 'string',
      value: 'ID',
      help: 'the worker a worker token belongs to: 1-128 letters, digits, ".", "_", "-"; a letter or digit first',
    },
    ...LOCAL_FLAGS,
  },
  env: LOCAL_ENV,
  subcommands: ['create', 'list', 'revoke'],
  examples: [
    'token create --name alice-agent --role submitter',
    'token create --name claude-reviewer --role agent_reviewer',
    'token revoke alice-agent',
  ],
});

export const STATUS = defineCommand({
  name: 'status',
  usage: ['status [--url URL] [--token-file FILE] [--ca-file FILE] [--json]'],
  summary: 'Workers, cards, queue, leases and alerts in one screen.',
  flags: REMOTE_FLAGS,
  env: REMOTE_ENV,
  examples: [
    'status --url https://127.0.0.1:8443 --token-file .gpu-broker/operator.token --ca-file .gpu-broker/tls/ca.pem',
  ],
});

export const REVIEW = defineCommand({
  name: 'review',
  usage: [
    'review list',
    'review show PROPOSAL [--revision REV] [--json]',
    'review input PROPOSAL --path PATH [--revision REV] [--offset N] [--max-bytes N] [--json]',
    'review approve|request-changes|reject PROPOSAL --revision REV --comment TEXT',
    'review prompt PROPOSAL [--revision REV] [--max-bytes N] [--json]',
    "review agent --command 'CMD' [--once] [--timeout-seconds S] [--interval-seconds S] [--json]",
  ],
  summary:
    'The review queue, one revision in full (manifest and every change against the last decided revision), one input file page by page, and decisions on exact revisions (needs a reviewer token).',
  flags: {
    revision: {
      type: 'string',
      value: 'REV',
      help: 'the revision id you judge (review list shows it; show and input default to the current one)',
    },
    comment: { type: 'string', value: 'TEXT', help: 'why: shown to the submitter' },
    path: {
      type: 'string',
      value: 'PATH',
      help: 'review input: the input file to print (review show lists them)',
    },
    offset: { type: 'string', value: 'N', help: 'review input: byte offset to start at (default 0)' },
    'max-bytes': {
      type: 'string',
      value: 'N',
      help: 'review input: most bytes to print (default 262144); review prompt: most submitted bytes quoted',
    },
    command: {
      type: 'string',
      value: 'CMD',
      help: 'review agent: the model command (sh -c): prompt on stdin, one JSON verdict on stdout; it never gets the token',
    },
    once: { type: 'boolean', help: 'review agent: one pass over the queue, then exit' },
    'timeout-seconds': {
      type: 'string',
      value: 'S',
      help: 'review agent: per-revision model time limit (default 300)',
    },
    'interval-seconds': {
      type: 'string',
      value: 'S',
      help: 'review agent: pause between passes (default 10)',
    },
    ...REMOTE_FLAGS,
  },
  env: REMOTE_ENV,
  subcommands: ['list', 'show', 'input', 'approve', 'request-changes', 'reject', 'prompt', 'agent'],
  examples: [
    'review list',
    'review show prop_01J…',
    'review input prop_01J… --path src/train.py',
    'review approve prop_01J… --revision rev_01J… --comment "bounded, outputs small"',
    'review prompt prop_01J…',
    'review agent --command \'claude -p --tools ""\' --once',
  ],
});

function cardCommand(name: 'cordon' | 'uncordon') {
  return defineCommand({
    name,
    usage: [`${name} WORKER:CARD [WORKER:CARD]… [--reason TEXT]`],
    summary:
      name === 'cordon'
        ? 'Stops new leases on each named card (running tasks continue). Every target is checked before any is changed.'
        : 'Lets each named card take leases again. Every target is checked before any is changed.',
    flags: { reason: { type: 'string', value: 'TEXT', help: 'why, for the audit log' }, ...REMOTE_FLAGS },
    env: REMOTE_ENV,
    positionals: true,
    examples: [`${name} gpu-host-1:3 gpu-host-1:4 --reason "ECC errors"`],
  });
}

function workerCommand(name: 'drain' | 'undrain' | 'remove-worker', summary: string) {
  return defineCommand({
    name,
    usage: [`${name} WORKER [WORKER]…`],
    summary,
    flags: REMOTE_FLAGS,
    env: REMOTE_ENV,
    positionals: true,
    examples: [`${name} gpu-host-1`],
  });
}

export const CORDON = cardCommand('cordon');
export const UNCORDON = cardCommand('uncordon');
export const DRAIN = workerCommand('drain', 'Stops new work on each named worker; running tasks finish.');
export const UNDRAIN = workerCommand('undrain', 'Lets each named worker take new work again.');
export const REMOVE_WORKER = workerCommand(
  'remove-worker',
  'Removes each named (offline, idle) worker from the registry.',
);

export const RECONCILE = defineCommand({
  name: 'reconcile',
  usage: ['reconcile TASK [TASK]… --resolution COMPLETED|FAILED|CANCELLED --reason TEXT'],
  summary: 'Settles tasks left UNKNOWN (their worker vanished) once you know what happened on the host.',
  flags: {
    resolution: { type: 'string', value: 'STATE', help: 'the final state to record' },
    reason: { type: 'string', value: 'TEXT', help: 'what you checked, for the audit log' },
    ...REMOTE_FLAGS,
  },
  env: REMOTE_ENV,
  positionals: true,
  examples: ['reconcile task_01J… --resolution FAILED --reason "host rebooted; cards idle"'],
});

export const QUALIFY = defineCommand({
  name: 'qualify',
  usage: [
    'qualify [--worker ID] [--cards 1,2,4,8] [--submitter scripted|claude|codex] [--json]',
    'qualify show RUN_ID [--json]',
    'qualify cancel RUN_ID [--json]',
  ],
  summary:
    'Runs the qualification ladder on a worker (its cards are cordoned meanwhile), follows it, and prints the verdict; exits 0 only on PASSED.',
  flags: {
    worker: { type: 'string', value: 'ID', help: 'the worker to qualify (default: the only one online)' },
    cards: {
      type: 'string',
      value: 'N,N,…',
      help: 'card counts of the rungs (default 1,2,4,8 up to its cards)',
    },
    submitter: {
      type: 'string',
      value: 'scripted|claude|codex',
      help: 'who submits the tasks (default scripted)',
    },
    ...REMOTE_FLAGS,
  },
  env: REMOTE_ENV,
  subcommands: ['show', 'cancel'],
  examples: ['qualify --cards 1,2', 'qualify show qual_01J…'],
});

export const CLIENT_KIT = defineCommand({
  name: 'client-kit',
  usage: [
    'client-kit build --out DIR [--url URL] [--ca-file FILE] [--json]',
    'client-kit verify DIR [--json]',
  ],
  summary:
    'build renders the skill, example specs and harness configs for one master into a new directory (never a token or key); verify checks a kit against its MANIFEST.json and SHA256SUMS.',
  flags: {
    out: { type: 'string', value: 'DIR', help: 'new directory for the kit (build)' },
    url: { type: 'string', value: 'URL', help: 'the master URL agents use (default $GPU_BROKER_URL)' },
    'ca-file': {
      type: 'string',
      value: 'FILE',
      help: "the master's CA certificate (default $GPU_BROKER_CA_FILE)",
    },
    ...JSON_FLAG,
  },
  env: {
    GPU_BROKER_URL: 'the master URL when --url is not given',
    GPU_BROKER_CA_FILE: 'CA certificate when --ca-file is not given',
  },
  subcommands: ['build', 'verify'],
  examples: ['client-kit build --out ./kit --url https://gpu-host:8443 --ca-file .gpu-broker/tls/ca.pem'],
});

export const AUDIT = defineCommand({
  name: 'audit',
  usage: ['audit verify [--data-dir DIR] [--json]', 'audit verify --archive FILE [--archive FILE]… [--json]'],
  summary:
    'Walks the audit hash chain (archive segments, then the live table); exits 1 naming the first bad row. With --archive, checks archive files offline.',
  flags: {
    ...LOCAL_FLAGS,
    archive: {
      type: 'string',
      value: 'FILE',
      multiple: true,
      help: 'an archive segment file to check offline, in chain order (no database opened)',
    },
  },
  env: LOCAL_ENV,
  subcommands: ['verify'],
  examples: [
    'audit verify --data-dir /var/lib/gpu-broker',
    'audit verify --archive audit-archive/audit-1-5000.jsonl --archive audit-archive/audit-5001-9000.jsonl',
  ],
});

export const PROPOSE = defineCommand({
  name: 'propose',
  usage: [
    "propose --dir DIR --entry 'python3 train.py --epochs 1' [--cards N] [--title T] [--include GLOB]… [--output PATH]… [--proposal ID] [--confirm] [--json]",
  ],
  summary:
    "Uploads a project directory's files as content-addressed inputs (what changed only, .gitignore-aware; files an interpreter loads on its own, such as __pycache__/ and *.pth, are left out and counted), writes the spec and creates or revises a proposal; prints its id.",
  flags: {
    dir: { type: 'string', value: 'DIR', help: 'the project directory to ship' },
    include: { type: 'string', value: 'GLOB', multiple: true, help: 'only files matching (repeatable)' },
    entry: {
      type: 'string',
      value: 'CMD',
      help: 'the command to run in the task dir, e.g. "python3 train.py"',
    },
    cards: { type: 'string', value: 'N', help: 'cards to ask for (default 1)' },
    title: { type: 'string', value: 'T', help: 'title of the proposal' },
    objective: { type: 'string', value: 'TEXT', help: 'what the run should show' },
    'success-criteria': { type: 'string', value: 'TEXT', help: 'how to tell it worked' },
    'time-limit': { type: 'string', value: 'SECONDS', help: 'time limit (default 3600)' },
    output: {
      type: 'string',
      value: 'PATH',
      multiple: true,
      help: 'an output file under $GPU_BROKER_OUTPUT_DIR',
    },
    notes: { type: 'string', value: 'TEXT', help: 'notes for the reviewer' },
    proposal: { type: 'string', value: 'ID', help: 'revise this proposal instead of creating one' },
    confirm: { type: 'boolean', help: 'confirm the new revision for review' },
    ...REMOTE_FLAGS,
  },
  env: REMOTE_ENV,
  examples: ["propose --dir ./project --entry 'python3 train.py --epochs 1' --cards 1 --confirm"],
});
