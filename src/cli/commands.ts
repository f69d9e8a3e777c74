import { MCP_STDIO } from '../../client-kit/stdio-bridge-spec.js';
import type { CommandSpec } from '../platform/args.js';
import { PROPOSE } from './agent/proposal-command-specs.js';
import { RUN, TASK } from './agent/task-command-specs.js';
import type { CommandRunner } from './common/io.js';
import { SERVE, START, WORKER } from './host/command-specs.js';
import {
  ACCOUNT,
  AUDIT,
  CARDS,
  CLIENT_KIT,
  CORDON,
  DRAIN,
  QUALIFY,
  RECONCILE,
  REMOVE_WORKER,
  STATUS,
  TOKEN,
  UNCORDON,
  UNDRAIN,
  USAGE,
} from './operator/command-specs.js';
import { GRANT } from './review/grant-command-specs.js';
import { REVIEW } from './review/review-command-specs.js';

/** A command: its spec, how to load its code, and whether it gets its own name as argv[0]. */
export interface CommandEntry {
  spec: CommandSpec;
  /** Loaded on demand, so `gpu-broker mcp-stdio` does not load fastify. */
  load: () => Promise<{ run: CommandRunner }>;
  /** Verbs sharing one file (cordon, drain, …) dispatch on their name, passed as argv[0]. */
  passName?: boolean;
}

const cards = () => import('./operator/cards.js');

/**
 * Every `gpu-broker` command, in the order the top-level help lists them. Specs come from one import per
 * specs file (in its folder beside its commands, listed in common/shared-specs.ts); a new family is one more import.
 */
export const COMMANDS: Record<string, CommandEntry> = {
  start: { spec: START, load: () => import('./host/start.js') },
  serve: { spec: SERVE, load: () => import('./host/serve.js') },
  worker: { spec: WORKER, load: () => import('./host/worker.js') },
  token: { spec: TOKEN, load: () => import('./operator/token.js') },
  account: { spec: ACCOUNT, load: () => import('./operator/account.js') },
  usage: { spec: USAGE, load: () => import('./operator/usage.js') },
  status: { spec: STATUS, load: () => import('./operator/status.js') },
  cards: { spec: CARDS, load: () => import('./operator/card-list.js') },
  review: { spec: REVIEW, load: () => import('./review/review.js') },
  propose: { spec: PROPOSE, load: () => import('./agent/propose.js') },
  grant: { spec: GRANT, load: () => import('./review/grant.js') },
  run: { spec: RUN, load: () => import('./agent/run.js') },
  task: { spec: TASK, load: () => import('./agent/task.js') },
  cordon: { spec: CORDON, load: cards, passName: true },
  uncordon: { spec: UNCORDON, load: cards, passName: true },
  drain: { spec: DRAIN, load: cards, passName: true },
  undrain: { spec: UNDRAIN, load: cards, passName: true },
  'remove-worker': { spec: REMOVE_WORKER, load: cards, passName: true },
  reconcile: { spec: RECONCILE, load: cards, passName: true },
  qualify: { spec: QUALIFY, load: () => import('./operator/qualify.js') },
  'mcp-stdio': { spec: MCP_STDIO, load: () => import('./agent/mcp-stdio.js') },
  'client-kit': { spec: CLIENT_KIT, load: () => import('./operator/client-kit.js') },
  audit: { spec: AUDIT, load: () => import('./operator/audit.js') },
};
