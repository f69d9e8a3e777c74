import {
  chmodSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ExecutionPlan } from '../../../../src/contracts/worker-protocol.js';
import { startExecution } from '../../../../worker/local/executor.js';
import {
  type BwrapRequest,
  bwrapArgs,
  bwrapCommandLine,
  probeBwrap,
  systemMounts,
  taskEnvProblem,
} from '../../../../worker/sandbox/bwrap.js';
import { containerArgs, envFileText, probeContainerEngine } from '../../../../worker/sandbox/container.js';
import { makeSimDeviceNodes } from '../../../../worker/sandbox/devices.js';
import { findOnPath, HELPER_ENV } from '../../../../worker/sandbox/helper-commands.js';
import type { SandboxSetup } from '../../../../worker/sandbox/setup.js';
import { TaskUidPool } from '../../../../worker/sandbox/task-uids.js';
import type { Chunk } from '../../../support/executor-plan.js';
import { makePlan, sh, text } from '../../../support/executor-plan.js';
import { isRoot, requireOrSkip } from '../../../support/require-or-skip.js';
import { SANDBOX_ENGINES } from '../../../support/sandbox-engines.js';

// docs/security.md "Code the reviewer did not read": the spec's env reaches the task's own exec and nothing before it; bwrap's options (every
// host path) never show on a command line. The cluster-level proof is
// test/integration/cluster/sandbox-env.test.ts; here the pieces, and the unprivileged-bwrap path.

const request = (over: Partial<BwrapRequest> = {}): BwrapRequest => ({
  system: { dirs: ['/usr'], links: [['usr/bin', '/bin']] },
  taskDir: '/srv/worker-data/executions/e1/task',
  hidden: [{ path: '/srv/worker-data', kind: 'dir' }],
  pinned: [],
  devices: [],
  network: 'none',
  identity: { uid: 2_000_000_001, gid: 2_000_000_001, setpriv: '/usr/bin/setpriv' },
  statusFd: 3,
  argv: ['/bin/sh', '-c', 'echo hi'],
  taskEnv: {
    vars: { LD_DEBUG_OUTPUT: '/srv/x', A: 'b=c' },
    envHelper: '/usr/bin/env',
    bwrapEnvNames: ['PATH', 'A'],
  },
  ...over,
});

