import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ResolvedLimits } from '../../../../src/contracts/task-limits.js';
import type { ExecutionPlan } from '../../../../src/contracts/worker-protocol.js';
import { startExecution } from '../../../../worker/local/executor.js';
import { probeBwrap } from '../../../../worker/sandbox/bwrap.js';
import { type CgroupHierarchy, probeCgroups } from '../../../../worker/sandbox/cgroups.js';
import type { SandboxSetup } from '../../../../worker/sandbox/setup.js';
import {
  mountTaskFs,
  probeTaskFs,
  type TaskFsTools,
  unmountStale,
} from '../../../../worker/sandbox/task-fs.js';
import type { Chunk } from '../../../support/executor-plan.js';
import { makePlan, text } from '../../../support/executor-plan.js';
import { bwrapSetupFor } from '../../../support/local-sandbox.js';
import { isRoot, requireOrSkip } from '../../../support/require-or-skip.js';
import { SANDBOX_ENGINES } from '../../../support/sandbox-engines.js';

/**
 * ADR 0043, attacked again (a hostile task, a second tenant): what the task dir's own file system
 * (worker/sandbox/task-fs.ts) brings with it.
 *
 *  - A worker that restarts sweeps the file systems a killed process left (`unmountStale`) once recovery
 *    has stopped the previous process's executions; meanwhile it is connected and starts new tasks. The
 *    sweep must leave a running execution's file system alone: unmounted under it, the task's writes
 *    and outputs go to a detached file system, the watch reads the data dir's file system instead and
 *    ends an innocent task DISK_LIMIT.
 *  - Each task's file system is a loop device whose backing file is `<executions>/<id>/task.img`: the
 *    host's /sys shows every loop device's backing file (0444), so without a mask every task would read
 *    every other task's execution id there, as it could through /sys/fs/cgroup before item 7. And the
 *    sandbox binds the host's /var recursively: with the data dir below it (/var/lib/gpu-broker-worker,
 *    as docs/operations.md has it; /var/tmp here), every other task's `<executions>/<id>/task` mount
 *    would be listed in the task's own /proc/self/mountinfo (under the hidden data dir, unreachable, but
 *    named).
 */

const probe = await probeBwrap({ root: isRoot });
const cgroups: CgroupHierarchy | null = isRoot ? await probeCgroups({ root: true }) : null;
let tools: TaskFsTools | string = 'not probed';
let dataDir = '';
if (isRoot) {
  dataDir = mkdtempSync(join('/var/tmp', 'gpu-broker-task-fs-attacks-'));
  tools = await probeTaskFs(dataDir, true);
}
const ready = requireOrSkip(
  'bubblewrap, root, cgroups and per-task file systems (mkfs.ext4, loop devices)',
  probe.ok && probe.bwrap !== null && probe.env !== null && cgroups !== null && typeof tools !== 'string',
  `${probe.detail}; task fs: ${typeof tools === 'string' ? tools : 'ok'}`,
);

const LIMITS: ResolvedLimits = {
  memory_mib: 256,
  pids: 64,
  cpu_weight: 100,
  tmp_mib: 8,
  shm_mib: 4,
  disk_mib: 16,
};
let rootDir: string;
let sandbox: Extract<SandboxSetup, { kind: 'bwrap' }>;

beforeAll(async () => {
  if (!ready || probe.bwrap === null || probe.env === null || typeof tools === 'string') return;
  rootDir = join(dataDir, 'executions');
  sandbox = {
    ...(await bwrapSetupFor(probe, dataDir, { uids: { first: 2_000_520_000, last: 2_000_520_099 } })),
    cgroups,
    taskFs: tools,
  };
});
afterAll(() => {
  if (dataDir !== '') rmSync(dataDir, { recursive: true, force: true });
});

function start(native: string | null, script: string, outputs?: Array<{ path: string; required: boolean }>) {
  const chunks: Chunk[] = [];
  const base = makePlan({ argv: ['/usr/bin/python3', '-c', script], ...(outputs ? { outputs } : {}) });
  const plan: ExecutionPlan = { ...base, spec: { ...base.spec, time_limit_seconds: 30 }, limits: LIMITS };
  const handle = startExecution(plan, {
    rootDir,
    workerId: 'worker-task-fs-attacks',
    provider: 'sim',
    onLog: (stream, offset, data) => chunks.push({ stream, offset, data }),
    cleanupPollMs: 20,
    sandbox: { ...sandbox, native },
  });
  return { handle, chunks, plan, execRoot: join(rootDir, plan.execution_id) };
}

