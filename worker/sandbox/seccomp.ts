import { createHash } from 'node:crypto';

/**
 * The syscall filter every process task runs under (docs/security.md "The syscall
 * filter"): ONE reviewed table, compiled here into a classic-BPF seccomp program for the host's
 * architecture, installed by the sandbox in the task's own process after the uid drop and no_new_privs,
 * just before the task's exec (so nothing the sandbox itself needs is filtered).
 *
 * Starting point: the container runtimes' default profile (moby/containerd `default.json`), read as a
 * deny-list: what that profile leaves out for a container without extra capabilities is denied here by
 * name, everything else is allowed. A deny-list keeps what GPU workloads need (ioctl on /dev/nvidia*,
 * /dev/kfd and /dev/dri/*, mmap of device memory, NUMA calls, NCCL's shared memory and loopback sockets,
 * ptrace of the task's own processes for debuggers and py-spy) without listing the hundreds of calls a
 * CUDA or ROCm runtime makes; the rows below are what a task never needs and what widened the kernel
 * surface in real escapes (user namespaces reaching nf_tables, io_uring, bpf, keyrings, Shocker's
 * open_by_handle_at).
 *
 * A denied call fails with EPERM (as under podman's profile), so a program sees a normal error; clone3
 * fails with ENOSYS, which makes glibc fall back to clone, whose flags the filter can read. A call made
 * through another architecture's table (int 0x80 on x86_64) kills the process: the table is written for
 * the native one only, and a GPU task has no 32-bit code. The x32 table is denied too.
 */

/** How a denied call fails. */
type Errno = 'EPERM' | 'ENOSYS';

const ERRNO: Readonly<Record<Errno, number>> = { EPERM: 1, ENOSYS: 38 };

/** A condition on one argument's low 32 bits (the flag words below all fit there). */
type ArgTest =
  /** Denied when any of these bits is set (clone/unshare namespace flags). */
  | { arg: number; anyBit: number }
  /** Denied unless the value is one of these (personality: the default and the query only). */
  | { arg: number; oneOf: readonly number[] }
  /** Denied when the value is one of these (ioctl's request). */
  | { arg: number; equals: readonly number[] };

/** One row: a syscall, when it is denied (always, or on an argument), how, and why. */
export interface SeccompRule {
  readonly syscall: string;
  /** The group an operator names to allow it again (`--seccomp-allow GROUP`, audited). */
  readonly group: string;
  readonly errno: Errno;
  readonly when?: ArgTest;
  readonly why: string;
}

const CLONE_NEWTIME = 0x80;
const CLONE_NEWNS = 0x20000;
const CLONE_NEWCGROUP = 0x2000000;
const CLONE_NEWUTS = 0x4000000;
const CLONE_NEWIPC = 0x8000000;
const CLONE_NEWUSER = 0x10000000;
const CLONE_NEWPID = 0x20000000;
const CLONE_NEWNET = 0x40000000;
/** Every namespace flag: a task makes no namespace (the sandbox already made its own). */
const NEW_NAMESPACES =
  CLONE_NEWTIME |
  CLONE_NEWNS |
  CLONE_NEWCGROUP |
  CLONE_NEWUTS |
  CLONE_NEWIPC |
  CLONE_NEWUSER |
  CLONE_NEWPID |
  CLONE_NEWNET;
const TIOCSTI = 0x5412;
const TIOCLINUX = 0x541c;

const deny = (syscalls: readonly string[], group: string, why: string): SeccompRule[] =>
  syscalls.map((syscall) => ({ syscall, group, errno: 'EPERM', why }));

