import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { approveTask, clusterConfig, getTask, shellSpec, waitUntilSettled } from '../../support/cluster.js';
import { pidsWithMarker } from '../../support/executor-plan.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectOk } from '../../support/mcp.js';
import { makeGateDir, removeTempDirs } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';
import { startWorkerOn, type TestWorker } from '../../support/worker.js';

/**
 * docs/security.md "The task sandbox" attack table, each row tried by a real task an agent proposed, approved through the real MCP
 * tools, run by a real worker daemon in its real bubblewrap sandbox. The master's and the worker's data
 * dirs live under /var/tmp, which every sandbox binds read-only: only the sandbox's hiding keeps them out
 * of reach, not a private /tmp. Rows 6 and 7 (file modes at start) are pinned where the modes are set.
 */

interface Logs {
  data: string;
}
interface Outputs {
  outputs: Array<{ path: string; size: number; sha256: string }>;
}

let m: TestMaster;
let w: TestWorker;
let alice: Client;
let rita: Client;
let varDir: string;
let victim: string;
const WORKER_SECRET = `worker-secret-${process.pid}-0123456789abcdef`;

beforeAll(async () => {
  varDir = mkdtempSync('/var/tmp/gpu-broker-attacks-');
  // Traversable, so that what keeps a task out of the data dirs below is the sandbox, not this mode.
  chmodSync(varDir, 0o755);
  m = await startTestMaster({ config: clusterConfig(), dataDir: join(varDir, 'master') });
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  const workerDir = join(varDir, 'worker');
  w = await startWorkerOn(m, 'gpu-attack', { simCards: 8, dataDir: workerDir, hiddenPaths: [m.dataDir] });
  // What a worker token file next to its data looks like; no task may read it.
  writeFileSync(join(workerDir, 'worker.token'), WORKER_SECRET, { mode: 0o600 });
  // A root-owned file the task can see (read-only) and will try to make the worker overwrite.
  victim = join(varDir, 'victim.txt');
  writeFileSync(victim, 'original\n', { mode: 0o644 });
  await waitFor(() => m.deps.cluster.fleet.get('gpu-attack').cards.length === 8, {
    what: 'eight sim cards on gpu-attack',
  });
});

afterAll(async () => {
  await w?.close();
  await m?.close();
  rmSync(varDir, { recursive: true, force: true });
  removeTempDirs();
});

async function run(script: string, overrides: Parameters<typeof shellSpec>[1] = {}) {
  const id = await approveTask(alice, rita, shellSpec(script, overrides));
  const task = await waitUntilSettled(alice, id, 45_000);
  const logs = expectOk(await callTool<Logs>(alice, 'get_task_logs', { task_id: id })).data;
  return { id, task, logs };
}

