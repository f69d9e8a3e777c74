import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { createCaTrustingFetch } from '../src/platform/tls.js';
import { startChildMaster } from './child-master.js';
import { type ChildWorker, startChildWorker } from './child-worker.js';
import { BenchClients, callTool, keySequence, waitForCards } from './harness.js';
import { type BenchSection, type OpResult, summarise } from './stats.js';

/**
 * The whole path of a task, end to end (issue 37 item 4): E2E_LOOPS (8) loops in flight, each an agent
 * principal that proposes a 1-card `/bin/true` task (create_proposal, confirm_revision), a reviewer
 * principal that approves that revision (submit_review APPROVE), and the agent waiting for the task
 * (wait_for_task), until E2E_TASKS (500) tasks are done. Master (`gpu-broker serve`) and worker
 * (`gpu-broker worker --gpus sim:8`, `--isolation` E2E_ISOLATION, default none) each run in a child
 * process; the clients are the real MCP SDK's, over HTTPS, in this process.
 *
 * Printed: tasks/s over the measured loops; approval → started p50/p99 from each task's own timestamps
 * (approved_at, started_at; the master's clock, millisecond resolution); master and worker CPU ms per
 * task from /proc/PID/stat (utime + stime, the worker's with its reaped children) before and after.
 * E2E_WARMUP (32) tasks run first and are not counted.
 *
 * E2E_BASE=DIR (a built older tree, e.g. a `git archive` of the commit before a change + `npm run
 * build`) runs E2E_ROUNDS (3) rounds, each the older tree's master and worker then this tree's, so both
 * share the machine's load; without it, one round of this tree.
 */

const TASKS = Number(process.env['E2E_TASKS'] ?? 500);
const LOOPS = Number(process.env['E2E_LOOPS'] ?? 8);
const WARMUP = Number(process.env['E2E_WARMUP'] ?? 32);
const ROUNDS = Number(process.env['E2E_ROUNDS'] ?? 3);
const ISOLATION = process.env['E2E_ISOLATION'] ?? 'none';
const BASE = process.env['E2E_BASE'];

const SPEC = {
  title: 'e2e bench',
  objective: 'measure the whole path of a task',
  success_criteria: 'exits 0',
  cards: { count: 1 },
  runtime: { kind: 'process', argv: ['/bin/true'] },
  outputs: [],
  time_limit_seconds: 60,
  notes: 'zero-duration benchmark task',
};

/** CPU seconds of process `pid` (utime + stime; USER_HZ 100), with its reaped children if asked. */
function cpuSeconds(pid: number, withReaped: boolean): number {
  const f = statFields(pid);
  const own = Number(f[11]) + Number(f[12]);
  return (withReaped ? own + Number(f[13]) + Number(f[14]) : own) / 100;
}

/** System (kernel) CPU seconds of process `pid` alone: its share says how much is syscalls (writes). */
function systemSeconds(pid: number): number {
  return Number(statFields(pid)[12]) / 100;
}

/** The fields of /proc/PID/stat after the command name (which may hold spaces). */
function statFields(pid: number): string[] {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
}

/** One task's loop: agent proposes and confirms, reviewer approves, agent waits; returns the task id. */
async function oneTask(agent: Client, reviewer: Client, nextKey: () => string): Promise<string> {
  const p = await callTool<{ proposal_id: string; revision_id: string; digest: string }>(
    agent,
    'create_proposal',
    { spec: SPEC, idempotency_key: nextKey() },
  );
  await callTool(agent, 'confirm_revision', {
    proposal_id: p.proposal_id,
    revision_id: p.revision_id,
    idempotency_key: nextKey(),
  });
  const r = await callTool<{ task_id: string }>(reviewer, 'submit_review', {
    proposal_id: p.proposal_id,
    revision_id: p.revision_id,
    revision_digest: p.digest,
    decision: 'APPROVE',
    comments: 'bench',
    idempotency_key: nextKey(),
  });
  for (;;) {
    const w = await callTool<{ task: { state: string }; timed_out: boolean }>(agent, 'wait_for_task', {
      task_id: r.task_id,
      timeout_seconds: 20,
    });
    if (!w.timed_out) {
      if (w.task.state !== 'COMPLETED') throw new Error(`task ${r.task_id} ended ${w.task.state}`);
      return r.task_id;
    }
  }
}

/** `count` tasks through `LOOPS` concurrent loops; returns their ids. */
async function runLoops(
  agents: Client[],
  reviewers: Client[],
  nextKey: () => string,
  count: number,
): Promise<string[]> {
  const ids: string[] = [];
  let issued = 0;
  await Promise.all(
    agents.map(async (agent, i) => {
      while (issued < count) {
        issued++;
        ids.push(await oneTask(agent, reviewers[i]!, nextKey));
      }
    }),
  );
  return ids;
}

interface TreeRun {
  tasksPerSecond: number;
  seconds: number;
  approvedToStartedMs: number[];
  masterMsPerTask: number;
  /** Of masterMsPerTask, the part spent in the kernel (stime). */
  masterSystemMsPerTask: number;
  workerMsPerTask: number;
  errors: number;
}

