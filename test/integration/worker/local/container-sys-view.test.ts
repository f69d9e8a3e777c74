import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startExecution } from '../../../../worker/local/executor.js';
import type { ContainerTasks } from '../../../../worker/sandbox/container.js';
import { makeSimDeviceNodes } from '../../../../worker/sandbox/devices.js';
import { mountTaskFs, probeTaskFs, type TaskFs } from '../../../../worker/sandbox/task-fs.js';
import { TaskUidPool } from '../../../../worker/sandbox/task-uids.js';
import type { TestImage } from '../../../support/container-image.js';
import { testImage } from '../../../support/container-image.js';
import type { Chunk } from '../../../support/executor-plan.js';
import { makePlan, text } from '../../../support/executor-plan.js';
import { isRoot, requireOrSkip } from '../../../support/require-or-skip.js';

/**
 * ADR 0043, attacked again for container tasks: each task dir is a loop device whose
 * backing file is `<executions>/<id>/task.img` (task-fs.ts), and the engine's /sys shows every loop
 * device's backing file: a container task must not read another task's execution id there, nor its
 * ext4 counters, as the sandboxed tasks cannot (host-mounts.ts MASKED_KERNEL_PATHS).
 */

const ready = requireOrSkip('root (a per-task file system to look for)', isRoot);
let image: TestImage;
let dataDir: string;
let containers: ContainerTasks;
let other: TaskFs | string = 'not mounted';
const OTHER_ID = 'exec-another-owners-task';

beforeAll(async () => {
  if (!ready) return;
  image = await testImage();
  dataDir = mkdtempSync(join('/var/tmp', 'gpu-broker-container-sys-'));
  containers = {
    setup: image.setup,
    uids: new TaskUidPool({ first: 2_000_550_000, last: 2_000_550_099 }),
    simNodes: await makeSimDeviceNodes(join(dataDir, 'devices'), 1, true),
  };
  // Another task's file system, as the worker mounts it.
  const tools = await probeTaskFs(dataDir, true);
  if (typeof tools === 'string') throw new Error(tools);
  const execRoot = join(dataDir, 'executions', OTHER_ID);
  mkdirSync(join(execRoot, 'task'), { recursive: true });
  other = await mountTaskFs(tools, { execRoot, taskDir: join(execRoot, 'task'), diskMib: 4, owner: null });
}, 120_000);
afterAll(async () => {
  if (typeof other !== 'string') await other.release();
  image?.cleanup();
  if (dataDir !== undefined) rmSync(dataDir, { recursive: true, force: true });
});

describe.runIf(ready)("what a container task sees of other tasks' file systems", () => {
  it("attack: no loop device's backing file (another task's execution id) nor ext4 counters in its /sys", async () => {
    expect(typeof other, String(other)).not.toBe('string');
    const chunks: Chunk[] = [];
    const handle = startExecution(
      makePlan({
        image: image.pinned,
        argv: [
          'sh',
          '-c',
          'echo "backing=[$(cat /sys/block/loop*/loop/backing_file /sys/devices/virtual/block/loop*/loop/backing_file 2>/dev/null)]"; echo "ext4=[$(ls /sys/fs/ext4 2>/dev/null)]"',
        ],
      }),
      {
        rootDir: join(dataDir, 'executions'),
        workerId: 'worker-container-sys',
        provider: 'sim',
        onLog: (stream, offset, data) => chunks.push({ stream, offset, data }),
        cleanupPollMs: 50,
        containers,
      },
    );
    const result = await handle.done;
    const out = text(chunks, 'stdout');
    expect(result.failure_reason, text(chunks, 'stderr')).toBeNull();
    expect(out).not.toContain(OTHER_ID);
    expect(out).toBe('backing=[]\next4=[]\n');
  }, 120_000);
});
