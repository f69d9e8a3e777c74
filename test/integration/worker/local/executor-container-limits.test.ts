import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ResolvedLimits } from '../../../../src/contracts/task-limits.js';
import type { ExecutionPlan } from '../../../../src/contracts/worker-protocol.js';
import { startExecution } from '../../../../worker/local/executor.js';
import type { ContainerTasks } from '../../../../worker/sandbox/container.js';
import { CONTAINER_LABEL } from '../../../../worker/sandbox/container.js';
import { makeSimDeviceNodes } from '../../../../worker/sandbox/devices.js';
import { probeTaskFs } from '../../../../worker/sandbox/task-fs.js';
import { TaskUidPool } from '../../../../worker/sandbox/task-uids.js';
import type { TestImage } from '../../../support/container-image.js';
import { testImage } from '../../../support/container-image.js';
import type { Chunk } from '../../../support/executor-plan.js';
import { makePlan, text } from '../../../support/executor-plan.js';

// A container task's limits (docs/performance.md "Noisy neighbours") with this machine's real podman and runc: the memory limit read
// from the kernel as OUT_OF_MEMORY naming it, the task dir's disk watch, scratch removed at the end —
// the same as a bwrap task's (executor-limits.test.ts), by the same code (sandbox/limits.ts).

const LIMITS: ResolvedLimits = {
  memory_mib: 64,
  pids: 64,
  cpu_weight: 100,
  tmp_mib: 8,
  shm_mib: 8,
  disk_mib: 16,
};
const FIRST_UID = 2_000_200_300;

let image: TestImage;
let dataDir: string;
let containers: ContainerTasks;

beforeAll(async () => {
  image = await testImage();
  dataDir = mkdtempSync(join('/var/tmp', 'gpu-broker-container-limits-'));
  const root = process.getuid?.() === 0;
  containers = {
    setup: image.setup,
    uids: root ? new TaskUidPool({ first: FIRST_UID, last: FIRST_UID + 99 }) : null,
    simNodes: await makeSimDeviceNodes(join(dataDir, 'devices'), 2, root),
  };
}, 60_000);
afterAll(() => {
  image?.cleanup();
  rmSync(dataDir, { recursive: true, force: true });
});

function start(script: string, timeLimit = 60) {
  const chunks: Chunk[] = [];
  const base = makePlan({ image: image.pinned, argv: ['sh', '-c', script], timeLimit, grace: 1 });
  const plan: ExecutionPlan = { ...base, limits: LIMITS };
  const rootDir = join(dataDir, 'executions');
  const handle = startExecution(plan, {
    rootDir,
    workerId: 'worker-1',
    provider: 'sim',
    onLog: (stream, offset, data) => chunks.push({ stream, offset, data }),
    cleanupPollMs: 50,
    containers,
  });
  return { plan, handle, chunks, execRoot: join(rootDir, plan.execution_id) };
}

function labelled(executionId: string): string {
  return execFileSync(
    image.setup.command,
    ['ps', '--all', '--filter', `label=${CONTAINER_LABEL}=${executionId}`, '--format', '{{.Names}}'],
    { env: { ...image.setup.env } },
  )
    .toString()
    .trim();
}

/** A shell loop that doubles a string for ever (busybox has no allocator of its own to call); it says so first, so it has a log. */
const HOG = 'echo hog; a=x; while :; do a="$a$a"; done';
/** 40 × 1 MiB into the task dir, then waits. */
const FILL_TASK_DIR =
  'a=x; i=0; while [ $i -lt 20 ]; do a="$a$a"; i=$((i+1)); done; j=0; while [ $j -lt 40 ]; do echo "$a"; j=$((j+1)); done > /task/scratch; echo filled; sleep 60';

describe('a container task on a task dir of its own file system (ADR 0043)', () => {
  it('attack: a file held open and unlinked counts: DISK_LIMIT, and the mount and image are gone after', async () => {
    if (process.getuid?.() !== 0) return;
    const tools = await probeTaskFs(dataDir, true);
    if (typeof tools === 'string') return;
    const saved = containers;
    containers = { ...containers, taskFs: tools };
    try {
      const { handle, execRoot } = start(
        'a=x; i=0; while [ $i -lt 20 ]; do a="$a$a"; i=$((i+1)); done; exec 3>/task/x; rm /task/x; j=0; while [ $j -lt 40 ]; do echo "$a" >&3; j=$((j+1)); done; echo held; sleep 60',
      );
      const result = await handle.done;
      expect(result.failure_reason).toBe('DISK_LIMIT');
      const detail = (await handle.exited).limits_detail?.join('\n') ?? '';
      expect(detail).toContain('over its disk limit of 16 MiB');
      expect(detail).toContain('a file system of its own');
      expect(existsSync(join(execRoot, 'task.img'))).toBe(false);
      expect(existsSync(join(execRoot, 'task'))).toBe(false);
    } finally {
      containers = saved;
    }
  });
});

describe('a container task over its limits', () => {
  it('a memory hog ends with OUT_OF_MEMORY naming the limit, not KILLED_BY_SIGNAL; nothing is left', async () => {
    const { plan, handle, execRoot } = start(HOG);
    const result = await handle.done;
    expect(result.failure_reason).toBe('OUT_OF_MEMORY');
    const detail = (await handle.exited).limits_detail?.join('\n') ?? '';
    expect(detail).toContain('memory limit of 64 MiB');
    expect(detail).toContain('limits enforced:');
    expect(result.cleaned).toBe(true);
    expect(labelled(plan.execution_id)).toBe('');
    // Scratch is gone; the worker's own logs stay.
    expect(existsSync(join(execRoot, 'task'))).toBe(false);
    expect(existsSync(join(execRoot, 'stdout.log'))).toBe(true);
  });

  it('filling the task dir past its disk limit ends it with DISK_LIMIT and removes the dir', async () => {
    const { plan, handle, execRoot } = start(FILL_TASK_DIR);
    const result = await handle.done;
    expect(result.failure_reason).toBe('DISK_LIMIT');
    expect((await handle.exited).limits_detail?.join('\n')).toContain('over its disk limit of 16 MiB');
    expect(result.cleaned).toBe(true);
    expect(labelled(plan.execution_id)).toBe('');
    expect(existsSync(join(execRoot, 'task'))).toBe(false);
  });

  it('a task within its limits succeeds, and its scratch is removed once its outputs are collected', async () => {
    const { handle, chunks, execRoot } = start('echo hello > /task/scratch; echo done');
    const result = await handle.done;
    expect(result.failure_reason).toBeNull();
    expect(text(chunks, 'stdout')).toContain('done');
    expect(existsSync(join(execRoot, 'task'))).toBe(false);
  });

  it('a task that kills itself with SIGKILL is KILLED_BY_SIGNAL, not OUT_OF_MEMORY (attack)', async () => {
    const { handle } = start('kill -9 $$');
    const result = await handle.done;
    expect(result.failure_reason).toBe('KILLED_BY_SIGNAL');
  });
});
