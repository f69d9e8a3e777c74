import { execFileSync, spawnSync } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run as workerCli } from '../../../src/cli/host/worker.js';
import type { TaskView } from '../../../src/contracts/views.js';
import { createLogger, silentLogger } from '../../../src/platform/logger.js';
import { type RunningWorker, startWorker } from '../../../worker/daemon/start-worker.js';
import { prepareSandbox } from '../../../worker/sandbox/setup.js';
import type { SlurmBackend, SlurmSandbox } from '../../../worker/slurm/backend.js';
import { SlurmDriver } from '../../../worker/slurm/cli/driver.js';
import { jobMarker } from '../../../worker/slurm/job-setup.js';
import { slurmPoolSampler } from '../../../worker/slurm/sampler.js';
import { runCli } from '../../support/cli.js';
import { approveTask, clusterConfig, getTask, shellSpec, waitUntilSettled } from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectOk } from '../../support/mcp.js';
import { ensureSlurm, startMultiNodeSlurm } from '../../support/slurm.js';
import { makeTempDir, removeTempDirs } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';

/**
 * The Slurm backend through a real master and the real single-node Slurm of this machine (partition
 * `gpu`, node `localhost`, 8 fake GPUs; scripts/slurm/): proposal, review, sbatch, the start
 * binding on the task and the cards, logs, outputs, cancel, time limit, a job scancelled behind the
 * broker's back, worker restart with a job still running, a foreign job's GPUs not offered, and a stale
 * broker job fenced off the cluster. One file, run serially: the tests share the one Slurm (another
 * engineer's tests may use it at the same time, so counts of free GPUs are read, never assumed).
 */

const PARTITION = 'gpu';
/**
 * The master's config for this file, in one place. The hostile-env test's spec sets interpreter and
 * loader control variables (BASH_ENV, ENV, SHELLOPTS, PS4, LD_DEBUG…) on purpose: where the policy gives
 * error findings for such names, allow them here (policy.allowed_control_env) so the spec is approved
 * and the worker's defences are what the test exercises.
 */
const MASTER_CONFIG = clusterConfig({
  policy: {
    allowed_control_env: ['BASH_ENV', 'ENV', 'SHELLOPTS', 'PS4', 'LD_DEBUG', 'LD_DEBUG_OUTPUT', 'PYTHONPATH'],
    scripts: [{ interpreter: '/usr/bin/python3', script_from_inputs: true }],
  },
  timing: { cleanup_timeout_seconds: 60, lease_grace_seconds: 30, worker_offline_seconds: 5 },
});
const avail = ensureSlurm();
const slurmUp = avail.ok;
const slurmEnv = avail.ok ? avail.slurm.env : {};
const WORKER_ID = `slurm-${process.pid}`;
/** The worker's operator-fixed sbatch arguments; one test adds `--begin` to make a job pend in Slurm. */
const extraArgs: string[] = [];

let m: TestMaster;
let alice: Client;
let rita: Client;
let ops: Client;
let worker: RunningWorker;
let dataDir: string;
let dataset: string;
/**
 * Under /var/tmp, which every sandbox binds from the host (unlike /tmp): the worker's data dir and its
 * token file live here so that only hiding them keeps them from a task.
 */
let secretsRoot: string;
let tokenFile: string;
const TOKEN_TEXT = `worker-token-${process.pid}-do-not-leak`;
/** Mutable: one test points the sandbox at a device dir without the GPUs' nodes, one turns it off. */
let backend: { -readonly [K in keyof SlurmBackend]: SlurmBackend[K] };

type CardRow = { worker_id: string; index: number; state: string; task_id: string | null; slurm: unknown };

async function startSlurmWorker(
  b: SlurmBackend = backend,
  workerId = WORKER_ID,
  dir = dataDir,
): Promise<RunningWorker> {
  const sampler = slurmPoolSampler({ driver: b.driver, partition: PARTITION, workerId });
  return startWorker({
    masterUrl: m.url,
    token: m.createToken(`w-${workerId}-${Date.now()}`, ['worker'], workerId),
    workerId,
    dataDir: dir,
    sampler,
    ...(m.caPem === null ? {} : { ca: m.caPem }),
    logger: process.env['SLURM_TEST_LOG']
      ? createLogger('debug', { destination: pino.destination(process.env['SLURM_TEST_LOG']) })
      : silentLogger(),
    sampleIntervalMs: 300,
    backoff: { initialMs: 50, maxMs: 500 },
    // The hello says how tasks are isolated: bwrap on the nodes when the backend sandboxes its ranks.
    sandbox: b.sandbox?.setup ?? { kind: 'none' },
    slurm: { backend: b, sampler },
    // A named data set on the "shared filesystem", as `--mount dataset=DIR` declares it.
    mounts: [{ name: 'dataset', host_path: dataset, read_only: true }],
  });
}

