import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIo } from '../../../src/cli/common/io.js';
import { run as runWorkerCli } from '../../../src/cli/host/worker.js';
import type { MasterConfigInput } from '../../../src/platform/config.js';
import { approveTask, clusterConfig, shellSpec, waitUntilSettled } from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectOk } from '../../support/mcp.js';
import { removeTempDirs } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';

/**
 * docs/security.md "Code the reviewer did not read", "env only inside" on a local worker: a hostile spec env goes through the real master (MCP
 * propose, confirm, approve) to a real worker started by the real `gpu-broker worker` command, which
 * sandboxes it with bubblewrap. No process outside the task's sandbox may read a variable of the spec's
 * choosing (the marker files below would appear), the task itself sees every value, the worker's
 * `--token-file` is not readable inside, and the sandbox's PID 1 shows no host path of the worker.
 *
 * Everything host-side lives under /var/tmp, which every sandbox binds read-only: a marker file there can
 * only be written by a process outside the sandbox.
 */

/**
 * The master's config for this file, in one place. The spec below sets interpreter- and loader-control
 * variables on purpose; where the policy gives error findings for such names, allow them here.
 */
/**
 * The hostile-env test's spec sets loader and shell control variables on purpose; the policy allows
 * them (each an ENV_CONTROL_ALLOWED warning instead of an ENV_CONTROL error) so the spec is approved and
 * the worker's own defences are what the test exercises.
 */
const MASTER_CONFIG: MasterConfigInput = clusterConfig({
  policy: {
    allowed_control_env: [
      'BASH_ENV',
      'ENV',
      'SHELLOPTS',
      'PS4',
      // A control name (program lookup; docs/security.md "Code the reviewer did not read"); the worker's own env never reads it.
      'PATH',
      'LD_DEBUG',
      'LD_DEBUG_OUTPUT',
      'LD_PROFILE',
      'LD_PROFILE_OUTPUT',
    ],
  },
});

interface Logs {
  data: string;
}

const WORKER_ID = 'gpu-env';
let m: TestMaster;
let alice: Client;
let rita: Client;
let varDir: string;
let markers: string;
let dataDir: string;
let tokenFile: string;
let workerToken: string;
let stopWorker: () => void;
let workerExit: Promise<number>;
const workerErr: string[] = [];

beforeAll(async () => {
  varDir = mkdtempSync('/var/tmp/gpu-broker-env-');
  chmodSync(varDir, 0o755);
  markers = join(varDir, 'markers');
  mkdirSync(markers, { mode: 0o777 });
  chmodSync(markers, 0o777);
  m = await startTestMaster({ config: MASTER_CONFIG, dataDir: join(varDir, 'master') });
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));

  // A script any shell reading BASH_ENV/ENV would run, and fake helpers a spec PATH could point at.
  const hook = join(varDir, 'hook.sh');
  writeFileSync(hook, `#!/bin/sh\n/usr/bin/touch '${markers}/hook-ran-'$$\n`, { mode: 0o755 });
  const fakeBin = join(varDir, 'fakebin');
  mkdirSync(fakeBin, { mode: 0o755 });
  for (const name of ['bwrap', 'setpriv', 'env', 'podman', 'runc', 'mknod', 'sh', 'bash'])
    writeFileSync(join(fakeBin, name), `#!/bin/sh\n/usr/bin/touch '${markers}/fake-${name}-ran'\nexit 97\n`, {
      mode: 0o755,
    });

  // The worker, as an operator starts it: its token in a file outside its data dir, under a system dir.
  dataDir = join(varDir, 'worker');
  mkdirSync(join(varDir, 'etc'), { mode: 0o755 });
  tokenFile = join(varDir, 'etc', 'worker.token');
  workerToken = m.createToken(`worker-${WORKER_ID}`, ['worker'], WORKER_ID);
  writeFileSync(tokenFile, `${workerToken}\n`, { mode: 0o600 });
  const caFile = join(varDir, 'ca.pem');
  writeFileSync(caFile, m.caPem ?? '');
  const stop = new Promise<void>((r) => {
    stopWorker = r;
  });
  const io: CliIo = {
    stdout: () => undefined,
    stderr: (t) => void workerErr.push(t),
    env: { GPU_BROKER_LOG_LEVEL: 'silent', PATH: `${fakeBin}:/usr/bin:/bin` },
    stopSignal: stop,
  };
  // The daemon's own PATH leads to the fakes as well: the worker must find its helpers on its fixed
  // path, not on whatever PATH it was started with.
  const hostPath = process.env['PATH'];
  process.env['PATH'] = `${fakeBin}:${hostPath ?? '/usr/bin:/bin'}`;
  workerExit = runWorkerCli(
    [
      '--url',
      m.url,
      '--token-file',
      tokenFile,
      '--ca-file',
      caFile,
      '--id',
      WORKER_ID,
      '--gpus',
      'sim:2',
      '--data-dir',
      dataDir,
      '--isolation',
      'bwrap',
      '--container-engine',
      'none',
      '--hide',
      m.dataDir,
      '--json',
    ],
    io,
  );
  try {
    await waitFor(() => m.deps.cluster.fleet.get(WORKER_ID).cards.length === 2, {
      what: `two sim cards on ${WORKER_ID} (worker said: ${workerErr.join('')})`,
    });
  } finally {
    if (hostPath === undefined) delete process.env['PATH'];
    else process.env['PATH'] = hostPath;
  }
});