/** The table. Each row's `why` is what docs/security.md lists. */
export const SECCOMP_RULES: readonly SeccompRule[] = [
  {
    syscall: 'clone',
    group: 'namespaces',
    errno: 'EPERM',
    when: { arg: 0, anyBit: NEW_NAMESPACES },
    why: 'a new user namespace gives the task root in it, and with it nf_tables, iptables and mounts: the kernel surface most escapes of the last years went through; no other namespace is the task’s to make',
  },
  {
    syscall: 'unshare',
    group: 'namespaces',
    errno: 'EPERM',
    when: { arg: 0, anyBit: NEW_NAMESPACES },
    why: 'as clone with namespace flags',
  },
  {
    syscall: 'clone3',
    group: 'namespaces',
    errno: 'ENOSYS',
    why: 'its flags are in memory the filter cannot read; ENOSYS makes glibc fall back to clone',
  },
  ...deny(['setns'], 'namespaces', 'joining another namespace'),
  ...deny(
    ['keyctl', 'add_key', 'request_key'],
    'keyring',
    'kernel keys outlive the task (per-uid, unreclaimable until reboot) and are not namespaced',
  ),
  ...deny(['bpf'], 'bpf', 'eBPF programs and maps: a large verifier surface'),
  ...deny(
    ['perf_event_open'],
    'perf',
    'performance counters read other processes and the kernel; a large surface',
  ),
  ...deny(
    ['userfaultfd'],
    'userfaultfd',
    'stalls kernel page faults at will: the standard tool for winning kernel races',
  ),
  ...deny(
    ['io_uring_setup', 'io_uring_enter', 'io_uring_register'],
    'io_uring',
    'a second syscall path that seccomp does not see, with a long record of kernel bugs',
  ),
  ...deny(['kexec_load', 'kexec_file_load', 'reboot'], 'host', 'replacing or restarting the kernel'),
  ...deny(['init_module', 'finit_module', 'delete_module'], 'host', 'kernel modules'),
  ...deny(
    [
      'mount',
      'umount2',
      'pivot_root',
      'move_mount',
      'open_tree',
      'fsopen',
      'fsconfig',
      'fsmount',
      'fspick',
      'mount_setattr',
    ],
    'mount',
    'mounts are the sandbox’s to make; a task changes no mount',
  ),
  ...deny(
    [
      'swapon',
      'swapoff',
      'acct',
      'quotactl',
      'quotactl_fd',
      'vhangup',
      'syslog',
      'lookup_dcookie',
      'nfsservctl',
      'fanotify_init',
    ],
    'host',
    'host administration',
  ),
  ...deny(
    ['settimeofday', 'clock_settime', 'clock_adjtime', 'adjtimex'],
    'host',
    'the clock is not namespaced',
  ),
  ...deny(['sethostname', 'setdomainname'], 'host', 'the host name is the sandbox’s'),
  ...deny(
    ['open_by_handle_at', 'name_to_handle_at'],
    'host',
    'opens files by handle around every mount (the Shocker escape)',
  ),
  ...deny(
    [
      'uselib',
      'ustat',
      'sysfs',
      '_sysctl',
      'iopl',
      'ioperm',
      'create_module',
      'get_kernel_syms',
      'query_module',
    ],
    'host',
    'obsolete or raw hardware access',
  ),
  {
    syscall: 'personality',
    group: 'personality',
    errno: 'EPERM',
    when: { arg: 0, oneOf: [0, 0xffffffff] },
    why: 'other personalities turn off address space randomisation or change the syscall ABI; only the default and the query are allowed',
  },
  {
    syscall: 'ioctl',
    group: 'tty',
    errno: 'EPERM',
    when: { arg: 1, equals: [TIOCSTI, TIOCLINUX] },
    why: 'types into a terminal another process reads (all other ioctls, the cards’ included, are allowed)',
  },
];

/** Syscall numbers the table names, per architecture (from the kernel's unistd headers). */
const NUMBERS: Readonly<Record<'x64' | 'arm64', Readonly<Record<string, number>>>> = {
  x64: {
    clone: 56,
    unshare: 272,
    clone3: 435,
    setns: 308,
    keyctl: 250,
    add_key: 248,
    request_key: 249,
    bpf: 321,
    perf_event_open: 298,
    userfaultfd: 323,
    io_uring_setup: 425,
    io_uring_enter: 426,
    io_uring_register: 427,
    kexec_load: 246,
    kexec_file_load: 320,
    reboot: 169,
    init_module: 175,
    finit_module: 313,
    delete_module: 176,
    mount: 165,
    umount2: 166,
    pivot_root: 155,
    move_mount: 429,
    open_tree: 428,
    fsopen: 430,
    fsconfig: 431,
    fsmount: 432,
    fspick: 433,
    mount_setattr: 442,
    swapon: 167,
    swapoff: 168,
    acct: 163,
    quotactl: 179,
    quotactl_fd: 443,
    vhangup: 153,
    syslog: 103,
    lookup_dcookie: 212,
    nfsservctl: 180,
    fanotify_init: 300,
    settimeofday: 164,
    clock_settime: 227,
    clock_adjtime: 305,
    adjtimex: 159,
    sethostname: 170,
    setdomainname: 171,
    open_by_handle_at: 304,
    name_to_handle_at: 303,
    uselib: 134,
    ustat: 136,
    sysfs: 139,
    _sysctl: 156,
    iopl: 172,
    ioperm: 173,
    create_module: 174,
    get_kernel_syms: 177,
    query_module: 178,
    personality: 135,
    ioctl: 16,
  },
  arm64: {
    clone: 220,
    unshare: 97,
    clone3: 435,
    setns: 268,
    keyctl: 219,
    add_key: 217,
    request_key: 218,
    bpf: 280,
    perf_event_open: 241,
    userfaultfd: 282,
    io_uring_setup: 425,
    io_uring_enter: 426,
    io_uring_register: 427,
    kexec_load: 104,
    kexec_file_load: 294,
    reboot: 142,
    init_module: 105,
    finit_module: 273,
    delete_module: 106,
    mount: 40,
    umount2: 39,
    pivot_root: 41,
    move_mount: 429,
    open_tree: 428,
    fsopen: 430,
    fsconfig: 431,
    fsmount: 432,
    fspick: 433,
    mount_setattr: 442,
    swapon: 224,
    swapoff: 225,
    acct: 89,
    quotactl: 60,
    quotactl_fd: 443,
    vhangup: 58,
    syslog: 116,
    lookup_dcookie: 18,
    nfsservctl: 42,
    fanotify_init: 262,
    settimeofday: 170,
    clock_settime: 112,
    clock_adjtime: 266,
    adjtimex: 171,
    sethostname: 161,
    setdomainname: 162,
    open_by_handle_at: 265,
    name_to_handle_at: 264,
    personality: 92,
    ioctl: 29,
  },
};

