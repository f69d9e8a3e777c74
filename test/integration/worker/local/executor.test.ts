import { createHash } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ExecutionPlan } from '../../../../src/contracts/worker-protocol.js';
import { MAX_LOG_CHUNK_BYTES } from '../../../../src/contracts/worker-protocol.js';
import type { ExecutionHandle } from '../../../../worker/executions/executor.js';
import type { ExecutorOptions } from '../../../../worker/local/executor.js';
import { startExecution } from '../../../../worker/local/executor.js';
import { probeOomKills } from '../../../../worker/local/process-group.js';
import { startLogPump } from '../../../../worker/task-io/logs.js';
import { AdvancingClock } from '../../../support/advancing-clock.js';
import type { Chunk } from '../../../support/executor-plan.js';
import { isLive, makePlan, sh, text } from '../../../support/executor-plan.js';
import { waitFor } from '../../../support/wait.js';

// Real child processes throughout: the executor's job is the interaction with the kernel.

let root: string;

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'gpu-broker-executor-'));
});
afterAll(() => {
  rmSync(root, { recursive: true, force: true });
});

function start(
  plan: ExecutionPlan,
  extra: Partial<ExecutorOptions> = {},
): { handle: ExecutionHandle; chunks: Chunk[] } {
  const chunks: Chunk[] = [];
  const handle = startExecution(plan, {
    rootDir: root,
    workerId: 'worker-1',
    provider: 'sim',
    onLog: (stream, offset, data) => chunks.push({ stream, offset, data }),
    cleanupPollMs: 20,
    ...extra,
  });
  return { handle, chunks };
}

function sha256(b: Buffer | string): string {
  return createHash('sha256').update(b).digest('hex');
}

describe('environment', () => {
  it('shows exactly the leased cards and the binding, and leaks nothing of the worker', async () => {
    process.env.GPU_BROKER_TEST_SECRET = 'worker-token-must-not-leak';
    const plan = makePlan({
      argv: [
        process.execPath,
        '-e',
        'process.stdout.write(JSON.stringify({ env: process.env, cwd: process.cwd() }))',
      ],
      cards: [
        { index: 2, uuid: 'GPU-aaa' },
        { index: 5, uuid: 'GPU-bbb' },
      ],
      epoch: 7,
      // A spec must not be able to widen its cards or forge its ids.
      env: {
        MY_SETTING: 'x y',
        CUDA_VISIBLE_DEVICES: '0,1,2,3',
        GPU_BROKER_TASK_ID: 'forged',
        GPU_BROKER_PREEMPTED: '1',
      },
    });
    const { handle, chunks } = start(plan);
    const result = await handle.done.finally(() => {
      delete process.env.GPU_BROKER_TEST_SECRET;
    });
    expect(result.failure_reason).toBeNull();
    const { env, cwd } = JSON.parse(text(chunks, 'stdout')) as { env: Record<string, string>; cwd: string };
    const execDir = join(root, plan.execution_id, 'task');
    expect(cwd).toBe(execDir);
    expect(env).toEqual({
      PATH: expect.any(String),
      LANG: 'C.UTF-8',
      HOME: execDir,
      TMPDIR: join(execDir, 'tmp'),
      MY_SETTING: 'x y',
      CUDA_DEVICE_ORDER: 'PCI_BUS_ID',
      CUDA_VISIBLE_DEVICES: '2,5',
      HIP_VISIBLE_DEVICES: '2,5',
      ROCR_VISIBLE_DEVICES: '2,5',
      GPU_BROKER_TASK_ID: plan.task_id,
      GPU_BROKER_EXECUTION_ID: plan.execution_id,
      GPU_BROKER_ASSIGNMENT_ID: plan.assignment_id,
      GPU_BROKER_LEASE_EPOCH: '7',
      GPU_BROKER_GPU_IDS: '2,5',
      GPU_BROKER_GPU_UUIDS: 'GPU-aaa,GPU-bbb',
      GPU_BROKER_OUTPUT_DIR: join(execDir, 'out'),
      GPU_BROKER_WORKER_ID: 'worker-1',
      GPU_BROKER_SIMULATED: '1',
      GPU_BROKER_PREEMPTED: '0',
      GPU_BROKER_PREEMPTIONS: '0',
    });
  });

  it('says GPU_BROKER_SIMULATED=0 on real providers', async () => {
    const { handle, chunks } = start(makePlan({ argv: sh('printf %s "$GPU_BROKER_SIMULATED"') }), {
      provider: 'nvidia',
    });
    await handle.done;
    expect(text(chunks, 'stdout')).toBe('0');
  });
});

