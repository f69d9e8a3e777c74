import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startExecution } from '../../../../worker/local/executor.js';
import { probeBwrap } from '../../../../worker/sandbox/bwrap.js';
import { findHelper } from '../../../../worker/sandbox/helper-commands.js';
import { hostSeccompArch, syscallNumber } from '../../../../worker/sandbox/seccomp.js';
import { prepareSeccomp, type SandboxSetup, type TaskSeccomp } from '../../../../worker/sandbox/setup.js';
import type { Chunk } from '../../../support/executor-plan.js';
import { makePlan, text } from '../../../support/executor-plan.js';
import { type BwrapSetup, bwrapSetupFor, runToEnd } from '../../../support/local-sandbox.js';
import { isRoot, requireOrSkip } from '../../../support/require-or-skip.js';
import { SANDBOX_ENGINES } from '../../../support/sandbox-engines.js';

/**
 * docs/security.md "The task sandbox": a task leaves nothing in the kernel and sees no other task through it. Under
 * the syscall filter a task's add_key fails, so its uid never appears in the host's /proc/key-users (the
 * same task unfiltered leaves a key there for good: what the filter takes away); and inside the sandbox
 * /proc/key-users, /proc/keys and the host's /sys/fs/cgroup (every other task's cgroup) are covered.
 */

const arch = hostSeccompArch();
const addKeyNr = String(arch === null ? -1 : syscallNumber(arch, 'add_key'));
const probe = await probeBwrap({ root: isRoot });
const ready =
  requireOrSkip('bubblewrap', probe.ok && probe.bwrap !== null && probe.env !== null, probe.detail) &&
  arch !== null;

let dataDir: string;
let seccomp: TaskSeccomp | null;
let base: BwrapSetup;

beforeAll(async () => {
  if (!ready || probe.bwrap === null || probe.env === null) return;
  dataDir = mkdtempSync(join('/var/tmp', 'gpu-broker-kernel-view-'));
  seccomp = prepareSeccomp(dataDir, []);
  base = await bwrapSetupFor(probe, dataDir, { uids: { first: 2_000_410_000, last: 2_000_410_099 } });
});
afterAll(() => {
  if (dataDir !== undefined) rmSync(dataDir, { recursive: true, force: true });
});

function run(sandbox: SandboxSetup, argv: string[]) {
  return runToEnd(makePlan({ argv }), { rootDir: join(dataDir, 'executions'), sandbox });
}

/** Adds a key to the task uid's own user keyring (KEY_SPEC_USER_KEYRING), prints `uid errno-or-ok`. */
const ADD_KEY = `
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
r = libc.syscall(ctypes.c_long(int(sys.argv[1])), b"user", b"left-behind", b"x" * 64, ctypes.c_long(64), ctypes.c_long(-4))
print(os.getuid(), "ok" if r >= 0 else os.strerror(ctypes.get_errno()))
`;

/** The uids the host's /proc/key-users lists, each with its line (`uid: usage nkeys/nikeys …`). */
function keyUsers(): Map<number, string> {
  return new Map(
    readFileSync('/proc/key-users', 'utf8')
      .split('\n')
      .filter((l) => l.trim() !== '')
      .map((l) => [Number.parseInt(l.trim().split(':')[0]!, 10), l.trim()] as const),
  );
}

