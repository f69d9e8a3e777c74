import type { Policy } from '../../contracts/policy.js';
import { pinnedScripts } from '../../contracts/policy.js';
import type { TaskSpec } from '../../contracts/task-spec.js';
import { envControlFinding } from './env-control.js';
import { checkInputs } from './inputs.js';
import { checkExecutable, checkImage } from './runtime.js';
import { checkLimits } from './task-limits.js';
import type { Add, Finding, FindingSeverity, PolicyFacts } from './types.js';
import { quoteUntrusted as q, quoteList } from './untrusted.js';

export type { Finding, PolicyFacts } from './types.js';

/**
 * Policy findings for one revision (docs/security.md "Policy"). `error` findings block confirmation;
 * `warning` findings are shown to the reviewer. Every finding teaches: it says what is wrong and what a valid
 * value looks like. Every submitter value in a message is quoted (src/domain/policy/untrusted.ts), never spliced in.
 * The checks live in policy-runtime.ts (what runs), policy-inputs.ts (the inputs), task-limits.ts (the
 * limits) and here (env, network, mounts, placement, ceilings, reviewer aids); `CHECKS` lists them in order.
 */

/** Env names the broker sets itself; a spec may never set them. */
const RESERVED_ENV =
  /^(GPU_BROKER_.*|CUDA_VISIBLE_DEVICES|HIP_VISIBLE_DEVICES|ROCR_VISIBLE_DEVICES|NVIDIA_VISIBLE_DEVICES)$/;
/**
 * Env names refused whatever the config says: they make the dynamic loader run code of the task's
 * choosing. `policy.refused_env` adds to this list; it cannot shrink it.
 */
export const ALWAYS_REFUSED_ENV: readonly string[] = ['LD_PRELOAD', 'LD_LIBRARY_PATH', 'LD_AUDIT'];

/** Env names that usually carry secrets; specs are read by reviewers and stored forever. */
const SECRET_ENV = /(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|PRIVATE_KEY|CREDENTIAL)/i;

/** One step of the evaluation: it adds its findings through `add`. */
type Check = (spec: TaskSpec, policy: Policy, facts: PolicyFacts, add: Add) => void;

/** The steps of `evaluatePolicy`, in the order their findings are listed. */
const CHECKS: readonly Check[] = [
  checkRuntime,
  (spec, policy, _facts, add) => checkNetwork(spec, policy, add),
  checkInputs,
  checkMounts,
  (spec, policy, _facts, add) => checkEnv(spec, policy, add),
  (spec, policy, facts, add) => checkLimits(spec, policy, add, facts.largestHost),
  (spec, _policy, _facts, add) => checkPlacement(spec, add),
  (spec, policy, _facts, add) => checkMig(spec, policy, add),
  (spec, _policy, facts, add) => checkPriority(spec, facts, add),
  (spec, policy, _facts, add) => checkCeilings(spec, policy, add),
  (spec, _policy, _facts, add) => checkReviewerAids(spec, add),
];

/** Evaluates `spec` against `policy`. Pure: file digests come in through `facts`. */
export function evaluatePolicy(spec: TaskSpec, policy: Policy, facts: PolicyFacts): Finding[] {
  const findings: Finding[] = [];
  const add: Add = (severity: FindingSeverity, code, path, message, hint) =>
    findings.push({ severity, code, path, message, hint });
  for (const check of CHECKS) check(spec, policy, facts, add);
  return findings;
}

/**
 * What runs: a container's argv runs inside its image, so the host-executable rules do not apply to it; the
 * image must be pinned instead. Env rules apply to both kinds.
 */
function checkRuntime(spec: TaskSpec, policy: Policy, facts: PolicyFacts, add: Add): void {
  if (spec.runtime.kind === 'container') checkImage(spec.runtime.image, policy, add);
  else checkExecutable(spec, policy, facts, add);
}

