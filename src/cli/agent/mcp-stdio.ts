import { Writable } from 'node:stream';
import { runStdioBridgeCommand } from '../../../client-kit/stdio-bridge-command.js';
import type { CommandRunner } from '../common/io.js';

/**
 * `gpu-broker mcp-stdio --url URL [--token-env NAME] [--ca-file FILE]`: the stdio MCP bridge
 * (client-kit/stdio-bridge.ts). Resolves only when the bridge ends: stdin closed or a stop signal.
 * Exit codes: 0 normal end, 1 setup failure (unreadable CA file, token refused by the master at start),
 * 2 usage (no URL, no token).
 */
export const run: CommandRunner = (argv, io) =>
  runStdioBridgeCommand(argv, {
    // CliIo carries no stdin, and this is the one command that reads it, so it is taken from the
    // process here rather than widening CliIo for a single caller.
    stdin: process.stdin,
    stdout: new Writable({
      write(chunk: Buffer | string, _encoding, callback) {
        io.stdout(chunk.toString());
        callback();
      },
    }),
    stderr: io.stderr,
    env: io.env,
    ...(io.stopSignal ? { stopSignal: io.stopSignal } : {}),
  });
