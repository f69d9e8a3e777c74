import {
  closeSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  statSync,
  unlinkSync,
  writeSync,
} from 'node:fs';
import { dirname } from 'node:path';

/**
 * A uid of its own for every task (docs/security.md "The task sandbox"), never handed out twice (docs/security.md "Code the reviewer did not read"). A root worker gives each
 * execution the next uid of a configured range (`--task-uids FIRST-LAST`, default DEFAULT_TASK_UIDS), so
 * two tasks never share a uid: neither can signal, ptrace or read the other's files even outside their
 * sandboxes. The gid is the same number.
 *
 * Why never reuse rather than reuse once free: state the kernel keeps per uid outlives the task's
 * processes (the user and user-session keyrings, which since Linux 5.3 stay registered until the uid's
 * namespace goes; POSIX message queues and shared memory counted against the uid), and so do files a
 * task leaves owned by its uid in a writable data mount (`--mount NAME=PATH:rw`) or anywhere else the
 * worker does not clean. A later task running as the same uid, perhaps another owner's, would inherit all
 * of that. Cleaning every such place cannot be proven complete; not reusing can. A restart must not start
 * over, so uids are reserved in blocks: `stateFile` holds the end of the reserved block (the first uid not
 * reserved), fsync'd before any uid of the block is used, and a restart begins there, skipping what the
 * last block left unused (one fsync per block instead of one per task, which cost ~7 ms of the
 * worker's event loop per task). The block is UID_BLOCK for a wide range and shrinks to 1 for a narrow one
 * (range size / 1024), so a small `--task-uids` range loses at most a few uids per restart. The default
 * range holds two thousand million uids, so it does not run out in practice, and a narrow range that does
 * says so instead of reusing.
 *
 * The default range sits far above the ranges `useradd` and /etc/subuid hand out (1000…, 100000…), so a
 * task uid never owns a real user's files.
 *
 * Host-wide (docs/security.md "The task sandbox"): two root workers on one host (a local and a Slurm worker, or two local
 * ones) each with its own data dir used to start at the same uid, so two owners' tasks ran as one uid at
 * once. Every reservation now also goes through one counter for the whole host (`hostRegistry`, default
 * HOST_TASK_UIDS under /var/lib): under a lock file it takes the block from the larger of its own next
 * uid and the host's, and raises the host's past it. Blocks of different workers are then disjoint
 * whatever their ranges (overlapping ones included), and no worker ever starts a range over from its first
 * uid. A range wholly below what the host has handed out is used up at once and says so. The lock is a
 * file made with O_EXCL holding the holder's pid; a holder that is gone (a crash) leaves it stale, and the
 * next reservation takes it over.
 */

/** First and last uid a worker may give tasks. */
export interface UidRange {
  readonly first: number;
  readonly last: number;
}

/** The file in the worker's data dir that holds the next never-used task uid. */
export const TASK_UIDS_STATE = 'task-uids.next';

/** The host-wide counter every root worker of this host reserves its blocks through (see the module comment). */
export const HOST_TASK_UIDS = '/var/lib/gpu-broker/task-uids.next';

/** How long a reservation waits for another worker's lock before it gives up. */
const HOST_LOCK_WAIT_MS = 5000;
/** How long an empty lock file (its writer died before writing its pid) is waited for. */
const EMPTY_LOCK_STALE_MS = 2000;
/** One wait between looks at a held lock. */
const NAP_MS = 5;

/** How many uids one write of the state file reserves at most (see the module comment). */
export const UID_BLOCK = 64;

/** The range used when `--task-uids` is not given. */
export const DEFAULT_TASK_UIDS: UidRange = { first: 2_000_000_000, last: 3_999_999_999 };

