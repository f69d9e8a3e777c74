import { defineCommand } from '../../platform/args.js';
import { REMOTE_ENV, REMOTE_FLAGS, SHIP_FLAGS } from '../common/shared-specs.js';

/** The submitter's proposal command: `propose` (see ../common/shared-specs.ts; `review` is in ../review/). */

export const PROPOSE = defineCommand({
  name: 'propose',
  usage: [
    "propose --dir DIR --entry 'python3 train.py --epochs 1' [--cards N] [--title T] [--include GLOB]… [--include-secret PATH]… [--output PATH]… [--proposal ID] [--confirm] [--json]",
    'propose --dir DIR [--include GLOB]… --dry-run [--json]',
  ],
  summary:
    "Uploads a project directory's files as content-addressed inputs (what changed only; every .gitignore and .gpu-brokerignore honoured; symbolic links and files an interpreter loads on its own, such as __pycache__/ and *.pth, are left out and counted; credential files and private keys refused unless --include-secret names them; the whole list printed the first time a directory ships), writes the spec and creates or revises a proposal; prints its id.",
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
    ...SHIP_FLAGS,
    ...REMOTE_FLAGS,
  },
  env: REMOTE_ENV,
  examples: ["propose --dir ./project --entry 'python3 train.py --epochs 1' --cards 1 --confirm"],
});
