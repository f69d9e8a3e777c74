import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, statfsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ExecutionPlan } from '../../../../src/contracts/worker-protocol.js';
import { startExecution } from '../../../../worker/local/executor.js';
import { probeBwrap, systemMounts } from '../../../../worker/sandbox/bwrap.js';
import { probeCgroups } from '../../../../worker/sandbox/cgroups.js';
import { makeSimDeviceNodes } from '../../../../worker/sandbox/devices.js';
import {
  mountTaskFs,
  probeTaskFs,
  type TaskFs,
  type TaskFsTools,
} from '../../../../worker/sandbox/task-fs.js';
import { TaskUidPool } from '../../../../worker/sandbox/task-uids.js';
import { type Chunk, makePlan, text } from '../../../support/executor-plan.js';
import { isRoot, requireOrSkip } from '../../../support/require-or-skip.js';

/**
 * ADR 0043, attacked again: "the worker's own store and other tasks always keep room". Each task
 * dir is an image on the worker's data file system; an image that only grows as the task writes (sparse)
 * promises room the data file system may not have once several tasks run: tasks that each stay within
 * their disk_mib fill it together, and the next write anywhere on it (the worker's store, another task's
 * logs, another task's image: an I/O error inside its file system) fails. The image's room is taken when
 * it is made, so a task that cannot have it does not start, and what has started keeps it.
 *
 * The data file system here is a 96 MiB one of its own (an ext4 image on a loop device), so that two
 * tasks of 40 MiB each over-ask it.
 */

let top = '';
let dataDir = '';
let tools: TaskFsTools | string = 'not probed';
if (isRoot) {
  top = mkdtempSync(join('/var/tmp', 'gpu-broker-task-fs-room-'));
  dataDir = join(top, 'data');
  mkdirSync(dataDir);
  try {
    execFileSync('truncate', ['-s', '96M', join(top, 'data.img')]);
    execFileSync('mkfs.ext4', ['-q', '-F', '-O', '^has_journal', '-m', '0', join(top, 'data.img')]);
    execFileSync('mount', ['-o', 'loop', join(top, 'data.img'), dataDir]);
    tools = await probeTaskFs(dataDir, true);
  } catch (err) {
    tools = (err as Error).message;
  }
}
const ready = requireOrSkip(
  'root and per-task file systems (mkfs.ext4, loop devices)',
  typeof tools !== 'string',
  typeof tools === 'string' ? tools : '',
);

const held: TaskFs[] = [];
beforeAll(() => undefined);
afterAll(async () => {
  for (const fs of held) await fs.release();
  if (top === '') return;
  try {
    execFileSync('umount', [dataDir]);
  } catch {
    // never mounted
  }
  rmSync(top, { recursive: true, force: true });
});

/** Mounts a task dir of `mib` on the small data file system, or says why not. */
async function taskDir(name: string, mib: number): Promise<{ fs: TaskFs | string; dir: string }> {
  const execRoot = join(dataDir, name);
  mkdirSync(join(execRoot, 'task'), { recursive: true });
  const fs = await mountTaskFs(tools as TaskFsTools, {
    execRoot,
    taskDir: join(execRoot, 'task'),
    diskMib: mib,
    owner: null,
  });
  if (typeof fs !== 'string') held.push(fs);
  return { fs, dir: join(execRoot, 'task') };
}

/** Writes `mib` MiB into `file`; returns the error's code, or 'ok'. */
function fill(file: string, mib: number): string {
  try {
    writeFileSync(file, Buffer.alloc(mib * 1024 * 1024, 1));
    execFileSync('sync', ['-f', file]);
    return 'ok';
  } catch (err) {
    return (err as NodeJS.ErrnoException).code ?? (err as Error).message;
  }
}

describe.runIf(ready)("room on the worker's data file system", () => {
  it('attack: two tasks within their disk limits never fill the data file system together; the worker keeps room', async () => {
    const a = await taskDir('exec-a', 60);
    expect(typeof a.fs, String(a.fs)).not.toBe('string');
    const b = await taskDir('exec-b', 60);
    // The second task cannot have its room: it does not start, saying why; the first keeps all of its own.
    expect(b.fs).toMatch(/^no room on the worker's data file system for the task dir's 76 MiB/);
    expect(fill(join(a.dir, 'x'), 56)).toBe('ok');
    // What the worker writes beside them (its store, logs) still fits.
    expect(fill(join(dataDir, 'store.db'), 4)).toBe('ok');
    const s = statfsSync(dataDir);
    expect(s.bavail * s.bsize).toBeGreaterThan(0);
  });
});

describe.runIf(ready)('a task whose room is not there', () => {
  it('attack: fails SETUP_FAILED saying so, never falls back to the walk on the full data file system', async () => {
    for (const fs of held.splice(0)) await fs.release();
    const probe = await probeBwrap({ root: true });
    const a = await taskDir('exec-holder', 60);
    expect(typeof a.fs, String(a.fs)).not.toBe('string');
    const chunks: Chunk[] = [];
    const base = makePlan({ argv: ['/bin/sh', '-c', 'echo ran'] });
    const plan: ExecutionPlan = {
      ...base,
      limits: { memory_mib: 256, pids: 64, cpu_weight: 100, tmp_mib: 8, shm_mib: 4, disk_mib: 60 },
    };
    const handle = startExecution(plan, {
      rootDir: join(dataDir, 'executions'),
      workerId: 'worker-task-fs-room',
      provider: 'sim',
      onLog: (stream, offset, data) => chunks.push({ stream, offset, data }),
      cleanupPollMs: 20,
      sandbox: {
        kind: 'bwrap',
        bwrap: probe.bwrap!,
        setpriv: probe.setpriv,
        envHelper: probe.env!,
        native: null,
        uids: new TaskUidPool({ first: 2_000_580_000, last: 2_000_580_099 }),
        hiddenPaths: [dataDir],
        system: systemMounts(),
        simNodes: await makeSimDeviceNodes(join(top, 'devices'), 1, true),
        cgroups: await probeCgroups({ root: true }),
        taskFs: tools as TaskFsTools,
      },
    });
    const result = await handle.done;
    expect(text(chunks, 'stdout')).toBe('');
    expect(result.failure_reason).toBe('SETUP_FAILED');
    expect(result.setup_error).toContain(
      "no room on the worker's data file system for the task dir's 76 MiB",
    );
  });
});
