import { defineCommand } from '../../platform/args.js';
import { REMOTE_ENV, REMOTE_FLAGS, SHIP_FLAGS } from '../common/shared-specs.js';

/**
 * The flags, help and examples of `gpu-broker run` and `gpu-broker task …` (ADR 0026): one command from
 * code to result, and the verbs to follow a task afterwards. Specs only, like the other families listed in
 * command-specs.ts, so `--help` still loads no command code.
 */

export const RUN = defineCommand({
  name: 'run',
  usage: [
    'run [--dir DIR] [--cards N] [--time-limit SECONDS] [--title T] [--output PATH]… [--proposal ID] [--no-download] [--include-secret PATH]… -- COMMAND [ARG]…',
    'run [--dir DIR] [--include GLOB]… --dry-run [--json]',
  ],
  summary:
    "One command from code to result: ships DIR's files (what the master lacks only; every .gitignore and .gpu-brokerignore honoured; .git/, node_modules/, .gpu-broker/, gpu-broker-outputs/ and symbolic links left out; credential files and private keys refused unless --include-secret names them; the whole list printed before the first run of a directory), proposes (or revises the proposal this DIR ran last, remembered per user under $XDG_STATE_HOME/gpu-broker/runs/, never in DIR), confirms, says whether a grant covers it or who must review it, waits, streams the logs, downloads the declared outputs into DIR/gpu-broker-outputs/TASK/ (sha256 checked) and exits with the task's exit code. Ctrl-C leaves the task running and prints how to reattach. Exit codes: the task's own; 128+N when a signal N ended it; 120 error findings (nothing ran); 121 changes requested; 122 rejected, withdrawn or expired; 123 task cancelled; 124 time limit reached; 125 the task failed without an exit code of its own (SETUP_FAILED, OUTPUT_MISSING, WORKER_LOST, …); 130 interrupted (the task keeps running); 1 a broker error; 2 bad arguments.",
  flags: {
    dir: {
      type: 'string',
      value: 'DIR',
      help: 'the project directory to ship and to download into (default .)',
    },
    include: { type: 'string', value: 'GLOB', multiple: true, help: 'only files matching (repeatable)' },
    cards: { type: 'string', value: 'N', help: 'cards to ask for (default 1)' },
    'time-limit': { type: 'string', value: 'SECONDS', help: 'time limit (default 3600)' },
    title: { type: 'string', value: 'T', help: 'title of the proposal (default "run COMMAND…")' },
    objective: { type: 'string', value: 'TEXT', help: 'what the run should show' },
    'success-criteria': { type: 'string', value: 'TEXT', help: 'how to tell it worked' },
    notes: { type: 'string', value: 'TEXT', help: 'notes for the reviewer' },
    output: {
      type: 'string',
      value: 'PATH',
      multiple: true,
      help: 'an output file the task writes under $GPU_BROKER_OUTPUT_DIR (required; repeatable)',
    },
    proposal: {
      type: 'string',
      value: 'ID',
      help: 'revise this proposal (default: the one your last run of DIR made)',
    },
    'no-download': { type: 'boolean', help: 'do not download the outputs' },
    ...SHIP_FLAGS,
    ...REMOTE_FLAGS,
  },
  env: REMOTE_ENV,
  examples: [
    'run --dir . --cards 1 --output metrics.json -- python3 train.py --epochs 1',
    'run -- /bin/sh bench.sh',
    'run --dry-run',
  ],
});

export const TASK = defineCommand({
  name: 'task',
  usage: [
    'task list [--state STATE] [--limit N] [--json]',
    'task show TASK [--json]',
    'task logs TASK [--stream stdout|stderr] [--tail N] [--follow]',
    'task wait TASK [--json]',
    'task outputs TASK [--dir DIR] [--json]',
    'task cancel TASK [--json]',
  ],
  summary:
    "Your tasks: list them, show one, print or follow its logs (by byte offset: no line twice, none missing), wait for it to end (exit code as `gpu-broker run`'s), list or download its declared outputs (sha256 checked), cancel it.",
  flags: {
    state: { type: 'string', value: 'STATE', help: 'task list: only tasks in this state (e.g. RUNNING)' },
    limit: { type: 'string', value: 'N', help: 'task list: at most N tasks (default 50)' },
    stream: { type: 'string', value: 'stdout|stderr', help: 'task logs: one stream (default both)' },
    tail: { type: 'string', value: 'N', help: 'task logs: only the last N lines' },
    follow: { type: 'boolean', short: 'f', help: 'task logs: keep printing until the task ends' },
    dir: {
      type: 'string',
      value: 'DIR',
      help: 'task outputs: download into DIR/gpu-broker-outputs/TASK/ (default: list only)',
    },
    ...REMOTE_FLAGS,
  },
  env: REMOTE_ENV,
  subcommands: ['list', 'show', 'logs', 'wait', 'outputs', 'cancel'],
  examples: ['task list --state RUNNING', 'task logs task_01J… --follow', 'task outputs task_01J… --dir .'],
});