describe('the sandbox command line', () => {
  it('root worker: bwrap and setpriv start with no task variable; env -i applies them after the uid drop', () => {
    const line = bwrapCommandLine(bwrapArgs(request()), 4);
    expect(line.argv).toEqual([
      '--args',
      '4',
      '--',
      '/usr/bin/setpriv',
      '--reuid=2000000001',
      '--regid=2000000001',
      '--clear-groups',
      '--inh-caps=-all',
      '--bounding-set=-all',
      '--no-new-privs',
      '--',
      '/usr/bin/env',
      '-i',
      '--',
      'LD_DEBUG_OUTPUT=/srv/x',
      'A=b=c',
      'PWD=/task',
      '/bin/sh',
      '-c',
      'echo hi',
    ]);
    const options = line.data.toString('utf8').split('\0');
    expect(options.at(-1)).toBe('');
    expect(options).not.toContain('--setenv');
    expect(options).not.toContain('--unsetenv');
    // Every host path is in the piped options, none on the command line.
    expect(options).toContain('/srv/worker-data');
    expect(options).toContain('/srv/worker-data/executions/e1/task');
    expect(line.argv.join(' ')).not.toContain('/srv/worker-data');
  });

  it('root worker, native sandbox: the uid, gid and env travel as options; only the task is on the command line', () => {
    const line = bwrapCommandLine(
      bwrapArgs(request({ identity: { uid: 2_000_000_001, gid: 2_000_000_002, native: true } })),
      4,
    );
    // No setpriv, no env: the native sandbox drops to the uid and sets the env itself (ADR 0038).
    expect(line.argv).toEqual(['--args', '4', '--', '/bin/sh', '-c', 'echo hi']);
    const options = line.data.toString('utf8').split('\0');
    expect(options.slice(-16)).toEqual([
      '--uid',
      '2000000001',
      '--gid',
      '2000000002',
      '--setenv',
      'LD_DEBUG_OUTPUT',
      '/srv/x',
      '--setenv',
      'A',
      'b=c',
      '--setenv',
      'PWD',
      '/task',
      '--chdir',
      '/task',
      '',
    ]);
    // Never a user namespace, never bwrap's --unsetenv (its own env never reaches the task).
    expect(options).not.toContain('--unshare-user');
    expect(options).not.toContain('--unsetenv');
  });

  it('unprivileged worker: bwrap sets the env itself when it execs the task, from the piped options', () => {
    const line = bwrapCommandLine(bwrapArgs(request({ identity: null })), 4);
    expect(line.argv).toEqual(['--args', '4', '--', '/bin/sh', '-c', 'echo hi']);
    const options = line.data.toString('utf8').split('\0');
    const at = options.indexOf('--unsetenv');
    expect(at).toBeGreaterThan(0);
    // bwrap's own PATH goes (the task does not set it here); its A is replaced by the task's.
    expect(options.slice(at, at + 8)).toEqual([
      '--unsetenv',
      'PATH',
      '--setenv',
      'LD_DEBUG_OUTPUT',
      '/srv/x',
      '--setenv',
      'A',
      'b=c',
    ]);
  });

  it('without taskEnv (the Slurm rank wrapper) the arguments are as before', () => {
    const { taskEnv: _none, ...withoutEnv } = request();
    const args = bwrapArgs(withoutEnv);
    expect(args).not.toContain('--setenv');
    expect(args).not.toContain('--unsetenv');
    expect(args.slice(args.indexOf('--chdir'))).toEqual([
      '--chdir',
      '/task',
      '--',
      '/usr/bin/setpriv',
      '--reuid=2000000001',
      '--regid=2000000001',
      '--clear-groups',
      '--inh-caps=-all',
      '--bounding-set=-all',
      '--no-new-privs',
      '--',
      '/bin/sh',
      '-c',
      'echo hi',
    ]);
  });

  it('refuses what would change meaning on the way: NUL bytes, "=" in a program run through env', () => {
    expect(taskEnvProblem(['/bin/sh'], { A: 'x\0--bind' }, false)).toMatch(/env A contains a NUL byte/);
    expect(taskEnvProblem(['/bin/sh', 'a\0b'], {}, false)).toMatch(/argv contains a NUL byte/);
    expect(taskEnvProblem(['/opt/a=b/run'], {}, true)).toMatch(/argv\[0\].*contains "="/);
    expect(taskEnvProblem(['/opt/a=b/run'], {}, false)).toBeNull();
    expect(taskEnvProblem(['/bin/sh', 'x=y'], { A: 'b=c' }, true)).toBeNull();
    expect(() => bwrapCommandLine(['--tmpfs', '/a\0b', '--chdir', '/task', '--', '/bin/true'], 4)).toThrow(
      /NUL/,
    );
  });
});

const root = isRoot;
const bwrapProbe = await probeBwrap({ root });
const sandboxed = requireOrSkip(
  'bubblewrap',
  bwrapProbe.ok && bwrapProbe.bwrap !== null && bwrapProbe.env !== null,
  bwrapProbe.detail,
);

