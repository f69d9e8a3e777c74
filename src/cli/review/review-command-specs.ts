import { defineCommand } from '../../platform/args.js';
import { REMOTE_ENV, REMOTE_FLAGS } from '../common/shared-specs.js';

/** The reviewer's command: `review` (see ../common/shared-specs.ts; `grant` is in ./grant-command-specs.ts). */

export const REVIEW = defineCommand({
  name: 'review',
  usage: [
    'review list',
    'review show PROPOSAL [--revision REV] [--json]',
    'review input PROPOSAL --path PATH [--revision REV] [--offset N] [--max-bytes N] [--json]',
    'review approve|request-changes|reject PROPOSAL --revision REV --comment TEXT',
    'review prompt PROPOSAL [--revision REV] [--max-bytes N] [--json]',
    "review agent --command 'CMD' [--model-env NAME]… [--model-bind PATH]… [--model-network none|host] [--unsandboxed-model] [--once] [--timeout-seconds S] [--interval-seconds S] [--json]",
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
      help: 'review agent: the model command (sh -c, in a sandbox: no token, no home, no network, fresh scratch dir): prompt on stdin, one JSON verdict on stdout',
    },
    'model-env': {
      type: 'string',
      value: 'NAME',
      multiple: true,
      help: 'review agent: pass this variable of your environment to the model, e.g. ANTHROPIC_API_KEY (repeatable; never GPU_BROKER_*)',
    },
    'model-bind': {
      type: 'string',
      value: 'PATH',
      multiple: true,
      help: 'review agent: show this host path to the model read-only, e.g. where its CLI is installed (repeatable; refused if it holds a token or data dir)',
    },
    'model-network': {
      type: 'string',
      value: 'none|host',
      help: "review agent: the model's network (default none; host to reach its API)",
    },
    'unsandboxed-model': {
      type: 'boolean',
      help: 'review agent: run the model as yourself, with no sandbox (a model with tools can then read your token; warns)',
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
    "review agent --command 'sh /opt/kit/agent-reviewer/claude-model.sh' --model-env ANTHROPIC_API_KEY --model-network host --model-bind /opt/kit",
  ],
});
