/**
 * The I/O a CLI command gets. Commands never touch `process` directly (only src/cli/main.ts does), so
 * tests can run them in-process and read what they printed.
 */
export interface CliIo {
  /** Writes to standard output (no newline added). */
  stdout: (text: string) => void;
  /** Writes to standard error (no newline added). */
  stderr: (text: string) => void;
  /** The environment the command runs under. */
  env: Readonly<Record<string, string | undefined>>;
  /** Resolves when the command should stop (SIGINT/SIGTERM); long-running commands await it. */
  stopSignal?: Promise<void>;
}

/** One subcommand: parses its own argv (after the subcommand name) and returns an exit code. */
export type CommandRunner = (argv: string[], io: CliIo) => Promise<number>;
