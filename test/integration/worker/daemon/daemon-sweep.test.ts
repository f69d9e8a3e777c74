import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../../../../src/platform/logger.js';
import { probeBwrap, systemMounts } from '../../../../worker/sandbox/bwrap.js';
import { type CgroupHierarchy, probeCgroups, type TaskCgroup } from '../../../../worker/sandbox/cgroups.js';
import { makeSimDeviceNodes } from '../../../../worker/sandbox/devices.js';
import type { SandboxSetup } from '../../../../worker/sandbox/setup.js';
import { sweepStale } from '../../../../worker/sandbox/sweep-stale.js';
import { TaskUidPool } from '../../../../worker/sandbox/task-uids.js';
import { openLocalStore } from '../../../../worker/store/local-store.js';
import { isRoot, requireOrSkip } from '../../../support/require-or-skip.js';
import { waitFor } from '../../../support/wait.js';
import { seedExecution } from '../../../support/worker-store.js';
import { type Harness, harness, plan } from './daemon-harness.js';

// A worker killed mid-task leaves the task's cgroup (with what still ran in it) and its task dir
// behind. The next worker process sweeps them at start (sandbox/sweep-stale.ts) — only what it made:
// a cgroup of another worker in the same parent, and a dir it has no record of, stay. Real cgroupfs.

const probe = await probeBwrap({ root: isRoot });
const cgroups: CgroupHierarchy | null = isRoot ? await probeCgroups({ root: true }) : null;
const ready = requireOrSkip(
  'bubblewrap, root and a writable cgroup hierarchy',
  probe.ok && probe.bwrap !== null && probe.env !== null && cgroups !== null,
  `${probe.detail}; cgroups ${cgroups === null ? 'not writable here' : cgroups.describe}`,
);

const LIMITS = { memoryBytes: 64 * 1024 * 1024, pids: 16, cpuWeight: 100 };

let h: Harness;
const children: ChildProcess[] = [];
const made: TaskCgroup[] = [];
beforeEach(async () => {
  h = await harness();
});
afterEach(async () => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  for (const cg of made.splice(0)) {
    await cg.killAll();
    await cg.remove();
  }
  await h.dispose();
});

async function sandbox(dataDir: string): Promise<SandboxSetup> {
  return {
    kind: 'bwrap',
    bwrap: probe.bwrap!,
    setpriv: probe.setpriv,
    envHelper: probe.env!,
    uids: new TaskUidPool({ first: 2_000_200_500, last: 2_000_200_599 }),
    hiddenPaths: [dataDir],
    system: systemMounts(),
    cgroups,
    simNodes: await makeSimDeviceNodes(join(dataDir, '..', 'devices'), 4, true),
  };
}

/** A cgroup with a live process in it, as a crashed worker's task would leave it. */
async function occupiedCgroup(name: string): Promise<{ cg: TaskCgroup; child: ChildProcess }> {
  const cg = await cgroups!.create(name, LIMITS);
  made.push(cg);
  const child = spawn('/bin/sleep', ['60'], { stdio: 'ignore' });
  children.push(child);
  await cg.add(child.pid!);
  return { cg, child };
}

describe.runIf(ready)('worker start after a crash', () => {
  it('removes its own stale task cgroups (killing what ran in them) and task dirs; nothing else', {
    timeout: 15_000,
  }, async () => {
    const dataDir = join(h.dir, 'data');
    mkdirSync(dataDir, { recursive: true });
    const stale = plan({ argv: ['/bin/sleep', '30'] });
    const finished = plan({ argv: ['/bin/true'], cards: [1] });
    const foreign = plan({ argv: ['/bin/true'], cards: [2] });
    const store = openLocalStore(join(dataDir, 'worker.sqlite'));
    seedExecution(store, stale, 'started');
    seedExecution(store, finished, 'cleaned');
    store.close();

    const ours = await occupiedCgroup(stale.execution_id);
    const theirs = await occupiedCgroup(foreign.execution_id);
    const execDir = (id: string) => join(dataDir, 'executions', id);
    for (const p of [stale, finished, foreign]) {
      mkdirSync(join(execDir(p.execution_id), 'task', 'out'), { recursive: true });
      writeFileSync(join(execDir(p.execution_id), 'task', 'scratch'), 'x'.repeat(4096));
      writeFileSync(join(execDir(p.execution_id), 'stdout.log'), 'log\n');
    }

    await h.worker({ sandbox: await sandbox(dataDir) });
    await waitFor(() => ours.cg.dirs.every((d) => !existsSync(d)), {
      timeoutMs: 10_000,
      what: 'the stale cgroup swept',
    });
    await waitFor(() => ours.child.exitCode !== null || ours.child.signalCode !== null, {
      what: 'the process left in it killed',
    });
    await waitFor(() => !existsSync(join(execDir(finished.execution_id), 'task')), {
      what: 'task dirs swept',
    });
    expect(existsSync(join(execDir(stale.execution_id), 'task'))).toBe(false);
    // The logs stay, as at a normal end.
    expect(existsSync(join(execDir(stale.execution_id), 'stdout.log'))).toBe(true);
    // Not this worker's: untouched, its process alive.
    for (const d of theirs.cg.dirs) expect(existsSync(d)).toBe(true);
    expect(theirs.child.exitCode === null && theirs.child.signalCode === null).toBe(true);
    expect(existsSync(join(execDir(foreign.execution_id), 'task', 'scratch'))).toBe(true);
  });

  it('never sweeps the cgroup of a task it is running now (attack: a stale-looking name of a live task)', {
    timeout: 15_000,
  }, async () => {
    const dataDir = join(h.dir, 'data');
    await h.worker({ sandbox: await sandbox(dataDir) });
    await waitFor(() => h.master.connected());
    const base = plan({ argv: ['/bin/sh', '-c', 'echo up; exec sleep 30'] });
    const limits = { memory_mib: 128, pids: 64, cpu_weight: 100, tmp_mib: 8, shm_mib: 8, disk_mib: 64 };
    const p = { ...base, limits };
    h.master.assign(p);
    await waitFor(() => h.master.logText(p.execution_id) === 'up\n', { timeoutMs: 10_000, what: 'up' }).catch(
      (err: Error) => {
        throw new Error(`${err.message}; phases ${JSON.stringify(h.master.phases(p.execution_id))}`);
      },
    );
    // Its cgroup exists: the sweep below must leave it.
    const dirs = cgroups!.adopt(p.execution_id).dirs;
    expect(dirs.every((d) => existsSync(d))).toBe(true);
    // A second worker process on the same data dir is not possible; the sweep itself is what is
    // attacked here: it runs with the running set read after the listing.
    const swept = await sweepStale({
      cgroups,
      executionsDir: join(dataDir, 'executions'),
      // Only this id: other test files' task cgroups may share the parent, and are not this test's.
      known: (id) => id === p.execution_id,
      running: () => new Set([p.execution_id]),
      logger: silentLogger(),
    });
    expect(swept.cgroups).not.toContain(p.execution_id);
    expect(swept.taskDirs).not.toContain(p.execution_id);
    expect(dirs.every((d) => existsSync(d))).toBe(true);
    expect(h.master.phases(p.execution_id).map((m) => m.phase)).toEqual(['accepted', 'started']);
  });
});