afterAll(async () => {
  stopWorker?.();
  await workerExit;
  await m?.close();
  rmSync(varDir, { recursive: true, force: true });
  removeTempDirs();
});

async function runTask(
  script: string,
  env: Record<string, string> = {},
  outputs: Array<{ path: string; required: boolean }> = [],
) {
  const id = await approveTask(
    alice,
    rita,
    shellSpec(script, { runtime: { kind: 'process', argv: ['/bin/sh', '-c', script], env }, outputs }),
  );
  const task = await waitUntilSettled(alice, id, 45_000);
  const logs = expectOk(await callTool<Logs>(alice, 'get_task_logs', { task_id: id })).data;
  return { id, task, logs };
}

/** Prints each named variable as the task sees it, one `NAME=[value]` line each. */
function printVars(names: readonly string[]): string {
  return names.map((n) => `printf '%s=[%s]\\n' ${n} "$${n}"`).join('\n');
}

describe('the spec env reaches only the task, inside its sandbox', () => {
  it('BASH_ENV, ENV, SHELLOPTS, PS4, PATH, LD_DEBUG_OUTPUT, LD_PROFILE_OUTPUT: nothing outside reads them', async () => {
    const env = {
      BASH_ENV: join(varDir, 'hook.sh'),
      ENV: join(varDir, 'hook.sh'),
      SHELLOPTS: 'xtrace',
      PS4: `$(/usr/bin/touch ${markers}/ps4-ran)`,
      PATH: `${join(varDir, 'fakebin')}:/usr/bin:/bin`,
      LD_DEBUG: 'all',
      LD_DEBUG_OUTPUT: join(markers, 'ld-debug'),
      LD_PROFILE: 'libc.so.6',
      LD_PROFILE_OUTPUT: markers,
    };
    // Into a file: the task's own ld.so honours LD_DEBUG and, unable to write the read-only host path,
    // fills stderr with its trace.
    const { id, task } = await runTask(
      `{\n${printVars(Object.keys(env))}\n} > "$GPU_BROKER_OUTPUT_DIR/vars.txt"`,
      env,
      [{ path: 'vars.txt', required: true }],
    );
    expect(task.state).toBe('COMPLETED');
    const vars = expectOk(
      await callTool<{ file: { content: string } | null }>(alice, 'get_task_outputs', {
        task_id: id,
        path: 'vars.txt',
      }),
    ).file?.content;
    // The task itself sees exactly what the reviewer approved.
    for (const [name, value] of Object.entries(env)) expect(vars).toContain(`${name}=[${value}]\n`);
    // Nothing outside the sandbox (bwrap, setpriv, a shell, a helper found on the spec's PATH) read them:
    // no debug or profile output at the spec's host paths, no hook, no fake helper ran.
    expect(readdirSync(markers)).toEqual([]);
  });

  it("inside the sandbox too, nothing before the task's own exec (setpriv runs as root) reads the spec's LD_*", async () => {
    const { task, logs } = await runTask(
      [
        'echo "uid=$(id -u)"',
        'echo "owners=$(stat -c %u /tmp/ld.* | sort -u | tr "\\n" " ")"',
        'grep -l -e setpriv -e bwrap /tmp/ld.* || echo helpers=none',
      ].join('\n'),
      { LD_DEBUG: 'files', LD_DEBUG_OUTPUT: '/tmp/ld' },
    );
    expect(task.state).toBe('COMPLETED');
    const uid = /uid=(\d+)/.exec(logs)?.[1];
    expect(uid).toBeDefined();
    // Debug files exist (the task's own processes honour its env), all written by the task's uid.
    expect(logs).toContain(`owners=${uid} \n`);
    expect(logs).toContain('helpers=none');
  });
});

describe("the worker's secrets and host paths, from inside", () => {
  it('the --token-file cannot be read, and /proc/1/cmdline shows no host path of the worker', async () => {
    const { task, logs } = await runTask(
      [
        `[ -c '${tokenFile}' ] && echo token=covered`,
        `printf 'token=[%s]\\n' "$(cat '${tokenFile}' 2>&1)"`,
        'printf "pid1=[%s]\\n" "$(tr "\\0\\n" "  " </proc/1/cmdline)"',
        'for p in /proc/[0-9]*; do printf "cmd=[%s]\\n" "$(tr "\\0\\n" "  " <$p/cmdline 2>/dev/null)"; done',
      ].join('\n'),
    );
    expect(task.state).toBe('COMPLETED');
    expect(logs).not.toContain(workerToken);
    // /dev/null is bound over it (nodev, so opening it is refused; either way nothing comes back).
    expect(logs).toContain('token=covered');
    expect(logs).toMatch(/token=\[(|cat: \S+: Permission denied)\]\n/);
    expect(existsSync(tokenFile)).toBe(true);
    // bwrap's options (every mount, every hidden path) came through a pipe: PID 1 and every process
    // the task can see name no host path of the worker (its data dir, executions, the master's dir).
    const pid1 = /pid1=\[(.*)\]\n/.exec(logs)?.[1] ?? '';
    expect(pid1).toMatch(/^(\S*bwrap|gpu-broker-sandbox) --args 4 -- /);
    const seen = logs.split('\n').filter((l) => l.startsWith('cmd=') || l.startsWith('pid1='));
    expect(seen.length).toBeGreaterThan(1);
    for (const line of seen) {
      expect(line).not.toContain(dataDir);
      expect(line).not.toContain(m.dataDir);
      expect(line).not.toContain('--tmpfs');
    }
  });
});
