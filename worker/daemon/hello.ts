import { readFileSync, statfsSync } from 'node:fs';
import { availableParallelism, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { MAX_LIMIT_MIB } from '../../src/contracts/task-limits.js';
import type { WorkerMessage } from '../../src/contracts/worker-protocol.js';
import { PROTOCOL_VERSION } from '../../src/contracts/worker-protocol.js';
import { packageRoot } from '../../src/platform/package-root.js';
import { below, parseMountinfo, parseSelfCgroup } from '../sandbox/mountinfo.js';
import type { ExecutionRecord } from '../store/local-store.js';
import type { DataMount } from '../task-io/mounts.js';

/**
 * The worker's `hello`, sent first on every connection (docs/worker-protocol.md): who it is, its cards,
 * what it knows of its executions, its marks and epochs (fencing), and what it can run.
 */

/** The hello message. */
export type HelloMessage = Extract<WorkerMessage, { type: 'hello' }>;

/** What one hello says, read from the worker's options, its sampler and its store just before sending. */
export interface HelloFacts {
  readonly workerId: string;
  readonly bootId: string;
  readonly version: string;
  readonly hostname: string;
  readonly provider: HelloMessage['provider'];
  readonly cards: HelloMessage['cards'];
  /** store.listKnownExecutions(HELLO_MAX_EXECUTIONS): every unfinished one first, then recent finished ones. */
  readonly executions: readonly ExecutionRecord[];
  readonly masterMarks: HelloMessage['master_marks'];
  readonly cardEpochs: HelloMessage['card_epochs'];
  readonly isolation: HelloMessage['isolation'];
  readonly containerEngine: HelloMessage['container_engine'];
  readonly mounts: readonly DataMount[];
  readonly backend: HelloMessage['backend'];
  /** A Slurm worker's pool (its sampler's latest view); null on a local worker. */
  readonly slurm: HelloMessage['slurm'];
  /** The syscall filter its process tasks run under; null: none. */
  readonly seccomp: HelloMessage['seccomp'];
  /** Its host's RAM, CPUs and data-dir disk (hostResources); null: not known (a Slurm pool). */
  readonly host: HelloMessage['host'];
}

/** The hello for `facts`; pure. */
export function buildHello(facts: HelloFacts): HelloMessage {
  return {
    type: 'hello',
    protocol_version: PROTOCOL_VERSION,
    worker_id: facts.workerId,
    boot_id: facts.bootId,
    version: facts.version,
    hostname: facts.hostname.slice(0, 255),
    provider: facts.provider,
    cards: facts.cards,
    executions: facts.executions.map((e) => ({
      execution_id: e.execution_id,
      task_id: e.task_id,
      lease_epoch: e.lease_epoch,
      phase: e.phase,
      cards: e.plan.cards.map((c) => c.index),
    })),
    master_marks: facts.masterMarks,
    card_epochs: facts.cardEpochs,
    isolation: facts.isolation,
    container_engine: facts.containerEngine,
    mounts: facts.mounts.map((m) => ({ name: m.name, read_only: m.read_only })),
    backend: facts.backend,
    slurm: facts.slurm,
    seccomp: facts.seccomp,
    host: facts.host,
    // worker/executions/manager.ts starts nothing before the master acknowledged its acceptance.
    starts_after_ack: true,
  };
}

/**
 * This host's RAM, CPUs and the room free on the file system holding `dataDir` when the worker starts
 * (docs/security.md "The task sandbox"), each within the contract's bounds; null when the file system cannot be read. The
 * master derives each task's memory and disk from them (src/domain/policy/task-limits.ts `hostAllowance`) and
 * never promises the tasks of this worker more than that together (scheduling/pool.ts). Free room, not
 * the file system's size: each task dir's image takes its room when it is made (sandbox/task-fs.ts), and
 * what else the file system holds (the system, the master's store) is not the tasks'.
 */
export function hostResources(dataDir: string): HelloMessage['host'] {
  const MIB = 1024 * 1024;
  const cap = (v: number) => Math.min(MAX_LIMIT_MIB, Math.max(0, Math.floor(v)));
  try {
    const fs = statfsSync(dataDir);
    // The worker's own cgroup may hold less than the machine (a systemd MemoryMax=, a container): its
    // tasks' cgroups are below it, so that is all they can have together.
    const memory = Math.min(totalmem(), cgroupMemoryLimit() ?? Number.POSITIVE_INFINITY);
    return {
      memory_mib: Math.max(1, cap(memory / MIB)),
      cpus: Math.max(1, Math.min(65536, availableParallelism())),
      disk_mib: cap((fs.bavail * fs.bsize) / MIB),
    };
  } catch {
    return null;
  }
}

/**
 * The tightest memory limit on this process's cgroup and its ancestors, in bytes (v2 `memory.max`, v1
 * `memory.limit_in_bytes`), or null when there is none (or it cannot be read).
 */
export function cgroupMemoryLimit(
  mountinfo: string = readOr('/proc/self/mountinfo'),
  selfCgroup: string = readOr('/proc/self/cgroup'),
  read: (path: string) => string | null = (path) => {
    try {
      return readFileSync(path, 'utf8');
    } catch {
      return null;
    }
  },
): number | null {
  const mounts = parseMountinfo(mountinfo);
  const paths = parseSelfCgroup(selfCgroup);
  const v1 = mounts.find((m) => m.fstype === 'cgroup' && m.superOptions.split(',').includes('memory'));
  const v2 = mounts.find((m) => m.fstype === 'cgroup2');
  const where =
    v1 !== undefined && paths.has('memory')
      ? { mount: v1, path: paths.get('memory')!, file: 'memory.limit_in_bytes' }
      : v2 !== undefined && paths.has('')
        ? { mount: v2, path: paths.get('')!, file: 'memory.max' }
        : null;
  if (where === null) return null;
  let best: number | null = null;
  // From the process's own cgroup up to the hierarchy's root: the smallest limit binds.
  for (let dir = below(where.mount, where.path); ; dir = dirname(dir)) {
    const text = read(join(dir, where.file))?.trim();
    const value = text === undefined || text === 'max' ? Number.NaN : Number(text);
    // v1 writes "no limit" as a page-rounded 2^63 - 1.
    if (Number.isFinite(value) && value > 0 && value < 2 ** 60)
      best = best === null ? value : Math.min(best, value);
    if (dir === where.mount.point || dir === '/' || !dir.startsWith(where.mount.point)) break;
  }
  return best;
}

function readOr(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}

let cachedVersion: string | undefined;

/** package.json's version (at most 64 characters), read once; `unknown` when it cannot be read. */
export function packageVersion(): string {
  if (cachedVersion === undefined) {
    try {
      const pkg = JSON.parse(readFileSync(join(packageRoot(), 'package.json'), 'utf8')) as {
        version?: unknown;
      };
      cachedVersion = typeof pkg.version === 'string' ? pkg.version.slice(0, 64) : 'unknown';
    } catch {
      cachedVersion = 'unknown';
    }
  }
  return cachedVersion;
}
