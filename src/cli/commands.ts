import { MCP_STDIO } from '../../client-kit/stdio-bridge-spec.js';
import type { CommandSpec } from '../platform/args.js';
import { GRANT } from './grant-command-specs.js';
import { SERVE, START, WORKER } from './host-command-specs.js';
import type { CommandRunner } from './io.js';
import {
  AUDIT,
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
} from './operator-command-specs.js';
import { PROPOSE, REVIEW } from './proposal-command-specs.js';
import { RUN, TASK } from './task-command-specs.js';

/** A command: its spec, how to load its code, and whether it gets its own name as argv[0]. */
export interface CommandEntry {
  spec: CommandSpec;
  /** Loaded on demand, so `gpu-broker mcp-stdio` does not load fastify. */
  load: () => Promise<{ run: CommandRunner }>;
  /** Verbs sharing one file (cordon, drain, …) dispatch on their name, passed as argv[0]. */
  passName?: boolean;
}

const cards = () => import('./cards.js');

/**
 * Every `gpu-broker` command, in the order the top-level help lists them. Specs come from one import per
 * family file (`./<family>-command-specs.js`, listed in command-specs.ts); a new family is one more import.
 */
export const COMMANDS: Record<string, CommandEntry> = {
  start: { spec: START, load: () => import('./start.js') },
  serve: { spec: SERVE, load: () => import('./serve.js') },
  worker: { spec: WORKER, load: () => import('./worker.js') },
  token: { spec: TOKEN, load: () => import('./token.js') },
  status: { spec: STATUS, load: () => import('./status.js') },
  review: { spec: REVIEW, load: () => import('./review.js') },
  propose: { spec: PROPOSE, load: () => import('./propose.js') },
  grant: { spec: GRANT, load: () => import('./grant.js') },
  run: { spec: RUN, load: () => import('./run.js') },
  task: { spec: TASK, load: () => import('./task.js') },
  cordon: { spec: CORDON, load: cards, passName: true },
  uncordon: { spec: UNCORDON, load: cards, passName: true },
  drain: { spec: DRAIN, load: cards, passName: true },
  undrain: { spec: UNDRAIN, load: cards, passName: true },
  'remove-worker': { spec: REMOVE_WORKER, load: cards, passName: true },
  reconcile: { spec: RECONCILE, load: cards, passName: true },
  qualify: { spec: QUALIFY, load: () => import('./qualify.js') },
  'mcp-stdio': { spec: MCP_STDIO, load: () => import('./mcp-stdio.js') },
  'client-kit': { spec: CLIENT_KIT, load: () => import('./client-kit.js') },
  audit: { spec: AUDIT, load: () => import('./audit.js') },
};
