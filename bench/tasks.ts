import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { silentLogger } from '../src/platform/logger.js';
import { createCaTrustingFetch } from '../src/platform/tls.js';
import { startWorker } from '../worker/daemon/start-worker.js';
import { SimSampler } from '../worker/samplers/sim-sampler.js';
import { prepareSandbox } from '../worker/sandbox/setup.js';
import { startChildMaster } from './child-master.js';
import { BenchClients, callTool, keySequence, proposeAndApprove, waitForCards } from './harness.js';
import { type BenchSection, type OpResult, summarise } from './stats.js';

/**
 * Task throughput through one local worker (issue 21 item 7): BENCH_TASKS (500) approved 1-card
 * `/bin/true` tasks, queued before the worker connects, then one worker with 8 simulated cards runs them
 * all; measured from the worker's start to the last task COMPLETED (cleanup receipt applied), once with
 * `--isolation none` and once in bwrap, in the same run so that the two rows share the machine's load.
 * The master is its own process (`gpu-broker serve`), the worker runs in this one over WSS.
 * CPU seconds are per task: the master's (from /proc/PID/stat), and this process's with its reaped
 * children (the worker, its bwrap/task processes; the MCP clients are idle while the tasks run).
 *
 * BENCH_TASKS_ISOLATION=none|bwrap runs one row only (for profiling, e.g. with `node --cpu-prof`).
 */

const TASKS = Number(process.env['BENCH_TASKS'] ?? 500);
const APPROVERS = 4;

const SPEC = {
  title: 'tasks bench',
  objective: 'measure task throughput',
  success_criteria: 'exits 0',
  cards: { count: 1 },
  runtime: { kind: 'process', argv: ['/bin/true'] },
  outputs: [],
  time_limit_seconds: 60,
  notes: 'zero-duration benchmark task',
};

type Isolation = 'none' | 'bwrap';

/** CPU seconds of this process and its reaped children (utime, stime, cutime, cstime; USER_HZ 100). */
function selfCpuSeconds(): number {
  const stat = readFileSync('/proc/self/stat', 'utf8');
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(rest[11]) + Number(rest[12]) + Number(rest[13]) + Number(rest[14])) / 100;
}

async function runOnce(isolation: Isolation): Promise<OpResult> {
  const master = await startChildMaster({
    executables: [{ path: '/bin/true' }],
    require_isolation: isolation !== 'none',
  });
  const trusting = createCaTrustingFetch(master.caPem);
  const workerDir = mkdtempSync(join(tmpdir(), 'gpu-broker-bench-tasks-'));
  const clients = new BenchClients(master.url, trusting.fetch, 'bench-tasks');
  let worker: Awaited<ReturnType<typeof startWorker>> | null = null;
  try {
    const alice = await clients.connect(await master.createToken('bench-alice', ['submitter']));
    const rita = await clients.connect(await master.createToken('bench-rita', ['reviewer']));
    const workerToken = await master.createToken('bench-worker', ['worker'], 'bench-worker');
    // Queue every task first, so the measured part is the worker's path from assign to exited alone.
    const nextKey = keySequence(`tasks-${isolation}`);
    const ids: string[] = [];
    for (let i = 0; i < TASKS; i += APPROVERS) {
      const batch = Array.from({ length: Math.min(APPROVERS, TASKS - i) }, () =>
        proposeAndApprove(alice, rita, SPEC, nextKey),
      );
      ids.push(...(await Promise.all(batch)));
    }
    const sampler = new SimSampler({ count: 8, seed: 'bench-worker' });
    const sandbox =
      isolation === 'none'
        ? { kind: 'none' as const }
        : (await prepareSandbox({ isolation, dataDir: workerDir, sampler })).setup;
    const cpu0 = selfCpuSeconds();
    const masterCpu0 = master.cpuSeconds();
    const started = performance.now();
    worker = await startWorker({
      sandbox,
      masterUrl: master.url,
      token: workerToken,
      workerId: 'bench-worker',
      dataDir: workerDir,
      sampler,
      ca: master.caPem,
      logger: silentLogger(),
    });
    // Polled, not one wait per task: the bench's own calls should cost the master little.
    const deadline = Date.now() + 300_000;
    for (;;) {
      const st = await callTool<{ tasks_by_state: Record<string, number> }>(alice, 'get_status', {});
      const c = st.tasks_by_state;
      if ((c['COMPLETED'] ?? 0) + (c['FAILED'] ?? 0) + (c['CANCELLED'] ?? 0) >= TASKS) break;
      if (Date.now() > deadline) throw new Error(`tasks not done in 300 s: ${JSON.stringify(c)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    const seconds = (performance.now() - started) / 1000;
    const workerCpu = (selfCpuSeconds() - cpu0) / TASKS;
    const masterCpu = (master.cpuSeconds() - masterCpu0) / TASKS;
    const taskMs: number[] = [];
    let errors = 0;
    for (const id of ids) {
      const t = (
        await callTool<{ task: { state: string; started_at: string | null; finished_at: string | null } }>(
          alice,
          'get_task',
          { task_id: id },
        )
      ).task;
      if (t.state !== 'COMPLETED') errors++;
      else taskMs.push(Date.parse(t.finished_at!) - Date.parse(t.started_at!));
    }
    // The cards are free again once every cleanup receipt is in (not part of the measured time).
    await waitForCards(
      alice,
      (cards) => cards.filter((c) => c.state === 'AVAILABLE').length === 8,
      15_000,
      'the bench worker did not free its cards',
    );
    const row = summarise(
      'tasks',
      `${TASKS} × 1-card /bin/true, isolation ${isolation}`,
      taskMs,
      errors,
      seconds,
      `1 worker × 8 sim cards, all queued first; p50/p99 = started → finished; CPU ms/task: worker+tasks ${(workerCpu * 1000).toFixed(1)}, master ${(masterCpu * 1000).toFixed(1)}`,
    );
    // tasks/s over all tasks, not only those that completed
    return { ...row, calls: TASKS, callsPerSecond: TASKS / seconds };
  } finally {
    await clients.close();
    await worker?.close();
    await trusting.close();
    await master.stop();
    rmSync(workerDir, { recursive: true, force: true });
  }
}

async function runTasks(): Promise<OpResult[]> {
  const only = process.env['BENCH_TASKS_ISOLATION'];
  const modes: Isolation[] = only === 'none' || only === 'bwrap' ? [only] : ['none', 'bwrap'];
  const rows: OpResult[] = [];
  for (const mode of modes) rows.push(await runOnce(mode));
  return rows;
}

/** The task-throughput section of `npm run bench`: sandbox vs no sandbox, side by side. */
export const tasksSection: BenchSection = {
  name: 'tasks',
  description: `${TASKS} queued 1-card /bin/true tasks through one local worker, --isolation none vs bwrap`,
  run: runTasks,
};
