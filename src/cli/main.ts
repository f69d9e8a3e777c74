#!/usr/bin/env node
import { COMMANDS } from './commands.js';
import type { CliIo } from './common/io.js';
import { escapeField, escapeText, terminalSafeIo } from './common/output.js';

/**
 * `gpu-broker` entry point: the only place (with src/main.ts) that touches `process`. Each subcommand
 * lives in its own file and is loaded on demand, so `gpu-broker mcp-stdio` does not load fastify.
 */

const USAGE = `gpu-broker — GPU time for coding agents, safely

  start                         master + a local worker + client configs (quick start)
  serve [--listen H:P] [--tls auto|off] [--config F] [--data-dir D]
  worker --url URL --token-file F [--id ID] [--gpus auto|nvidia|hy|sim:N] [--data-dir D]
  token create --name N --role R [--role R…] [--account A] [--worker-id ID] | token list | token revoke NAME
  account create|list|show|set|delete …   teams: weights, quotas (per card model too), budgets
  usage [--by account|principal|model] [--since T] [--until T] [--csv]   who used how many card-hours
  status                        workers, cards, queue, leases, accounts, alerts
  cards                         every card, MIG slices under their card
  propose --dir D --entry 'python3 train.py' [--include GLOB…] [--cards N] [--title T] [--output P…] [--proposal P] [--confirm]
  run [--dir D] [--cards N] [--output P…] -- python3 train.py   propose, wait, stream logs, fetch outputs, exit as the task
  task list | show T | logs T [--follow] | wait T | outputs T [--dir D] | cancel T
  review list | show P | approve|request-changes|reject P --revision R --comment TEXT
  grant list | show G | …       standing grants (see gpu-broker grant --help)
  cordon|uncordon WORKER:CARD… [--reason T] ; drain|undrain|remove-worker WORKER… ; reconcile TASK… --resolution R --reason T
  qualify [--worker ID] [--cards 1,2,4,8] [--submitter scripted|claude|codex] | qualify show RUN
  mcp-stdio --url URL [--token-env NAME] [--ca-file F]
  client-kit build --out DIR [--url URL] [--ca-file F] | client-kit verify DIR
  audit verify [--archive FILE]...

Remote commands take --url, --token/--token-file, --ca-file (or GPU_BROKER_URL, GPU_BROKER_TOKEN,
GPU_BROKER_CA_FILE); local ones take --data-dir (or GPU_BROKER_HOME, default ./.gpu-broker). --json everywhere. gpu-broker COMMAND --help for details.
`;

async function main(): Promise<number> {
  const [name, ...rest] = process.argv.slice(2);
  if (!name || name === 'help' || name === '--help' || name === '-h') {
    process.stdout.write(USAGE);
    return name ? 0 : 2;
  }
  const entry = COMMANDS[name];
  if (!entry) {
    process.stderr.write(`gpu-broker: unknown command "${escapeField(name)}" (see: gpu-broker --help)\n`);
    return 2;
  }
  const stopSignal = new Promise<void>((resolve) => {
    process.once('SIGINT', () => resolve());
    process.once('SIGTERM', () => resolve());
  });
  // Every byte a command prints passes the terminal guard (src/cli/common/output.ts): the tables escape their
  // cells, and this catches whatever a command writes directly.
  const io: CliIo = terminalSafeIo({
    stdout: (t) => process.stdout.write(t),
    stderr: (t) => process.stderr.write(t),
    env: process.env,
    stopSignal,
  });
  const { run } = await entry.load();
  return run(entry.passName ? [name, ...rest] : rest, io);
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    // One line for users; the stack only when asked for, as it helps a bug report, not a user.
    const detail = process.env['GPU_BROKER_DEBUG'] ? (err as Error)?.stack : (err as Error)?.message;
    process.stderr.write(`gpu-broker: ${escapeText(detail ?? String(err))}\n`);
    process.exitCode = 1;
  },
);
