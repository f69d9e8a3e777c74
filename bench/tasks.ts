import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createCaTrustingFetch } from '../src/platform/tls.js';
import { type ChildMaster, CLI_PATH, startChildMaster } from './child-master.js';
import { BenchClients, callTool, keySequence, proposeAndApprove, waitForCards } from './harness.js';
import { type BenchSection, type OpResult, summarise } from './stats.js';

/**
 * Task throughput through one local worker (issue 21 item 7): BENCH_TASKS (500) approved 1-card
 * `/bin/true` tasks run by one worker with 8 simulated cards, once with `--isolation none`, once sandboxed
 * by bwrap + setpriv + env and, on a root host, once by the native sandbox (ADR 0038), in the same run so that the two rows share the machine's load. Master and worker are each their
 * own process, started as an operator would (`gpu-broker serve`, `gpu-broker worker --gpus sim:8`), so
 * neither's CPU or memory is the load generator's (a worker in this process would fork from a heap that
 * holds the MCP clients too, and fork's cost grows with it).
 *
 * The worker connects first and its cards are cordoned while the tasks are queued; uncordoning them
 * starts the measured part, which ends when the last task is COMPLETED (cleanup receipt applied).
 * tasks/s = tasks / that time; CPU ms per task: the worker's (with its reaped children: bwrap, setpriv,
 * env, the task) and the master's, from /proc/PID/stat over the same interval, and the whole machine's
 * from /proc/stat (machineBusySeconds: it also holds the sandbox teardown charged to the host's init).
 *
 * BENCH_TASKS_ISOLATION=none|bwrap|native runs one row only; GPU_BROKER_BENCH_WORKER_NODE_ARGS (e.g.
 * "--cpu-prof --cpu-prof-dir=/tmp/prof") goes to the worker's node, as ..._MASTER_NODE_ARGS to the master's.
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

/** none: `--isolation none`; bwrap: the sandbox built by bwrap + setpriv + env; native: by gpu-broker-sandbox (ADR 0038). */
type Isolation = 'none' | 'bwrap' | 'native';

/** CPU seconds of process `pid` alone (utime, stime; USER_HZ 100), and with its reaped children. */
function cpuOf(pid: number): { own: number; withReaped: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const own = (Number(rest[11]) + Number(rest[12])) / 100;
  return { own, withReaped: own + (Number(rest[13]) + Number(rest[14])) / 100 };
}

/**
 * CPU seconds the whole machine spent busy (user, nice, system, irq, softirq over all cores; USER_HZ 100).
 * Per task this also counts what no process of ours is charged for: a bwrap sandbox's PID-namespace init
 * outlives bwrap (bwrap exits on the task's status, before its init has torn the namespaces down), so
 * the host's init reaps it and is charged its teardown; and the kernel's own workers.
 */
function machineBusySeconds(): number {
  const fields = readFileSync('/proc/stat', 'utf8')
    .split('\n', 1)[0]!
    .trim()
    .split(/\s+/)
    .slice(1)
    .map(Number);
  const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0] = fields;
  return (user + nice + system + irq + softirq) / 100;
}

/**
 * CPU seconds of the worker: its own (the event loop, what caps tasks/s), and with every descendant,
 * reaped or alive (bwrap, setpriv, env, the tasks; the spawner, which reaps the tasks itself, ADR 0032).
 */
