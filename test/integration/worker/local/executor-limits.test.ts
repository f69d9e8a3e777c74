import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ResolvedLimits } from '../../../../src/contracts/task-limits.js';
import type { ExecutionPlan } from '../../../../src/contracts/worker-protocol.js';
import { type Clock, systemClock } from '../../../../src/platform/clock.js';
import type { ExecutionHandle } from '../../../../worker/executions/executor.js';
import { startExecution } from '../../../../worker/local/executor.js';
import { probeBwrap, systemMounts } from '../../../../worker/sandbox/bwrap.js';
import { type CgroupHierarchy, probeCgroups } from '../../../../worker/sandbox/cgroups.js';
import { makeSimDeviceNodes } from '../../../../worker/sandbox/devices.js';
import type { SandboxSetup } from '../../../../worker/sandbox/setup.js';
import { TaskUidPool } from '../../../../worker/sandbox/task-uids.js';
import { AdvancingClock } from '../../../support/advancing-clock.js';
import type { Chunk } from '../../../support/executor-plan.js';
import { makePlan, sh, text } from '../../../support/executor-plan.js';
import { isRoot, requireOrSkip } from '../../../support/require-or-skip.js';
import { SANDBOX_ENGINES } from '../../../support/sandbox-engines.js';
import { waitFor } from '../../../support/wait.js';

// Per-task resource limits (docs/performance.md "Noisy neighbours"), each by a real task in a real sandbox with a real cgroup: the
// kernel enforces them, and the test reads them back from the kernel. Every attack is kept as a test.

const probe = await probeBwrap({ root: isRoot });
const cgroups: CgroupHierarchy | null = isRoot ? await probeCgroups({ root: true }) : null;
const ready = requireOrSkip(
  'bubblewrap, root and a writable cgroup hierarchy',
  probe.ok && probe.bwrap !== null && probe.env !== null && cgroups !== null,
  `${probe.detail}; cgroups ${cgroups === null ? 'not writable here' : cgroups.describe}`,
);

const LIMITS: ResolvedLimits = {
  memory_mib: 128,
  pids: 64,
  cpu_weight: 50,
  tmp_mib: 8,
  shm_mib: 4,
  disk_mib: 16,
};

let dataDir: string;
let rootDir: string;
let sandbox: SandboxSetup;

beforeAll(async () => {
  if (!ready || probe.bwrap === null || probe.env === null) return;
  dataDir = mkdtempSync(join('/var/tmp', 'gpu-broker-limits-'));
  rootDir = join(dataDir, 'executions');
  sandbox = {
    kind: 'bwrap',
    bwrap: probe.bwrap,
    setpriv: probe.setpriv,
    envHelper: probe.env,
    uids: new TaskUidPool({ first: 2_000_200_000, last: 2_000_200_099 }),
    hiddenPaths: [dataDir],
    system: systemMounts(),
    simNodes: await makeSimDeviceNodes(join(dataDir, 'devices'), 2, true),
    cgroups,
  };
});
afterAll(() => {
  if (dataDir !== undefined) rmSync(dataDir, { recursive: true, force: true });
});

function start(
  argv: string[],
  limits: Partial<ResolvedLimits> = {},
  timeLimit = 30,
  clock: Clock = systemClock,
  extra: Partial<ExecutionPlan> = {},
) {
  const chunks: Chunk[] = [];
  const base = makePlan({ argv });
  const plan: ExecutionPlan = {
    ...base,
    spec: { ...base.spec, time_limit_seconds: timeLimit },
    limits: { ...LIMITS, ...limits },
    ...extra,
  };
  const handle: ExecutionHandle = startExecution(plan, {
    rootDir,
    workerId: 'worker-1',
    provider: 'sim',
    onLog: (stream, offset, data) => chunks.push({ stream, offset, data }),
    cleanupPollMs: 20,
    sandbox,
    clock,
  });
  return { plan, handle, chunks, execRoot: join(rootDir, plan.execution_id) };
}

