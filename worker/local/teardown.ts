import type { Clock } from '../../src/platform/clock.js';
import { errorMessage } from '../../src/platform/error-message.js';
import type { LogPump } from '../task-io/logs.js';
import type { TaskBox } from './box.js';
import { nameMembers } from './process-group.js';

/**
 * Steps 4 and 6 of a local execution (executor.ts): what the task left behind is ended, the log pipes
 * drained, and the cleanup receipt polled for.
 */

/** After the group is dead the pipes close at once; only a process that escaped the group delays them. */
const PIPE_DRAIN_MS = 2000;

/**
 * The n-th wait (ms, n from 0) of a poll for processes to be gone: 2, 4, 8, 16… up to `cap`. A sandbox's
 * init is often still exiting when bwrap itself has exited (it reports the task's status before its
 * init is reaped) and is gone a few ms later (docs/performance.md "Noisy neighbours"): a first wait of the full interval (50 ms here,
 * 200 ms for the receipt) was most of a short task's time on its card.
 */
export function pollDelayMs(n: number, cap: number): number {
  return Math.max(1, Math.min(cap, 2 ** (n + 1)));
}

/** Step 4: SIGTERM to what the task left in its box, up to `graceMs` for it to go, then SIGKILL. */
export async function terminateLeftovers(box: TaskBox, graceMs: number, clock: Clock): Promise<void> {
  if ((await box.live()).length === 0) return;
  box.terminate();
  const deadline = clock.now() + graceMs;
  for (let n = 0; clock.now() < deadline; n++) {
    await sleep(Math.min(pollDelayMs(n, 50), Math.max(1, deadline - clock.now())));
    if ((await box.live()).length === 0) return;
  }
  box.kill();
}

/** Waits for the log pumps to finish, aborting those a process outside the group still feeds. */
export async function drainPumps(pumps: LogPump[]): Promise<string[]> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<'timeout'>((r) => {
    timer = setTimeout(() => r('timeout'), PIPE_DRAIN_MS);
  });
  const all = Promise.all(pumps.map((p) => p.finished));
  const first = await Promise.race([all, timeout]);
  clearTimeout(timer);
  const errors: string[] = [];
  if (first === 'timeout') {
    errors.push('a process outside the task group kept the output pipes open; log capture stopped');
    for (const p of pumps) p.abort();
  }
  for (const summary of await all) errors.push(...summary.errors);
  return errors;
}

/** How step 6 polls. */
export interface CleanupPoll {
  /** Says whether the leased cards show no process of this execution any more; absent: not checked. */
  readonly checkCardsClean?: (() => Promise<{ clean: boolean; detail?: string }>) | undefined;
  readonly pollMs: number;
  /** The plan's `cleanup_timeout_seconds`, counted from now. */
  readonly timeoutSeconds: number;
  readonly clock: Clock;
}

/** Step 6: polls until the box has no live process and the cards are clean, or the timeout passes. */
export async function awaitCleanup(
  box: TaskBox,
  poll: CleanupPoll,
): Promise<{ cleaned: boolean; cleanup_detail: string }> {
  const { clock, checkCardsClean } = poll;
  const deadline = clock.now() + poll.timeoutSeconds * 1000;
  for (let n = 0; ; n++) {
    const problems: string[] = [];
    const members = await box.live();
    if (members.length > 0) {
      const list = (await nameMembers(members)).map((m) => `${m.pid} (${m.name})`).join(', ');
      problems.push(`the task (${box.kind}) still has live processes: ${list}`);
    }
    if (checkCardsClean) {
      try {
        const cards = await checkCardsClean();
        if (!cards.clean) problems.push(`cards not clean: ${cards.detail ?? 'no detail'}`);
      } catch (err) {
        problems.push(`card check failed: ${errorMessage(err)}`);
      }
    }
    if (problems.length === 0) {
      const cards = checkCardsClean ? 'and the cards are clean' : '(no card check)';
      return { cleaned: true, cleanup_detail: `every process of the task (${box.kind}) is gone ${cards}` };
    }
    if (clock.now() >= deadline) {
      return {
        cleaned: false,
        cleanup_detail: `not clean after ${poll.timeoutSeconds}s: ${problems.join('; ')}`,
      };
    }
    await sleep(Math.min(pollDelayMs(n, poll.pollMs), Math.max(1, deadline - clock.now())));
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
