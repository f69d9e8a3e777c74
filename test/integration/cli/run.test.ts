import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run as runCommand } from '../../../src/cli/agent/run.js';
import { run as taskCommand } from '../../../src/cli/agent/task.js';
import type { CliIo } from '../../../src/cli/common/io.js';
import { builtCliPath, runCli } from '../../support/cli.js';
import { clusterConfig } from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { expectOk } from '../../support/mcp.js';
import { makeTempDir, removeTempDirs } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';
import { startWorkerOn, type TestWorker } from '../../support/worker.js';

/**
 * ADR 0026: `gpu-broker run` through a real master and a real worker (bwrap, simulated cards), with a
 * reviewer deciding through the real MCP review path. The run must say it waits for review before the
 * reviewer decides; Ctrl-C (the built CLI, a real SIGINT) leaves the task running.
 */

let m: TestMaster;
let w: TestWorker;
let reviewer: Client;
let env: Record<string, string>;
const BIN = Buffer.from(Array.from({ length: 256 }, (_, i) => i));

beforeAll(async () => {
  m = await startTestMaster({
    config: clusterConfig({
      policy: { scripts: [{ interpreter: '/usr/bin/python3', script_from_inputs: true }] },
    }),
  });
  w = await startWorkerOn(m, 'w-run', { simCards: 2 });
  env = {
    GPU_BROKER_URL: m.url,
    GPU_BROKER_TOKEN: m.createToken('agent', ['submitter']),
    GPU_BROKER_CA_FILE: m.caCertPath ?? '',
    // What run remembers of a directory lives per user, here in a state dir of the test's own.
    XDG_STATE_HOME: makeTempDir('run-state'),
  };
  reviewer = await m.mcpClient(m.createToken('rev', ['reviewer']));
  await waitFor(() => m.deps.cluster.fleet.get('w-run').cards.length === 2, {
    timeoutMs: 20_000,
    what: 'the worker and its 2 simulated cards',
  });
}, 60_000);

afterAll(async () => {
  await w?.close();
  await m?.close();
  removeTempDirs();
});

/** A project dir whose train.py prints `lines` numbered lines, writes outputs and exits `exit`. */
function project(name: string, opts: { lines?: number; exit?: number; sleep?: number } = {}): string {
  const dir = join(makeTempDir('run-cli'), name);
  mkdirSync(join(dir, 'lib'), { recursive: true });
  mkdirSync(join(dir, 'node_modules', 'x'), { recursive: true });
  writeFileSync(join(dir, 'node_modules', 'x', 'big.js'), 'never shipped');
  writeFileSync(join(dir, 'lib', 'consts.py'), 'GREETING = "hello"\n');
  writeFileSync(
    join(dir, 'train.py'),
    [
      'import os, sys, time',
      'print("to stderr \\x1b]0;pwned\\x07", file=sys.stderr, flush=True)',
      `for i in range(1, ${opts.lines ?? 5} + 1):`,
      '    print(f"line {i}", flush=True)',
      `    time.sleep(${opts.sleep ?? 0})`,
      'out = os.environ["GPU_BROKER_OUTPUT_DIR"]',
      'open(os.path.join(out, "metrics.json"), "w").write(\'{"loss": 0.5}\\n\')',
      `open(os.path.join(out, "weights.bin"), "wb").write(bytes(range(256)))`,
      `sys.exit(${opts.exit ?? 0})`,
      '',
    ].join('\n'),
  );
  return dir;
}

/** Runs `gpu-broker run` in-process with output readable while it runs. */
function startRun(args: string[], stop?: Promise<void>) {
  let stdout = '';
  let stderr = '';
  const io: CliIo = {
    stdout: (t) => {
      stdout += t;
    },
    stderr: (t) => {
      stderr += t;
    },
    env,
    ...(stop ? { stopSignal: stop } : {}),
  };
  const done = runCommand(args, io);
  return { done, out: () => stdout, err: () => stderr };
}

