import { defineCommand } from '../../platform/args.js';
import { JSON_FLAG, LOCAL_ENV, LOCAL_FLAGS, REMOTE_ENV, REMOTE_FLAGS } from '../common/shared-specs.js';

/**
 * The operator's commands: tokens, the status screen, cards and workers (cordon … reconcile), qualification,
 * client kits and the audit chain (see command-specs.ts).
 */

export const TOKEN = defineCommand({
  name: 'token',
  usage: [
    'token create --name NAME --role ROLE [--role ROLE]… [--worker-id ID] [--account ACCOUNT] [--data-dir DIR] [--json]',
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
    account: {
      type: 'string',
      value: 'ACCOUNT',
      help: 'the account (team) the principal belongs to (default: default; gpu-broker account list)',
    },
    ...LOCAL_FLAGS,
  },
  env: LOCAL_ENV,
  subcommands: ['create', 'list', 'revoke'],
  examples: [
    'token create --name alice-agent --role submitter',
    'token create --name claude-reviewer --role agent_reviewer',
    'token create --name bob-agent --role submitter --account team-b',
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

export const CARDS = defineCommand({
  name: 'cards',
  usage: ['cards [--url URL] [--token-file FILE] [--ca-file FILE] [--json]'],
  summary:
    'Every card of every worker: model, state, memory, utilisation, who holds it; MIG slices under their card with their profile.',
  flags: REMOTE_FLAGS,
  env: REMOTE_ENV,
  examples: [
    'cards --url https://127.0.0.1:8443 --token-file .gpu-broker/operator.token --ca-file .gpu-broker/tls/ca.pem',
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
  usage: ['reconcile TASK [TASK]… --resolution COMPLETED|FAILED|CANCELLED --reason TEXT [--force]'],
  summary:
    'Settles tasks left UNKNOWN (their worker vanished) once you know what happened on the host. Refused while the worker is online and still runs the task, unless --force.',
  flags: {
    resolution: { type: 'string', value: 'STATE', help: 'the final state to record' },
    reason: { type: 'string', value: 'TEXT', help: 'what you checked, for the audit log' },
    force: {
      type: 'boolean',
      help: 'reconcile even a task its online worker still runs: the worker kills it (SIGTERM, then SIGKILL)',
    },
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

export const ACCOUNT = defineCommand({
  name: 'account',
  usage: [
    'account create NAME [--parent ACCOUNT] [--weight N] [--description TEXT] [--model MODEL] [--nominal N] [--borrow N|any] [--budget HOURS --period day|week|month] [--max-priority N] [--preemptible yes|no] [--data-dir DIR] [--json]',
    'account list [--data-dir DIR] [--json]',
    'account show NAME [--data-dir DIR] [--json]',
    'account set NAME [--parent ACCOUNT] [--weight N] [--description TEXT] [--model MODEL] [--nominal N|none] [--borrow N|any] [--budget HOURS|none] [--period day|week|month] [--max-priority N|none] [--preemptible yes|no] [--data-dir DIR] [--json]',
    'account delete NAME [--data-dir DIR] [--json]',
  ],
  summary:
    "Manages the account tree in the master's database (run on the master host; operators elsewhere use /api/v1/accounts): every principal belongs to one account (a team) under root, each with a fair-share weight. A fresh database has root and default.",
  flags: {
    parent: { type: 'string', value: 'ACCOUNT', help: 'the parent account (create: default root)' },
    weight: {
      type: 'string',
      value: 'N',
      help: 'fair-share weight relative to its siblings, a whole number 1..1000000 (create: default 1)',
    },
    description: { type: 'string', value: 'TEXT', help: 'what the account is for (at most 500 characters)' },
    model: {
      type: 'string',
      value: 'MODEL',
      help: "the quota flags set this card model's quota (e.g. H100: cards whose model has these words) instead of the account-wide one; both apply; a model quota with neither --nominal nor --budget left is removed",
    },
    nominal: {
      type: 'string',
      value: 'N',
      help: 'cards the account is guaranteed when it asks (none: no quota); children sum within it',
    },
    borrow: {
      type: 'string',
      value: 'N',
      help: 'idle cards beyond the nominal share it may hold (any: no limit; needs --nominal)',
    },
    budget: { type: 'string', value: 'HOURS', help: 'card-hours per --period (none: no budget)' },
    period: {
      type: 'string',
      value: 'P',
      help: 'the budget resets each UTC day, week (from Monday) or month',
    },
    'max-priority': {
      type: 'string',
      value: 'N',
      help: "the highest spec priority the account's tasks may ask for, 0..100 (none: no bound)",
    },
    preemptible: {
      type: 'string',
      value: 'yes|no',
      help: 'yes: every task of the account may be preempted while it holds more than its nominal share (no: its specs decide)',
    },
    ...LOCAL_FLAGS,
  },
  env: LOCAL_ENV,
  subcommands: ['create', 'list', 'show', 'set', 'delete'],
  examples: [
    'account create org-ml',
    'account create team-a --parent org-ml --weight 2',
    'account set team-a --weight 3',
    'account set team-a --nominal 4 --borrow 4 --budget 500 --period week',
    'account set team-a --model H100 --nominal 4 --borrow 2 --budget 100 --period week',
    'account set team-a --model H100 --nominal none --borrow any --budget none',
    'account set batch --preemptible yes',
    'token create --name alice-agent --role submitter --account team-a',
  ],
});

export const USAGE = defineCommand({
  name: 'usage',
  usage: [
    'usage [--by account|principal|model] [--since TIME] [--until TIME] [--url URL] [--token-file FILE] [--ca-file FILE] [--json|--csv]',
  ],
  summary:
    'Who used what: card-hours charged to leases that ended in a window, by account, principal or card model (simulated cards apart). Operators and viewers see every account; anyone else their own.',
  flags: {
    by: { type: 'string', value: 'WHAT', help: 'account (default), principal or model' },
    since: {
      type: 'string',
      value: 'TIME',
      help: 'ISO 8601 start, inclusive (default: 7 days before --until)',
    },
    until: { type: 'string', value: 'TIME', help: 'ISO 8601 end, exclusive (default: now)' },
    csv: { type: 'boolean', help: 'print CSV (key,simulated,card_seconds,card_hours,leases)' },
    ...REMOTE_FLAGS,
  },
  env: REMOTE_ENV,
  examples: ['usage --by account --since 2026-12-01', 'usage --by model --json'],
});