describe.runIf(sandboxed)('in a real sandbox', () => {
  let dataDir: string;
  beforeAll(() => {
    dataDir = mkdtempSync(join('/var/tmp', 'gpu-broker-sandbox-env-'));
  });
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  async function runIn(plan: ExecutionPlan, dropUid: boolean, native: string | null = null) {
    const sandbox: SandboxSetup = {
      kind: 'bwrap',
      bwrap: bwrapProbe.bwrap!,
      setpriv: dropUid ? bwrapProbe.setpriv : null,
      native,
      envHelper: bwrapProbe.env!,
      uids: dropUid ? new TaskUidPool({ first: 2_000_200_000, last: 2_000_200_099 }) : null,
      hiddenPaths: [dataDir],
      system: systemMounts(),
      simNodes: await makeSimDeviceNodes(join(dataDir, 'devices'), 2, root),
    };
    const chunks: Chunk[] = [];
    const result = await startExecution(plan, {
      rootDir: join(dataDir, 'executions'),
      workerId: 'worker-1',
      provider: 'sim',
      onLog: (stream, offset, data) => chunks.push({ stream, offset, data }),
      cleanupPollMs: 20,
      sandbox,
    }).done;
    return { result, out: text(chunks, 'stdout') };
  }

  const script = [
    'printf "mark=[%s]\\n" "$MARK"',
    'ls /tmp/ld.* >/dev/null 2>&1 && echo debug-files',
    'grep -l -e bwrap -e setpriv -e gpu-broker-sandbox /tmp/ld.* || echo helpers=none',
    'echo "owners=$(stat -c %u /tmp/ld.* | sort -u | tr "\\n" " ")uid=$(id -u)"',
    'echo "names=$(tr "\\0" "\\n" </proc/$$/environ | cut -d= -f1 | LC_ALL=C sort | tr "\\n" " ")"',
  ].join('\n');
  // Exactly the task's env (worker/task-io/env.ts buildTaskEnv) and PWD (bwrap sets it at --chdir), nothing
  // of bwrap's or setpriv's.
  const names = [
    ...['CUDA_DEVICE_ORDER', 'CUDA_VISIBLE_DEVICES', 'HIP_VISIBLE_DEVICES', 'ROCR_VISIBLE_DEVICES'],
    ...[
      'ASSIGNMENT_ID',
      'EXECUTION_ID',
      'GPU_IDS',
      'GPU_UUIDS',
      'LEASE_EPOCH',
      'OUTPUT_DIR',
      'PREEMPTED',
      'PREEMPTIONS',
      'SIMULATED',
    ].map((n) => `GPU_BROKER_${n}`),
    ...['GPU_BROKER_TASK_ID', 'GPU_BROKER_WORKER_ID', 'HOME', 'LANG', 'LD_DEBUG', 'LD_DEBUG_OUTPUT', 'MARK'],
    ...['PATH', 'PWD', 'TMPDIR'],
  ].sort();
  const env = { MARK: 'a b=c', LD_DEBUG: 'files', LD_DEBUG_OUTPUT: '/tmp/ld' };

  const variants = [
    { name: 'root bwrap + setpriv', dropUid: true, native: null },
    { name: 'bwrap alone (unprivileged mode)', dropUid: false, native: null },
    ...SANDBOX_ENGINES.filter((e) => e.native !== null).map((e) => ({
      name: 'the native sandbox (root)',
      dropUid: true,
      native: e.native,
    })),
  ];
  for (const { name, dropUid, native } of variants) {
    // setpriv and the native sandbox are a root worker's.
    it.runIf(!dropUid || requireOrSkip('root', root, 'setpriv needs it'))(
      `${name}: only the task's own processes read its env`,
      async () => {
        const { result, out } = await runIn(makePlan({ argv: sh(script), env }), dropUid, native);
        expect(result.failure_reason).toBeNull();
        expect(out).toContain('mark=[a b=c]');
        expect(out).toContain('debug-files');
        expect(out).toContain('helpers=none');
        expect(out).toContain(`names=${names.join(' ')} \n`);
        const m = /owners=(\S+) uid=(\d+)/.exec(out);
        expect(m?.[1]).toBe(m?.[2]);
      },
    );
  }

  it.each(SANDBOX_ENGINES)(
    "the sandbox's own environment ($name) is the fixed one plus the execution id (for recovery), never the spec's",
    async ({ native }) => {
      // Outside the (hidden) data dir, in a dir a task uid can search.
      const gateDir = mkdtempSync(join('/var/tmp', 'gpu-broker-gate-'));
      chmodSync(gateDir, 0o755);
      const gate = join(gateDir, 'go');
      const plan = makePlan({
        argv: sh(`while [ ! -e '${gate}' ]; do sleep 0.05; done`),
        env: { MARK: 'spec' },
      });
      const running = runIn(plan, root, native);
      const environ = await waitForEnviron(plan.execution_id);
      writeFileSync(gate, '');
      const { result } = await running;
      rmSync(gateDir, { recursive: true, force: true });
      expect(result.failure_reason).toBeNull();
      expect(environ.sort()).toEqual(
        [
          `GPU_BROKER_EXECUTION_ID=${plan.execution_id}`,
          `LANG=${HELPER_ENV['LANG']}`,
          `PATH=${HELPER_ENV['PATH']}`,
        ].sort(),
      );
    },
  );

  it('a NUL byte in an env value is a setup failure, never a bwrap option', async () => {
    const { result } = await runIn(makePlan({ argv: sh('echo ran'), env: { X: 'a\0--bind\0/\0/x' } }), root);
    expect(result.failure_reason).toBe('SETUP_FAILED');
    expect(result.setup_error).toMatch(/env X contains a NUL byte/);
  });

  it('helpers run with the fixed environment only', () => {
    expect(Object.keys(HELPER_ENV).sort()).toEqual(['LANG', 'PATH']);
    expect(HELPER_ENV['PATH']?.split(':').every((d) => d.startsWith('/'))).toBe(true);
  });
});

