import { defineCommand } from '../../platform/args.js';
import { REMOTE_ENV, REMOTE_FLAGS } from '../common/shared-specs.js';

/** `gpu-broker grant …`: standing grants (docs/mcp-tools.md "Grants"). Spec only; code in grant.ts. */
export const GRANT = defineCommand({
  name: 'grant',
  usage: [
    'grant request --base REV --reason TEXT [--mutable GLOB]… [--max-runs N] [--card-hours H] [--ttl SECONDS] [--concurrency N] [--max-cards N] [--max-time SECONDS] [--supersedes GRANT]',
    'grant list [--state STATE]',
    'grant show GRANT',
    'grant approve|reject GRANT [--comment TEXT]',
    'grant revoke GRANT [--cancel-running] [--comment TEXT]',
    'grant explain --revision REV [--grant GRANT]',
  ],
  summary:
    'Standing grants: a reviewed scope that lets later revisions of one submitter run without a new review, within runs, card-hours, concurrency and an expiry. Request one from a revision that ran; a reviewer other than the grantee approves it; explain says whether a revision is covered and, if not, the first failing clause.',
  flags: {
    base: { type: 'string', value: 'REV', help: 'request: the revision that ran, the grant’s base' },
    reason: { type: 'string', value: 'TEXT', help: 'request: why, for the reviewer' },
    mutable: { type: 'string', value: 'GLOB', multiple: true, help: 'request: input paths that may change' },
    'max-runs': { type: 'string', value: 'N', help: 'request: most runs (default 10)' },
    'card-hours': {
      type: 'string',
      value: 'H',
      help: 'request: card-hours in all; each run reserves cards × its time limit until it ends (default: max-runs × max-cards)',
    },
    ttl: {
      type: 'string',
      value: 'SECONDS',
      help: 'request: lifetime (default 86400; capped by the operator)',
    },
    concurrency: { type: 'string', value: 'N', help: 'request: runs at once (default 1)' },
    'max-cards': { type: 'string', value: 'N', help: 'request: most cards per run (default: the base’s)' },
    'max-time': {
      type: 'string',
      value: 'SECONDS',
      help: 'request: largest time limit (default: the base’s)',
    },
    supersedes: { type: 'string', value: 'GRANT', help: 'request: the grant this one replaces' },
    state: { type: 'string', value: 'STATE', help: 'list: only this state (ACTIVE, REQUESTED, …)' },
    comment: { type: 'string', value: 'TEXT', help: 'approve, reject, revoke: why' },
    'cancel-running': { type: 'boolean', help: 'revoke: also cancel its tasks that have not ended' },
    revision: { type: 'string', value: 'REV', help: 'explain: the revision to test' },
    grant: { type: 'string', value: 'GRANT', help: 'explain: only this grant (default: every active one)' },
    ...REMOTE_FLAGS,
  },
  env: REMOTE_ENV,
  subcommands: ['request', 'list', 'show', 'approve', 'reject', 'revoke', 'explain'],
  examples: [
    'grant request --base rev_01J… --mutable train.py --mutable "src/**/*.py" --max-runs 20 --card-hours 4 --reason "tuning the learning rate"',
    'grant approve grt_01J… --comment "train.py and src/ only, 1 card"',
    'grant explain --revision rev_01J…',
    'grant revoke grt_01J… --cancel-running',
  ],
});