/** Parses `FIRST-LAST`; throws a clear error for anything else, root, or an empty range. */
export function parseUidRange(text: string): UidRange {
  const m = /^(\d+)-(\d+)$/.exec(text.trim());
  if (!m)
    throw new Error(`--task-uids ${JSON.stringify(text)}: expected FIRST-LAST, e.g. 2000000000-3999999999`);
  const first = Number(m[1]);
  const last = Number(m[2]);
  if (first < 1000)
    throw new Error('--task-uids must start at 1000 or above (system and login uids are below)');
  if (last < first) throw new Error('--task-uids: LAST must not be below FIRST');
  if (last > 4_294_967_294) throw new Error('--task-uids: LAST must be below 4294967295');
  return { first, last };
}

/** Hands out uids of a range, one per execution id, each at most once (see the module comment). */
export class TaskUidPool {
  private readonly byExecution = new Map<string, number>();
  private readonly taken = new Set<number>();
  /** The next uid never handed out. */
  private next: number;
  /** The first uid not covered by the reservation persisted in `stateFile` (no file: unbounded). */
  private reservedUpTo: number;
  /** How many uids one reservation covers: UID_BLOCK, less for a narrow range. */
  private readonly block: number;

  /**
   * `stateFile`: where the next never-used uid is kept across restarts (the worker's data dir); without
   * one (tests) uids are still never reused within this process. `hostRegistry`: the host-wide counter
   * (HOST_TASK_UIDS for a real worker); without one, this pool coordinates with no other.
   */
  constructor(
    private readonly range: UidRange,
    private readonly stateFile?: string,
    private readonly hostRegistry?: string,
  ) {
    this.next = Math.max(range.first, stateFile === undefined ? range.first : readNext(stateFile));
    this.reservedUpTo = this.next;
    this.block = Math.max(1, Math.min(UID_BLOCK, Math.floor((range.last - range.first + 1) / 1024)));
  }

  /** The uid of `executionId`, taking the next never-used one on first call. Throws when the range is used up. */
  acquire(executionId: string): number {
    const have = this.byExecution.get(executionId);
    if (have !== undefined) return have;
    while (this.taken.has(this.next)) this.next++;
    // Reserved (written and fsync'd) before the uid is used: a crash wastes the rest of the block, never
    // hands a uid out twice. The host's counter may move the block further up.
    if (this.next >= this.reservedUpTo) this.reserve();
    while (this.taken.has(this.next)) this.next++;
    const uid = this.next;
    if (uid > this.range.last || uid >= this.reservedUpTo) throw this.usedUp();
    this.next = uid + 1;
    this.taken.add(uid);
    this.byExecution.set(executionId, uid);
    return uid;
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
    if (uid >= this.next) {
      this.next = uid + 1;
      // Past what this worker reserved: reserve from here on (the uid itself was reserved when it was
      // first handed out, by this worker's earlier process, so the host's counter is already past it).
      if (this.next > this.reservedUpTo) this.reserve();
    }
    return true;
  }

  /**
   * Persists a reservation of the next block: from `next`, or from the host's counter where it is
   * higher (then `next` moves up to it), to at most the range's end.
   */
  private reserve(): void {
    if (this.hostRegistry === undefined) {
      const upTo = Math.min(this.range.last + 1, this.next + this.block);
      if (this.stateFile !== undefined) writeNext(this.stateFile, upTo);
      this.reservedUpTo = this.stateFile === undefined ? Number.POSITIVE_INFINITY : upTo;
      return;
    }
    const registry = this.hostRegistry;
    withHostLock(registry, () => {
      const hostNext = readNext(registry);
      const start = Math.max(this.next, hostNext);
      if (start > this.range.last) throw this.usedUp(hostNext);
      const upTo = Math.min(this.range.last + 1, start + this.block);
      writeNext(registry, Math.max(hostNext, upTo));
      if (this.stateFile !== undefined) writeNext(this.stateFile, upTo);
      this.next = start;
      this.reservedUpTo = upTo;
    });
  }

