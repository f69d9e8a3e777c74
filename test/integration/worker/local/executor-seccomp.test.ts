import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { probeBwrap } from '../../../../worker/sandbox/bwrap.js';
import { hostSeccompArch, SECCOMP_RULES, syscallNumber } from '../../../../worker/sandbox/seccomp.js';
import { prepareSeccomp, type SandboxSetup, type TaskSeccomp } from '../../../../worker/sandbox/setup.js';
import { makePlan } from '../../../support/executor-plan.js';
import { type BwrapSetup, bwrapSetupFor, runToEnd } from '../../../support/local-sandbox.js';
import { isRoot, requireOrSkip } from '../../../support/require-or-skip.js';
import { SANDBOX_ENGINES } from '../../../support/sandbox-engines.js';

/**
 * ADR 0042: every process task runs under the syscall filter (worker/sandbox/seccomp.ts), on both
 * sandbox engines. A real task calls each row of the table by number and reports the errno it saw; the
 * same task without the filter shows what the filter takes away (a nested user namespace, kernel keys, a
 * personality without address randomisation), and what GPU workloads need still works under it.
 */

const arch = hostSeccompArch();
const probe = await probeBwrap({ root: isRoot });
const ready =
  requireOrSkip('bubblewrap', probe.ok && probe.bwrap !== null && probe.env !== null, probe.detail) &&
  arch !== null;

let dataDir: string;
let seccomp: TaskSeccomp | null;
let base: BwrapSetup;

beforeAll(async () => {
  if (!ready || probe.bwrap === null || probe.env === null) return;
  dataDir = mkdtempSync(join('/var/tmp', 'gpu-broker-seccomp-'));
  seccomp = prepareSeccomp(dataDir, []);
  base = await bwrapSetupFor(probe, dataDir, {
    uids: { first: 2_000_200_000, last: 2_000_200_099 },
    cards: 2,
  });
});
afterAll(() => {
  if (dataDir !== undefined) rmSync(dataDir, { recursive: true, force: true });
});

/** Each row's call: its arguments, chosen so that without the filter most calls do no harm. */
const CALLS: Record<string, readonly number[]> = {
  clone: [0x10000000 | 17, 0, 0, 0, 0], // CLONE_NEWUSER | SIGCHLD: a child exits at once (see PROBE)
  unshare: [0x10000000], // CLONE_NEWUSER
  clone3: [0, 0],
  setns: [-1, 0],
  keyctl: [0, -3, 0], // KEYCTL_GET_KEYRING_ID of the session keyring
  add_key: [0, 0, 0, 0, -3],
  request_key: [0, 0, 0, 0],
  personality: [0x0040000], // ADDR_NO_RANDOMIZE
  ioctl: [0, 0x5412, 0], // TIOCSTI
};

/** The probe: calls each [name, nr, args] by number, prints {name: "ok" | errno name}. */
const PROBE = `
import ctypes, errno, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
me = os.getpid()
out = {}
for name, nr, args in json.loads(sys.argv[1]):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    if r == 0 and name == 'clone' and os.getpid() != me:
        os._exit(0)
    out[name] = 'ok' if r >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
status = open('/proc/self/status').read()
out['Seccomp'] = [l.split()[1] for l in status.splitlines() if l.startswith('Seccomp:')][0]
print(json.dumps(out))
`;

/** What a GPU workload needs, under the filter: threads, a child, loopback sockets, shared memory. */
const WORKLOAD = `
import mmap, os, socket, subprocess, threading
t = threading.Thread(target=lambda: None); t.start(); t.join()
assert subprocess.run(['/bin/true']).returncode == 0
s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1)
c = socket.create_connection(s.getsockname()); a, _ = s.accept(); c.send(b'x'); assert a.recv(1) == b'x'
fd = os.open('/dev/shm/nccl-x', os.O_CREAT | os.O_RDWR); os.ftruncate(fd, 4096)
m = mmap.mmap(fd, 4096); m[0] = 1
print('workload ok')
`;

function run(sandbox: SandboxSetup, argv: string[]) {
  return runToEnd(makePlan({ argv }), { rootDir: join(dataDir, 'executions'), sandbox });
}

const calls = () =>
  JSON.stringify([
    ...SECCOMP_RULES.flatMap((r) => {
      const nr = arch === null ? undefined : syscallNumber(arch, r.syscall);
      return nr === undefined ? [] : [[r.syscall, nr, CALLS[r.syscall] ?? [0, 0, 0]]];
    }),
    ...(arch === 'x64' ? [['x32 getpid', 0x40000000 | 39, []]] : []),
  ]);

