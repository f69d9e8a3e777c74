import { readdirSync, readFileSync } from 'node:fs';
import type { ExecutionPlan } from '../../src/contracts/worker-protocol.js';

/**
 * Plans, chunks and process probes shared by the worker tests. `makePlan` is the only builder of an
 * `ExecutionPlan` in the tests (ADR 0020): the daemon harness and the local-store tests call it with their
 * own defaults, so a change to the plan's shape is made here once.
 */

/** What a test plan may set; everything else gets a small default. */
export interface PlanOptions {
  argv: string[];
  env?: Record<string, string>;
  outputs?: Array<{ path: string; required: boolean }>;
  timeLimit?: number;
  grace?: number;
  cleanupTimeout?: number;
  cards?: Array<{ index: number; uuid: string }>;
  /**
   * The execution id; the task and assignment ids are derived from it (`task-of-…`, `asg-…`), so the same
   * id always gives the same plan. Without it the ids are fresh (process id and a counter).
   */
  executionId?: string;
  /** The plan's lease epoch, default 1. */
  epoch?: number;
  network?: 'none' | 'host';
  /** The spec's named mounts (names the worker offers). */
  mounts?: string[];
  hiddenPaths?: string[];
  pins?: Array<{ path: string; sha256: string }>;
  /** Makes a `container` task running `argv` in this image. */
  image?: string;
  /** The plan's `image_digest` (a policy-listed image's required digest). */
  imageDigest?: string;
}

let counter = 0;

/** A plan for one execution: unique ids unless `executionId` is given. */
export function makePlan(o: PlanOptions): ExecutionPlan {
  counter += 1;
  const cards = o.cards ?? [{ index: 0, uuid: 'GPU-sim-0' }];
  const ids =
    o.executionId === undefined
      ? {
          task_id: `task-${process.pid}-${counter}`,
          execution_id: `exec-${process.pid}-${counter}`,
          assignment_id: `asg-${process.pid}-${counter}`,
        }
      : {
          task_id: `task-of-${o.executionId}`,
          execution_id: o.executionId,
          assignment_id: `asg-${o.executionId}`,
        };
  return {
    ...ids,
    lease_epoch: o.epoch ?? 1,
    cards,
    spec: {
      title: 't',
      objective: 'o',
      success_criteria: 's',
      cards: { count: cards.length },
      runtime: {
        ...(o.image === undefined
          ? { kind: 'process' as const }
          : { kind: 'container' as const, image: o.image }),
        argv: o.argv,
        ...(o.env === undefined ? {} : { env: o.env }),
      },
      outputs: o.outputs ?? [],
      time_limit_seconds: o.timeLimit ?? 20,
      ...(o.network === undefined ? {} : { network: o.network }),
      ...(o.mounts === undefined ? {} : { mounts: o.mounts }),
    },
    spec_digest: '0'.repeat(64),
    kill_grace_seconds: o.grace ?? 0.5,
    cleanup_timeout_seconds: o.cleanupTimeout ?? 5,
    ...(o.hiddenPaths === undefined ? {} : { hidden_paths: o.hiddenPaths }),
    ...(o.pins === undefined ? {} : { pins: o.pins }),
    ...(o.imageDigest === undefined ? {} : { image_digest: o.imageDigest }),
  };
}

/** One log chunk as the executor delivered it. */
export interface Chunk {
  stream: 'stdout' | 'stderr';
  offset: number;
  data: string;
}

/** argv that runs `script` with /bin/sh. */
export function sh(script: string): string[] {
  return ['/bin/sh', '-c', script];
}

/** The text of one stream. */
export function text(chunks: Chunk[], stream: 'stdout' | 'stderr'): string {
  return chunks
    .filter((c) => c.stream === stream)
    .map((c) => c.data)
    .join('');
}

/** Alive and not a zombie (an unreaped zombie holds no resources). */
export function isLive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const state = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
    return state !== 'Z' && state !== 'X';
  } catch {
    return false;
  }
}

/** Host pids of live processes whose command line contains `marker`. */
export function pidsWithMarker(marker: string): number[] {
  const out: number[] = [];
  for (const entry of readdirSync('/proc').filter((e) => /^[0-9]+$/.test(e))) {
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8');
      if (cmdline.includes(marker) && isLive(Number(entry)) && Number(entry) !== process.pid)
        out.push(Number(entry));
    } catch {
      // gone
    }
  }
  return out;
}