/** The task's cgroup dirs on this host, found by the execution id. */
function cgroupDirs(executionId: string): string[] {
  const self = readFileSync('/proc/self/cgroup', 'utf8');
  const dirs: string[] = [];
  for (const c of ['memory', 'pids', 'cpu']) {
    const path =
      self
        .split('\n')
        .find((l) => l.split(':')[1]?.split(',').includes(c))
        ?.split(':')[2] ?? '/';
    dirs.push(join('/sys/fs/cgroup', c, path, 'gpu-broker', executionId));
  }
  return dirs;
}

describe.each(SANDBOX_ENGINES)('built by $name', ({ native }) => {
  beforeAll(() => {
    if (sandbox?.kind === 'bwrap') sandbox = { ...sandbox, native };
  });

  describe.runIf(ready)('per-task limits, enforced by the kernel', () => {
    it('puts the task in its own cgroup before it runs, with the limits read back from the kernel', async () => {
      const { plan, handle, chunks } = start(sh('cat /proc/self/cgroup; echo ready; sleep 30'));
      await waitFor(() => text(chunks, 'stdout').includes('ready'));
      const [memory, pids, cpu] = cgroupDirs(plan.execution_id);
      expect(Number(readFileSync(join(memory!, 'memory.limit_in_bytes'), 'utf8'))).toBe(128 * 1024 * 1024);
      expect(readFileSync(join(pids!, 'pids.max'), 'utf8').trim()).toBe('64');
      expect(Number(readFileSync(join(cpu!, 'cpu.shares'), 'utf8'))).toBe(512);
      // The task's own shell is in it (the whole sandbox is: bwrap entered before it read its options).
      const inside = readFileSync(join(memory!, 'cgroup.procs'), 'utf8').trim().split('\n').map(Number);
      expect(inside.length).toBeGreaterThanOrEqual(2);
      handle.cancel('test');
      const result = await handle.done;
      expect(result.failure_reason).toBe('CANCELLED');
      expect(result.cleaned).toBe(true);
      // Removed at teardown, with the task dir (scratch).
      for (const dir of cgroupDirs(plan.execution_id)) expect(existsSync(dir)).toBe(false);
    });

    it('puts a CPU quota on a task that asked for limits.cpus (the plan’s cpus), read back from the kernel', async () => {
      const { plan, handle, chunks } = start(sh('echo ready; sleep 30'), {}, 30, systemClock, { cpus: 1 });
      await waitFor(() => text(chunks, 'stdout').includes('ready'));
      const cpu = cgroupDirs(plan.execution_id)[2]!;
      // cgroup v1 here: the quota over the period (v2 writes both to cpu.max; tested in the unit tests).
      expect(readFileSync(join(cpu, 'cpu.cfs_quota_us'), 'utf8').trim()).toBe('100000');
      expect(readFileSync(join(cpu, 'cpu.cfs_period_us'), 'utf8').trim()).toBe('100000');
      handle.cancel('test');
      await handle.done;
      expect((await handle.exited).limits_detail?.join('\n')).toContain(
        'cpus 1 CPUs (cgroup v1 (memory, pids, cpu) cpu quota)',
      );
    });

    it('ends a memory hog over its limit with OUT_OF_MEMORY naming the limit; the worker lives on', async () => {
      const hog = '/usr/bin/python3';
      const { handle, execRoot } = start(
        [hog, '-c', 'print("hog", flush=True)\nb = []\nwhile True: b.append(bytearray(16 * 1024 * 1024))'],
        {},
      );
      const result = await handle.done;
      expect(result.failure_reason).toBe('OUT_OF_MEMORY');
      const exited = await handle.exited;
      expect(exited.limits_detail?.join('\n')).toContain('memory limit of 128 MiB');
      expect(exited.limits_detail?.join('\n')).toMatch(/limits enforced: memory_mib 128 MiB \(cgroup v[12]/);
      expect(result.cleaned).toBe(true);
      // Scratch is gone; the worker's logs stay.
      expect(existsSync(join(execRoot, 'task'))).toBe(false);
      expect(existsSync(join(execRoot, 'stdout.log'))).toBe(true);
      expect(process.memoryUsage().rss).toBeLessThan(1024 ** 3);
    });

    it('holds a fork bomb at the pids limit and kills it all at the end', async () => {
      // Each shell forks two more as fast as it can, then blocks opening a FIFO no one writes; the
      // kernel refuses fork past pids.max, and a shell whose fork fails exits (dash does). A bomb whose
      // shells waited for their children instead could die out under load (CI printed n=3 twice: the
      // tree collapsed from its failing leaves before the count looked); blocked shells hold their
      // slots, so the namespace stays full. Once the bomb runs the task's own shell never forks again:
      // it counts its processes with builtins (a glob) until the bomb has filled the namespace or 15 s
      // have passed (read from /proc/uptime, a builtin), prints the count, and waits (a builtin) for a
      // sleep it started before the bomb, until the time limit ends it all.
      const clock = new AdvancingClock();
      const { plan, handle, chunks } = start(
        sh(
          'mkfifo /tmp/hold; sleep 600 & s=$!; bomb() { bomb & bomb & read x </tmp/hold; }; bomb 2>/dev/null & IFS=. read t0 _ </proc/uptime; while :; do c=0; for p in /proc/[0-9]*; do c=$((c+1)); done; [ $c -ge 40 ] && break; IFS=. read t _ </proc/uptime; [ $t -ge $((t0 + 15)) ] && break; done; echo "n=$c"; wait $s',
        ),
        {},
        // The time limit ends it; 20 s leaves the count time to be printed under the whole suite's load,
        // and once it is, the test moves the executor's clock past the limit rather than wait for it.
        20,
        clock,
      );
      await waitFor(() => text(chunks, 'stdout').includes('n='), { timeoutMs: 30_000 });
      const [, pids] = cgroupDirs(plan.execution_id);
      const current = Number(readFileSync(join(pids!, 'pids.current'), 'utf8'));
      expect(current).toBeLessThanOrEqual(64);
      const seen = Number(text(chunks, 'stdout').match(/n=(\d+)/)?.[1]);
      // It did fill the namespace (the count stops at 40). The glob over /proc is no snapshot (processes
      // come and go while it reads), so the bound is the kernel's own: it refuses forks at the limit.
      expect(seen).toBeGreaterThanOrEqual(40);
      // The bomb goes on forking: the kernel soon refuses one at the limit (pids.events counts them).
      const refused = () => Number(/^max (\d+)/m.exec(readFileSync(join(pids!, 'pids.events'), 'utf8'))?.[1]);
      expect(
        await waitFor(() => refused() > 0 || null, { timeoutMs: 10_000, what: 'a fork refused at pids.max' }),
      ).toBe(true);
      expect(Number(readFileSync(join(pids!, 'pids.current'), 'utf8'))).toBeLessThanOrEqual(64);
      clock.advance(20_000);
      const result = await handle.done;
      expect(result.failure_reason).toBe('TIMED_OUT');
      expect(result.cleaned).toBe(true);
      for (const dir of cgroupDirs(plan.execution_id)) expect(existsSync(dir)).toBe(false);
    });

    it('caps /tmp and /dev/shm: a write past the size fails with ENOSPC', async () => {
      const { handle, chunks } = start(
        sh(
          'df -m /tmp /dev/shm | tail -n 2; head -c 20M /dev/zero 2>&1 >/tmp/big; echo "tmp=$?"; head -c 20M /dev/zero 2>&1 >/dev/shm/big; echo "shm=$?"',
        ),
      );
      const result = await handle.done;
      const out = text(chunks, 'stdout');
      expect(out).toMatch(/No space left on device/);
      expect(out).toContain('tmp=1');
      expect(out).toContain('shm=1');
      expect(result.failure_reason).toBeNull();
    });

    it('ends a task that fills its task dir past the disk limit with DISK_LIMIT', async () => {
      const { handle, execRoot } = start(sh('head -c 40M /dev/zero > /task/scratch; sleep 30'));
      const result = await handle.done;
      expect(result.failure_reason).toBe('DISK_LIMIT');
      expect((await handle.exited).limits_detail?.join('\n')).toContain('over its disk limit of 16 MiB');
      expect(existsSync(join(execRoot, 'task'))).toBe(false);
    });

    it('ends a task that hides its data in dirs nested past PATH_MAX with DISK_LIMIT, and removes it all (attack)', async () => {
      // Relative mkdir and cd only: the bottom's host path is past PATH_MAX, so a walk by path (the watch,
      // `rm -r`) can name nothing there; the watch used to count none of it and the removal to leave it.
      const { handle, execRoot } = start(
        sh(
          'i=0; while [ $i -lt 400 ]; do mkdir dddddddddd && cd -P dddddddddd || exit 3; i=$((i+1)); done; head -c 40M /dev/zero > big; echo written; sleep 30',
        ),
      );
      const result = await handle.done;
      expect(result.failure_reason).toBe('DISK_LIMIT');
      expect((await handle.exited).limits_detail?.join('\n')).toContain('cannot measure');
      expect(existsSync(join(execRoot, 'task'))).toBe(false);
    });

    it('an executor failure still gives back the box: its task dir (and cgroup) do not outlive the result', async () => {
      const base = makePlan({ argv: sh('true') });
      const plan: ExecutionPlan = { ...base, limits: LIMITS };
      const handle = startExecution(plan, {
        rootDir,
        workerId: 'worker-1',
        provider: 'sim',
        onLog: () => undefined,
        cleanupPollMs: 20,
        sandbox,
        launcher: {
          launch: () => {
            throw new Error('a bug in the launcher');
          },
        },
      });
      const result = await handle.done;
      expect(result).toMatchObject({ failure_reason: 'SETUP_FAILED', cleaned: false });
      expect(JSON.stringify(result)).toContain('executor error: a bug in the launcher');
      expect(existsSync(join(rootDir, plan.execution_id, 'task'))).toBe(false);
    });

    it('asks a contained task to stop (SIGTERM to its processes, found by its cgroup) before it kills it', async () => {
      // The box finds a task with a cgroup by cgroup.procs alone, no /proc walk (box.ts): the grace
      // period's SIGTERM must still reach the task's own processes, and not only its init.
      const { handle, chunks } = start(sh('trap "echo bye; exit 0" TERM; echo ready; sleep 60 & wait'));
      await waitFor(() => text(chunks, 'stdout').includes('ready'));
      handle.cancel('test');
      const result = await handle.done;
      expect(text(chunks, 'stdout')).toContain('bye');
      expect(result).toMatchObject({ failure_reason: 'CANCELLED', cleaned: true });
    });

    it('keeps a task that tries to leave its cgroup inside it (attack)', async () => {
      // The task writes its pid to the parent's and the root's cgroup.procs (not its to write: read-only
      // /sys, no capabilities, another uid), calls setsid and double-forks; all of it stays inside.
      const { plan, handle, chunks } = start(
        sh(
          'for f in /sys/fs/cgroup/memory/cgroup.procs /sys/fs/cgroup/pids/cgroup.procs /sys/fs/cgroup/memory/../cgroup.procs; do echo $$ > $f 2>/dev/null && echo "escaped $f"; done; (setsid sh -c "sleep 60" &) ; echo ready; sleep 60',
        ),
      );
      await waitFor(() => text(chunks, 'stdout').includes('ready'));
      expect(text(chunks, 'stdout')).not.toContain('escaped');
      const [memory] = cgroupDirs(plan.execution_id);
      const inside = readFileSync(join(memory!, 'cgroup.procs'), 'utf8').trim().split('\n').map(Number);
      // bwrap, its init, the shell, the setsid sleeper and the main sleep at least.
      expect(inside.length).toBeGreaterThanOrEqual(4);
      handle.cancel('test');
      const result = await handle.done;
      expect(result.cleaned).toBe(true);
      for (const pid of inside) expect(existsSync(`/proc/${pid}`) && !isZombie(pid)).toBe(false);
    });
  });

  function isZombie(pid: number): boolean {
    try {
      return / Z /.test(readFileSync(`/proc/${pid}/stat`, 'utf8').slice(-200));
    } catch {
      return false;
    }
  }
});