describe.runIf(ready).each(SANDBOX_ENGINES)(
  'what a task leaves in and sees of the kernel, built by $name',
  ({ native }) => {
    it.runIf(isRoot)(
      'attack: under the filter a task leaves no key: its uid never shows in /proc/key-users',
      async () => {
        const before = keyUsers();
        const r = await run({ ...base, native, seccomp }, ['/usr/bin/python3', '-c', ADD_KEY, addKeyNr]);
        expect(r.result.failure_reason, r.stderr).toBeNull();
        const [uid, ...words] = r.stdout.trim().split(' ');
        const outcome = words.join(' ');
        expect(outcome).toBe('Operation not permitted');
        expect(before.has(Number(uid))).toBe(false);
        expect(keyUsers().has(Number(uid))).toBe(false);
      },
    );

    it.runIf(isRoot)(
      'without the filter the same task leaves its key in the kernel (what the filter takes away)',
      async () => {
        const r = await run({ ...base, native, seccomp: null }, [
          '/usr/bin/python3',
          '-c',
          ADD_KEY,
          addKeyNr,
        ]);
        expect(r.result.failure_reason, r.stderr).toBeNull();
        const [uid, ...words] = r.stdout.trim().split(' ');
        const outcome = words.join(' ');
        expect(outcome).toBe('ok');
        expect(keyUsers().has(Number(uid))).toBe(true);
      },
    );

    it("attack: sees neither which uids hold keys nor the host's cgroup tree", async () => {
      const r = await run({ ...base, native, seccomp }, [
        '/bin/sh',
        '-c',
        'echo "key-users=$(cat /proc/key-users 2>/dev/null | wc -l) keys=$(cat /proc/keys 2>/dev/null | wc -l) cgroup=$(ls -A /sys/fs/cgroup | wc -l) firmware=$(ls -A /sys/firmware 2>/dev/null | wc -l) disks=$(cat /proc/partitions /proc/diskstats 2>/dev/null | wc -l)"',
      ]);
      expect(r.result.failure_reason, r.stderr).toBeNull();
      expect(r.stdout.trim()).toBe('key-users=0 keys=0 cgroup=0 firmware=0 disks=0');
    });
  },
);

describe.runIf(ready && isRoot)("the task's env on the host's process list (bwrap + setpriv)", () => {
  /** Every host process's command line that holds `needle`. */
  function cmdlinesHolding(needle: string): string[] {
    const found: string[] = [];
    for (const pid of readdirSync('/proc').filter((n) => /^\d+$/.test(n))) {
      try {
        const line = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
        if (line.includes(needle)) found.push(line.replace(/\0/g, ' '));
      } catch {
        // gone
      }
    }
    return found;
  }

  async function runWithEnv(shell: string | null) {
    const chunks: Chunk[] = [];
    const plan = makePlan({
      argv: [
        '/bin/sh',
        '-c',
        `while [ ! -e /task/go ]; do sleep 0.05; done; env | sort; echo "multi=[$MULTI]"`,
      ],
      env: { MODEL_TOKEN_HINT: 'value-on-the-host-list', MULTI: 'a b\nc' },
    });
    const handle = startExecution(plan, {
      rootDir: join(dataDir, 'executions'),
      workerId: 'worker-kernel-view',
      provider: 'sim',
      onLog: (stream, offset, data) => chunks.push({ stream, offset, data }),
      cleanupPollMs: 20,
      sandbox: { ...base, native: null, seccomp, shell },
    });
    await handle.started;
    const seen = cmdlinesHolding('value-on-the-host-list');
    writeFileSync(join(dataDir, 'executions', plan.execution_id, 'task', 'go'), '');
    const result = await handle.done;
    // The env file goes with the run: the spec's env does not stay on the worker's disk.
    expect(existsSync(join(dataDir, 'executions', plan.execution_id, 'task.env'))).toBe(false);
    return { result, seen, stdout: text(chunks, 'stdout'), stderr: text(chunks, 'stderr') };
  }

  it('attack: no host process shows a value of the task env while it runs; the task has exactly its env', async () => {
    const r = await runWithEnv(findHelper('bash'));
    expect(r.result.failure_reason, r.stderr).toBeNull();
    expect(r.seen).toEqual([]);
    expect(r.stdout).toContain('MODEL_TOKEN_HINT=value-on-the-host-list\n');
    expect(r.stdout).toContain('multi=[a b\nc]\n');
    expect(r.stdout).toContain('PWD=/task\n');
    expect(r.stdout).not.toMatch(/^(E|kv|BASH\w*|SHLVL)=/m);
  });

  it("the same env on env's command line (no bash) shows on the host for the task's life: what the file takes away", async () => {
    const r = await runWithEnv(null);
    expect(r.result.failure_reason, r.stderr).toBeNull();
    expect(r.seen.length).toBeGreaterThan(0);
    expect(r.stdout).toContain('MODEL_TOKEN_HINT=value-on-the-host-list\n');
  });
});
