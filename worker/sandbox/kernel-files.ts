import { readFileSync, readlinkSync, writeFileSync } from 'node:fs';

/**
 * Reads of the kernel's own files (/proc, cgroupfs) for the per-task probes: cgroup.procs, limits read
 * back, OOM counters, a sandbox init's stat. Nothing here waits on a disk (the kernel fills them on
 * read, in microseconds), so a synchronous read costs the worker's event loop less than `fs/promises`,
 * whose `readFile` is four thread-pool round trips (open, fstat, read, close), each with its own JS
 * callback (~0.3 ms a read, a dozen reads a task). Throws as `readFileSync` does. Never used
 * for a file on a real filesystem, and never for writes (moving a process between v1 cgroups may wait
 * in the kernel).
 */
export function readKernelFile(path: string): string {
  return readFileSync(path, 'utf8');
}

/** A kernel symlink (`/proc/PID/ns/pid`); see readKernelFile. */
export function readKernelLink(path: string): string {
  return readlinkSync(path);
}

/**
 * Writes a control file of a cgroup no process is in yet (its limits, right after it is made). Like the
 * reads above it waits on no disk: through `fs/promises` it is three thread-pool round trips (open, write,
 * close). Making and removing a cgroup stay asynchronous (measured: a v1 mkdir of three controllers holds
 * the calling thread ~1 ms), and so does moving a process in (`cgroup.procs`: a v1 migration may wait for
 * an RCU grace period). Throws as writeFileSync.
 */
export function writeKernelFile(path: string, value: string): void {
  writeFileSync(path, value);
}