describe.runIf(ready).each(SANDBOX_ENGINES)('the syscall filter, built by $name', ({ native }) => {
  let filtered: Record<string, string> = {};
  let unfiltered: Record<string, string> = {};
  beforeAll(async () => {
    const on = await run({ ...base, native, seccomp }, ['/usr/bin/python3', '-c', PROBE, calls()]);
    expect(on.result.failure_reason, on.stderr).toBeNull();
    filtered = JSON.parse(on.stdout) as Record<string, string>;
    const off = await run({ ...base, native, seccomp: null }, ['/usr/bin/python3', '-c', PROBE, calls()]);
    expect(off.result.failure_reason, off.stderr).toBeNull();
    unfiltered = JSON.parse(off.stdout) as Record<string, string>;
  });

  it('is on in the task (Seccomp: 2, filter mode), and off without it', () => {
    expect(filtered.Seccomp).toBe('2');
    expect(unfiltered.Seccomp).toBe('0');
  });

  it('takes away what a task could do without it: a user namespace, kernel keys, no randomisation', () => {
    expect(unfiltered.unshare).toBe('ok');
    expect(unfiltered.keyctl).toBe('ok');
    expect(unfiltered.personality).toBe('ok');
    for (const name of ['unshare', 'keyctl', 'personality']) expect(filtered[name], name).toBe('EPERM');
  });

  const rows = SECCOMP_RULES.filter((r) => arch !== null && syscallNumber(arch, r.syscall) !== undefined);
  it.each(rows.map((r) => [r.syscall, r.errno] as const))('%s fails with %s', (name, errno) => {
    expect(filtered[name], name).toBe(errno);
  });

  it.runIf(arch === 'x64')('x32 syscalls fail with EPERM', () => {
    expect(filtered['x32 getpid']).toBe('EPERM');
  });

  it.runIf(arch === 'x64')('attack: a syscall through the i386 table (int 0x80) kills the task', async () => {
    // mov eax, 20 (getpid in the i386 table); int 0x80; ret — run from executable memory.
    const INT80 = [
      'import ctypes, mmap, os',
      'code = bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3])',
      'm = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)',
      'm.write(code)',
      'addr = ctypes.addressof(ctypes.c_char.from_buffer(m))',
      'f = ctypes.CFUNCTYPE(ctypes.c_int)(addr)',
      "print('int80 returned', f() == os.getpid(), flush=True)",
    ].join('\n');
    const off = await run({ ...base, native, seccomp: null }, ['/usr/bin/python3', '-c', INT80]);
    // A kernel without i386 emulation faults it either way: nothing to show here.
    if (!off.stdout.includes('int80 returned True')) return;
    const on = await run({ ...base, native, seccomp }, ['/usr/bin/python3', '-c', INT80]);
    expect(on.stdout).toBe('');
    expect(on.result.signal).toBe('SIGSYS');
    expect(on.result.failure_reason).not.toBeNull();
  });

  it('attack: the descriptor bwrap read the filter from never reaches the task', async () => {
    const r = await run({ ...base, native, seccomp }, [
      '/usr/bin/python3',
      '-c',
      'import os; print(" ".join(sorted(os.listdir("/proc/self/fd"), key=int)))',
    ]);
    expect(r.result.failure_reason, r.stderr).toBeNull();
    // 0-2, and the one listdir itself opens.
    expect(r.stdout.trim().split(' ').map(Number)).toEqual([0, 1, 2, 3]);
  });

  it('leaves what a GPU workload needs: threads, children, loopback sockets, shared memory', async () => {
    const r = await run({ ...base, native, seccomp }, ['/usr/bin/python3', '-c', WORKLOAD]);
    expect(r.stderr).toBe('');
    expect(r.stdout).toContain('workload ok');
    expect(r.result.failure_reason).toBeNull();
  });
});

describe('the filter file', () => {
  it('refuses a group the table does not have, naming the groups', () => {
    expect(() => prepareSeccomp(mkdtempSync(join('/tmp', 'sc-')), ['io-uring'])).toThrow(
      /not a group .*io_uring/,
    );
  });
  it('changes its version when a group is allowed again', () => {
    const dir = mkdtempSync(join('/tmp', 'sc-'));
    const all = prepareSeccomp(dir, []);
    const wider = prepareSeccomp(dir, ['io_uring']);
    rmSync(dir, { recursive: true, force: true });
    if (all === null || wider === null) return;
    expect(wider.version).not.toBe(all.version);
    expect(wider.program.length).toBeLessThan(all.program.length);
  });
});
