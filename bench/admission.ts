import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { silentLogger } from '../src/platform/logger.js';
import { createCaTrustingFetch } from '../src/platform/tls.js';
import { startWorker } from '../worker/daemon.js';
import { SimSampler } from '../worker/samplers/sim-sampler.js';
import { prepareSandbox } from '../worker/sandbox-setup.js';
import { CLI_PATH, startChildMaster } from './child-master.js';
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
const execFileP = promisify(execFile);

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

async function token(dataDir: string, name: string, roles: string[], workerId?: string): Promise<string> {
  const args = [CLI_PATH, 'token', 'create', '--data-dir', dataDir, '--name', name, '--json'];
  for (const r of roles) args.push('--role', r);
  if (workerId) args.push('--worker-id', workerId);
  const { stdout } = await execFileP(process.execPath, args);
  return (JSON.parse(stdout) as { token: string }).token;
}

interface TaskTimes {
  state: string;
  approved_at: string;
  started_at: string | null;
  finished_at: string | null;
}

async function runAdmission(): Promise<OpResult[]> {
  const master = await startChildMaster({ executables: [{ path: '/bin/true' }] });
  const trusting = createCaTrustingFetch(master.caPem);
  const workerDir = mkdtempSync(join(tmpdir(), 'gpu-broker-bench-worker-'));
  const clients: Client[] = [];
  let worker: Awaited<ReturnType<typeof startWorker>> | null = null;
  try {
    const connect = async (t: string) => {
      const client = new Client({ name: 'bench-admission', version: '0' });
      await client.connect(
        new StreamableHTTPClientTransport(new URL('/mcp', master.url), {
          requestInit: { headers: { Authorization: `Bearer ${t}` } },
          fetch: trusting.fetch,
        }),
      );
      clients.push(client);
      return client;
    };
    const alice = await connect(await token(master.dataDir, 'bench-alice', ['submitter']));
    const rita = await connect(await token(master.dataDir, 'bench-rita', ['reviewer']));
    const sampler = new SimSampler({ count: 8, seed: 'bench-worker' });
    // Tasks run in the real sandbox, so admission latency includes setting it up.
    const sandbox = await prepareSandbox({ isolation: 'bwrap', dataDir: workerDir, sampler });
    worker = await startWorker({
      sandbox: sandbox.setup,
      masterUrl: master.url,
      token: await token(master.dataDir, 'bench-worker', ['worker'], 'bench-worker'),
      workerId: 'bench-worker',
      dataDir: workerDir,
      sampler,
      ca: master.caPem,
      logger: silentLogger(),
    });
    const call = async <T>(c: Client, name: string, args: Record<string, unknown>): Promise<T> => {
      const r = await c.callTool({ name, arguments: args });
      if (r.isError) throw new Error(`${name}: ${JSON.stringify(r.content)}`);
      return r.structuredContent as T;
    };
    // Wait (bounded) until the worker's cards are schedulable.
    const ready = Date.now() + 15_000;
    for (;;) {
      const cards = await call<{ cards: Array<{ state: string }> }>(alice, 'list_cards', {});
      if (cards.cards.filter((c) => c.state === 'AVAILABLE').length === 8) break;
      if (Date.now() > ready) throw new Error('the bench worker never became available');
      await new Promise((r) => setTimeout(r, 50));
    }

    let key = 0;
    const admitOne = async (): Promise<TaskTimes> => {
      const p = await call<{ proposal_id: string; revision_id: string; digest: string }>(
        alice,
        'create_proposal',
        {
          spec: SPEC,
          idempotency_key: `adm-${key++}`,
        },
      );
      await call(alice, 'confirm_revision', {
        proposal_id: p.proposal_id,
        revision_id: p.revision_id,
        idempotency_key: `adm-${key++}`,
      });
      const approved = await call<{ task_id: string }>(rita, 'submit_review', {
        proposal_id: p.proposal_id,
        revision_id: p.revision_id,
        revision_digest: p.digest,
        decision: 'APPROVE',
        comments: 'bench',
        idempotency_key: `adm-${key++}`,
      });
      const waited = await call<{ task: TaskTimes; timed_out: boolean }>(alice, 'wait_for_task', {
        task_id: approved.task_id,
        timeout_seconds: 20,
      });
      if (waited.timed_out || waited.task.state !== 'COMPLETED')
        throw new Error(`task ${approved.task_id} ended ${waited.task.state}`);
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
    await Promise.allSettled(clients.map((c) => c.close()));
    await worker?.close();
    await trusting.close();
    await master.stop();
    rmSync(workerDir, { recursive: true, force: true });
  }
}

/** The admission-latency section of `npm run bench`. */
export const admissionSection: BenchSection = {
  name: 'admission',
  description: 'approval → the worker’s started report, one local worker, zero-duration tasks',
  run: runAdmission,
};
