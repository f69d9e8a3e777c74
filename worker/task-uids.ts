/**
 * A uid of its own for every running task (issue 9): a root worker hands each execution the lowest free
 * uid of a configured range (`--task-uids FIRST-LAST`, default DEFAULT_TASK_UIDS) and takes it back when
 * the execution has been cleaned up, so two running tasks never share a uid: neither can signal, ptrace
 * or read the other's files even outside their sandboxes. The gid is the same number.
 *
 * The default range sits far above the ranges `useradd` and /etc/subuid hand out (1000…, 100000…), so a
 * task uid never owns a real user's files.
 */

/** First and last uid a worker may give tasks. */
export interface UidRange {
  readonly first: number;
  readonly last: number;
}

/** The range used when `--task-uids` is not given. */
export const DEFAULT_TASK_UIDS: UidRange = { first: 2_000_000_000, last: 2_000_065_535 };

/** Parses `FIRST-LAST`; throws a clear error for anything else, root, or an empty range. */
export function parseUidRange(text: string): UidRange {
  const m = /^(\d+)-(\d+)$/.exec(text.trim());
  if (!m)
    throw new Error(`--task-uids ${JSON.stringify(text)}: expected FIRST-LAST, e.g. 2000000000-2000065535`);
  const first = Number(m[1]);
  const last = Number(m[2]);
  if (first < 1000)
    throw new Error('--task-uids must start at 1000 or above (system and login uids are below)');
  if (last < first) throw new Error('--task-uids: LAST must not be below FIRST');
  if (last > 4_294_967_294) throw new Error('--task-uids: LAST must be below 4294967295');
  return { first, last };
}

/** Hands out uids of a range, one per execution id. */
export class TaskUidPool {
  private readonly byExecution = new Map<string, number>();
  private readonly taken = new Set<number>();

  constructor(private readonly range: UidRange) {}

  /** The uid of `executionId`, taking the lowest free one on first call. Throws when the range is used up. */
  acquire(executionId: string): number {
    const have = this.byExecution.get(executionId);
    if (have !== undefined) return have;
    for (let uid = this.range.first; uid <= this.range.last; uid++) {
      if (this.taken.has(uid)) continue;
      this.taken.add(uid);
      this.byExecution.set(executionId, uid);
      return uid;
    }
    throw new Error(`all ${this.range.last - this.range.first + 1} task uids are in use`);
  }

  /**
   * Records that `executionId` already holds `uid` (a Slurm job a previous worker process started, whose
   * task still runs as that uid), so that no new execution is given it. False when the uid is outside
   * the range or held by another execution.
   */
  claim(executionId: string, uid: number): boolean {
    if (uid < this.range.first || uid > this.range.last) return false;
    const have = this.byExecution.get(executionId);
    if (have !== undefined) return have === uid;
    if (this.taken.has(uid)) return false;
    this.taken.add(uid);
    this.byExecution.set(executionId, uid);
    return true;
  }

  /** Gives `executionId`'s uid back; a no-op for an unknown id. */
  release(executionId: string): void {
    const uid = this.byExecution.get(executionId);
    if (uid === undefined) return;
    this.byExecution.delete(executionId);
    this.taken.delete(uid);
  }

  /** How many uids are held. */
  inUse(): number {
    return this.taken.size;
  }
}
