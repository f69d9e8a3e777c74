import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ExecutionPlan } from '../../../../src/contracts/worker-protocol.js';
import type { ExecutionHandle } from '../../../../worker/executions/executor.js';
import type { ExecutorOptions } from '../../../../worker/local/executor.js';
import { startExecution } from '../../../../worker/local/executor.js';
import { probeBwrap, systemMounts } from '../../../../worker/sandbox/bwrap.js';
import { makeSimDeviceNodes } from '../../../../worker/sandbox/devices.js';
import type { SandboxSetup } from '../../../../worker/sandbox/setup.js';
import { TaskUidPool } from '../../../../worker/sandbox/task-uids.js';
import type { Chunk } from '../../../support/executor-plan.js';
import { makePlan, pidsWithMarker, sh, text } from '../../../support/executor-plan.js';
import { isRoot, requireOrSkip } from '../../../support/require-or-skip.js';
import { SANDBOX_ENGINES } from '../../../support/sandbox-engines.js';
import { waitFor } from '../../../support/wait.js';

// Attacks on the bubblewrap sandbox, each by a real task in a real sandbox (docs/security.md "The task sandbox"). The worker's data
// dir here is `dataDir`: it holds a fake worker token and worker.sqlite, which no task may read.

let dataDir: string;
let rootDir: string;
let sandbox: SandboxSetup;
const WORKER_SECRET = 'worker-token-0123456789abcdef';
const probe = await probeBwrap({ root: isRoot });
const sandboxed = requireOrSkip(
  'bubblewrap',
  probe.ok && probe.bwrap !== null && probe.env !== null,
  probe.detail,
);

beforeAll(async () => {
  if (!sandboxed || probe.bwrap === null || probe.env === null) return;
  // Under /var (bound into every sandbox), so only the hiding keeps it out of sight.
  dataDir = mkdtempSync(join('/var/tmp', 'gpu-broker-sandbox-'));
  rootDir = join(dataDir, 'executions');
  writeFileSync(join(dataDir, 'worker.token'), WORKER_SECRET, { mode: 0o600 });
  writeFileSync(join(dataDir, 'worker.sqlite'), `sqlite ${WORKER_SECRET}`, { mode: 0o600 });
  const root = isRoot;
  sandbox = {
    kind: 'bwrap',
    bwrap: probe.bwrap,
    setpriv: root ? probe.setpriv : null,
    envHelper: probe.env,
    uids: root ? new TaskUidPool({ first: 2_000_100_000, last: 2_000_100_099 }) : null,
    hiddenPaths: [dataDir],
    system: systemMounts(),
    simNodes: await makeSimDeviceNodes(join(dataDir, 'devices'), 8, root),
  };
});
afterAll(() => {
  if (dataDir !== undefined) rmSync(dataDir, { recursive: true, force: true });
});

function start(plan: ExecutionPlan, extra: Partial<ExecutorOptions> = {}) {
  const chunks: Chunk[] = [];
  const handle: ExecutionHandle = startExecution(plan, {
    rootDir,
    workerId: 'worker-1',
    provider: 'sim',
    onLog: (stream, offset, data) => chunks.push({ stream, offset, data }),
    cleanupPollMs: 20,
    sandbox,
    ...extra,
  });
  return { handle, chunks };
}

