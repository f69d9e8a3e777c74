import { parseArgs } from 'node:util';
import {
  type CommandSpec,
  type Flags,
  type FlagValues,
  helpText,
  type ParsedArgs,
} from '../../platform/args.js';
import type { CliIo } from './io.js';
import { escapeField } from './output.js';

/**
 * Argument parsing for every `gpu-broker` command: a thin wrapper around node's `util.parseArgs` that
 * adds `--help` (usage, flags, environment, examples; exit 0) and turns parse errors into one usage
 * line on stderr with exit 2 instead of a stack trace. See docs/decisions/0011-cli-arguments.md for
 * why this over a CLI library. The specs and their help text are src/platform/args.ts (the stdio
 * bridge in client-kit/ describes itself with them too); the parser stays here because its errors are
 * printed through the CLI's terminal escaping (output.ts).
 */

/** Writes a one-line usage error and returns its exit code, 2. */
export function usageError(io: CliIo, spec: CommandSpec, message: string): number {
  const name = spec.name.split(' ')[0];
  io.stderr(`gpu-broker ${spec.name}: ${escapeField(message)} (see: gpu-broker ${name} --help)\n`);
  return 2;
}

/**
 * Parses argv against a spec. Returns the parsed values, or an exit code when the command should end
 * now: 0 after printing help (`--help`/`-h` anywhere before `--`, or a `help` subcommand), 2 after a
 * one-line usage error.
 */
export function parseCommand<F extends Flags>(
  spec: CommandSpec<F>,
  argv: string[],
  io: CliIo,
): ParsedArgs<F> | number {
  const end = argv.indexOf('--');
  const head = end === -1 ? argv : argv.slice(0, end);
  if (head.includes('--help') || head.includes('-h') || (spec.subcommands && argv[0] === 'help')) {
    io.stdout(helpText(spec));
    return 0;
  }
  const options: Record<string, { type: 'string' | 'boolean'; multiple?: boolean; short?: string }> = {};
  for (const [name, f] of Object.entries(spec.flags))
    options[name] = {
      type: f.type,
      ...(f.multiple ? { multiple: true } : {}),
      ...(f.short ? { short: f.short } : {}),
    };
  try {
    const parsed = parseArgs({
      args: argv,
      options,
      strict: true,
      allowPositionals: spec.positionals === true || spec.subcommands !== undefined,
    });
    return { values: parsed.values as FlagValues<F>, positionals: parsed.positionals };
  } catch (err) {
    // parseArgs messages are one sentence, then advice about `--` that does not apply here.
    const message = ((err as Error).message.split(/\.\s/)[0] ?? 'bad arguments').replace(/^\w/, (c) =>
      c.toLowerCase(),
    );
    return usageError(io, spec, message);
  }
}
