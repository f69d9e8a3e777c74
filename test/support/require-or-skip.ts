/**
 * The one policy for tests that need something of the machine (root, bubblewrap, podman, an IPv6 loopback,
 * a local Slurm): where it is missing they are skipped, and the reason is printed; under CI (`CI` set, as
 * `.ci/run` does) a missing need is an error instead, so CI can never pass by skipping what it should run.
 * Every environment-dependent skip in the tests goes through `requireOrSkip` (ADR 0020).
 */

/** Whether this run is CI: `CI` set to anything but '', '0' or 'false'. */
function isCi(env: NodeJS.ProcessEnv = process.env): boolean {
  const ci = env['CI'];
  return ci !== undefined && ci !== '' && ci !== '0' && ci !== 'false';
}

/** Whether the tests run as root (a root worker drops tasks to their own uids with setpriv). */
export const isRoot = process.getuid?.() === 0;

const reported = new Set<string>();

/**
 * Whether tests that need `what` can run here: `available`, for `describe.runIf`, `it.runIf` or an early
 * `ctx.skip()`. A skip is printed once per `what`; under CI an unavailable `what` throws instead, naming it
 * and `hint` (how to provide it).
 */
export function requireOrSkip(what: string, available: boolean, hint?: string): boolean {
  if (available) return true;
  const need = `${what}${hint === undefined ? '' : ` (${hint})`}`;
  if (isCi()) throw new Error(`these tests need ${need}; under CI they may not be skipped`);
  if (!reported.has(need)) {
    reported.add(need);
    console.warn(`skipped: tests that need ${need}`);
  }
  return false;
}