describe('a hostile task, through a real worker', () => {
  it('row 1: symlinks named like the log files do not make the worker write elsewhere', async () => {
    const { task, logs } = await run(
      [
        `for d in /task /task/out /task/.. /; do ln -sf '${victim}' "$d/stdout.log" 2>/dev/null; ln -sf '${victim}' "$d/stderr.log" 2>/dev/null; done`,
        'echo PWNED; echo PWNED >&2',
      ].join('\n'),
    );
    expect(task.state).toBe('COMPLETED');
    expect(logs).toBe('PWNED\n');
    expect(readFileSync(victim, 'utf8')).toBe('original\n');
  });

  it('row 2: an output whose parent is a symlink to the worker data dir brings back nothing of it', async () => {
    const workerDir = w.dataDir;
    const { id, task } = await run(
      [
        `ln -s '${workerDir}' "$GPU_BROKER_OUTPUT_DIR/a"`,
        `ln -s '${workerDir}/worker.token' "$GPU_BROKER_OUTPUT_DIR/direct.token"`,
        'mkdir -p "$GPU_BROKER_OUTPUT_DIR/b" && echo mine > "$GPU_BROKER_OUTPUT_DIR/b/ok.txt"',
      ].join('\n'),
      {
        outputs: [
          { path: 'a/worker.token', required: false },
          { path: 'direct.token', required: false },
          { path: 'b/ok.txt', required: true },
        ],
      },
    );
    expect(task.state).toBe('COMPLETED');
    const listed = expectOk(await callTool<Outputs>(alice, 'get_task_outputs', { task_id: id }));
    expect(listed.outputs.map((o) => o.path)).toEqual(['b/ok.txt']);
  });

  it('row 3: another running task is invisible in /proc; its environ cannot be read, nor can it be stopped', async () => {
    const gate = join(makeGateDir('attack-row3'), 'go');
    const mark = `victim-mark-${process.pid}`;
    const victimScript = `while [ ! -e '${gate}' ]; do sleep 0.05; done; printf '%s' "$VICTIM_MARK" > "$GPU_BROKER_OUTPUT_DIR/r.txt"`;
    const victimId = await approveTask(
      alice,
      rita,
      shellSpec(victimScript, {
        runtime: { kind: 'process', argv: ['/bin/sh', '-c', victimScript], env: { VICTIM_MARK: mark } },
        outputs: [{ path: 'r.txt', required: true }],
        title: 'victim',
      }),
    );
    await waitFor(async () => (await getTask(alice, victimId)).state === 'RUNNING', {
      what: 'victim running',
    });
    const { task, logs } = await run(
      [
        'n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo "pids=$n"',
        `grep -l '${mark}' /proc/[0-9]*/environ 2>/dev/null && echo FOUND || echo not-found`,
        // Every pid it can see but itself and the sandbox's init: none of them is the victim.
        // biome-ignore lint/suspicious/noTemplateCurlyInString: a shell parameter expansion, not a template
        'for p in /proc/[0-9]*; do q=${p#/proc/}; [ "$q" = "$$" ] || [ "$q" = 1 ] || kill -STOP "$q" 2>/dev/null; done; echo tried',
      ].join('\n'),
    );
    writeFileSync(gate, '');
    expect(task.state).toBe('COMPLETED');
    expect(logs).toContain('not-found');
    // Its own processes only: the sandbox's init, the shell, and the glob's subshell at most.
    expect(Number(/pids=(\d+)/.exec(logs)?.[1])).toBeLessThan(5);
    const done = await waitUntilSettled(alice, victimId);
    expect(done.state).toBe('COMPLETED');
  });

  it("row 4: the worker's token and worker.sqlite, the master's data dir, /root and /home are not there", async () => {
    const { task, logs } = await run(
      [
        `cat '${w.dataDir}/worker.token' '${w.dataDir}/worker.sqlite' 2>&1 | head -c 200; echo`,
        `cat '${m.dataDir}/operator.token' '${m.dataDir}/broker.db' 2>&1 | head -c 200; echo`,
        `ls -A '${w.dataDir}' '${m.dataDir}' /root /home 2>&1 | tr '\\n' ' '; echo`,
      ].join('\n'),
    );
    expect(task.state).toBe('COMPLETED');
    expect(logs).not.toContain(WORKER_SECRET);
    expect(logs).not.toContain(m.operatorToken);
    expect(logs).not.toContain('SQLite format');
    // Not "Permission denied": the files are simply not there (the dirs are empty tmpfs inside).
    for (const path of [
      `${w.dataDir}/worker.token`,
      `${w.dataDir}/worker.sqlite`,
      `${m.dataDir}/operator.token`,
    ])
      expect(logs).toContain(`${path}: No such file`);
  });

  it('row 5: a setsid child does not outlive its task', async () => {
    const marker = `orphan-${process.pid}-${Date.now()}`;
    const { task } = await run(
      `setsid sh -c 'exec sleep 1000 # ${marker}' </dev/null >/dev/null 2>&1 &\necho started`,
    );
    expect(task.state).toBe('COMPLETED');
    expect(pidsWithMarker(marker)).toEqual([]);
  });

  it('network "none": the task cannot open a TCP connection to the master\'s port', async () => {
    const port = new URL(m.url).port;
    const { task, logs } = await run(
      `/usr/bin/python3 -c "import socket
try:
    socket.create_connection(('127.0.0.1', ${port}), 2); print('CONNECTED')
except OSError as e:
    print('refused', e.errno)"`,
    );
    expect(task.state).toBe('COMPLETED');
    expect(logs).toContain('refused');
    expect(logs).not.toContain('CONNECTED');
  });

  it('a 2-card task on an 8-card worker sees exactly its two nodes', async () => {
    const { task, logs } = await run('cd /dev && echo nvidia*', { cards: { count: 2 } });
    expect(task.state).toBe('COMPLETED');
    const indexes = task.cards.map((c) => c.index);
    expect(logs).toBe(`${indexes.map((i) => `nvidia${i}`).join(' ')}\n`);
  });
});
