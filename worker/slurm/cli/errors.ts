/** Errors of the Slurm driver. */

/**
 * A Slurm command failed: exited non-zero, was killed by the driver's timeout, could not be started
 * (missing binary), or printed something the driver cannot read. `stderr` is the command's own text.
 */
export class SlurmCommandError extends Error {
  constructor(
    /** The program and its arguments, as run (no shell). */
    readonly argv: readonly string[],
    /** Exit code; null when killed or never started. */
    readonly exitCode: number | null,
    readonly stderr: string,
    /** Why: 'exit' (non-zero), 'timeout', 'spawn' (ENOENT…), 'output' (unreadable output). */
    readonly kind: 'exit' | 'timeout' | 'spawn' | 'output',
    detail?: string,
  ) {
    super(
      `${argv[0]} failed (${kind}${exitCode !== null ? ` ${exitCode}` : ''})${detail ? `: ${detail}` : ''}${
        stderr.trim() ? `: ${stderr.trim().slice(0, 500)}` : ''
      }`,
    );
    this.name = 'SlurmCommandError';
  }
}

/** A request the driver refuses before running anything (bad name, negative count, hostile extra arg…). */
export class SlurmRequestError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SlurmRequestError';
  }
}