/** Waits (at most 15 s) until the task printed `marker`. */
async function printed(chunks: Chunk[], marker: string): Promise<void> {
  const until = Date.now() + 15_000;
  while (!text(chunks, 'stdout').includes(marker)) {
    if (Date.now() > until) throw new Error(`the task never printed ${marker}: ${text(chunks, 'stderr')}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Mount points below `dir` in this process's mount table. */
function mountsBelow(dir: string): string[] {
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4] ?? '')
    .filter((p) => p.startsWith(`${dir}/`));
}

describe.runIf(ready)('the sweep after a restart, while new tasks run', () => {
  it("attack: unmountStale leaves a running execution's file system mounted; the task ends well, with its output", async () => {
    if (typeof tools === 'string') return;
    const { handle, chunks, plan, execRoot } = start(
      null,
      "import time; print('up', flush=True); time.sleep(3); open('/task/out/r.txt','w').write('ok')",
      [{ path: 'r.txt', required: true }],
    );
    await printed(chunks, 'up');
    expect(mountsBelow(execRoot)).toContain(join(execRoot, 'task'));
    // What the daemon's sweep does once recovery is over (daemon/executors.ts sweepAfterCrash): this
    // execution is running, so it is not stale.
    const swept = await unmountStale(tools, rootDir, {
      known: () => true,
      running: () => new Set([plan.execution_id]),
    });
    expect(swept).toEqual([]);
    expect(mountsBelow(execRoot)).toContain(join(execRoot, 'task'));
    const result = await handle.done;
    expect(result.failure_reason, text(chunks, 'stderr')).toBeNull();
    expect(result.outputs.map((o) => o.path)).toEqual(['r.txt']);
  });
});

describe.runIf(ready)('the sweep after a crash, on a data dir named through a link', () => {
  it("attack: unmountStale finds the task file systems a killed worker left though mountinfo names the link's target", async () => {
    if (typeof tools === 'string') return;
    const real = join(dataDir, 'real-data');
    const execRoot = join(real, 'executions', 'exec-crashed');
    mkdirSync(join(execRoot, 'task'), { recursive: true });
    symlinkSync(real, join(dataDir, 'data-link'));
    const fs = await mountTaskFs(tools, {
      execRoot,
      taskDir: join(execRoot, 'task'),
      diskMib: 4,
      owner: null,
    });
    expect(typeof fs).not.toBe('string');
    try {
      const swept = await unmountStale(tools, join(dataDir, 'data-link', 'executions'), {
        known: () => true,
        running: () => new Set(),
      });
      expect(swept).toEqual([join(execRoot, 'task')]);
      expect(mountsBelow(real)).toEqual([]);
      expect(existsSync(join(execRoot, 'task.img'))).toBe(false);
    } finally {
      if (typeof fs !== 'string') await fs.release();
    }
  });
});

describe.runIf(ready)('the sweep after a crash, on a data dir whose name mountinfo escapes', () => {
  it('attack: a space, a tab, a backslash and a newline in the path: found, unmounted, image removed', async () => {
    if (typeof tools === 'string') return;
    const odd = join(dataDir, 'odd name\twith\\slash\nand newline');
    const execRoot = join(odd, 'executions', 'exec-odd');
    mkdirSync(join(execRoot, 'task'), { recursive: true });
    const fs = await mountTaskFs(tools, {
      execRoot,
      taskDir: join(execRoot, 'task'),
      diskMib: 4,
      owner: null,
    });
    expect(typeof fs, String(fs)).not.toBe('string');
    try {
      const swept = await unmountStale(tools, join(odd, 'executions'), {
        known: () => true,
        running: () => new Set(),
      });
      expect(swept).toEqual([join(execRoot, 'task')]);
      expect(readFileSync('/proc/self/mountinfo', 'utf8')).not.toContain('exec-odd');
      expect(existsSync(join(execRoot, 'task.img'))).toBe(false);
    } finally {
      if (typeof fs !== 'string') await fs.release();
    }
  });
});

/** Prints every loop device's backing file and the ext4 file systems the task can list in /sys. */
const LOOK = `
import glob, os, time
print('up', flush=True)
time.sleep(1)
seen = []
for f in glob.glob('/sys/block/loop*/loop/backing_file') + glob.glob('/sys/devices/virtual/block/loop*/loop/backing_file') + glob.glob('/sys/class/block/loop*/loop/backing_file'):
    try:
        seen.append(open(f).read().strip())
    except OSError as e:
        seen.append(f + ': ' + os.strerror(e.errno))
print('backing:', seen)
print('ext4:', sorted(os.listdir('/sys/fs/ext4')) if os.path.isdir('/sys/fs/ext4') else [])
print('mountinfo:', open('/proc/self/mountinfo').read())
`;

describe.runIf(ready).each(SANDBOX_ENGINES)(
  'what a task sees of other tasks in /sys and its mount table, built by $name',
  ({ native }) => {
    it("attack: another task's execution id shows neither in /sys (loop backing files) nor in /proc/self/mountinfo", async () => {
      // Runs until the look is done (then cancelled), not for a fixed time the look may outlast.
      const other = start(native, "import time; print('up', flush=True); time.sleep(120)");
      try {
        await printed(other.chunks, 'up');
        const looker = start(native, LOOK);
        const result = await looker.handle.done;
        const out = text(looker.chunks, 'stdout');
        expect(result.failure_reason, text(looker.chunks, 'stderr')).toBeNull();
        expect(out).toContain('backing: []');
        expect(out).toContain('ext4: []');
        const [sys = '', mountinfo = ''] = out.split('mountinfo:');
        expect(sys).not.toContain(other.plan.execution_id);
        // bwrap makes every mount of its namespace a slave first, which undoes the unbindable mark
        // (task-fs.ts), so under bwrap the other task's mount is still listed there (unreachable below
        // the hidden data dir, but named); the native sandbox keeps it out.
        if (native !== null) expect(mountinfo).not.toContain(other.plan.execution_id);
        else expect(mountinfo).toContain(`${other.plan.execution_id}/task`);
      } finally {
        other.handle.cancel('the look is done');
        // Still running when the look ended: the other task was there to be seen.
        expect((await other.handle.done).failure_reason).toBe('CANCELLED');
      }
    });
  },
);