/** The environment of the host process whose command line is `bwrap|gpu-broker-sandbox --args 4 …` for `executionId`. */
async function waitForEnviron(executionId: string): Promise<string[]> {
  for (let i = 0; i < 400; i++) {
    for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
      try {
        const environ = readFileSync(`/proc/${pid}/environ`, 'utf8')
          .split('\0')
          .filter((e) => e !== '');
        const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
        if (
          /(bwrap|gpu-broker-sandbox)\0--args\0/.test(cmd) &&
          environ.includes(`GPU_BROKER_EXECUTION_ID=${executionId}`)
        )
          return environ;
      } catch {
        // gone
      }
    }
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`no bwrap process for ${executionId}`);
}

describe('container tasks', () => {
  it("the engine runs with the fixed env; the task's env goes by file and explicit NAME=VALUE only", async () => {
    const confDir = mkdtempSync(join(tmpdir(), 'gpu-broker-engine-env-'));
    try {
      const probe = await probeContainerEngine({ engine: 'podman', confDir });
      if (requireOrSkip('podman', probe.setup !== null, probe.detail) && probe.setup !== null) {
        expect(Object.keys(probe.setup.env).sort()).toEqual(['CONTAINERS_CONF', 'LANG', 'PATH']);
        expect(probe.setup.env['PATH']).toBe(HELPER_ENV['PATH']);
        expect(HELPER_ENV['PATH']?.split(':')).toContain(dirname(probe.setup.command));
      }
    } finally {
      rmSync(confDir, { recursive: true, force: true });
    }
    const { text, inline } = envFileText({ A: 'x', B: 'two\nlines', LD_DEBUG_OUTPUT: '/srv/x' });
    expect(text).toBe('A=x\nLD_DEBUG_OUTPUT=/srv/x\n');
    const args = containerArgs({
      engine: 'podman',
      name: 'n',
      executionId: 'e',
      image: 'i',
      taskDir: '/t',
      envFile: '/f',
      inlineEnv: inline,
      devices: { kind: 'nodes', nodes: [] },
      network: 'none',
      user: { uid: 1, gid: 1 },
      limits: null,
      init: false,
      argv: ['/bin/true'],
    });
    // Never a bare `--env NAME`, which would copy the engine's own variable into the container.
    const envArgs = args.flatMap((a, i) => (a === '--env' ? [args[i + 1] ?? ''] : []));
    expect(envArgs).toEqual(['B=two\nlines']);
  });
});

describe('helpers are found at start on a fixed path', () => {
  it('a missing env (or bwrap) stops the worker at start, naming the package', async () => {
    const bin = mkdtempSync(join(tmpdir(), 'gpu-broker-helpers-'));
    try {
      symlinkSync('/usr/bin/bwrap', join(bin, 'bwrap'));
      symlinkSync('/usr/bin/setpriv', join(bin, 'setpriv'));
      const probe = await probeBwrap({ path: bin, root: true });
      expect(probe.ok).toBe(false);
      expect(probe.detail).toMatch(/env is not installed.*coreutils/);
      const none = await probeBwrap({ path: join(bin, 'nothing'), root: false });
      expect(none.detail).toMatch(/bwrap\) is not installed.*apt-get install bubblewrap/);
    } finally {
      rmSync(bin, { recursive: true, force: true });
    }
  });

  it('never looks in a relative or empty PATH entry (where the worker happened to start)', () => {
    const cwd = process.cwd();
    const dir = mkdtempSync(join(tmpdir(), 'gpu-broker-cwd-'));
    try {
      writeFileSync(join(dir, 'bwrap'), '#!/bin/sh\n', { mode: 0o755 });
      process.chdir(dir);
      expect(findOnPath('bwrap', ':.:bin')).toBeNull();
    } finally {
      process.chdir(cwd);
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