describe('logs', () => {
  it('streams stdout and stderr with byte offsets and writes the same bytes to the log files', async () => {
    const plan = makePlan({ argv: sh('echo one; echo err1 >&2; sleep 0.05; echo two; echo err2 >&2') });
    const { handle, chunks } = start(plan);
    const result = await handle.done;
    expect(result.failure_reason).toBeNull();
    expect(text(chunks, 'stdout')).toBe('one\ntwo\n');
    expect(text(chunks, 'stderr')).toBe('err1\nerr2\n');
    for (const stream of ['stdout', 'stderr'] as const) {
      let expected = 0;
      for (const c of chunks.filter((x) => x.stream === stream)) {
        expect(c.offset).toBe(expected);
        expected += Buffer.byteLength(c.data);
      }
      const file = readFileSync(join(root, plan.execution_id, `${stream}.log`), 'utf8');
      expect(file).toBe(text(chunks, stream));
    }
  });

  it('cuts large output into bounded chunks without splitting multi-byte characters', async () => {
    // 3-byte and 2-byte characters, so chunk limits fall inside characters unless the pump avoids it.
    const script = "const s = '€é'.repeat(60000); process.stdout.write(s); process.stdout.write('end');";
    const plan = makePlan({ argv: [process.execPath, '-e', script] });
    const { handle, chunks } = start(plan);
    const result = await handle.done;
    expect(result.failure_reason).toBeNull();
    const expectedText = '€é'.repeat(60000) + 'end';
    expect(chunks.length).toBeGreaterThan(1);
    let offset = 0;
    for (const c of chunks) {
      const bytes = Buffer.byteLength(c.data);
      expect(bytes).toBeLessThanOrEqual(MAX_LOG_CHUNK_BYTES);
      expect(c.data).not.toContain('\uFFFD');
      expect(c.offset).toBe(offset);
      offset += bytes;
    }
    expect(text(chunks, 'stdout')).toBe(expectedText);
    expect(readFileSync(join(root, plan.execution_id, 'stdout.log'), 'utf8')).toBe(expectedText);
  });

  it('survives binary output, keeping exact bytes in the file and byte offsets in the stream', async () => {
    const plan = makePlan({ argv: sh('head -c 200000 /dev/urandom') });
    const { handle, chunks } = start(plan);
    const result = await handle.done;
    expect(result.failure_reason).toBeNull();
    expect(readFileSync(join(root, plan.execution_id, 'stdout.log')).length).toBe(200000);
    const last = chunks.at(-1)!;
    // Offsets are byte offsets of the raw stream; the text is a lossy view of binary data.
    expect(last.offset).toBeLessThan(200000);
    expect(chunks.every((c, i) => i === 0 || c.offset > chunks[i - 1]!.offset)).toBe(true);
  });

  it('splits one large read at character boundaries and delivers a truncated tail as is', async () => {
    const source = new PassThrough();
    const chunks: Chunk[] = [];
    const file = join(root, 'pump.log');
    const pump = startLogPump('stderr', source, file, (stream, offset, data) =>
      chunks.push({ stream, offset, data }),
    );
    const body = Buffer.from('€'.repeat(100_000)); // 300 000 bytes in one piece
    const tail = Buffer.from('€').subarray(0, 2); // a character cut short by the task's exit
    source.end(Buffer.concat([body, tail]));
    const summary = await pump.finished;
    expect(summary).toEqual({ bytes: body.length + 2, dropped: 0, errors: [] });
    expect(chunks.length).toBeGreaterThanOrEqual(5);
    let offset = 0;
    for (const c of chunks.slice(0, -1)) {
      expect(c.offset).toBe(offset);
      expect(Buffer.byteLength(c.data)).toBeLessThanOrEqual(MAX_LOG_CHUNK_BYTES);
      expect(c.data).not.toContain('\uFFFD');
      offset += Buffer.byteLength(c.data);
    }
    expect(offset).toBe(body.length);
    expect(chunks.at(-1)).toEqual({ stream: 'stderr', offset: body.length, data: '\uFFFD' });
    expect(readFileSync(file).equals(Buffer.concat([body, tail]))).toBe(true);
  });

  it('copes with several megabytes of output', async () => {
    const plan = makePlan({ argv: sh('yes 0123456789 | head -c 5000000') });
    const { handle, chunks } = start(plan);
    const result = await handle.done;
    expect(result.failure_reason).toBeNull();
    const last = chunks.at(-1)!;
    expect(last.offset + Buffer.byteLength(last.data)).toBe(5_000_000);
    expect(readFileSync(join(root, plan.execution_id, 'stdout.log')).length).toBe(5_000_000);
  });

  it('stops waiting for a pipe held open by a process that escaped the group', async () => {
    const plan = makePlan({ argv: sh("setsid sh -c 'echo $$; exec sleep 1000' & sleep 0.1; exit 0") });
    const { handle, chunks } = start(plan);
    let escaped = 0;
    try {
      const result = await handle.done;
      escaped = Number(text(chunks, 'stdout').trim());
      expect(result.failure_reason).toBeNull();
      expect(result.log_errors.join('\n')).toContain('kept the output pipes open');
      // Only the card check can see an escaped process; the group itself is gone.
      expect(result.cleaned).toBe(true);
    } finally {
      if (escaped > 0) process.kill(escaped, 'SIGKILL');
    }
  });

  it('keeps running and keeps the file when the log consumer throws', async () => {
    const plan = makePlan({ argv: sh('echo a; echo b') });
    const { handle } = start(plan, {
      onLog: () => {
        throw new Error('consumer broke');
      },
    });
    const result = await handle.done;
    expect(result.failure_reason).toBeNull();
    expect(result.log_errors.join('\n')).toContain('consumer broke');
    expect(readFileSync(join(root, plan.execution_id, 'stdout.log'), 'utf8')).toBe('a\nb\n');
  });
});

