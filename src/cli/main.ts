#!/usr/bin/env node
import type { CliIo, CommandRunner } from './io.js';

/**
 * `gpu-broker` entry point: the only place (with src/main.ts) that touches `process`. Each subcommand
 * lives in its own file and is loaded on demand, so `gpu-broker mcp-stdio` does not load fastify.
 */

const COMMANDS: Record<string, () => Promise<{ run: CommandRunner }>> = {
  start: () => import('./start.js'),
  serve: () => import('./serve.js'),
  worker: () => import('./worker.js'),
  token: () => import('./token.js'),
  status: () => import('./status.js'),
  review: () => import('./review.js'),
  propose: () => import('./propose.js'),
  cordon: () => import('./cards.js'),
  uncordon: () => import('./cards.js'),
  drain: () => import('./cards.js'),
  undrain: () => import('./cards.js'),
  'remove-worker': () => import('./cards.js'),
  reconcile: () => import('./cards.js'),
  qualify: () => import('./qualify.js'),
  'mcp-stdio': () => import('./mcp-stdio.js'),
  'client-kit': () => import('./client-kit.js'),
  audit: () => import('./audit.js'),
};

const USAGE = `gpu-broker — GPU time for coding agents, safely

  start                         master + a local worker + client configs (quick start)
  serve [--listen H:P] [--tls auto|off] [--config F] [--data-dir D]
  worker --url URL --token-file F [--id ID] [--gpus auto|nvidia|hy|sim:N] [--data-dir D]
  token create --name N --role R [--role R…] [--worker-id ID] | token list | token revoke NAME
  status                        workers, cards, queue, leases, alerts
  propose --dir D --entry 'python3 train.py' [--include GLOB…] [--cards N] [--title T] [--output P…] [--proposal P] [--confirm]
  review list | show P | approve|request-changes|reject P --revision R --comment TEXT
  cordon|uncordon WORKER:CARD [--reason T] ; drain|undrain|remove-worker WORKER ; reconcile TASK --resolution R --reason T
  qualify [--worker ID] [--cards 1,2,4,8] [--submitter scripted|claude|codex] | qualify show RUN
  mcp-stdio --url URL [--token-env NAME] [--ca-file F]
  client-kit build --out DIR [--url URL] [--ca-file F] | client-kit verify DIR
  audit verify [--archive FILE]...

Remote commands take --url, --token/--token-file, --ca-file (or GPU_BROKER_URL, GPU_BROKER_TOKEN,
GPU_BROKER_CA_FILE); local ones take --data-dir (or GPU_BROKER_HOME, default ./.gpu-broker). --json everywhere.
`;

async function main(): Promise<number> {
  const [name, ...rest] = process.argv.slice(2);
  if (!name || name === 'help' || name === '--help' || name === '-h') {
    process.stdout.write(USAGE);
    return name ? 0 : 2;
  }
  const load = COMMANDS[name];
  if (!load) {
    process.stderr.write(`unknown command "${name}"\n\n${USAGE}`);
    return 2;
  }
  const stopSignal = new Promise<void>((resolve) => {
    process.once('SIGINT', () => resolve());
    process.once('SIGTERM', () => resolve());
  });
  const io: CliIo = {
    stdout: (t) => process.stdout.write(t),
    stderr: (t) => process.stderr.write(t),
    env: process.env,
    stopSignal,
  };
  const { run } = await load();
  // Subcommands that dispatch on their own name (cordon, drain, …) get it as argv[0].
  const args = ['cordon', 'uncordon', 'drain', 'undrain', 'remove-worker', 'reconcile'].includes(name)
    ? [name, ...rest]
    : rest;
  return run(args, io);
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(`gpu-broker: ${(err as Error)?.stack ?? String(err)}\n`);
    process.exitCode = 1;
  },
);
