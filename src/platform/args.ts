/**
 * The declarative description of a command — usage, flags, environment, examples — and the `--help`
 * text made from it. Every `gpu-broker` command (src/cli/*-command-specs.ts) and the stdio bridge
 * (client-kit/stdio-bridge-spec.ts) is described this way; the parser that reads argv against a spec is
 * src/cli/common/args.ts. See docs/decisions/0011-cli-arguments.md.
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