/** The bwrap sandbox a `--backend slurm` worker prepares (as the CLI does), with the test Slurm's fake GPU dir. */
async function slurmSandbox(dir: string, gpuDevDir: string, token?: string): Promise<SlurmSandbox> {
  const prepared = await prepareSandbox({
    isolation: 'bwrap',
    dataDir: dir,
    // As `gpu-broker worker --token-file FILE` does: the token file is hidden in every rank's sandbox.
    hiddenPaths: token === undefined ? [] : [token],
    sampler: slurmPoolSampler({
      driver: new SlurmDriver({ env: slurmEnv }),
      partition: PARTITION,
      workerId: 'x',
    }),
    containerEngine: 'none',
  });
  if (prepared.setup.kind !== 'bwrap') throw new Error('bwrap is needed for the Slurm sandbox tests');
  return { setup: prepared.setup, gpuDevDir };
}

async function cards(): Promise<CardRow[]> {
  const r = expectOk(await callTool<{ cards: CardRow[] }>(ops, 'list_cards', {}));
  return r.cards.filter((c) => c.worker_id === WORKER_ID);
}

function jobState(jobId: string, env: Record<string, string> = slurmEnv): string {
  const out = spawnSync('scontrol', ['show', 'job', '-o', jobId], { encoding: 'utf8', env });
  return /JobState=(\S+)/.exec(out.stdout)?.[1] ?? 'GONE';
}

async function runningWithBinding(taskId: string): Promise<TaskView> {
  return waitFor(
    async () => {
      const t = await getTask(alice, taskId);
      return t.state === 'RUNNING' && t.slurm?.binding ? t : null;
    },
    { timeoutMs: 30_000, intervalMs: 200, what: `task ${taskId} RUNNING with a Slurm binding` },
  );
}

beforeAll(async () => {
  if (!slurmUp) return;
  m = await startTestMaster({ config: MASTER_CONFIG });
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  ops = await m.mcpClient(m.operatorToken);
  secretsRoot = mkdtempSync('/var/tmp/gpu-broker-slurm-secrets-');
  chmodSync(secretsRoot, 0o755);
  dataDir = join(secretsRoot, 'data');
  mkdirSync(dataDir, { mode: 0o755 });
  writeFileSync(join(dataDir, 'worker-secret.txt'), 'data-dir-secret\n', { mode: 0o644 });
  // World-readable on purpose: a careless operator's mode must not matter, hiding must.
  tokenFile = join(secretsRoot, 'worker.token');
  writeFileSync(tokenFile, `${TOKEN_TEXT}\n`, { mode: 0o644 });
  chmodSync(tokenFile, 0o644);
  dataset = makeTempDir('slurm-dataset');
  chmodSync(dataset, 0o755);
  writeFileSync(join(dataset, 'labels.txt'), 'cat\ndog\n', { mode: 0o644 });
  backend = {
    driver: new SlurmDriver({ env: slurmEnv }),
    partition: PARTITION,
    extraArgs,
    jobDir: join(makeTempDir('slurm-jobs'), 'jobs'),
    pollMs: 250,
    sandbox: await slurmSandbox(
      dataDir,
      join(avail.ok ? avail.slurm.localDir : '/nonexistent', 'dev'),
      tokenFile,
    ),
  };
  worker = await startSlurmWorker();
  await waitFor(async () => (await cards()).length === 8, {
    timeoutMs: 15_000,
    what: 'the pool of 8 GPUs listed',
  });
}, 60_000);

afterAll(async () => {
  await worker?.close();
  await m?.close();
  removeTempDirs();
  if (secretsRoot) rmSync(secretsRoot, { recursive: true, force: true });
});

