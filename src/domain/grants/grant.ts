import type { ExtraArgs, GrantScope } from '../../contracts/standing-grant.js';
import type { TaskSpec } from '../../contracts/task-spec.js';
import { applyTransition, type TransitionResult, type TransitionTable } from '../machines/state-machine.js';
import { envControlOf } from '../policy/env-control.js';

/**
 * Standing grants (docs/decisions/0029-grants.md): a reviewer's decision that lets later
 * revisions of one submitter run without a new per-revision review, bounded by what runs (the scope,
 * ./standing-grant-coverage.ts), how much (runs, card-hours, concurrency) and until when (expires_at).
 * Not to be confused with a scheduler's lease grant (src/broker/loops/pass-apply.ts).
 *
 * States:
 * - `REQUESTED`: drafted by the grantee (or a reviewer); covers nothing until decided.
 * - `ACTIVE`: a reviewer other than the grantee approved it; confirm_revision auto-approves what it covers.
 * - `SUSPENDED`: its breaker tripped (`breaker_k` failed runs in a row); covers nothing; revoke or let it expire.
 * - `REJECTED` (terminal): a reviewer refused it.
 * - `REVOKED` (terminal): a reviewer or operator withdrew it (or the requester withdrew its request).
 * - `EXPIRED` (terminal): past `expires_at`; set by the sweeper, and never covering past it in any case.
 */
export const GRANT_STATES = ['REQUESTED', 'ACTIVE', 'SUSPENDED', 'REJECTED', 'REVOKED', 'EXPIRED'] as const;
/** A grant state. */
export type GrantState = (typeof GRANT_STATES)[number];

/** Events that move a grant. */
export const GRANT_EVENTS = ['approve', 'reject', 'revoke', 'suspend', 'expire'] as const;
/** A grant event. */
export type GrantEvent = (typeof GRANT_EVENTS)[number];

/** The grant transition table (docs/state-machines.md "Standing grants"). */
export const GRANT_TABLE: TransitionTable<GrantState, GrantEvent> = {
  REQUESTED: { approve: 'ACTIVE', reject: 'REJECTED', revoke: 'REVOKED', expire: 'EXPIRED' },
  ACTIVE: { revoke: 'REVOKED', suspend: 'SUSPENDED', expire: 'EXPIRED' },
  SUSPENDED: { revoke: 'REVOKED', expire: 'EXPIRED' },
  REJECTED: {},
  REVOKED: {},
  EXPIRED: {},
};

/** Applies an event to a grant state. */
export function transitionGrant(
  state: GrantState,
  event: GrantEvent,
): TransitionResult<GrantState, GrantEvent> {
  return applyTransition(GRANT_TABLE, state, event);
}

/** True once a grant can no longer change. */
export function isTerminalGrant(state: GrantState): boolean {
  return Object.keys(GRANT_TABLE[state]).length === 0;
}

/** What coverage and the budget read of a grant (the stored row, src/store/grants-repo.ts, has more). */
export interface StandingGrant {
  id: string;
  grantee_id: string;
  state: GrantState;
  scope: GrantScope;
  max_runs: number;
  /** Budget in card-seconds (max_card_hours × 3600, whole): integer arithmetic keeps it exact. */
  max_card_seconds: number;
  concurrency: number;
  expires_at: number;
  breaker_k: number;
  runs_used: number;
  card_seconds_charged: number;
  card_seconds_reserved: number;
  running: number;
  consecutive_failures: number;
}

/**
 * Executables that run another program named in their arguments: with them first, a fixed prefix pins
 * nothing (`/usr/bin/env python3 -c …`). Never coverable as argv[0]; compared by file name.
 */
export const WRAPPER_EXECUTABLES: readonly string[] = [
  'env',
  'xargs',
  'nice',
  'nohup',
  'timeout',
  'stdbuf',
  'busybox',
  'sudo',
  'su',
  'time',
  'ionice',
  'taskset',
  'numactl',
  'chroot',
  'setsid',
  'flock',
  'watch',
  'strace',
  'ltrace',
  'gdb',
  'unshare',
  'nsenter',
  'chrt',
  'prlimit',
  'doas',
  'runuser',
  'script',
  'parallel',
  'find',
];

const baseName = (path: string) => path.slice(path.lastIndexOf('/') + 1);

/** Whether argv[0] is a wrapper or the dynamic loader (`ld-linux-x86-64.so.2 /bin/sh`). */
export function isWrapperExecutable(exe: string): boolean {
  const name = baseName(exe);
  return WRAPPER_EXECUTABLES.includes(name) || /^ld(-linux.*)?\.so/.test(name) || name.startsWith('ld-');
}

/**
 * Why an argv prefix pins nothing, or null when it is a real pin: a wrapper first; an option token after
 * the first (`-c`, `-m`, `-e`, `--eval`: code in argv instead of a reviewed file); extra arguments after a
 * bare executable (the first of them could be such an option), whatever `extraArgs` widens.
 */
export function argvPrefixProblem(prefix: readonly string[], extraArgs: ExtraArgs): string | null {
  const [exe] = prefix;
  if (exe === undefined) return 'argv_prefix is empty';
  if (isWrapperExecutable(exe)) return `argv[0] ${exe} runs another program; grants never cover it`;
  const option = prefix.findIndex((t, i) => i > 0 && t.startsWith('-'));
  if (option !== -1)
    return `argv[${option}] ${prefix[option]} is an option (inline code such as sh -c or python3 -c is never coverable)`;
  if (extraArgs !== 'none' && prefix.length < 2)
    return 'extra_args needs a prefix of at least 2 tokens (executable and script): after a bare executable any option could follow';
  return null;
}