/** Data mounts: one no enrolled worker offers would wait forever; an offered one is pointed out to the reviewer. */
function checkMounts(spec: TaskSpec, _policy: Policy, facts: PolicyFacts, add: Add): void {
  for (const [n, name] of (spec.mounts ?? []).entries()) {
    if (facts.offeredMounts && !facts.offeredMounts.includes(name))
      add(
        'warning',
        'MOUNT_NOT_OFFERED',
        `mounts[${n}]`,
        `no enrolled worker offers the data mount ${q(name)}; the task would wait for one`,
        `Offered now: ${quoteList(facts.offeredMounts, 20) || 'none'}. An operator declares one with gpu-broker worker --mount NAME=/path.`,
      );
    else
      add(
        'warning',
        'MOUNT_REQUESTED',
        `mounts[${n}]`,
        `the task reads the data mount ${q(name)} at ${q(`/mnt/${name}`)}`,
        'Reviewer: check that the task needs this data set; it is mounted read-only unless the operator allowed writes.',
      );
  }
}

/** A priority above the owner's account's maximum cannot be confirmed: fair share bounds it per team. */
function checkPriority(spec: TaskSpec, facts: PolicyFacts, add: Add): void {
  const max = facts.account?.max_priority;
  if (max === null || max === undefined || spec.priority === undefined || spec.priority <= max) return;
  add(
    'error',
    'PRIORITY_ABOVE_ACCOUNT',
    'priority',
    `priority ${spec.priority} is above the maximum of account ${q(facts.account!.name)}, ${max}`,
    `Ask for ${max} or less (or leave priority out); an operator sets the maximum with gpu-broker account set ${facts.account!.name} --max-priority.`,
  );
}

/** Ranks spread over several nodes without network cannot reach each other. */
function checkPlacement(spec: TaskSpec, add: Add): void {
  const perNode = spec.cards.per_node;
  if (perNode === undefined || spec.cards.count <= perNode || (spec.network ?? 'none') !== 'none') return;
  add(
    'warning',
    'MULTI_NODE_WITHOUT_NETWORK',
    'network',
    `the task runs on ${spec.cards.count / perNode} nodes without network: each rank's sandbox has only loopback, so ranks on different nodes cannot reach each other`,
    'Set "network": "host" when the ranks talk to each other (torch.distributed, NCCL over sockets); leave it when each node works alone.',
  );
}

/** MIG slices (ADR 0046): a spec asking for them, where the policy forbids them, is an error. */
function checkMig(spec: TaskSpec, policy: Policy, add: Add): void {
  const profile = spec.cards.mig_profile;
  if (policy.mig !== 'forbid' || (profile === undefined && spec.cards.allow_mig !== true)) return;
  add(
    'error',
    'MIG_FORBIDDEN',
    profile === undefined ? 'cards.allow_mig' : 'cards.mig_profile',
    profile === undefined
      ? "the task lets a MIG slice stand for its card, and this broker's policy forbids MIG slices (policy.mig)"
      : `the task asks for MIG ${profile} slices, and this broker's policy forbids MIG slices (policy.mig)`,
    'Ask for whole cards: drop cards.mig_profile and cards.allow_mig.',
  );
}

/** The policy's ceilings on cards and time. */
function checkCeilings(spec: TaskSpec, policy: Policy, add: Add): void {
  if (spec.cards.count > policy.max_cards)
    add(
      'error',
      'TOO_MANY_CARDS',
      'cards.count',
      `${spec.cards.count} cards requested; policy allows at most ${policy.max_cards}`,
      `Use cards.count between 1 and ${policy.max_cards}.`,
    );
  if (spec.time_limit_seconds > policy.max_time_limit_seconds)
    add(
      'error',
      'TIME_LIMIT_TOO_LONG',
      'time_limit_seconds',
      `${spec.time_limit_seconds} s requested; policy allows at most ${policy.max_time_limit_seconds} s`,
      `Use time_limit_seconds between 1 and ${policy.max_time_limit_seconds}.`,
    );
}

/** What the reviewer needs to judge the run and the submitter to get something back: outputs and notes. */
function checkReviewerAids(spec: TaskSpec, add: Add): void {
  if (spec.outputs.length === 0)
    add(
      'warning',
      'NO_OUTPUTS',
      'outputs',
      'no outputs declared; only logs will come back',
      'Declare files the run writes under $GPU_BROKER_OUTPUT_DIR, e.g. [{"path":"result.json","required":true}].',
    );
  if (!spec.notes || spec.notes.trim().length === 0)
    add(
      'warning',
      'NO_NOTES',
      'notes',
      'no notes for the reviewer',
      'Explain in notes why the run needs GPUs, what could go wrong and what the reviewer should check.',
    );
}