/** Waits for the run to say it waits for review, then decides through submit_review (MCP). */
async function review(
  err: () => string,
  decision: 'APPROVE' | 'REQUEST_CHANGES' = 'APPROVE',
): Promise<{ proposal_id: string; revision_id: string }> {
  await waitFor(() => err().includes('waiting for review by'), { timeoutMs: 15_000, what: err() });
  const q = expectOk(
    await m.callTool<{ items: Array<{ proposal_id: string; revision_id: string }> }>(
      reviewer,
      'list_review_queue',
      {},
    ),
  );
  const first = q.items[0];
  if (!first) throw new Error('nothing in the review queue');
  const item = { proposal_id: first.proposal_id, revision_id: first.revision_id };
  expectOk(
    await m.callTool(reviewer, 'submit_review', {
      ...item,
      decision,
      comments: decision === 'APPROVE' ? 'bounded, fine' : 'please change it',
      idempotency_key: m.key(),
    }),
  );
  return item;
}

const RUN_FLAGS = ['--output', 'metrics.json', '--output', 'weights.bin', '--cards', '1'];

describe('gpu-broker run', () => {
  it('waits for review, streams the logs, downloads the outputs and exits 0', async () => {
    const dir = project('ok');
    const r = startRun(['--dir', dir, ...RUN_FLAGS, '--', 'python3', 'train.py', '--epochs', '1']);
    await review(r.err);
    const code = await r.done;
    expect(code, r.err()).toBe(0);
    expect(r.out()).toBe('line 1\nline 2\nline 3\nline 4\nline 5\n');
    expect(r.err()).toContain('to stderr');
    expect(r.err()).toMatch(/proposed prop_\S+ revision 1: 2 file\(s\), 2 uploaded/);
    const taskId = /task (task_\S+): following/.exec(r.err())?.[1] ?? '';
    const root = join(dir, 'gpu-broker-outputs', taskId);
    expect(readFileSync(join(root, 'metrics.json'), 'utf8')).toBe('{"loss": 0.5}\n');
    expect(readFileSync(join(root, 'weights.bin')).equals(BIN)).toBe(true);
    // The first run of a directory lists what it ships before sending it (docs/security.md "gpu-broker run on the submitter’s machine"); the memory of
    // it is this user's, not in the directory.
    expect(r.err()).toContain('gpu-broker: first run from this directory');
    expect(r.err()).toMatch(/gpu-broker: 2 file\(s\), \S+ \S+ \(\d+ bytes\) from /);
    expect(r.err()).toMatch(/gpu-broker: +\S+ B {2}lib\/consts\.py\n/);
    expect(existsSync(join(dir, '.gpu-broker', 'run.json'))).toBe(false);
    // Again, unchanged: the approved proposal is final, so a new one; nothing re-uploaded, no listing,
    // and the downloaded outputs are not shipped.
    const again = startRun(['--dir', dir, ...RUN_FLAGS, '--', 'python3', 'train.py', '--epochs', '1']);
    await review(again.err);
    expect(await again.done, again.err()).toBe(0);
    expect(again.err()).not.toContain('first run from this directory');
    expect(again.err()).toMatch(/proposed prop_\S+ revision 1: 2 file\(s\), 0 uploaded/);
    expect(again.err()).not.toContain(/proposed (prop_\S+)/.exec(r.err())?.[1] ?? 'x');
  }, 60_000);

  it("exits with the script's own exit code", async () => {
    const r = startRun([
      '--dir',
      project('exit3', { exit: 3 }),
      ...RUN_FLAGS,
      '--json',
      '--',
      'python3',
      'train.py',
    ]);
    await review(r.err);
    expect(await r.done, r.err()).toBe(3);
    expect(r.err()).toContain('EXIT_NONZERO');
    // --json: stdout is one document; the task's own stdout went to stderr.
    expect(JSON.parse(r.out())).toMatchObject({ exit: 3, exit_code: 3, state: 'FAILED', uploaded: 2 });
    expect(r.err()).toContain('line 5\n');
  }, 60_000);

  it('a second run in the same dir revises the same proposal and uploads only the changed file', async () => {
    const dir = project('again');
    const first = startRun(['--dir', dir, ...RUN_FLAGS, '--', 'python3', 'train.py']);
    const asked = await review(first.err, 'REQUEST_CHANGES');
    expect(await first.done).toBe(121);
    expect(first.err()).toContain('please change it');
    writeFileSync(join(dir, 'lib', 'consts.py'), 'GREETING = "changed"\n');
    const second = startRun(['--dir', dir, ...RUN_FLAGS, '--', 'python3', 'train.py']);
    await review(second.err);
    expect(await second.done, second.err()).toBe(0);
    expect(second.err()).toContain(`revised ${asked.proposal_id} revision 2: 2 file(s), 1 uploaded`);
  }, 90_000);

  it('Ctrl-C in review keeps the proposal; the same code attaches to it, changed code supersedes it', async () => {
    const dir = project('attach');
    let interrupt = () => {};
    const stop = new Promise<void>((resolve) => {
      interrupt = resolve;
    });
    const first = startRun(['--dir', dir, ...RUN_FLAGS, '--', 'python3', 'train.py'], stop);
    await waitFor(() => first.err().includes('waiting for review by'), { what: first.err() });
    interrupt();
    expect(await first.done).toBe(130);
    expect(first.err()).toContain('stays in review');
    const id = /proposed (prop_\S+)/.exec(first.err())?.[1] ?? '';
    let interruptAgain = () => {};
    const stopAgain = new Promise<void>((resolve) => {
      interruptAgain = resolve;
    });
    const same = startRun(['--dir', dir, ...RUN_FLAGS, '--', 'python3', 'train.py'], stopAgain);
    await waitFor(() => same.err().includes(`proposal ${id} revision 1 is already in review`), {
      what: same.err(),
    });
    interruptAgain();
    expect(await same.done).toBe(130);
    writeFileSync(join(dir, 'train.py'), 'print("v2")\n');
    const changed = startRun(['--dir', dir, '--', 'python3', 'train.py']);
    await review(changed.err);
    expect(await changed.done, changed.err()).toBe(0);
    expect(changed.err()).toContain(`withdrew proposal ${id}`);
    expect(changed.out()).toBe('v2\n');
  }, 60_000);

  it('ignores a .gpu-broker/run.json that came with the repository: it picks no proposal to revise or withdraw', async () => {
    // The victim's own proposal, in review from another directory.
    const mine = project('victim');
    let stopMine = () => {};
    const mineRun = startRun(
      ['--dir', mine, ...RUN_FLAGS, '--', 'python3', 'train.py'],
      new Promise<void>((resolve) => {
        stopMine = resolve;
      }),
    );
    await waitFor(() => mineRun.err().includes('waiting for review by'), { what: mineRun.err() });
    stopMine();
    expect(await mineRun.done).toBe(130);
    const victimId = /proposed (prop_\S+)/.exec(mineRun.err())?.[1] ?? '';
    // A cloned repository carrying a run.json that names it (docs/security.md "gpu-broker run on the submitter’s machine").
    const cloned = project('cloned');
    writeFileSync(join(cloned, 'train.py'), 'print("other code")\n');
    mkdirSync(join(cloned, '.gpu-broker'));
    writeFileSync(
      join(cloned, '.gpu-broker', 'run.json'),
      JSON.stringify({ version: 1, proposals: { [m.url]: victimId } }),
    );
    let stop = () => {};
    const r = startRun(
      ['--dir', cloned, ...RUN_FLAGS, '--', 'python3', 'train.py'],
      new Promise<void>((resolve) => {
        stop = resolve;
      }),
    );
    await waitFor(() => r.err().includes('waiting for review by'), { what: r.err() });
    stop();
    expect(await r.done).toBe(130);
    expect(r.err()).toContain('ignoring .gpu-broker/run.json');
    expect(r.err()).toContain('first run from this directory');
    expect(r.err()).not.toContain(`withdrew proposal ${victimId}`);
    expect(r.err()).toMatch(/proposed prop_\S+ revision 1/);
    expect(m.store.proposals.get(victimId)?.state).toBe('IN_REVIEW');
    // Leave the review queue as it was for the tests that follow.
    const agent = await m.mcpClient(env['GPU_BROKER_TOKEN'] ?? '');
    const clonedId = /proposed (prop_\S+)/.exec(r.err())?.[1] ?? '';
    for (const id of [victimId, clonedId])
      expectOk(await m.callTool(agent, 'cancel_proposal', { proposal_id: id, idempotency_key: m.key() }));
    await agent.close();
  }, 60_000);

  it('stops at error findings (120) and prints a broker error with its code and hint (1)', async () => {
    const dir = project('findings');
    const refused = await runCli(runCommand, ['--dir', dir, '--', '/usr/bin/curl', 'http://x'], env);
    expect(refused.code, refused.stderr).toBe(120);
    expect(refused.stderr).toMatch(/error: \S+ at runtime\.argv/);
    expect(refused.stderr).toContain('not sent to review');
    const denied = await runCli(runCommand, ['--dir', dir, '--', 'python3', 'train.py'], {
      ...env,
      GPU_BROKER_TOKEN: 'not-a-token',
    });
    expect(denied.code).toBe(1);
    expect(denied.stderr).toMatch(/^error: UNAUTHENTICATED: .+\nhint: .+/);
  });

  it('refuses a run without a command, and a bad --cards, before sending anything', async () => {
    const none = await runCli(runCommand, ['--dir', '.'], env);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain('put the command after --');
    const bad = await runCli(runCommand, ['--cards', 'two', '--', 'python3', 'x.py'], env);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--cards must be a whole number');
  });
});