/**
 * The input a prefix runs as its script, or undefined: `[interpreter, script, …]` where `interpreter`
 * is one the policy runs scripts from the inputs with (`interpreters`), `script` does not start with `-`
 * and names (`./` allowed) an input of `spec`, which runs as a process (src/domain/policy/run-argv.ts
 * `scriptInput` is the same rule for the spec's own argv). Only then do arguments past the prefix reach
 * a file a reviewer read rather than a launcher (`make`, `uv run`, `torchrun`, `python -m`, …).
 */
export function prefixScript(
  prefix: readonly string[],
  spec: TaskSpec,
  interpreters: readonly string[],
): string | undefined {
  const [exe, script] = prefix;
  if (spec.runtime.kind !== 'process' || exe === undefined || script === undefined) return undefined;
  if (script.startsWith('-') || !interpreters.includes(exe)) return undefined;
  const path = script.replace(/^\.\//, '');
  return (spec.inputs ?? []).some((i) => i.path === path) ? path : undefined;
}

/**
 * What arguments past the prefix reach, in the words `grant show` and the dashboard print (ADR 0029);
 * the master computes it once (get_grant's `extra_args_reach`).
 */
export function extraArgsReach(scope: Pick<GrantScope, 'argv_prefix' | 'extra_args'>): string {
  const [exe = '?', script = '?'] = scope.argv_prefix;
  switch (scope.extra_args) {
    case 'none':
      return 'none: argv is fixed';
    case 'script':
      return `extra arguments go to the reviewed script ${script}`;
    case 'any_unsafe':
      return `WIDENED: extra arguments reach \`${baseName(exe)}\`, which can run any command`;
  }
}

/**
 * Every reason a scope is refused at request time (empty: acceptable). `base` and `interpreters` (the
 * policy's script-from-inputs interpreters) check that `extra_args: "script"` really reaches a script.
 * Pure.
 */
export function scopeProblems(
  scope: GrantScope,
  base?: { spec: TaskSpec; interpreters: readonly string[] },
): string[] {
  const problems: string[] = [];
  const argv = argvPrefixProblem(scope.argv_prefix, scope.extra_args);
  if (argv) problems.push(argv);
  if (
    !argv &&
    base &&
    scope.extra_args === 'script' &&
    !prefixScript(scope.argv_prefix, base.spec, base.interpreters)
  )
    problems.push(
      `extra_args "script": argv[1] ${JSON.stringify(scope.argv_prefix[1] ?? null)} is not an input the policy runs as a script under ${scope.argv_prefix[0]}, so extra arguments would reach ${baseName(scope.argv_prefix[0] ?? '?')} itself; use "none" (a fixed argv), or "any_unsafe" to widen it on purpose`,
    );
  for (const rule of scope.env) {
    const control = envControlOf(rule.name);
    if (control)
      problems.push(
        `env ${rule.name} is an interpreter-control variable (${control.family}: ${control.why}); a grant never lets it change`,
      );
  }
  if (new Set(scope.env.map((e) => e.name)).size !== scope.env.length)
    problems.push('each env name may be listed once');
  return problems;
}

/** The share of a grant's budgets and clock used, 0..1 each: what alerts at 80 % read. */
export function grantUsage(
  g: StandingGrant & { created_at: number },
  now: number,
): { runs: number; card_hours: number; ttl: number } {
  const span = g.expires_at - g.created_at;
  return {
    runs: g.max_runs === 0 ? 1 : g.runs_used / g.max_runs,
    card_hours:
      g.max_card_seconds === 0 ? 1 : (g.card_seconds_charged + g.card_seconds_reserved) / g.max_card_seconds,
    ttl: span <= 0 ? 1 : Math.min(1, Math.max(0, (now - g.created_at) / span)),
  };
}

/** The ratio at which a budget or the TTL raises an alert. */
export const GRANT_ALERT_RATIO = 0.8;

/** Budgets (runs, card_hours, ttl) that crossed GRANT_ALERT_RATIO between `before` and `after`. */
export function crossedAlerts(before: Record<string, number>, after: Record<string, number>): string[] {
  return Object.keys(after).filter(
    (k) => (before[k] ?? 0) < GRANT_ALERT_RATIO && (after[k] ?? 0) >= GRANT_ALERT_RATIO,
  );
}

/** Card-seconds a run reserves up front: cards × its time limit (the most it can hold the cards). */
export function reservationOf(cards: number, timeLimitSeconds: number): number {
  return cards * timeLimitSeconds;
}

/**
 * Card-seconds a finished run is charged: the cards it held × the seconds from start to finish, capped
 * at its reservation (a run is stopped at its time limit; the kill grace is not the grantee's to pay).
 * A run that never started is charged nothing.
 */
export function chargeOf(
  cards: number,
  startedAt: number | null,
  finishedAt: number,
  reserved: number,
): number {
  if (startedAt === null) return 0;
  const seconds = Math.max(0, Math.ceil((finishedAt - startedAt) / 1000));
  return Math.min(reserved, cards * seconds);
}
