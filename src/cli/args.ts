import { parseArgs } from 'node:util';
import type { CliIo } from './io.js';
import { escapeField } from './output.js';

/**
 * Argument parsing for every `gpu-broker` command: a thin wrapper around node's `util.parseArgs` that
 * adds `--help` (usage, flags, environment, examples; exit 0) and turns parse errors into one usage
 * line on stderr with exit 2 instead of a stack trace. See docs/decisions/0011-cli-arguments.md for
 * why this over a CLI library.
 */

/** One flag: its parseArgs type plus what `--help` says about it. */
export interface FlagSpec {
  type: 'string' | 'boolean';
  multiple?: boolean;
  short?: string;
  /** Placeholder for the value in help, e.g. `FILE`. */
  value?: string;
  /** One line saying what the flag does and its default. */
  help: string;
}

/** Flags keyed by their long name (without `--`). */
export type Flags = Record<string, FlagSpec>;

/** A command's interface: what `--help` prints and what the parser accepts. */
export interface CommandSpec<F extends Flags = Flags> {
  /** The words after `gpu-broker`, e.g. `token` or `cordon`. */
  name: string;
  /** Usage lines, each after `gpu-broker `. */
  usage: string[];
  /** What the command does, a sentence or two. */
  summary: string;
  flags: F;
  /** Environment variables the command reads, with what each means. */
  env?: Record<string, string>;
  /** Example invocations, each after `gpu-broker `. */
  examples: string[];
  /** Subcommands (`token create`, …); each accepts `--help` too. */
  subcommands?: string[];
  /** Whether positional arguments are accepted. */
  positionals?: boolean;
}

/** The parsed values for a set of flags, typed from their specs. */
export type FlagValues<F extends Flags> = {
  [K in keyof F]?:
    | (F[K]['type'] extends 'boolean' ? boolean : F[K]['multiple'] extends true ? string[] : string)
    | undefined;
};

/** What a command gets after parsing. */
export interface ParsedArgs<F extends Flags> {
  values: FlagValues<F>;
  positionals: string[];
}

/** Declares a spec with its flag names kept as literal types. */
export function defineCommand<const F extends Flags>(spec: CommandSpec<F>): CommandSpec<F> {
  return spec;
}

/** The `--help` text of a command. */
export function helpText(spec: CommandSpec): string {
  const lines = spec.usage.map((u, i) => `${i === 0 ? 'usage: ' : '       '}gpu-broker ${u}`);
  lines.push('', spec.summary, '', 'flags:');
  const flagRows: Array<[string, string]> = Object.entries(spec.flags).map(([name, f]) => [
    `${f.short ? `-${f.short}, ` : ''}--${name}${f.value ? ` ${f.value}` : ''}${f.multiple ? ' (repeatable)' : ''}`,
    f.help,
  ]);
  flagRows.push(['-h, --help', 'print this help and exit']);
  lines.push(...columns(flagRows));
  if (spec.env && Object.keys(spec.env).length > 0) {
    lines.push('', 'environment:');
    lines.push(...columns(Object.entries(spec.env)));
  }
  lines.push('', spec.examples.length > 1 ? 'examples:' : 'example:');
  lines.push(...spec.examples.map((e) => `  gpu-broker ${e}`));
  return `${lines.join('\n')}\n`;
}

function columns(rows: Array<[string, string]>): string[] {
  const width = Math.max(...rows.map(([l]) => l.length)) + 2;
  return rows.map(([l, r]) => `  ${l.padEnd(width)}${r}`);
}

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
