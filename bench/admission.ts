import { createCaTrustingFetch } from '../src/platform/tls.js';
import { startChildMaster } from './child-master.js';
import { BenchClients, callTool, keySequence, proposeAndApprove } from './harness.js';
import { type BenchWorker, startBenchWorker } from './in-process-worker.js';
import { type BenchSection, type OpResult, summarise } from './stats.js';

/**
 * Admission latency (issue 3): how long from a reviewer's approval to the worker's `started` report, with
 * one local worker on 8 simulated cards and zero-duration tasks (`/bin/true`). The master runs in its own
 * process (`gpu-broker serve`), the worker in this one, connected over WSS with the dev CA, as in a
 * real deployment on one host. Tasks go one at a time (the next is approved once the previous completed),
 * so the numbers are admission without queueing: the scheduling pass, the fenced lease, the assign over
 * WSS, the worker's fencing and spawn, and the `started` report applied by the master. Both ends of each
 * interval are the master's own timestamps (approved_at, started_at, finished_at; 1 ms resolution).
 */

const WARMUP = 20;
const TASKS = 300;
const MAX_SECONDS = 60;

const SPEC = {
  title: 'admission bench',
  objective: 'measure admission latency',
  success_criteria: 'exits 0',
  cards: { count: 1 },
  runtime: { kind: 'process', argv: ['/bin/true'] },
  outputs: [],
  time_limit_seconds: 60,
  notes: 'zero-duration benchmark task',
};

interface TaskTimes {
  state: string;
  approved_at: string;
  started_at: string | null;
  finished_at: string | null;
}

async function runAdmission(): Promise<OpResult[]> {
  const master = await startChildMaster({ executables: [{ path: '/bin/true' }] });
  const trusting = createCaTrustingFetch(master.caPem);
  const clients = new BenchClients(master.url, trusting.fetch, 'bench-admission');
  let worker: BenchWorker | null = null;
  try {
    const alice = await clients.connect(await master.createToken('bench-alice', ['submitter']));
    const rita = await clients.connect(await master.createToken('bench-rita', ['reviewer']));
    worker = await startBenchWorker(master, alice, { workerId: 'bench-worker', cards: 8 });

    const nextKey = keySequence('adm');
    const admitOne = async (): Promise<TaskTimes> => {
      const taskId = await proposeAndApprove(alice, rita, SPEC, nextKey);
      const waited = await callTool<{ task: TaskTimes; timed_out: boolean }>(alice, 'wait_for_task', {
        task_id: taskId,
        timeout_seconds: 20,
      });
      if (waited.timed_out || waited.task.state !== 'COMPLETED')
        throw new Error(`task ${taskId} ended ${waited.task.state}`);
      return waited.task;
    };

    for (let i = 0; i < WARMUP; i++) await admitOne();
    const toStarted: number[] = [];
    const toCompleted: number[] = [];
    let errors = 0;
    const started = performance.now();
    const deadline = started + MAX_SECONDS * 1000;
    while (toStarted.length + errors < TASKS && performance.now() < deadline) {
      try {
        const t = await admitOne();
        const approvedAt = Date.parse(t.approved_at);
        toStarted.push(Date.parse(t.started_at!) - approvedAt);
        toCompleted.push(Date.parse(t.finished_at!) - approvedAt);
      } catch {
        errors++;
      }
    }
    const seconds = (performance.now() - started) / 1000;
    const notes =
      '1 worker, 8 sim cards, /bin/true one at a time; master in its own process, worker over WSS';
    return [
      summarise('admission', 'approval → started report applied', toStarted, errors, seconds, notes),
      summarise('admission', 'approval → COMPLETED (cleanup receipt)', toCompleted, errors, seconds, notes),
    ];
  } finally {
    await clients.close();
    await worker?.close();
    await trusting.close();
    await master.stop();
  }
}

/** The admission-latency section of `npm run bench`. */
export const admissionSection: BenchSection = {
  name: 'admission',
  description: 'approval → the worker’s started report, one local worker, zero-duration tasks',
  run: runAdmission,
};
