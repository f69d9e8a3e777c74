#!/usr/bin/env node
import { runStdioBridgeCommand } from './stdio-bridge-command.js';

/**
 * Standalone entry of the stdio bridge (`node dist/client-kit/stdio-bridge-main.js --url …`): the
 * same command as `gpu-broker mcp-stdio`, without loading the master's CLI. It is the only file of the
 * client kit that touches `process`, the way src/cli/main.ts is for the master.
 */

const stop = new Promise<void>((resolve) => {
  process.once('SIGTERM', () => resolve());
  process.once('SIGINT', () => resolve());
});

const code = await runStdioBridgeCommand(process.argv.slice(2), {
  stdin: process.stdin,
  stdout: process.stdout,
  stderr: (text) => process.stderr.write(text),
  env: process.env,
  stopSignal: stop,
});
process.exitCode = code;
// Everything is closed by now; the timer only guards against a stray handle keeping a harness's
// child alive after it asked the bridge to stop.
setTimeout(() => process.exit(code), 2_000).unref();