/** AUDIT_ARCH_* of each architecture the table is written for. */
const AUDIT_ARCH: Readonly<Record<'x64' | 'arm64', number>> = { x64: 0xc000003e, arm64: 0xc00000b7 };

/** Architectures the filter exists for. */
export type SeccompArch = keyof typeof AUDIT_ARCH;

// Classic BPF, as seccomp runs it (linux/filter.h, linux/seccomp.h).
const LD_W_ABS = 0x20;
const JEQ_K = 0x15;
const JGE_K = 0x35;
const JSET_K = 0x45;
const RET_K = 0x06;
const RET_KILL_PROCESS = 0x80000000;
const RET_ALLOW = 0x7fff0000;
const RET_ERRNO = 0x00050000;
/** struct seccomp_data: int nr; u32 arch; u64 ip; u64 args[6] (little-endian: an arg's low half first). */
const OFF_NR = 0;
const OFF_ARCH = 4;
const argLow = (i: number) => 16 + 8 * i;
/** x86_64's x32 ABI: syscall numbers with this bit. */
const X32_BIT = 0x40000000;

type Insn = readonly [code: number, jt: number, jf: number, k: number];

/** The instructions for one row, after the number matched: deny, or test the argument. */
function ruleBody(rule: SeccompRule): Insn[] {
  const denied: Insn = [RET_K, 0, 0, RET_ERRNO | ERRNO[rule.errno]];
  const allow: Insn = [RET_K, 0, 0, RET_ALLOW];
  const w = rule.when;
  if (w === undefined) return [denied];
  const load: Insn = [LD_W_ABS, 0, 0, argLow(w.arg)];
  if ('anyBit' in w) return [load, [JSET_K, 0, 1, w.anyBit], denied, allow];
  const values = 'oneOf' in w ? w.oneOf : w.equals;
  // Each value: jump to `hit` when equal. For oneOf a hit allows; for equals a hit denies.
  const tests: Insn[] = values.map((v, i) => [JEQ_K, values.length - i, 0, v >>> 0]);
  return 'oneOf' in w ? [load, ...tests, denied, allow] : [load, ...tests, allow, denied];
}

/** The rules left once the operator's allowed groups are taken out. */
export function activeRules(allowGroups: readonly string[] = []): SeccompRule[] {
  return SECCOMP_RULES.filter((r) => !allowGroups.includes(r.group));
}

/** The groups an operator can allow again. */
export const SECCOMP_GROUPS: readonly string[] = [...new Set(SECCOMP_RULES.map((r) => r.group))];

/**
 * The BPF program (struct sock_filter[], 8 bytes each, host byte order = little-endian on both
 * architectures) for `arch`, without the rows of `allowGroups`. Rows whose syscall the architecture
 * does not have are left out. Pure.
 */
export function seccompProgram(arch: SeccompArch, allowGroups: readonly string[] = []): Buffer {
  const numbers = NUMBERS[arch];
  const insns: Insn[] = [
    [LD_W_ABS, 0, 0, OFF_ARCH],
    [JEQ_K, 1, 0, AUDIT_ARCH[arch]],
    [RET_K, 0, 0, RET_KILL_PROCESS],
    [LD_W_ABS, 0, 0, OFF_NR],
  ];
  if (arch === 'x64') insns.push([JGE_K, 0, 1, X32_BIT], [RET_K, 0, 0, RET_ERRNO | ERRNO.EPERM]);
  for (const rule of activeRules(allowGroups)) {
    const nr = numbers[rule.syscall];
    if (nr === undefined) continue;
    const body = ruleBody(rule);
    insns.push([JEQ_K, 0, body.length, nr], ...body);
  }
  insns.push([RET_K, 0, 0, RET_ALLOW]);
  const out = Buffer.alloc(insns.length * 8);
  insns.forEach(([code, jt, jf, k], i) => {
    out.writeUInt16LE(code, i * 8);
    out.writeUInt8(jt, i * 8 + 2);
    out.writeUInt8(jf, i * 8 + 3);
    out.writeUInt32LE(k >>> 0, i * 8 + 4);
  });
  return out;
}

/** The host's architecture as the table knows it, or null (no filter is made there: the worker says so). */
export function hostSeccompArch(arch: string = process.arch): SeccompArch | null {
  return arch === 'x64' || arch === 'arm64' ? arch : null;
}

/**
 * The filter's version: `v1-` and the first 12 hex digits of the program's sha256, so the hello, the
 * dashboard and an audit row name exactly the rules a task ran under (an allowed group changes it).
 */
export function seccompVersion(program: Buffer): string {
  return `v1-${createHash('sha256').update(program).digest('hex').slice(0, 12)}`;
}

/** A syscall's number on `arch` as the table knows it (tests call each row by number). */
export function syscallNumber(arch: SeccompArch, name: string): number | undefined {
  return NUMBERS[arch][name];
}