describe.each(SANDBOX_ENGINES)('built by $name', ({ native }) => {
  beforeAll(() => {
    if (sandbox?.kind === 'bwrap') sandbox = { ...sandbox, native };
  });

  describe.runIf(sandboxed)('what a sandboxed task sees', () => {
    it('exactly its leased cards as device nodes, with visibility numbered as present', async () => {
      const plan = makePlan({
        argv: sh('ls /dev; echo "vis=$CUDA_VISIBLE_DEVICES ids=$GPU_BROKER_GPU_IDS"'),
        cards: [
          { index: 2, uuid: 'SIM-2' },
          { index: 5, uuid: 'SIM-5' },
        ],
      });
      const { handle, chunks } = start(plan);
      const result = await handle.done;
      expect(result.failure_reason).toBeNull();
      const out = text(chunks, 'stdout');
      const gpuNodes = out.split('\n').filter((l) => l.startsWith('nvidia'));
      expect(gpuNodes).toEqual(['nvidia2', 'nvidia5']);
      expect(out).toContain('vis=0,1 ids=2,5');
    });

    it('its own dir at /task, a private /tmp, its own uid, no capabilities', async () => {
      const plan = makePlan({
        argv: sh(
          'pwd; echo "out=$GPU_BROKER_OUTPUT_DIR"; id -u; grep CapEff /proc/self/status; ls -A /tmp | wc -l; touch /usr/x 2>&1 || echo ro; touch /tmp/w /dev/shm/w && echo tmp-writable',
        ),
      });
      const { handle, chunks } = start(plan);
      await handle.done;
      const lines = text(chunks, 'stdout').trim().split('\n');
      expect(lines[0]).toBe('/task');
      expect(lines[1]).toBe('out=/task/out');
      if (process.getuid?.() === 0) expect(Number(lines[2])).toBeGreaterThanOrEqual(2_000_100_000);
      expect(lines[3]).toMatch(/CapEff:\s+0+$/);
      expect(lines[4]).toBe('0');
      expect(text(chunks, 'stdout')).toContain('ro');
      expect(text(chunks, 'stdout')).toContain('tmp-writable');
    });

    // An unprivileged worker's tasks share its uid (documented).
    it.runIf(requireOrSkip('root', isRoot, 'task uids need it'))(
      'gives two running tasks different uids',
      async () => {
        const a = start(makePlan({ argv: sh('id -u; sleep 1') }));
        const b = start(makePlan({ argv: sh('id -u; sleep 1') }));
        const [ra, rb] = await Promise.all([a.handle.done, b.handle.done]);
        expect(ra.failure_reason).toBeNull();
        expect(rb.failure_reason).toBeNull();
        expect(text(a.chunks, 'stdout')).not.toBe(text(b.chunks, 'stdout'));
      },
    );
  });

  describe.runIf(sandboxed)('attacks', () => {
    it('row 1: a symlinked log file cannot make the worker write elsewhere', async () => {
      const target = join(dataDir, 'root-owned.txt');
      writeFileSync(target, 'original');
      const plan = makePlan({
        argv: sh(
          `for f in stdout.log stderr.log ../stdout.log out/../stdout.log; do ln -sf '${target}' "$f" 2>/dev/null; done; echo PWNED; echo PWNED >&2`,
        ),
      });
      const { handle, chunks } = start(plan);
      await handle.done;
      expect(text(chunks, 'stdout')).toBe('PWNED\n');
      expect(readFileSync(target, 'utf8')).toBe('original');
      expect(readFileSync(join(rootDir, plan.execution_id, 'stdout.log'), 'utf8')).toBe('PWNED\n');
    });

    it('row 2: outputs through a symlinked or swapped parent never reach the worker token', async () => {
      const outputs = [
        { path: 'a0/w.token', required: false },
        { path: 'a1/w.token', required: false },
        { path: 'a2/w.token', required: false },
      ];
      // a0: a symlink to the (host) token dir; a1: a dir swapped for such a symlink by a setsid child that
      // keeps racing; a2: a hard link attempt.
      const plan = makePlan({
        argv: sh(
          `cd out && ln -s '${dataDir}' a0 && mkdir a1 a2 && ln '${join(dataDir, 'worker.token')}' a2/w.token 2>/dev/null; ` +
            `(setsid sh -c 'while :; do mv a1 a1x; ln -sfn ${dataDir} a1; rm -f a1; mv a1x a1; done' &) ; sleep 0.3; exit 0`,
        ),
        outputs,
      });
      const { handle } = start(plan);
      const result = await handle.done;
      for (const o of result.outputs) expect(o.content.toString()).not.toContain(WORKER_SECRET);
      expect(result.outputs.map((o) => o.path)).not.toContain('a0/w.token');
      expect(result.output_errors.join('\n')).toMatch(/a0\/w\.token.*symlink/);
      expect(result.cleaned).toBe(true);
    });

    it('row 3: another running task is invisible in /proc, and so is its environ', async () => {
      const victim = start(makePlan({ argv: sh('echo victim-ready; sleep 3'), env: { MARK: 'victim-env' } }));
      await waitFor(() => text(victim.chunks, 'stdout').includes('victim-ready'), {
        what: 'the victim to start',
      });
      const attacker = start(
        makePlan({
          argv: sh(
            'cat /proc/[0-9]*/environ 2>/dev/null | tr "\\0" "\\n" | grep -c victim-env; ls /proc | grep -c "^[0-9]"',
          ),
        }),
      );
      await attacker.handle.done;
      victim.handle.cancel('test over');
      await victim.handle.done;
      const [hits, pids] = text(attacker.chunks, 'stdout').trim().split('\n');
      expect(hits).toBe('0');
      // The attacker's namespace holds its init, its shell and the pipeline: a handful, not the host's.
      expect(Number(pids)).toBeLessThan(10);
    });

    it('row 4: the worker data dir (token, worker.sqlite), /root and /home are not there', async () => {
      const plan = makePlan({
        argv: sh(
          `cat '${join(dataDir, 'worker.sqlite')}' '${join(dataDir, 'worker.token')}' 2>&1; for d in '${dataDir}' /root /home; do ls -A "$d" 2>/dev/null; done | wc -l`,
        ),
      });
      const { handle, chunks } = start(plan);
      await handle.done;
      const out = text(chunks, 'stdout');
      expect(out).not.toContain(WORKER_SECRET);
      expect(out.trim().split('\n').at(-1)).toBe('0');
    });

    it('row 4b: a policy hidden path is not visible; a file is replaced by an empty one', async () => {
      const secretDir = mkdtempSync(join('/var/tmp', 'gpu-broker-hidden-'));
      const secretFile = join('/var/tmp', `gpu-broker-hidden-file-${process.pid}`);
      writeFileSync(join(secretDir, 'secret'), 'hidden-dir-secret');
      writeFileSync(secretFile, 'hidden-file-secret');
      try {
        const plan = makePlan({
          argv: sh(`cat '${join(secretDir, 'secret')}' '${secretFile}' 2>&1; echo done`),
          hiddenPaths: [secretDir, secretFile, '/nonexistent/path'],
        });
        const { handle, chunks } = start(plan);
        await handle.done;
        expect(text(chunks, 'stdout')).not.toMatch(/hidden-(dir|file)-secret/);
        expect(text(chunks, 'stdout')).toContain('done');
      } finally {
        rmSync(secretDir, { recursive: true, force: true });
        rmSync(secretFile, { force: true });
      }
    });

    it('row 5: a setsid child dies with the task; cancel and time limit leave nothing', async () => {
      const marker = `gpu-broker-marker-${process.pid}-a`;
      const exited = start(makePlan({ argv: sh(`(setsid sleep 1000 ${marker} &); sleep 0.2; exit 0`) }));
      const result = await exited.handle.done;
      expect(result).toMatchObject({ exit_code: 0, cleaned: true });
      expect(pidsWithMarker(marker)).toEqual([]);

      const marker2 = `gpu-broker-marker-${process.pid}-b`;
      const cancelled = start(
        makePlan({
          argv: sh(`(setsid sh -c 'trap "" TERM; sleep 1000 ${marker2}' &); echo up; sleep 1000`),
          grace: 0.3,
        }),
      );
      await waitFor(() => text(cancelled.chunks, 'stdout').includes('up'), { what: 'the task to start' });
      await waitFor(() => pidsWithMarker(marker2).length > 0, { what: 'the setsid child' });
      cancelled.handle.cancel('test');
      expect(await cancelled.handle.done).toMatchObject({ failure_reason: 'CANCELLED', cleaned: true });
      expect(pidsWithMarker(marker2)).toEqual([]);

      const marker3 = `gpu-broker-marker-${process.pid}-c`;
      const timed = start(
        makePlan({
          argv: sh(`trap "" TERM; (setsid sleep 1000 ${marker3} &); while :; do sleep 0.1; done`),
          timeLimit: 1,
          grace: 0.3,
        }),
      );
      expect(await timed.handle.done).toMatchObject({
        failure_reason: 'TIMED_OUT',
        signal: 'SIGKILL',
        cleaned: true,
      });
      expect(pidsWithMarker(marker3)).toEqual([]);
    });

    it('row 5b: a preempted task that setsids a TERM-proof child and exits 0 at once is PREEMPTED, the child gone', async () => {
      const marker = `gpu-broker-marker-${process.pid}-p`;
      const { handle, chunks } = start(
        makePlan({
          argv: sh(
            `(setsid sh -c 'trap "" TERM; sleep 1000 ${marker}' &); trap 'exit 0' TERM; echo up; while :; do sleep 0.05; done`,
          ),
          grace: 0.3,
        }),
      );
      await waitFor(() => text(chunks, 'stdout').includes('up'), { what: 'the task to start' });
      await waitFor(() => pidsWithMarker(marker).length > 0, { what: 'the setsid child' });
      handle.cancel('preempted', { preempt: true });
      // Its clean exit neither makes it a success (it would never run again) nor leaves the child behind.
      expect(await handle.done).toMatchObject({ failure_reason: 'PREEMPTED', exit_code: 0, cleaned: true });
      expect(pidsWithMarker(marker)).toEqual([]);
    });

    it('network "none" cannot reach a TCP port on the host; "host" can', async () => {
      const server: Server = createServer((s) => s.end('hello-from-host\n'));
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
      const port = (server.address() as { port: number }).port;
      const probe = [
        process.execPath,
        '-e',
        `const s=require('net').connect(${port},'127.0.0.1');s.on('data',d=>{process.stdout.write(String(d));s.end()});s.on('error',e=>{console.log('refused '+e.code)})`,
      ];
      try {
        const closed = start(makePlan({ argv: probe }));
        await closed.handle.done;
        expect(text(closed.chunks, 'stdout')).toMatch(/refused/);
        const open = start(makePlan({ argv: probe, network: 'host' }));
        await open.handle.done;
        expect(text(open.chunks, 'stdout')).toBe('hello-from-host\n');
      } finally {
        server.close();
      }
    });

    it('a pinned script under a hidden path still runs, read-only', async () => {
      const home = mkdtempSync(join(dataDir, 'repo-'));
      chmodSync(home, 0o755);
      const script = join(home, 'run.sh');
      writeFileSync(script, 'echo pinned-ran; echo x >> "$0" || echo cannot-write\n', { mode: 0o755 });
      const plan = makePlan({ argv: ['/bin/sh', script], pins: [{ path: script, sha256: '0'.repeat(64) }] });
      const { handle, chunks } = start(plan);
      const result = await handle.done;
      expect(text(chunks, 'stderr')).toMatch(/Read-only file system|Permission denied/);
      expect(result.setup_error).toBeUndefined();
      expect(text(chunks, 'stdout')).toContain('pinned-ran');
      expect(text(chunks, 'stdout')).toContain('cannot-write');
    });

    it('a pinned script outside the system dirs (here under /tmp) is reachable by the task uid', async () => {
      const repo = mkdtempSync(join(tmpdir(), 'gpu-broker-pinned-'));
      const deep = join(repo, 'a', 'b');
      mkdirSync(deep, { recursive: true });
      for (const d of [repo, join(repo, 'a'), deep]) chmodSync(d, 0o755);
      const script = join(deep, 'run.sh');
      writeFileSync(script, 'echo pinned-deep-ran\n', { mode: 0o644 });
      try {
        const plan = makePlan({
          argv: ['/bin/sh', script],
          pins: [{ path: script, sha256: '0'.repeat(64) }],
        });
        const { handle, chunks } = start(plan);
        const result = await handle.done;
        expect(text(chunks, 'stderr')).toBe('');
        expect(result.exit_code).toBe(0);
        expect(text(chunks, 'stdout')).toBe('pinned-deep-ran\n');
      } finally {
        rmSync(repo, { recursive: true, force: true });
      }
    });

    it("outputs come back; the task dir is its own and the execution root stays the worker's", async () => {
      const plan = makePlan({
        argv: sh('printf ok > "$GPU_BROKER_OUTPUT_DIR/r.txt"'),
        outputs: [{ path: 'r.txt', required: true }],
      });
      const { handle } = start(plan);
      const result = await handle.done;
      expect(result.failure_reason).toBeNull();
      expect(result.outputs.map((o) => o.content.toString())).toEqual(['ok']);
      const execRoot = join(rootDir, plan.execution_id);
      expect(statSync(execRoot).mode & 0o777).toBe(0o700);
      expect(statSync(execRoot).uid).toBe(process.getuid?.());
    });

    it('a missing device node of a real provider refuses to start (SETUP_FAILED)', async () => {
      const plan = makePlan({ argv: sh('true'), cards: [{ index: 63, uuid: 'GPU-x' }] });
      const result = await start(plan, { provider: 'nvidia' }).handle.done;
      expect(result.failure_reason).toBe('SETUP_FAILED');
      expect(result.setup_error).toMatch(/nvidia63 is missing/);
    });

    it('a Hygon task uid can open its render node under /dev/dri (bwrap would make /dev/dri 0700)', async () => {
      // Fake DCU nodes like hy-smi's host: <devDir>/kfd and <devDir>/dri/renderD<128+index>.
      const devDir = mkdtempSync(join(dataDir, 'hy-dev-'));
      mkdirSync(join(devDir, 'dri'), { recursive: true });
      for (const name of ['kfd', 'dri/renderD129', 'dri/renderD130'])
        execFileSync('mknod', ['-m', '0666', join(devDir, name), 'c', '1', '3']);
      const plan = makePlan({
        argv: sh(
          'ls -ld /dev/dri | cut -c1-10; ls /dev/dri; head -c 1 /dev/dri/renderD129 >/dev/null && echo opened',
        ),
        cards: [{ index: 1, uuid: 'DCU-1' }],
      });
      const { handle, chunks } = start(plan, {
        provider: 'hy',
        sandbox: { ...sandbox, devDir } as SandboxSetup,
      });
      const result = await handle.done;
      expect(result.failure_reason, result.setup_error).toBeNull();
      expect(text(chunks, 'stdout').trim().split('\n')).toEqual(['drwxr-xr-x', 'renderD129', 'opened']);
    });

    it('exit codes and signals come through bwrap', async () => {
      const code = await start(makePlan({ argv: sh('exit 3') })).handle.done;
      expect(code).toMatchObject({ exit_code: 3, failure_reason: 'EXIT_NONZERO' });
      const killed = await start(makePlan({ argv: sh('kill -KILL $$') })).handle.done;
      expect(killed).toMatchObject({ exit_code: null, signal: 'SIGKILL' });
    });
  });

  describe.runIf(sandboxed)('symlinks placed before the run', () => {
    it('refuses an output dir replaced by a symlink', async () => {
      const decoy = mkdtempSync(join(tmpdir(), 'gpu-broker-decoy-'));
      writeFileSync(join(decoy, 'r.txt'), 'decoy');
      mkdirSync(join(decoy, 'sub'));
      try {
        const plan = makePlan({
          argv: sh(`rm -r "$GPU_BROKER_OUTPUT_DIR" && ln -s '${decoy}' /task/out`),
          outputs: [{ path: 'r.txt', required: true }],
        });
        const result = await start(plan).handle.done;
        expect(result.failure_reason).toBe('OUTPUT_MISSING');
        expect(result.outputs).toEqual([]);
        expect(result.output_errors.join('\n')).toMatch(/symlink/);
      } finally {
        rmSync(decoy, { recursive: true, force: true });
      }
    });
  });
});