/** One master and one worker of the tree whose CLI is `cliPath`, `TASKS` tasks measured. */
async function runTree(cliPath: string, label: string): Promise<TreeRun> {
  const master = await startChildMaster(
    { executables: [{ path: '/bin/true' }], require_isolation: ISOLATION !== 'none' },
    { cliPath },
  );
  const trusting = createCaTrustingFetch(master.caPem);
  const clients = new BenchClients(master.url, trusting.fetch, 'bench-e2e');
  let worker: ChildWorker | null = null;
  try {
    const agents: Client[] = [];
    const reviewers: Client[] = [];
    const agentToken = await master.createToken('e2e-agent', ['submitter']);
    const reviewerToken = await master.createToken('e2e-reviewer', ['reviewer']);
    for (let i = 0; i < LOOPS; i++) {
      agents.push(await clients.connect(agentToken));
      reviewers.push(await clients.connect(reviewerToken));
    }
    worker = await startChildWorker(master, 'e2e-worker', 8, {
      cliPath,
      args: ['--isolation', ISOLATION],
    });
    await waitForCards(
      agents[0]!,
      (cards) => cards.filter((c) => c.state === 'AVAILABLE').length === 8,
      30_000,
      'the e2e worker never became available',
    );
    const nextKey = keySequence(`e2e-${label}`);
    await runLoops(agents, reviewers, nextKey, WARMUP);
    const master0 = cpuSeconds(master.pid, false);
    const masterSystem0 = systemSeconds(master.pid);
    const worker0 = cpuSeconds(worker.pid, true);
    const started = performance.now();
    const ids = await runLoops(agents, reviewers, nextKey, TASKS);
    const seconds = (performance.now() - started) / 1000;
    const masterMsPerTask = ((cpuSeconds(master.pid, false) - master0) * 1000) / TASKS;
    const masterSystemMsPerTask = ((systemSeconds(master.pid) - masterSystem0) * 1000) / TASKS;
    const workerMsPerTask = ((cpuSeconds(worker.pid, true) - worker0) * 1000) / TASKS;
    const approvedToStartedMs: number[] = [];
    let errors = 0;
    for (const id of ids) {
      const { task } = await callTool<{
        task: { state: string; approved_at: string | null; started_at: string | null };
      }>(agents[0]!, 'get_task', { task_id: id });
      if (task.state !== 'COMPLETED' || !task.approved_at || !task.started_at) errors++;
      else approvedToStartedMs.push(Date.parse(task.started_at) - Date.parse(task.approved_at));
    }
    return {
      tasksPerSecond: TASKS / seconds,
      seconds,
      approvedToStartedMs,
      masterMsPerTask,
      masterSystemMsPerTask,
      workerMsPerTask,
      errors,
    };
  } finally {
    await clients.close();
    await worker?.stop();
    await trusting.close();
    await master.stop();
  }
}

function row(label: string, r: TreeRun): OpResult {
  const base = summarise(
    'e2e',
    `${TASKS} tasks, ${LOOPS} loops, ${label}`,
    r.approvedToStartedMs,
    r.errors,
    r.seconds,
    `p50/p99 = approval → started; CPU ms/task: master ${r.masterMsPerTask.toFixed(2)} (kernel ${r.masterSystemMsPerTask.toFixed(2)}), worker ${r.workerMsPerTask.toFixed(2)} (with its reaped children); isolation ${ISOLATION}`,
  );
  return { ...base, calls: TASKS, callsPerSecond: r.tasksPerSecond };
}

async function runE2e(): Promise<OpResult[]> {
  const here = new URL('../src/cli/main.js', import.meta.url).pathname;
  const trees: { label: string; cli: string }[] = [];
  if (BASE) {
    const cli = join(BASE, 'dist/src/cli/main.js');
    if (!existsSync(cli)) throw new Error(`E2E_BASE: no ${cli} (build that tree first)`);
    trees.push({ label: 'base', cli });
  }
  trees.push({ label: 'this tree', cli: here });
  const rows: OpResult[] = [];
  const rounds = BASE ? ROUNDS : 1;
  for (let round = 1; round <= rounds; round++) {
    for (const t of trees) {
      const r = await runTree(t.cli, `${t.label.replace(' ', '-')}-${round}`);
      const out = row(rounds > 1 ? `${t.label}, round ${round}` : t.label, r);
      console.log(
        `  ${out.op}: ${out.callsPerSecond.toFixed(1)} tasks/s, approval → started p50 ${out.p50Ms} ms p99 ${out.p99Ms} ms; ${out.notes}`,
      );
      rows.push(out);
    }
  }
  return rows;
}

/** The end-to-end section of `npm run bench`: propose → confirm → approve → run, 8 loops in flight. */
export const e2eSection: BenchSection = {
  name: 'e2e',
  description: `${TASKS} 1-card /bin/true tasks end to end (create_proposal, confirm_revision, submit_review APPROVE, wait_for_task), ${LOOPS} loops in flight, master and a worker with 8 simulated cards in child processes`,
  run: runE2e,
};
