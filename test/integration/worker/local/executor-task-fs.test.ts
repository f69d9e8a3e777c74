import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
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
 * ADR 0043: the disk limit counts every byte a task holds. Each task dir is a file system of its
 * own sized by `disk_mib` (worker/sandbox/task-fs.ts): a file held open and unlinked, one made with
 * O_TMPFILE and `fallocate` are all counted and bounded by the kernel, on both sandbox engines; the
 * file system and its image are gone with the task, and a worker's restart unmounts what a killed one
 * left.
 */

const probe = await probeBwrap({ root: isRoot });
const cgroups: CgroupHierarchy | null = isRoot ? await probeCgroups({ root: true }) : null;
let tools: TaskFsTools | string = 'not probed';
let dataDir = '';
if (isRoot) {
  dataDir = mkdtempSync(join('/var/tmp', 'gpu-broker-task-fs-'));
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
    ...(await bwrapSetupFor(probe, dataDir, { uids: { first: 2_000_500_000, last: 2_000_500_099 } })),
    cgroups,
    taskFs: tools,
  };
});
afterAll(() => {
  if (dataDir !== '') rmSync(dataDir, { recursive: true, force: true });
});

function start(native: string | null, script: string) {
  const chunks: Chunk[] = [];
  const base = makePlan({ argv: ['/usr/bin/python3', '-c', script] });
  const plan: ExecutionPlan = { ...base, spec: { ...base.spec, time_limit_seconds: 30 }, limits: LIMITS };
  const handle = startExecution(plan, {
    rootDir,
    workerId: 'worker-task-fs',
    provider: 'sim',
    onLog: (stream, offset, data) => chunks.push({ stream, offset, data }),
    cleanupPollMs: 20,
    sandbox: { ...sandbox, native },
  });
  return { handle, chunks, execRoot: join(rootDir, plan.execution_id) };
}

/** Mount points below `dir` in this process's mount table. */
function mountsBelow(dir: string): string[] {
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4] ?? '')
    .filter((p) => p.startsWith(`${dir}/`));
}

/** Writes 40 MiB in 1 MiB pieces, ignoring ENOSPC, then waits to be ended. */
const HOLD = (open: string) => `
import os, time
fd = ${open}
for _ in range(40):
    try:
        os.write(fd, b'x' * 1048576)
    except OSError as e:
        print('write:', os.strerror(e.errno), flush=True)
        break
time.sleep(25)
`;

describe.runIf(ready).each(SANDBOX_ENGINES)(
  'the task dir is a file system of its own, built by $name',
  ({ native }) => {
    it('attack: a file held open and unlinked counts: ENOSPC past the file system, DISK_LIMIT past the limit', async () => {
      const { handle, chunks } = start(
        native,
        HOLD("os.open('/task/x', os.O_CREAT | os.O_WRONLY, 0o600); os.unlink('/task/x')"),
      );
      const result = await handle.done;
      expect(result.failure_reason, text(chunks, 'stderr')).toBe('DISK_LIMIT');
      const detail = (await handle.exited).limits_detail?.join('\n') ?? '';
      expect(detail).toContain('over its disk limit of 16 MiB');
      expect(detail).toContain('disk_mib 16 MiB (a file system of its own');
    });

    it('attack: an O_TMPFILE file (no name at all) counts the same', async () => {
      const { handle, chunks } = start(native, HOLD("os.open('/task', os.O_TMPFILE | os.O_WRONLY, 0o600)"));
      const result = await handle.done;
      expect(result.failure_reason, text(chunks, 'stderr')).toBe('DISK_LIMIT');
    });

    it('attack: fallocate of 1 GiB is refused by the kernel at once; nothing of it is held', async () => {
      const { handle, chunks, execRoot } = start(
        native,
        `
import os
fd = os.open('/task/big', os.O_CREAT | os.O_WRONLY, 0o600)
try:
    os.posix_fallocate(fd, 0, 1 << 30)
    print('fallocate: ok')
except OSError as e:
    print('fallocate:', os.strerror(e.errno))
st = os.statvfs('/task')
print('size-mib:', st.f_blocks * st.f_frsize // 1048576)
`,
      );
      const result = await handle.done;
      expect(result.failure_reason, text(chunks, 'stderr')).toBeNull();
      const out = text(chunks, 'stdout');
      expect(out).toContain('fallocate: No space left on device');
      expect(Number(/size-mib: (\d+)/.exec(out)?.[1])).toBeLessThan(40);
      // Gone with the task: the mount, the image and the dir.
      expect(mountsBelow(execRoot)).toEqual([]);
      expect(existsSync(join(execRoot, 'task.img'))).toBe(false);
      expect(existsSync(join(execRoot, 'task'))).toBe(false);
    });

    it('gives the task its dir as before: writable, its own, with out/', async () => {
      const { handle, chunks } = start(
        native,
        "import os; open('/task/out/r.txt','w').write('ok'); print(sorted(os.listdir('/task')), os.stat('/task').st_uid == os.getuid())",
      );
      const result = await handle.done;
      expect(result.failure_reason, text(chunks, 'stderr')).toBeNull();
      expect(text(chunks, 'stdout')).toBe("['out'] True\n");
      expect(result.outputs.map((o) => o.path)).toEqual([]);
    });
  },
);

describe.runIf(ready)('after a worker was killed', () => {
  it('unmountStale unmounts the task file systems it left, and removes their images', async () => {
    if (typeof tools === 'string') return;
    const execRoot = join(dataDir, 'crashed', 'exec-1');
    mkdirSync(join(execRoot, 'task'), { recursive: true });
    const fs = await mountTaskFs(tools, {
      execRoot,
      taskDir: join(execRoot, 'task'),
      diskMib: 4,
      owner: null,
    });
    expect(typeof fs).not.toBe('string');
    // The file system on an unbindable bind of the dir on itself (task-fs.ts): two mounts, one point.
    expect([...new Set(mountsBelow(join(dataDir, 'crashed')))]).toEqual([join(execRoot, 'task')]);
    expect(
      await unmountStale(tools, join(dataDir, 'crashed'), { known: () => true, running: () => new Set() }),
    ).toEqual([join(execRoot, 'task')]);
    expect(mountsBelow(join(dataDir, 'crashed'))).toEqual([]);
    expect(existsSync(join(execRoot, 'task.img'))).toBe(false);
  });
});