function cpuSeconds(pid: number): { own: number; all: number } {
  const self = cpuOf(pid);
  let all = self.withReaped;
  const walk = (p: number): void => {
    let kids: string[] = [];
    try {
      kids = readFileSync(`/proc/${p}/task/${p}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);
    } catch {
      return;
    }
    for (const k of kids) {
      try {
        all += cpuOf(Number(k)).withReaped;
        walk(Number(k));
      } catch {
        // exited while we looked
      }
    }
  };
  walk(pid);
  return { own: self.own, all };
}

/** `gpu-broker worker` with 8 simulated cards; its log goes to a file (a pipe could make it wait). */
async function startWorkerProcess(
  master: ChildMaster,
  dir: string,
  isolation: Isolation,
): Promise<{ pid: number; stop(): Promise<void> }> {
  const tokenFile = join(dir, 'worker.token');
  const caFile = join(dir, 'ca.pem');
  writeFileSync(tokenFile, await master.createToken('bench-worker', ['worker'], 'bench-worker'), {
    mode: 0o600,
  });
  writeFileSync(caFile, master.caPem);
  const log = openSync(join(dir, 'worker.log'), 'w');
  const nodeArgs = (process.env['GPU_BROKER_BENCH_WORKER_NODE_ARGS'] ?? '').split(' ').filter(Boolean);
  const child: ChildProcess = spawn(
    process.execPath,
    [
      ...nodeArgs,
      CLI_PATH,
      'worker',
      '--url',
      master.url,
      '--token-file',
      tokenFile,
      '--ca-file',
      caFile,
      '--id',
      'bench-worker',
      '--gpus',
      'sim:8',
      '--isolation',
      isolation === 'none' ? 'none' : 'bwrap',
      ...(isolation === 'none' ? [] : ['--sandbox-engine', isolation]),
      '--data-dir',
      join(dir, 'state'),
      '--json',
    ],
    { stdio: ['ignore', log, log] },
  );
  closeSync(log);
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  return {
    pid: child.pid!,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
    },
  };
}

async function runOnce(isolation: Isolation): Promise<OpResult> {
  const master = await startChildMaster({
    executables: [{ path: '/bin/true' }],
    require_isolation: isolation !== 'none',
  });
  const trusting = createCaTrustingFetch(master.caPem);
  const dir = mkdtempSync(join(tmpdir(), 'gpu-broker-bench-tasks-'));
  const clients = new BenchClients(master.url, trusting.fetch, 'bench-tasks');
  let worker: Awaited<ReturnType<typeof startWorkerProcess>> | null = null;
  try {
    const alice = await clients.connect(await master.createToken('bench-alice', ['submitter']));
    const rita = await clients.connect(await master.createToken('bench-rita', ['reviewer']));
    const op = await clients.connect(await master.createToken('bench-op', ['operator']));
    worker = await startWorkerProcess(master, dir, isolation);
    await waitForCards(
      alice,
      (cards) => cards.filter((c) => c.state === 'AVAILABLE').length === 8,
      30_000,
      'the bench worker never became available',
    );
    const nextKey = keySequence(`tasks-${isolation}`);
    const cards = Array.from({ length: 8 }, (_, index) => index);
    for (const index of cards)
      await callTool(op, 'cordon_card', { worker_id: 'bench-worker', index, idempotency_key: nextKey() });
    // Queue every task first, so the measured part is the path from assign to exited alone.
    const ids: string[] = [];
    for (let i = 0; i < TASKS; i += APPROVERS) {
      const batch = Array.from({ length: Math.min(APPROVERS, TASKS - i) }, () =>
        proposeAndApprove(alice, rita, SPEC, nextKey),
      );
      ids.push(...(await Promise.all(batch)));
    }
    const workerCpu0 = cpuSeconds(worker.pid);
    const masterCpu0 = master.cpuSeconds();
    const machine0 = machineBusySeconds();
    const started = performance.now();
    for (const index of cards)
      await callTool(op, 'uncordon_card', { worker_id: 'bench-worker', index, idempotency_key: nextKey() });
    // Polled, not one wait per task: the bench's own calls should cost the master little.
    const deadline = Date.now() + 300_000;
    for (;;) {
      const st = await callTool<{ tasks_by_state: Record<string, number> }>(alice, 'get_status', {});
      const c = st.tasks_by_state;
      if ((c['COMPLETED'] ?? 0) + (c['FAILED'] ?? 0) + (c['CANCELLED'] ?? 0) >= TASKS) break;
      if (Date.now() > deadline) throw new Error(`tasks not done in 300 s: ${JSON.stringify(c)}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    const seconds = (performance.now() - started) / 1000;
    const workerCpu1 = cpuSeconds(worker.pid);
    const workerCpu = (workerCpu1.all - workerCpu0.all) / TASKS;
    const workerOwnCpu = (workerCpu1.own - workerCpu0.own) / TASKS;
    const masterCpu = (master.cpuSeconds() - masterCpu0) / TASKS;
    const machineCpu = (machineBusySeconds() - machine0) / TASKS;
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
    const row = summarise(
      'tasks',
      `${TASKS} × 1-card /bin/true, ${isolation === 'none' ? 'isolation none' : isolation === 'bwrap' ? 'sandbox: bwrap' : 'sandbox: native'}`,
      taskMs,
      errors,
      seconds,
      `worker process × 8 sim cards, all queued first; p50/p99 = started → finished; CPU ms/task: worker (with bwrap and tasks) ${(workerCpu * 1000).toFixed(1)} (its own process ${(workerOwnCpu * 1000).toFixed(1)}), master ${(masterCpu * 1000).toFixed(1)}, whole machine ${(machineCpu * 1000).toFixed(1)} (with the bench's client and what no process of these is charged for)`,
    );
    // tasks/s over all tasks, not only those that completed
    return { ...row, calls: TASKS, callsPerSecond: TASKS / seconds };
  } finally {
    await clients.close();
    await worker?.stop();
    await trusting.close();
    await master.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

async function runTasks(): Promise<OpResult[]> {
  const only = process.env['BENCH_TASKS_ISOLATION'];
  // The native sandbox is a root worker's (and built by npm run build).
  const all: Isolation[] = process.getuid?.() === 0 ? ['none', 'bwrap', 'native'] : ['none', 'bwrap'];
  const modes: Isolation[] = all.filter((m) => only === undefined || only === m);
  const rows: OpResult[] = [];
  for (const mode of modes) rows.push(await runOnce(mode));
  return rows;
}

/** The task-throughput section of `npm run bench`: sandbox vs no sandbox, side by side. */
export const tasksSection: BenchSection = {
  name: 'tasks',
  description: `${TASKS} queued 1-card /bin/true tasks through one local worker, --isolation none vs the sandbox built by bwrap and by the native sandbox`,
  run: runTasks,
};
