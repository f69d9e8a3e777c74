import { readFileSync, readlinkSync } from 'node:fs';

/**
 * Reads of the kernel's own files (/proc, cgroupfs) for the per-task probes: cgroup.procs, limits read
 * back, OOM counters, a sandbox init's stat. Nothing here waits on a disk (the kernel fills them on
 * read, in microseconds), so a synchronous read costs the worker's event loop less than `fs/promises`,
 * whose `readFile` is four thread-pool round trips (open, fstat, read, close), each with its own JS
 * callback (issue 21: ~0.3 ms a read, a dozen reads a task). Throws as `readFileSync` does. Never used
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