describe.runIf(slurmUp)('Slurm backend against a real Slurm', () => {
  it('reports the partition as a pool: backend, partition and nodes in list_workers', async () => {
    const r = expectOk(await callTool<{ workers: Array<Record<string, unknown>> }>(ops, 'list_workers', {}));
    const w = r.workers.find((x) => x['worker_id'] === WORKER_ID)!;
    expect(w).toMatchObject({
      backend: 'slurm',
      slurm: { partition: PARTITION },
      cards: 8,
      isolation: 'bwrap',
    });
    expect((w['slurm'] as { nodes: Array<{ name: string; gpus: number }> }).nodes).toEqual([
      expect.objectContaining({ name: 'localhost', gpus: 8 }),
    ]);
  });

  it('runs a 2-card task through sbatch: job id, node and GPU indices on the task, logs and outputs', async () => {
    const taskId = await approveTask(
      alice,
      rita,
      shellSpec(
        'echo "cvd=$CUDA_VISIBLE_DEVICES ids=$GPU_BROKER_GPU_IDS job=$SLURM_JOB_ID"; echo to-stderr >&2; echo \'{"ok":true}\' > "$GPU_BROKER_OUTPUT_DIR/result.json"',
        { cards: { count: 2 }, outputs: [{ path: 'result.json', required: true }] },
      ),
    );
    const done = await waitUntilSettled(alice, taskId, 60_000);
    expect(done).toMatchObject({ state: 'COMPLETED', exit_code: 0, failure_reason: null });
    const slurm = done.slurm!;
    expect(slurm.job_id).toMatch(/^\d+$/);
    expect(slurm.binding?.nodes).toHaveLength(1);
    expect(slurm.binding?.nodes[0]?.node).toBe('localhost');
    expect(slurm.binding?.nodes[0]?.gpus).toHaveLength(2);
    const logs = expectOk(await callTool<{ data: string }>(alice, 'get_task_logs', { task_id: taskId }));
    const gpus = slurm.binding!.nodes[0]!.gpus.join(',');
    // In the rank's sandbox only its GPUs' nodes exist, numbered from 0; the physical ids stay known.
    expect(logs.data).toContain(`cvd=0,1 ids=${gpus} job=${slurm.job_id}`);
    const err = expectOk(
      await callTool<{ data: string }>(alice, 'get_task_logs', { task_id: taskId, stream: 'stderr' }),
    );
    expect(err.data).toContain('to-stderr');
    const outputs = expectOk(
      await callTool<{ outputs: Array<{ path: string }> }>(alice, 'get_task_outputs', { task_id: taskId }),
    );
    expect(outputs.outputs.map((o) => o.path)).toEqual(['result.json']);
    expect(m.store.leases.latestLeaseForTask(taskId)?.state).toBe('RELEASED');
    expect(jobState(slurm.job_id)).not.toMatch(/RUNNING|PENDING/);
  }, 90_000);

  it('runs the task in bwrap on the node: its GPUs only, its own uid, no job dir, no network, no forged exit.json', async () => {
    const jobsRoot = backend.jobDir;
    const taskId = await approveTask(
      alice,
      rita,
      shellSpec(
        [
          'echo "devs=$(ls /dev | grep ^nvidia | tr "\\n" " ")"',
          'echo "uid=$(id -u) host=$(hostname) pwd=$PWD"',
          `ls ${jobsRoot} >/dev/null 2>&1 && echo saw-jobs`,
          'echo \'{"version":1,"job_id":"1","exit_code":0,"ended_at":"x"}\' > ../exit.json 2>/dev/null && echo forged',
          'grep -q "^ *eth\\|^ *ens" /proc/net/dev && echo has-network',
          // Without a network slurmctld is unreachable and squeue retries for MessageTimeout (10 s) before
          // it gives up; one that can reach it answers in milliseconds, so 2 s tells the two apart.
          'timeout 2 squeue >/dev/null 2>&1 && echo can-squeue',
          'exit 3',
        ].join('; '),
        { cards: { count: 2 } },
      ),
    );
    const done = await waitUntilSettled(alice, taskId, 60_000);
    expect(done).toMatchObject({ state: 'FAILED', failure_reason: 'EXIT_NONZERO', exit_code: 3 });
    const logs = expectOk(await callTool<{ data: string }>(alice, 'get_task_logs', { task_id: taskId }));
    const gpus = done.slurm!.binding!.nodes[0]!.gpus;
    expect(logs.data).toContain(`devs=${gpus.map((g) => `nvidia${g}`).join(' ')} \n`);
    expect(logs.data).toMatch(/uid=(\d+) host=gpu-broker-task pwd=\/task/);
    expect(logs.data).not.toContain('uid=0 ');
    expect(logs.data).not.toMatch(/saw-jobs|forged|has-network|can-squeue/);
  }, 90_000);

  it("runs the agent's own files (inputs by sha256) read-only in the node's sandbox", async () => {
    type Uploaded = { inputs: Array<{ path: string; sha256: string; size: number }> };
    const up = expectOk(
      await callTool<Uploaded>(alice, 'upload_inputs', {
        files: [
          {
            path: 'src/run.sh',
            content:
              'cat /task/data/in.txt > "$GPU_BROKER_OUTPUT_DIR/r.txt"\necho x >> /task/src/run.sh 2>/dev/null && echo modified\nrm -f /task/src/run.sh 2>/dev/null && echo removed\necho ran-from-inputs\n',
          },
          { path: 'data/in.txt', content: 'hello-from-inputs\n' },
        ],
        idempotency_key: m.key(),
      }),
    );
    const taskId = await approveTask(
      alice,
      rita,
      shellSpec('sh /task/src/run.sh', {
        cards: { count: 1 },
        inputs: up.inputs,
        outputs: [{ path: 'r.txt', required: true }],
      }),
    );
    const done = await waitUntilSettled(alice, taskId, 60_000);
    expect(done, JSON.stringify(done)).toMatchObject({ state: 'COMPLETED', exit_code: 0 });
    const logs = expectOk(await callTool<{ data: string }>(alice, 'get_task_logs', { task_id: taskId }));
    expect(logs.data).toContain('ran-from-inputs');
    expect(logs.data).not.toMatch(/modified|removed/);
    const out = expectOk(
      await callTool<{ file: { content: string } | null }>(alice, 'get_task_outputs', {
        task_id: taskId,
        path: 'r.txt',
      }),
    );
    expect(out.file?.content).toBe('hello-from-inputs\n');
  }, 90_000);

  it('runs a script from the inputs in Python’s isolated mode on the rank (plan.argv: -E -s before the script)', async () => {
    type Uploaded = { inputs: Array<{ path: string; sha256: string; size: number }> };
    const main = [
      'import json, os, sys',
      'import helper',
      "out = {'flags': [sys.flags.ignore_environment, sys.flags.no_user_site], 'helper': helper.X}",
      "open(os.path.join(os.environ['GPU_BROKER_OUTPUT_DIR'], 'r.json'), 'w').write(json.dumps(out))",
      '',
    ].join('\n');
    const up = expectOk(
      await callTool<Uploaded>(alice, 'upload_inputs', {
        files: [
          { path: 'main.py', content: main },
          { path: 'helper.py', content: 'X = 42\n' },
        ],
        idempotency_key: m.key(),
      }),
    );
    const taskId = await approveTask(
      alice,
      rita,
      shellSpec('', {
        runtime: {
          kind: 'process',
          argv: ['/usr/bin/python3', 'main.py'],
          env: { PYTHONPATH: '/task/elsewhere' },
        },
        cards: { count: 1 },
        inputs: up.inputs,
        outputs: [{ path: 'r.json', required: true }],
      }),
    );
    const done = await waitUntilSettled(alice, taskId, 60_000);
    expect(done, JSON.stringify(done)).toMatchObject({ state: 'COMPLETED', exit_code: 0 });
    const out = expectOk(
      await callTool<{ file: { content: string } | null }>(alice, 'get_task_outputs', {
        task_id: taskId,
        path: 'r.json',
      }),
    );
    expect(JSON.parse(out.file?.content ?? 'null')).toEqual({ flags: [1, 1], helper: 42 });
  }, 90_000);

  it('binds a named data mount read-only at /mnt/<name> in the rank sandbox', async () => {
    const taskId = await approveTask(
      alice,
      rita,
      shellSpec(
        'echo "labels=$(tr "\\n" , < /mnt/dataset/labels.txt)"; echo x > /mnt/dataset/new 2>/dev/null && echo wrote-mount; ls /mnt',
        { cards: { count: 1 }, mounts: ['dataset'] },
      ),
    );
    const done = await waitUntilSettled(alice, taskId, 60_000);
    expect(done, JSON.stringify(done)).toMatchObject({ state: 'COMPLETED', exit_code: 0 });
    const logs = expectOk(await callTool<{ data: string }>(alice, 'get_task_logs', { task_id: taskId }));
    expect(logs.data).toContain('labels=cat,dog,');
    expect(logs.data).not.toContain('wrote-mount');
    expect(existsSync(join(dataset, 'new'))).toBe(false);
  }, 90_000);

  it('attack: a hidden path below a named mount stays hidden at /mnt/<name> on the node', async () => {
    const keys = join(dataset, 'keys');
    mkdirSync(keys, { recursive: true, mode: 0o755 });
    writeFileSync(join(keys, 'k'), 'the-secret\n', { mode: 0o644 });
    const sandbox = backend.sandbox!;
    backend.sandbox = {
      ...sandbox,
      setup: { ...sandbox.setup, hiddenPaths: [...sandbox.setup.hiddenPaths, keys] },
    };
    try {
      const taskId = await approveTask(
        alice,
        rita,
        shellSpec(
          'cat /mnt/dataset/labels.txt; ls -A /mnt/dataset/keys; cat /mnt/dataset/keys/k 2>/dev/null || echo NO_KEY',
          {
            cards: { count: 1 },
            mounts: ['dataset'],
          },
        ),
      );
      const done = await waitUntilSettled(alice, taskId, 60_000);
      expect(done, JSON.stringify(done)).toMatchObject({ state: 'COMPLETED', exit_code: 0 });
      const logs = expectOk(await callTool<{ data: string }>(alice, 'get_task_logs', { task_id: taskId }));
      expect(logs.data).toBe('cat\ndog\nNO_KEY\n');
    } finally {
      backend.sandbox = sandbox;
      rmSync(keys, { recursive: true, force: true });
    }
  }, 90_000);

  it('never runs the task unsandboxed: a GPU whose device node is missing on the node fails SETUP_FAILED', async () => {
    const sandbox = backend.sandbox!;
    backend.sandbox = { ...sandbox, gpuDevDir: makeTempDir('slurm-no-devices') };
    try {
      const taskId = await approveTask(alice, rita, shellSpec('echo the-task-ran', { cards: { count: 1 } }));
      const done = await waitUntilSettled(alice, taskId, 60_000);
      expect(done).toMatchObject({ state: 'FAILED', failure_reason: 'SETUP_FAILED' });
      expect(done.failure_detail).toMatch(
        /sandbox: node localhost rank 0: the device node \S+ of GPU \d+ is missing/,
      );
      const logs = expectOk(await callTool<{ data: string }>(alice, 'get_task_logs', { task_id: taskId }));
      expect(logs.data).not.toContain('the-task-ran');
    } finally {
      backend.sandbox = sandbox;
    }
  }, 90_000);

  it('shows the binding on the held slots while it runs, and cancel scancels the job (CANCELLED)', async () => {
    const taskId = await approveTask(alice, rita, shellSpec('echo up; sleep 300', { cards: { count: 2 } }));
    const running = await runningWithBinding(taskId);
    const jobId = running.slurm!.job_id;
    const held = (await cards()).filter((c) => c.task_id === taskId);
    expect(held).toHaveLength(2);
    for (const c of held) expect(c.slurm).toMatchObject({ job_id: jobId, binding: running.slurm!.binding });
    expectOk(await callTool(alice, 'cancel_task', { task_id: taskId, idempotency_key: m.key() }));
    // A cancel that lands between binding.json and the task's srun step used to start the task anyway
    // (job.sh swallowed the SIGTERM) and wait for Slurm's KillWait; test/integration/worker/slurm/cli/
    // job-log-cap.test.ts pins that job.sh now never starts it.
    // Up to 100 s: on a loaded machine Slurm can keep a job COMPLETING for ~66 s after the scancel (its
    // step's IO abandoned after 60 s, seen 2026-12-06), and the worker waits for the end, as it must:
    // the GPUs are not free before. (That run also showed the step's exit.json saying 0 for a job it had
    // cancelled: it now ends CANCELLED, not COMPLETED; job-outcome.test.ts pins it.)
    const done = await waitUntilSettled(alice, taskId, 100_000);
    expect(done, JSON.stringify(done)).toMatchObject({ state: 'CANCELLED' });
    expect(jobState(jobId)).not.toMatch(/RUNNING|PENDING/);
  }, 130_000);

  it("ends a task at the broker's own time limit (TIMED_OUT) and the Slurm job with it", async () => {
    const taskId = await approveTask(
      alice,
      rita,
      shellSpec('sleep 300', { cards: { count: 1 }, time_limit_seconds: 2 }),
    );
    const done = await waitUntilSettled(alice, taskId, 60_000);
    expect(done).toMatchObject({ state: 'FAILED', failure_reason: 'TIMED_OUT' });
    expect(jobState(done.slurm!.job_id)).not.toMatch(/RUNNING|PENDING/);
  }, 90_000);

  it("fails a task whose job was scancelled behind the broker's back (unsandboxed: --isolation none)", async () => {
    const sandbox = backend.sandbox;
    backend.sandbox = null;
    let running: TaskView;
    let taskId: string;
    try {
      taskId = await approveTask(alice, rita, shellSpec('sleep 300', { cards: { count: 1 } }));
      running = await runningWithBinding(taskId);
    } finally {
      backend.sandbox = sandbox;
    }
    execFileSync('scancel', [running.slurm!.job_id]);
    const done = await waitUntilSettled(alice, taskId, 60_000);
    expect(done.state).toBe('FAILED');
    expect(done.failure_reason).toBe('KILLED_BY_SIGNAL');
    expect(done.failure_detail).toContain('cancelled outside the broker');
  }, 90_000);

  it('resumes a running job after a worker restart, by its job id', async () => {
    // The task runs until the test says go (a file under /var/tmp, which the rank sandbox binds from the
    // host), so the job is surely still running across the restart, and no longer than that.
    const gate = mkdtempSync('/var/tmp/gpu-broker-slurm-resume-');
    chmodSync(gate, 0o755);
    const go = join(gate, 'go');
    try {
      const taskId = await approveTask(
        alice,
        rita,
        shellSpec(
          `echo before; i=0; while [ ! -e ${go} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; echo after; echo done > "$GPU_BROKER_OUTPUT_DIR/r.txt"`,
          { cards: { count: 1 }, outputs: [{ path: 'r.txt', required: true }] },
        ),
      );
      const running = await runningWithBinding(taskId);
      await worker.close();
      expect(jobState(running.slurm!.job_id)).toBe('RUNNING');
      worker = await startSlurmWorker();
      writeFileSync(join(gate, 'go'), '');
      const done = await waitUntilSettled(alice, taskId, 60_000);
      expect(done).toMatchObject({ state: 'COMPLETED', exit_code: 0 });
      expect(done.slurm?.job_id).toBe(running.slurm!.job_id);
      const logs = expectOk(await callTool<{ data: string }>(alice, 'get_task_logs', { task_id: taskId }));
      expect(logs.data).toContain('before');
      expect(logs.data).toContain('after');
    } finally {
      rmSync(gate, { recursive: true, force: true });
    }
  }, 90_000);

  it("shows Slurm's own pending reason while the admitted job waits in Slurm", async () => {
    extraArgs.push('--begin=now+3600');
    let taskId: string;
    try {
      taskId = await approveTask(alice, rita, shellSpec('echo never', { cards: { count: 1 } }));
      const pending = await waitFor(
        async () => {
          const t = await getTask(alice, taskId);
          return t.slurm?.pending_reason ? t : null;
        },
        { timeoutMs: 20_000, intervalMs: 200, what: 'a Slurm pending reason on the task' },
      );
      expect(pending.state).toBe('ASSIGNED');
      expect(pending.slurm).toMatchObject({ state: 'PENDING', pending_reason: 'BeginTime', binding: null });
    } finally {
      extraArgs.length = 0;
    }
    expectOk(await callTool(alice, 'cancel_task', { task_id: taskId, idempotency_key: m.key() }));
    expect((await waitUntilSettled(alice, taskId, 60_000)).state).toBe('CANCELLED');
  }, 90_000);

  it("does not offer a foreign job's GPUs, and never submits more than the pool has free", async () => {
    const foreign = execFileSync(
      'sbatch',
      [
        '--parsable',
        '--partition',
        PARTITION,
        '--gres=gpu:5',
        '--job-name',
        `foreign-${process.pid}`,
        '--output=/dev/null',
        '--wrap',
        'sleep 120',
      ],
      { encoding: 'utf8', env: slurmEnv },
    ).trim();
    try {
      await waitFor(() => jobState(foreign) === 'RUNNING', {
        timeoutMs: 30_000,
        what: 'the foreign job running',
      });
      await waitFor(async () => (await cards()).filter((c) => c.state === 'BUSY_FOREIGN').length >= 5, {
        timeoutMs: 15_000,
        what: 'the foreign GPUs shown BUSY_FOREIGN',
      });
      const taskId = await approveTask(alice, rita, shellSpec('echo fits', { cards: { count: 4 } }));
      // The master has a sample with the foreign job; it must keep the task queued, not sbatch it.
      const queued = await waitFor(
        async () => {
          const t = await getTask(alice, taskId);
          return t.state === 'QUEUED' && t.reason?.['code'] === 'waiting_for_cards' ? t : null;
        },
        { timeoutMs: 15_000, what: 'the 4-card task waiting for cards' },
      );
      expect(queued.slurm).toBeNull();
      expect(Number(queued.reason?.['free'])).toBeLessThan(4);
      execFileSync('scancel', [foreign]);
      const done = await waitUntilSettled(alice, taskId, 60_000);
      expect(done.state).toBe('COMPLETED');
    } finally {
      spawnSync('scancel', [foreign]);
    }
  }, 120_000);

  it('refuses a spec env that would steer sbatch, and a symlinked output, as on a local worker', async () => {
    const steer = await approveTask(
      alice,
      rita,
      shellSpec('echo hi', {
        cards: { count: 1 },
        runtime: { kind: 'process', argv: ['/bin/sh', '-c', 'echo hi'], env: { SBATCH_EXCLUSIVE: 'user' } },
      }),
    );
    const refusedTask = await waitUntilSettled(alice, steer, 60_000);
    expect(refusedTask).toMatchObject({ state: 'FAILED', failure_reason: 'SETUP_FAILED', slurm: null });
    expect(refusedTask.failure_detail).toContain('SBATCH_EXCLUSIVE');

    const leak = await approveTask(
      alice,
      rita,
      shellSpec('ln -s /etc/hostname "$GPU_BROKER_OUTPUT_DIR/leak"', {
        cards: { count: 1 },
        outputs: [{ path: 'leak', required: true }],
      }),
    );
    const leaked = await waitUntilSettled(alice, leak, 60_000);
    expect(leaked).toMatchObject({ state: 'FAILED', failure_reason: 'OUTPUT_MISSING' });
    expect(leaked.failure_detail).toContain('symlink');
    const outputs = expectOk(
      await callTool<{ outputs: unknown[] }>(alice, 'get_task_outputs', { task_id: leak }),
    );
    expect(outputs.outputs).toEqual([]);
  }, 90_000);

  it('applies a hostile spec env only to the task: no shell, srun, bwrap, setpriv or Slurm command outside reads it', async () => {
    const markers = makeTempDir('slurm-env-markers');
    chmodSync(markers, 0o777);
    const evil = join(markers, 'evil.sh');
    writeFileSync(evil, `touch ${markers}/bash-env-ran\n`, { mode: 0o755 });
    // Programs a spec's PATH would put first: each leaves a marker, then does the real thing.
    const fakeBin = join(markers, 'bin');
    mkdirSync(fakeBin, { mode: 0o755 });
    const faked = [
      'sbatch',
      'scontrol',
      'scancel',
      'squeue',
      'sacct',
      'srun',
      'setpriv',
      'bwrap',
      'bash',
      'env',
    ];
    for (const name of [
      ...faked,
      'sh',
      'hostname',
      'date',
      'cat',
      'mv',
      'grep',
      'sed',
      'head',
      'tr',
      'sha256sum',
      'cut',
      'rm',
    ])
      writeFileSync(
        join(fakeBin, name),
        `#!/bin/sh\ntouch ${markers}/ran-${name}\nexec /usr/bin/${name} "$@"\n`,
        {
          mode: 0o755,
        },
      );
    const lddebug = `gb-lddebug-${process.pid}`;
    const env = {
      PATH: `${fakeBin}:/usr/bin:/bin`,
      BASH_ENV: evil,
      ENV: evil,
      SHELLOPTS: 'xtrace',
      PS4: `$(touch ${markers}/ps4-ran)`,
      LD_DEBUG: 'files',
      // Relative: ld.so of any program would write it into its cwd (the task dir for the job's scripts,
      // the worker's cwd for sbatch and scontrol).
      LD_DEBUG_OUTPUT: lddebug,
      SPEC_VALUE: 'a b,c "d"\nline2',
    };
    const script = [
      'echo "bash_env=$BASH_ENV env=$ENV shellopts=$SHELLOPTS path=$PATH ld=$LD_DEBUG_OUTPUT"',
      'printf "ps4=%s|value=%s|\\n" "$PS4" "$SPEC_VALUE"',
      `cat ${tokenFile} 2>/dev/null; ls ${dataDir} 2>/dev/null`,
      'env | grep -c "^SLURM_CONF=\\|^SLURM_SUBMIT_DIR=\\|^HOME=/root\\|^MAIL=\\|pyenv" | sed "s/^/host-vars=/"',
    ].join('; ');
    const taskId = await approveTask(
      alice,
      rita,
      shellSpec(script, {
        cards: { count: 1 },
        runtime: { kind: 'process', argv: ['/bin/sh', '-c', script], env },
      }),
    );
    const done = await waitUntilSettled(alice, taskId, 60_000);
    expect(done, JSON.stringify(done)).toMatchObject({ state: 'COMPLETED', exit_code: 0 });
    const logs = expectOk(await callTool<{ data: string }>(alice, 'get_task_logs', { task_id: taskId }));
    // The task itself gets every value as the spec wrote it...
    expect(logs.data).toContain(
      `bash_env=${evil} env=${evil} shellopts=xtrace path=${fakeBin}:/usr/bin:/bin ld=${lddebug}`,
    );
    expect(logs.data).toContain(`ps4=$(touch ${markers}/ps4-ran)|value=a b,c "d"\nline2|`);
    // ...and no host variable of the rank's login environment, nor the worker's token or data dir.
    expect(logs.data).toContain('host-vars=0');
    expect(logs.data).not.toContain(TOKEN_TEXT);
    expect(logs.data).not.toContain('worker-secret.txt');
    // Nothing outside the sandbox read BASH_ENV/ENV/SHELLOPTS+PS4 or ran a program of the spec's PATH.
    expect(readdirSync(markers).sort()).toEqual(['bin', 'evil.sh']);
    // ld.so wrote debug files only for the task's own programs, inside its dir; none on the submit host.
    expect(readdirSync(process.cwd()).filter((n) => n.startsWith(lddebug))).toEqual([]);
    const taskDir = readdirSync(backend.jobDir)
      .map((e) => join(backend.jobDir, e, 'task'))
      .find((d) => existsSync(d) && readdirSync(d).some((n) => n.startsWith(lddebug)));
    expect(taskDir, 'the task wrote its own ld.so debug files').toBeDefined();
    for (const name of readdirSync(taskDir!).filter((n) => n.startsWith(lddebug))) {
      const text = readFileSync(join(taskDir!, name), 'utf8');
      expect(text, name).not.toMatch(/\/(setpriv|bwrap|srun|sbatch|scontrol|slurmstepd|bash|env)\b/);
    }
  }, 90_000);

  it('a relative BASH_ENV naming one of its own inputs (../inputs/x.sh) runs nowhere outside the sandbox', async () => {
    const markers = makeTempDir('slurm-env-markers-rel');
    chmodSync(markers, 0o777);
    type Uploaded = { inputs: Array<{ path: string; sha256: string; size: number }> };
    const up = expectOk(
      await callTool<Uploaded>(alice, 'upload_inputs', {
        files: [{ path: 'x.sh', content: `touch ${markers}/relative-bash-env-ran\n` }],
        idempotency_key: m.key(),
      }),
    );
    const taskId = await approveTask(
      alice,
      rita,
      shellSpec('echo "bash_env=$BASH_ENV env=$ENV"', {
        cards: { count: 1 },
        inputs: up.inputs,
        runtime: {
          kind: 'process',
          argv: ['/bin/sh', '-c', 'echo "bash_env=$BASH_ENV env=$ENV"'],
          env: { BASH_ENV: '../inputs/x.sh', ENV: '../inputs/x.sh', SHELLOPTS: 'xtrace' },
        },
      }),
    );
    const done = await waitUntilSettled(alice, taskId, 60_000);
    expect(done, JSON.stringify(done)).toMatchObject({ state: 'COMPLETED', exit_code: 0 });
    const logs = expectOk(await callTool<{ data: string }>(alice, 'get_task_logs', { task_id: taskId }));
    expect(logs.data).toContain('bash_env=../inputs/x.sh env=../inputs/x.sh');
    expect(readdirSync(markers)).toEqual([]);
  }, 90_000);

  it('`gpu-broker worker --backend slurm --token-file F`: F and the data dir are hidden in every rank', async () => {
    // The CLI itself (in-process), so that what it passes to the sandbox is what is tested.
    const cliId = `slurm-cli-${process.pid}`;
    const cliRoot = mkdtempSync('/var/tmp/gpu-broker-slurm-cli-');
    chmodSync(cliRoot, 0o755);
    const cliToken = join(cliRoot, 'worker.token');
    const token = m.createToken(`w-${cliId}`, ['worker'], cliId);
    writeFileSync(cliToken, `${token}\n`, { mode: 0o600 });
    chmodSync(cliToken, 0o644);
    const caFile = join(cliRoot, 'ca.pem');
    if (m.caPem !== null) writeFileSync(caFile, m.caPem);
    let stop!: () => void;
    const stopped = new Promise<void>((r) => {
      stop = r;
    });
    const cli = runCli(
      workerCli,
      [
        ...['--backend', 'slurm', '--slurm-partition', PARTITION, '--slurm-simulated-gpus'],
        ...['--slurm-job-dir', join(cliRoot, 'jobs'), '--slurm-poll-ms', '250'],
        ...['--slurm-gpu-dev-dir', join(avail.ok ? avail.slurm.localDir : '/nonexistent', 'dev')],
        ...['--url', m.url, '--token-file', cliToken, '--id', cliId, '--data-dir', join(cliRoot, 'data')],
        ...(m.caPem === null ? [] : ['--ca-file', caFile]),
      ],
      { GPU_BROKER_LOG_LEVEL: 'silent', PATH: process.env.PATH },
      stopped,
    );
    try {
      await waitFor(
        async () => {
          const r = expectOk(await callTool<{ cards: CardRow[] }>(ops, 'list_cards', {}));
          return r.cards.some((c) => c.worker_id === cliId && c.state === 'AVAILABLE');
        },
        { timeoutMs: 30_000, what: 'the CLI Slurm worker listed' },
      );
      // The CLI tightened the file to 0600 at start; a task running as the worker's own uid (an
      // unprivileged worker) could still read that, so only hiding protects it: make the mode irrelevant.
      chmodSync(cliToken, 0o644);
      const taskId = await approveTask(
        alice,
        rita,
        shellSpec(
          `cat ${cliToken} 2>&1; echo; ls ${join(cliRoot, 'data')} | wc -l | sed "s/^/data-entries=/"; echo end`,
          { cards: { count: 1 }, worker: cliId },
        ),
      );
      const done = await waitUntilSettled(alice, taskId, 60_000);
      expect(done, JSON.stringify(done)).toMatchObject({ state: 'COMPLETED', exit_code: 0 });
      const logs = expectOk(await callTool<{ data: string }>(alice, 'get_task_logs', { task_id: taskId }));
      expect(logs.data).toContain('data-entries=0');
      expect(logs.data).toContain('end');
      expect(logs.data).not.toContain(token.slice(0, 16));
    } finally {
      stop();
      const r = await cli;
      rmSync(cliRoot, { recursive: true, force: true });
      expect(r.code, r.stderr).toBe(0);
    }
  }, 120_000);

  it('scancels a job carrying its marker for an execution it does not know (fencing)', async () => {
    const stale = execFileSync(
      'sbatch',
      [
        '--parsable',
        '--partition',
        PARTITION,
        '--comment',
        jobMarker(WORKER_ID, 'EXEC-NOT-KNOWN'),
        '--job-name',
        `stale-${process.pid}`,
        '--output=/dev/null',
        '--wrap',
        'sleep 120',
      ],
      { encoding: 'utf8', env: slurmEnv },
    ).trim();
    try {
      // COMPLETING is the step between scancel and CANCELLED: wait past it (seen once in CI).
      await waitFor(() => !/RUNNING|PENDING|CONFIGURING|COMPLETING/.test(jobState(stale)), {
        timeoutMs: 20_000,
        what: 'the stale job scancelled by the worker',
      });
      expect(jobState(stale)).toMatch(/CANCELLED|GONE/);
    } finally {
      spawnSync('scancel', [stale]);
    }
  }, 60_000);
});