describe('exit', () => {
  it('reports success, exit codes and signals', async () => {
    const ok = await start(makePlan({ argv: sh('exit 0') })).handle.done;
    expect(ok).toMatchObject({ exit_code: 0, signal: null, failure_reason: null, cleaned: true });

    const bad = await start(makePlan({ argv: sh('exit 3') })).handle.done;
    expect(bad).toMatchObject({ exit_code: 3, signal: null, failure_reason: 'EXIT_NONZERO' });

    const killed = await start(makePlan({ argv: sh('kill -USR1 $$') })).handle.done;
    expect(killed).toMatchObject({ exit_code: null, signal: 'SIGUSR1', failure_reason: 'KILLED_BY_SIGNAL' });
  });

  it('handles an instant exit', async () => {
    const result = await start(makePlan({ argv: ['/bin/true'] })).handle.done;
    expect(result).toMatchObject({ exit_code: 0, failure_reason: null, cleaned: true });
  });
});

describe('time limit, cancel and the process group', () => {
  it('kills a task that ignores SIGTERM past its time limit, with TIMED_OUT', async () => {
    const plan = makePlan({
      argv: sh('trap "" TERM; echo ready; while :; do sleep 0.1; done'),
      timeLimit: 1,
      grace: 0.3,
    });
    const { handle, chunks } = start(plan);
    const result = await handle.done;
    expect(text(chunks, 'stdout')).toBe('ready\n');
    expect(result).toMatchObject({ failure_reason: 'TIMED_OUT', signal: 'SIGKILL', cleaned: true });
    expect(result.limits_detail?.join('\n') ?? '').not.toContain('backfilled');
  });

  it('a backfilled run stops TIMED_OUT at its deadline from when the executor began, whatever its limit left', async () => {
    // ADR 0049 §5: the master promised its cards back by its limit plus the start-up allowance from the
    // grant. Here the deadline (10 s) comes long before the limit (600 s from the start): once the task
    // runs, the executor's clock is moved past the deadline, and the run ends TIMED_OUT.
    const clock = new AdvancingClock();
    const base = makePlan({ argv: sh('echo ready; sleep 1000'), timeLimit: 600, grace: 0.3 });
    const { handle, chunks } = start({ ...base, stop_within_seconds: 10 }, { clock });
    await waitFor(() => text(chunks, 'stdout').includes('ready'), { what: 'the task running' });
    clock.advance(10_000);
    const result = await handle.done;
    expect(result).toMatchObject({ failure_reason: 'TIMED_OUT', cleaned: true });
    expect(result.limits_detail?.join('\n')).toContain('backfilled: stopped at its deadline of 10 s');
    expect(isLive(handle.pid!)).toBe(false);
  });

  it('a backfilled run whose setup outlasted its deadline never starts: TIMED_OUT, saying why', async () => {
    const clock = new AdvancingClock();
    const base = makePlan({ argv: sh('echo ran'), timeLimit: 600 });
    const { handle, chunks } = start({ ...base, stop_within_seconds: 5 }, { clock });
    // Setup is asynchronous: the clock passes the deadline before it ends (as slow inputs or a pull would).
    clock.advance(6_000);
    expect(await handle.started).toBeNull();
    const result = await handle.done;
    expect(result).toMatchObject({ failure_reason: 'TIMED_OUT', exit_code: null, cleaned: true });
    expect(result.setup_error).toContain('deadline of 5 s');
    expect(text(chunks, 'stdout')).toBe('');
  });

  it('without a deadline the time limit counts from the start, however long setup took', async () => {
    const clock = new AdvancingClock();
    const plan = makePlan({ argv: sh('echo ran'), timeLimit: 5 });
    const { handle, chunks } = start(plan, { clock });
    clock.advance(6_000);
    const result = await handle.done;
    expect(result).toMatchObject({ failure_reason: null, exit_code: 0 });
    expect(text(chunks, 'stdout')).toBe('ran\n');
  });

  it('cancels a running task and kills its whole group', async () => {
    const plan = makePlan({ argv: sh('sleep 1000 & echo $!; wait'), grace: 0.3 });
    const { handle, chunks } = start(plan);
    expect(await handle.started).toBeGreaterThan(0);
    await waitFor(() => text(chunks, 'stdout').includes('\n'), { what: 'the grandchild pid' });
    const grandchild = Number(text(chunks, 'stdout').trim());
    expect(isLive(grandchild)).toBe(true);
    handle.cancel('operator asked');
    const result = await handle.done;
    expect(result.failure_reason).toBe('CANCELLED');
    expect(result.cleaned).toBe(true);
    expect(isLive(grandchild)).toBe(false);
    expect(isLive(handle.pid!)).toBe(false);
  });

  it('kills what the task left in its group after it exits, even if it ignores SIGTERM', async () => {
    const plan = makePlan({
      argv: sh('sleep 1000 & echo $!; (trap "" TERM; sleep 1000) & echo $!; exit 0'),
      grace: 0.3,
    });
    const { handle, chunks } = start(plan);
    const result = await handle.done;
    expect(result).toMatchObject({ exit_code: 0, failure_reason: null, cleaned: true });
    const pids = text(chunks, 'stdout').trim().split('\n').map(Number);
    expect(pids).toHaveLength(2);
    for (const pid of pids) expect(isLive(pid)).toBe(false);
    expect(result.cleanup_detail).toContain('gone');
  });

  it('a preemption: SIGTERM, the spec’s preemption grace (not the kill grace), SIGKILL; PREEMPTED', async () => {
    const base = makePlan({
      argv: sh('trap "echo term" TERM; echo ready; while :; do sleep 0.05; done'),
      grace: 0,
    });
    const plan = { ...base, spec: { ...base.spec, preemptible: true, preemption_grace_seconds: 1 } };
    const { handle, chunks } = start(plan);
    await waitFor(() => text(chunks, 'stdout').includes('ready'), { what: 'the task running' });
    handle.cancel('preempted for task t2', { preempt: true });
    const result = await handle.done;
    // The trap ran (SIGTERM first) and the task, ignoring it, was killed after the grace.
    expect(text(chunks, 'stdout')).toContain('term');
    expect(result).toMatchObject({ failure_reason: 'PREEMPTED', signal: 'SIGKILL', cleaned: true });
    expect(isLive(handle.pid!)).toBe(false);
  });

  it('a preemption that a task answers by checkpointing and exiting 0 is still PREEMPTED (it will run again)', async () => {
    const { handle, chunks } = start(
      makePlan({ argv: sh('trap "echo saved; exit 0" TERM; echo ready; while :; do sleep 0.05; done') }),
    );
    await waitFor(() => text(chunks, 'stdout').includes('ready'), { what: 'the task running' });
    handle.cancel('preempted', { preempt: true });
    const result = await handle.done;
    expect(text(chunks, 'stdout')).toContain('saved');
    expect(result).toMatchObject({ failure_reason: 'PREEMPTED', exit_code: 0 });
  });

  it('a cancel asked first stays a cancel when a preemption follows', async () => {
    const { handle, chunks } = start(makePlan({ argv: sh('echo ready; sleep 1000'), grace: 0.3 }));
    await waitFor(() => text(chunks, 'stdout').includes('ready'), { what: 'the task running' });
    handle.cancel('owner asked');
    handle.cancel('preempted', { preempt: true });
    expect((await handle.done).failure_reason).toBe('CANCELLED');
  });

  it('the next run of a preempted task is told so: GPU_BROKER_PREEMPTED=1, GPU_BROKER_PREEMPTIONS=n', async () => {
    const plan = {
      ...makePlan({ argv: sh('printf %s/%s "$GPU_BROKER_PREEMPTED" "$GPU_BROKER_PREEMPTIONS"') }),
      preemptions: 2,
    };
    const { handle, chunks } = start(plan);
    await handle.done;
    expect(text(chunks, 'stdout')).toBe('1/2');
  });

  it('cancel before the process starts means it never starts', async () => {
    const { handle } = start(makePlan({ argv: sh('echo should-not-run') }));
    handle.cancel('changed my mind');
    expect(await handle.started).toBeNull();
    const result = await handle.done;
    expect(result).toMatchObject({ failure_reason: 'CANCELLED', exit_code: null, cleaned: true });
  });

  it('cancel after exit changes nothing', async () => {
    const { handle } = start(makePlan({ argv: sh('exit 0') }));
    await handle.exited;
    handle.cancel('late');
    expect((await handle.done).failure_reason).toBeNull();
  });
});

