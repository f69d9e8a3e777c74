import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { ResolvedLimits } from '../src/contracts/task-limits.js';
import type { ExecutionPlan } from '../src/contracts/worker-protocol.js';
import { startExecution } from '../worker/local/executor.js';
import { probeBwrap, systemMounts } from '../worker/sandbox/bwrap.js';
import { probeCgroups } from '../worker/sandbox/cgroups.js';
import { makeSimDeviceNodes } from '../worker/sandbox/devices.js';
import { probeNativeSandbox } from '../worker/sandbox/native.js';
import { prepareSeccomp, type SandboxSetup } from '../worker/sandbox/setup.js';
import { probeTaskFs } from '../worker/sandbox/task-fs.js';
import { TaskUidPool } from '../worker/sandbox/task-uids.js';
import { type BenchSection, type OpResult, summarise } from './stats.js';

/**
 * What one task start costs with each layer of issue 36's depth (docs/performance.md "Task start"): the
 * syscall filter (off, on) and the task dir's own file system (off, on), on each sandbox engine. One
 * `/bin/true` task at a time through the local executor in this process (no master, no scheduler), the
 * configurations interleaved round by round so that they share the machine's load; p50/p99 are the
 * task's whole run, start to result (setup, sandbox, exit, cleanup). Root only (task uids, cgroups,
 * mounts); BENCH_TASK_STARTS (default 100) rounds.
 */

const ROUNDS = Number(process.env['BENCH_TASK_STARTS'] ?? 100);
const LIMITS: ResolvedLimits = {
  memory_mib: 512,
  pids: 256,
  cpu_weight: 100,
  tmp_mib: 64,
  shm_mib: 64,
  disk_mib: 1024,
};

interface Config {
  readonly name: string;
  readonly sandbox: SandboxSetup;
}

async function configs(dataDir: string): Promise<Config[] | string> {
  const bwrap = await probeBwrap({ root: true });
  if (!bwrap.ok || bwrap.bwrap === null || bwrap.env === null) return bwrap.detail;
  const system = systemMounts();
  const native = await probeNativeSandbox({ root: true, system });
  const cgroups = await probeCgroups({ root: true });
  const seccomp = prepareSeccomp(dataDir, []);
  const taskFs = await probeTaskFs(dataDir, true);
  const base: Extract<SandboxSetup, { kind: 'bwrap' }> = {
    kind: 'bwrap',
    bwrap: bwrap.bwrap,
    setpriv: bwrap.setpriv,
    envHelper: bwrap.env,
    uids: new TaskUidPool({ first: 2_100_000_000, last: 2_100_999_999 }),
    hiddenPaths: [dataDir],
    system,
    cgroups,
    simNodes: await makeSimDeviceNodes(join(dataDir, 'devices'), 1, true),
  };
  const out: Config[] = [];
  for (const [engine, path] of [
    ['bwrap', null],
    ['native', native.path],
  ] as const) {
    if (engine === 'native' && path === null) continue;
    const e = { ...base, native: path };
    out.push({ name: `${engine}, no filter`, sandbox: { ...e, seccomp: null } });
    out.push({ name: `${engine}, filter`, sandbox: { ...e, seccomp } });
    if (typeof taskFs !== 'string')
      out.push({ name: `${engine}, filter + own file system`, sandbox: { ...e, seccomp, taskFs } });
  }
  return out;
}

let counter = 0;

async function once(config: Config, rootDir: string): Promise<{ ms: number; ok: boolean }> {
  counter += 1;
  const id = `bench-start-${process.pid}-${counter}`;
  const plan: ExecutionPlan = {
    task_id: `task-${id}`,
    execution_id: id,
    assignment_id: `asg-${id}`,
    lease_epoch: 1,
    cards: [{ index: 0, uuid: 'GPU-sim-0' }],
    spec: {
      title: 't',
      objective: 'o',
      success_criteria: 's',
      cards: { count: 1 },
      runtime: { kind: 'process', argv: ['/bin/true'] },
      outputs: [],
      time_limit_seconds: 30,
    },
    spec_digest: '0'.repeat(64),
    kill_grace_seconds: 0.5,
    cleanup_timeout_seconds: 5,
    limits: LIMITS,
  };
  const started = performance.now();
  const handle = startExecution(plan, {
    rootDir,
    workerId: 'bench-start',
    provider: 'sim',
    onLog: () => undefined,
    cleanupPollMs: 10,
    sandbox: config.sandbox,
  });
  const result = await handle.done;
  return { ms: performance.now() - started, ok: result.failure_reason === null };
}

async function run(): Promise<OpResult[]> {
  if (process.getuid?.() !== 0) return [];
  const dataDir = mkdtempSync(join('/var/tmp', 'gpu-broker-bench-start-'));
  try {
    const list = await configs(dataDir);
    if (typeof list === 'string') throw new Error(`task-start bench: no sandbox here: ${list}`);
    const times = new Map(list.map((c) => [c.name, [] as number[]]));
    const errors = new Map(list.map((c) => [c.name, 0]));
    const rootDir = join(dataDir, 'executions');
    const began = performance.now();
    for (let round = 0; round < ROUNDS; round++)
      for (const c of list) {
        const r = await once(c, rootDir);
        if (r.ok) times.get(c.name)!.push(r.ms);
        else errors.set(c.name, errors.get(c.name)! + 1);
      }
    const seconds = (performance.now() - began) / 1000;
    const p50 = (name: string) => summarise('', '', times.get(name)!, 0, 1).p50Ms;
    return list.map((c) => {
      const [engine] = c.name.split(',');
      const off = p50(`${engine}, no filter`);
      const row = summarise(
        'task-start',
        `1-card /bin/true, ${c.name}`,
        times.get(c.name)!,
        errors.get(c.name)!,
        seconds / list.length,
        `one at a time in this process, configurations interleaved; p50 ${(p50(c.name) - off).toFixed(1)} ms over "${engine}, no filter"`,
      );
      return row;
    });
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** The task-start section of `npm run bench`: what the filter and the task's own file system cost. */
export const taskStartSection: BenchSection = {
  name: 'task-start',
  description: `${ROUNDS} rounds of one 1-card /bin/true task per configuration (syscall filter off/on, the task dir's own file system off/on; bwrap and native engines), interleaved`,
  run,
};