describe.runIf(slurmUp)('Slurm backend, multi-node (two slurmd on this host)', () => {
  const MULTI_ID = `slurm-multi-${process.pid}`;
  let multi: RunningWorker | null = null;
  let multiEnv: Record<string, string> = {};

  beforeAll(async () => {
    const two = startMultiNodeSlurm();
    if (!two.ok) throw new Error(`two-node Slurm unavailable: ${two.reason}`);
    multiEnv = two.slurm.env;
    const b: SlurmBackend = {
      driver: new SlurmDriver({ env: multiEnv }),
      partition: PARTITION,
      extraArgs: [],
      jobDir: join(makeTempDir('slurm-multi-jobs'), 'jobs'),
      pollMs: 250,
      // Each node has its own fake GPU files (gres.conf File= with %n): the rank binds its node's.
      sandbox: await slurmSandbox(makeTempDir('slurm-multi-sandbox'), join(two.slurm.localDir, 'dev', '%n')),
    };
    multi = await startSlurmWorker(b, MULTI_ID, makeTempDir('slurm-multi-worker'));
    await waitFor(
      async () => {
        const r = expectOk(await callTool<{ cards: CardRow[] }>(ops, 'list_cards', {}));
        return r.cards.filter((c) => c.worker_id === MULTI_ID && c.state === 'AVAILABLE').length === 8;
      },
      { timeoutMs: 20_000, what: 'the two-node pool of 8 GPUs available' },
    );
  }, 90_000);

  afterAll(async () => {
    await multi?.close();
  });

  it('runs cards {count: 8, per_node: 4} as one job over both nodes with rank variables', async () => {
    const taskId = await approveTask(
      alice,
      rita,
      shellSpec(
        'echo "rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT node=$SLURMD_NODENAME cvd=$CUDA_VISIBLE_DEVICES devs=$(ls /dev | grep -c ^nvidia)"',
        { cards: { count: 8, per_node: 4 }, worker: MULTI_ID },
      ),
    );
    const done = await waitUntilSettled(alice, taskId, 60_000);
    expect(done, JSON.stringify(done)).toMatchObject({ state: 'COMPLETED', exit_code: 0 });
    const nodes = done.slurm!.binding!.nodes;
    expect(nodes.map((n) => n.node).sort()).toEqual(['n1', 'n2']);
    for (const n of nodes) expect(n.gpus).toHaveLength(4);
    const logs = expectOk(await callTool<{ data: string }>(alice, 'get_task_logs', { task_id: taskId }));
    expect(logs.data).toMatch(/rank=0 local=0 world=2 master=\S+:\d+ node=n1/);
    expect(logs.data).toMatch(/rank=1 local=0 world=2 master=\S+:\d+ node=n2/);
    // Each rank in its node's sandbox sees that node's 4 GPUs, numbered 0-3.
    expect(logs.data.match(/cvd=0,1,2,3 devs=4/g)).toHaveLength(2);
  }, 90_000);
});