describe('OOM probe', () => {
  it('finds a counter or says there is none, without throwing', async () => {
    const probe = await probeOomKills('self');
    if (probe !== null) expect(probe.baseline).toBeGreaterThanOrEqual(0);
    expect(await probeOomKills(2 ** 22 + 12345)).toBeNull();
  });
});

describe('cleanup receipt', () => {
  it('waits for the cards to be clean', async () => {
    let calls = 0;
    const { handle } = start(makePlan({ argv: sh('exit 0'), cleanupTimeout: 5 }), {
      checkCardsClean: async () => {
        calls += 1;
        return calls < 3 ? { clean: false, detail: 'memory still in use' } : { clean: true };
      },
    });
    const result = await handle.done;
    expect(result.cleaned).toBe(true);
    expect(calls).toBe(3);
  });

  it('reports cleaned=false with the reason when the cards stay dirty past the timeout', async () => {
    const { handle } = start(makePlan({ argv: sh('exit 0'), cleanupTimeout: 0.2 }), {
      checkCardsClean: async () => ({ clean: false, detail: 'pid 4242 on card 0' }),
    });
    const exited = await handle.exited;
    expect(exited.failure_reason).toBeNull();
    const result = await handle.done;
    expect(result.cleaned).toBe(false);
    expect(result.cleanup_detail).toContain('pid 4242 on card 0');
  });

  it('treats a failing card check as not clean', async () => {
    const { handle } = start(makePlan({ argv: sh('exit 0'), cleanupTimeout: 0.1 }), {
      checkCardsClean: async () => {
        throw new Error('smi is gone');
      },
    });
    const result = await handle.done;
    expect(result.cleaned).toBe(false);
    expect(result.cleanup_detail).toContain('smi is gone');
  });
});

