/**
 * The message of anything thrown, for a log line or a detail an operator reads: an Error's message, or
 * the thrown value as a string (a library may throw a string or a plain object). The one copy: the worker
 * and the CLI name it rather than writing the ternary again.
 */
export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
