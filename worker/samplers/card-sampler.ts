import type { CardSample, Provider } from '../../src/contracts/sample.js';

/**
 * Reads every card on this host once. One implementation per provider (nvidia-smi, hy-smi, simulated).
 * `sample()` either returns the whole host or throws a `SamplerError`: a partial answer that silently
 * dropped processes or cards would look like free cards, so the caller reports the error as
 * `sampler_error` and the master marks the cards UNKNOWN.
 */
export interface CardSampler {
  /** Which provider this sampler reads; `sim` cards carry `simulated: true`. */
  readonly provider: Provider;
  /** One sample of all cards, ordered by index. Throws `SamplerError` when the tool cannot be read. */
  sample(): Promise<CardSample[]>;
}

/**
 * Why a sample failed:
 * - `TOOL_NOT_FOUND`: the executable does not exist or is not executable.
 * - `TOOL_FAILED`: it ran and exited non-zero (or was killed by a signal).
 * - `TOOL_TIMED_OUT`: it ran past the timeout and was killed.
 * - `OUTPUT_TOO_LARGE`: it printed more than the output cap.
 * - `PARSE_FAILED`: it exited 0 but printed something we cannot read safely.
 */
export type SamplerErrorCode =
  | 'TOOL_NOT_FOUND'
  | 'TOOL_FAILED'
  | 'TOOL_TIMED_OUT'
  | 'OUTPUT_TOO_LARGE'
  | 'PARSE_FAILED';

/** Details kept on a `SamplerError` for logs and tests. */
export interface SamplerErrorDetails {
  /** The executable (path as run) or the sampler name. */
  tool: string;
  /** Exit code when the tool exited; null when killed or never started. */
  exitCode?: number | null;
  /** Signal that ended the tool, if any. */
  signal?: string | null;
  /** The start of what the tool printed, to make the message actionable. */
  output?: string;
}

/** A typed sampler failure; its message is what the worker sends as `sampler_error`. */
export class SamplerError extends Error {
  readonly code: SamplerErrorCode;
  readonly details: SamplerErrorDetails;

  constructor(code: SamplerErrorCode, message: string, details: SamplerErrorDetails) {
    super(message);
    this.name = 'SamplerError';
    this.code = code;
    this.details = details;
  }
}