describe('outputs', () => {
  it('returns declared outputs with size, sha256 and bytes; optional missing ones are not listed', async () => {
    const plan = makePlan({
      argv: sh(
        'cd "$GPU_BROKER_OUTPUT_DIR" && printf hello > a.txt && mkdir sub && printf "\\001\\002\\377" > sub/b.bin && ' +
          'printf undeclared > c.txt && ln -s a.txt link.txt',
      ),
      outputs: [
        { path: 'a.txt', required: true },
        { path: 'sub/b.bin', required: true },
        { path: 'optional.txt', required: false },
      ],
    });
    const result = await start(plan).handle.done;
    expect(result.failure_reason).toBeNull();
    const bin = Buffer.from([1, 2, 255]);
    expect(result.outputs).toEqual([
      { path: 'a.txt', size: 5, sha256: sha256('hello'), content: Buffer.from('hello') },
      { path: 'sub/b.bin', size: 3, sha256: sha256(bin), content: bin },
    ]);
    // No symlink is followed, not even one that stays inside the output dir.
    expect(result.output_errors).toEqual([]);
  });

  it('fails a successful exit with OUTPUT_MISSING when a required output is missing', async () => {
    const plan = makePlan({ argv: sh('exit 0'), outputs: [{ path: 'metrics.json', required: true }] });
    const result = await start(plan).handle.done;
    expect(result.failure_reason).toBe('OUTPUT_MISSING');
    expect(result.output_errors.join('\n')).toContain('metrics.json');
  });

  it('keeps EXIT_NONZERO over OUTPUT_MISSING', async () => {
    const plan = makePlan({ argv: sh('exit 2'), outputs: [{ path: 'metrics.json', required: true }] });
    expect((await start(plan).handle.done).failure_reason).toBe('EXIT_NONZERO');
  });

  it('refuses a symlink escaping the output dir', async () => {
    const secret = join(root, 'secret.txt');
    writeFileSync(secret, 'do not upload');
    const plan = makePlan({
      argv: sh(`ln -s '${secret}' "$GPU_BROKER_OUTPUT_DIR/leak.txt"`),
      outputs: [{ path: 'leak.txt', required: true }],
    });
    const result = await start(plan).handle.done;
    expect(result.failure_reason).toBe('OUTPUT_MISSING');
    expect(result.outputs).toEqual([]);
    expect(result.output_errors.join('\n')).toMatch(/leak\.txt.*symlink/);
  });

  it('refuses a file beneath a symlinked parent dir', async () => {
    const outside = join(root, 'outside-dir');
    mkdirSync(outside, { recursive: true });
    writeFileSync(join(outside, 'f.txt'), 'outside');
    const plan = makePlan({
      argv: sh(`ln -s '${outside}' "$GPU_BROKER_OUTPUT_DIR/d"`),
      outputs: [{ path: 'd/f.txt', required: false }],
    });
    const result = await start(plan).handle.done;
    expect(result.failure_reason).toBeNull();
    expect(result.outputs).toEqual([]);
    expect(result.output_errors.join('\n')).toMatch(/d\/f\.txt.*symlink or not a directory/);
  });

  it('refuses ".." and absolute paths even when the plan skipped validation', async () => {
    const plan = makePlan({
      argv: sh('echo x'),
      outputs: [
        { path: '../stdout.log', required: true },
        { path: '/etc/hostname', required: false },
      ],
    });
    const result = await start(plan).handle.done;
    expect(result.failure_reason).toBe('OUTPUT_MISSING');
    expect(result.outputs).toEqual([]);
    expect(result.output_errors.join('\n')).toContain('".."');
    expect(result.output_errors.join('\n')).toContain('relative path');
  });

  it('refuses non-regular files and files over the size cap', async () => {
    const plan = makePlan({
      argv: sh('cd "$GPU_BROKER_OUTPUT_DIR" && mkfifo pipe && mkdir dir && truncate -s 9M big.bin'),
      outputs: [
        { path: 'pipe', required: false },
        { path: 'dir', required: false },
        { path: 'big.bin', required: false },
      ],
    });
    const result = await start(plan).handle.done;
    expect(result.outputs).toEqual([]);
    const errors = result.output_errors.join('\n');
    expect(errors).toMatch(/pipe.*not a regular file/);
    expect(errors).toMatch(/dir.*not a regular file/);
    expect(errors).toMatch(/big\.bin.*limit/);
  });
});