  /** The error of a range with no unused uid left (on this host, when `hostNext` says how far it went). */
  private usedUp(hostNext?: number): Error {
    const host =
      hostNext !== undefined && hostNext > this.range.first
        ? `; this host's workers have handed out uids up to ${hostNext - 1}`
        : '';
    return new Error(
      `every task uid of ${this.range.first}-${this.range.last} has been used once${host}, and uids are never reused (per-uid kernel state and files can outlive a task): give the worker a --task-uids range above ${Math.max(this.range.last, (hostNext ?? 0) - 1)}`,
    );
  }

  /** Forgets `executionId`'s uid once nothing of it runs; the uid itself is never handed out again. */
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

/** The persisted next uid; the range's start when the file is missing (a fresh data dir). */
function readNext(file: string): number {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 0;
    throw err;
  }
  const n = Number(text.trim());
  // A damaged file must not send allocation back to uids already used: refuse to guess.
  if (!/^\d+$/.test(text.trim()) || !Number.isSafeInteger(n))
    throw new Error(
      `${file} does not hold a uid (${JSON.stringify(text.slice(0, 40))}): restore it or give a new --task-uids range`,
    );
  return n;
}

/**
 * Runs `work` holding `${registry}.lock` (O_EXCL, holding our pid). A lock whose holder is gone is
 * stale and taken over; one held longer than HOST_LOCK_WAIT_MS by a live process is an error.
 */
export function withHostLock<T>(registry: string, work: () => T): T {
  const dir = dirname(registry);
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  // Whoever else could write there could set the counter back (uids handed out twice) or hold the lock.
  const st = statSync(dir);
  if (st.uid !== (process.getuid?.() ?? st.uid) || (st.mode & 0o022) !== 0)
    throw new Error(
      `${dir} must be owned by this worker's user and writable by nobody else (it holds the host's task uid counter)`,
    );
  const lock = `${registry}.lock`;
  // Counted in naps of NAP_MS, not read from a clock: a worker reads time only from its injected Clock,
  // and this bound need not be exact.
  const nap = new Int32Array(new SharedArrayBuffer(4));
  let naps = 0;
  let emptyNaps = 0;
  for (;;) {
    let fd: number;
    try {
      fd = openSync(lock, 'wx', 0o600);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const holder = lockHolder(lock);
      emptyNaps = holder === 'empty' ? emptyNaps + 1 : 0;
      // Gone, or empty for long: its writer died between making the file and writing its pid.
      if (holder === 'gone' || emptyNaps * NAP_MS > EMPTY_LOCK_STALE_MS) {
        try {
          unlinkSync(lock);
        } catch {
          // Another worker took it over first.
        }
        continue;
      }
      if (++naps * NAP_MS > HOST_LOCK_WAIT_MS)
        throw new Error(
          `${lock} is held by another worker for over ${HOST_LOCK_WAIT_MS} ms; remove it if no worker runs`,
        );
      Atomics.wait(nap, 0, 0, NAP_MS);
      continue;
    }
    try {
      writeSync(fd, `${process.pid}\n`);
    } finally {
      closeSync(fd);
    }
    try {
      return work();
    } finally {
      unlinkSync(lock);
    }
  }
}

/** Who holds a lock file: a live process, one that is gone (a crash), or nobody yet (empty). */
function lockHolder(lock: string): 'alive' | 'gone' | 'empty' {
  let pid: number;
  try {
    pid = Number(readFileSync(lock, 'utf8').trim());
  } catch {
    return 'alive'; // removed meanwhile: look again
  }
  if (!Number.isSafeInteger(pid) || pid <= 0) return 'empty';
  try {
    process.kill(pid, 0);
    return 'alive';
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ESRCH' ? 'gone' : 'alive';
  }
}

/** Replaces the state file atomically and durably (write, fsync, rename). */
function writeNext(file: string, next: number): void {
  const tmp = `${file}.tmp.${process.pid}`;
  const fd = openSync(tmp, 'w', 0o600);
  try {
    writeSync(fd, `${next}\n`);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, file);
}