/**
 * Env: names the broker sets are reserved, the loader's worst are always refused, interpreter- and
 * loader-control names (env-control.ts) are errors unless their value is benign (installed or
 * task-private paths, a bare backend name) or the operator allows them by name, and names that look
 * like secrets warn.
 */
function checkEnv(spec: TaskSpec, policy: Policy, add: Add): void {
  for (const [name, value] of Object.entries(spec.runtime.env ?? {})) {
    const at = `runtime.env.${name}`;
    if (RESERVED_ENV.test(name)) {
      add(
        'error',
        'ENV_RESERVED',
        at,
        `the env name ${q(name)} is set by the broker for every task`,
        'Remove it: the worker sets CUDA_VISIBLE_DEVICES/HIP_VISIBLE_DEVICES and GPU_BROKER_* to the leased cards.',
      );
      continue;
    }
    if (ALWAYS_REFUSED_ENV.includes(name) || policy.refused_env.includes(name)) {
      add(
        'error',
        'ENV_REFUSED',
        at,
        `the env name ${q(name)} is refused by policy`,
        `Remove it. Refused names: ${[...new Set([...ALWAYS_REFUSED_ENV, ...policy.refused_env])].join(', ')}.`,
      );
      continue;
    }
    const control = envControlFinding(name, value);
    if (control !== undefined && policy.allowed_control_env.includes(name)) {
      add(
        'warning',
        'ENV_CONTROL_ALLOWED',
        at,
        `the env name ${q(name)} controls ${control.family} (${control.why}); the policy allows it`,
        'Reviewer: its value decides what code runs or what files are loaded; read it as code.',
      );
    } else if (control !== undefined) {
      add(
        'error',
        'ENV_CONTROL',
        at,
        `the env name ${q(name)} controls ${control.family}: ${control.why}`,
        `Remove it and do the same inside the reviewed script (e.g. sys.path in Python). An operator who accepts it lists the name in policy.allowed_control_env.`,
      );
    } else if (SECRET_ENV.test(name)) {
      add(
        'warning',
        'ENV_LOOKS_SECRET',
        at,
        `the env name ${q(name)} looks like a secret`,
        'Specs are stored and shown to reviewers; never put credentials in a spec.',
      );
    }
  }
}

/**
 * `network: "host"` gives the task the host's network (default: loopback only). Without
 * `policy.allow_network` it blocks confirmation; with it, it still warns, so the reviewer weighs it.
 */
function checkNetwork(spec: TaskSpec, policy: Policy, add: Add): void {
  if (spec.network !== 'host') return;
  if (!policy.allow_network) {
    add(
      'error',
      'NETWORK_NOT_ALLOWED',
      'network',
      'network "host" is not allowed by policy; tasks run with loopback only',
      'Drop "network" (or set it to "none") and ship what the run needs with it. If the run truly needs ' +
        'the network, an operator sets policy.allow_network to true in the master config.',
    );
    return;
  }
  add(
    'warning',
    'NETWORK_HOST',
    'network',
    'the task gets the host network: it can reach anything the worker host can',
    'Reviewer: check in the notes why the run needs the network and what it contacts.',
  );
}

/** The files whose digests `evaluatePolicy` needs for this spec. */
export function filesToDigest(spec: TaskSpec, policy: Policy): string[] {
  const files = new Set<string>();
  if (spec.runtime.kind === 'container') return []; // its argv names files inside the image
  const [exe, script] = spec.runtime.argv;
  if (exe && policy.executables.some((e) => e.path === exe && e.sha256)) files.add(exe);
  for (const s of pinnedScripts(policy.scripts))
    if (s.interpreter === exe && s.script === script) files.add(s.script);
  return [...files];
}

/** True when no finding blocks confirmation. */
export function isConfirmable(findings: readonly Finding[]): boolean {
  return !findings.some((f) => f.severity === 'error');
}