describe('setup failures', () => {
  it('reports SETUP_FAILED for a missing executable', async () => {
    const { handle } = start(makePlan({ argv: ['/nonexistent/bin/tool', '--x'] }));
    expect(await handle.started).toBeNull();
    const result = await handle.done;
    expect(result.failure_reason).toBe('SETUP_FAILED');
    expect(result.setup_error).toContain('ENOENT');
    expect(result.setup_error).toContain('/nonexistent/bin/tool');
  });

  it('reports SETUP_FAILED for a file that is not executable', async () => {
    const file = join(root, 'not-executable.sh');
    writeFileSync(file, '#!/bin/sh\necho hi\n');
    chmodSync(file, 0o644);
    const result = await start(makePlan({ argv: [file] })).handle.done;
    expect(result.failure_reason).toBe('SETUP_FAILED');
    expect(result.setup_error).toContain('EACCES');
  });

  it('refuses to reuse an existing execution directory or an unsafe execution id', async () => {
    mkdirSync(join(root, 'exec-existing'));
    const reused = await start(makePlan({ argv: sh('echo x'), executionId: 'exec-existing' })).handle.done;
    expect(reused.failure_reason).toBe('SETUP_FAILED');
    expect(reused.setup_error).toContain('EEXIST');

    const unsafe = await start(makePlan({ argv: sh('echo x'), executionId: '../escape' })).handle.done;
    expect(unsafe.failure_reason).toBe('SETUP_FAILED');
    expect(unsafe.setup_error).toContain('directory name');
  });
});