/** Spawns the built CLI; output readable while it runs. */
function spawnRun(args: string[]): {
  child: ChildProcess;
  out: () => string;
  err: () => string;
  exit: Promise<number | null>;
} {
  const child = spawn(process.execPath, [builtCliPath(), ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout?.setEncoding('utf8').on('data', (d: string) => {
    out += d;
  });
  child.stderr?.setEncoding('utf8').on('data', (d: string) => {
    err += d;
  });
  const exit = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  return { child, out: () => out, err: () => err, exit };
}

describe('Ctrl-C and gpu-broker task', () => {
  it('SIGINT leaves the task running; task logs --follow then prints every line once; task wait exits 0', async () => {
    const lines = 400;
    const r = spawnRun([
      'run',
      '--dir',
      project('sigint', { lines, sleep: 0.02 }),
      ...RUN_FLAGS,
      '--',
      'python3',
      'train.py',
    ]);
    await review(r.err);
    await waitFor(() => r.out().includes('line 3\n') && r.err().includes('pwned'), {
      timeoutMs: 20_000,
      what: `logs: ${r.err()}`,
    });
    r.child.kill('SIGINT');
    expect(await r.exit, r.err()).toBe(130);
    // The built CLI's terminal guard: the task's escape sequence arrives visible, never raw.
    expect(r.err()).toContain('to stderr \\x1b]0;pwned\\x07');
    expect(r.err()).not.toContain('\x1b');
    const taskId = /task (task_\S+): following/.exec(r.err())?.[1] ?? '';
    expect(r.err()).toContain(`gpu-broker task logs ${taskId} --follow`);
    const shown = await runCli(taskCommand, ['show', taskId, '--json'], env);
    expect(shown.json<{ task: { state: string } }>().task.state).toMatch(/^(ASSIGNED|RUNNING)$/);
    const follow = await runCli(taskCommand, ['logs', taskId, '--follow', '--stream', 'stdout'], env);
    expect(follow.code).toBe(0);
    expect(follow.stdout).toBe(Array.from({ length: lines }, (_, i) => `line ${i + 1}\n`).join(''));
    const waited = await runCli(taskCommand, ['wait', taskId], env);
    expect(waited.code).toBe(0);
    const tail = await runCli(taskCommand, ['logs', taskId, '--tail', '2', '--stream', 'stdout'], env);
    expect(tail.stdout).toBe(`line ${lines - 1}\nline ${lines}\n`);
    const list = await runCli(taskCommand, ['list', '--json'], env);
    expect(list.json<{ tasks: Array<{ task_id: string }> }>().tasks.map((t) => t.task_id)).toContain(taskId);
    const outs = await runCli(taskCommand, ['outputs', taskId, '--dir', makeTempDir('outs'), '--json'], env);
    expect(outs.json<{ files: unknown[] }>().files).toHaveLength(2);
  }, 90_000);

  it('task cancel stops a running task and task wait exits 123', async () => {
    const r = startRun([
      '--dir',
      project('cancel', { lines: 1000, sleep: 0.05 }),
      ...RUN_FLAGS,
      '--',
      'python3',
      'train.py',
    ]);
    await review(r.err);
    const taskId = await waitFor(() => /task (task_\S+) RUNNING/.exec(r.err())?.[1], {
      timeoutMs: 20_000,
      what: r.err(),
    });
    const cancelled = await runCli(taskCommand, ['cancel', taskId], env);
    expect(cancelled.code, cancelled.stderr).toBe(0);
    expect(await r.done).toBe(123);
    expect((await runCli(taskCommand, ['wait', taskId], env)).code).toBe(123);
  }, 60_000);
});
