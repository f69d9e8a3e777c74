import type { Flags } from '../../platform/args.js';

/**
 * The flags and environment every `gpu-broker` command family shares. Each family's commands (flags, help,
 * examples: the one source for the parser and for `--help`, src/cli/common/args.ts and src/platform/args.ts)
 * live in a specs file in the family's folder, beside its commands, listed in src/cli/commands.ts:
 *   host/command-specs.ts              start, serve, worker (run the master and workers)
 *   agent/proposal-command-specs.ts    propose (a proposal from files)
 *   agent/task-command-specs.ts        run, task (a task from code to result, and following it)
 *   review/review-command-specs.ts     review (the queue, one revision, decisions, the agent reviewer)
 *   review/grant-command-specs.ts      grant (standing grants: request, decide, revoke, explain)
 *   operator/command-specs.ts          token, status, cordon…reconcile, qualify, client-kit, audit
 * A family file holds specs only, no command code, so `--help` and the test that checks it load none.
 * `mcp-stdio`'s spec is the stdio bridge's own (client-kit/stdio-bridge-spec.ts), which the bridge bundle
 * carries without the CLI.
 */

export const JSON_FLAG = {
  json: { type: 'boolean', help: 'print machine-readable JSON on stdout' },
} as const;

/** Flags of the two commands that ship a directory (`run`, `propose --dir`: src/cli/agent/propose-files.ts). */
export const SHIP_FLAGS = {
  'include-secret': {
    type: 'string',
    value: 'PATH',
    multiple: true,
    help: 'ship this credential or private-key file on purpose (its exact path under DIR; repeatable)',
  },
  'dry-run': {
    type: 'boolean',
    help: 'print every file that would ship, its size and the total, and stop (no master, no token)',
  },
} as const satisfies Flags;

/** Flags of every command that talks to a running master over HTTPS (every family). */
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
export const LOCAL_FLAGS = {
  'data-dir': {
    type: 'string',
    value: 'DIR',
    help: "the master's data dir (default $GPU_BROKER_HOME, then ./.gpu-broker)",
  },
  ...JSON_FLAG,
} as const satisfies Flags;

export const LOCAL_ENV = { GPU_BROKER_HOME: 'data dir when --data-dir is not given (default ./.gpu-broker)' };
