import { inputInterpreters, type Policy, pinnedScripts } from '../contracts/policy.js';
import { PINNED_IMAGE, type TaskSpec } from '../contracts/task-spec.js';

/**
 * Policy findings for one revision (DESIGN §5). `error` findings block confirmation; `warning` findings
 * are shown to the reviewer. Every finding teaches: it says what is wrong and what a valid value looks like.
 */

/** How serious a finding is. */
export type FindingSeverity = 'error' | 'warning';

/** One policy finding. */
export interface Finding {
  severity: FindingSeverity;
  code: string;
  /** Where in the spec, as a dotted path (`runtime.argv[0]`). */
  path: string;
  message: string;
  hint: string;
}

/**
 * Facts the shell gathers before the pure check: sha256 of files the spec names (null = unreadable), and
 * the size of each input blob the master's store holds (absent = not uploaded).
 */
export interface PolicyFacts {
  fileDigests: Readonly<Record<string, string | null>>;
  storedBlobs?: Readonly<Record<string, number>>;
  /** Names of the data mounts some enrolled worker offers (absent: not checked). */
  offeredMounts?: readonly string[];
}

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

/** Evaluates `spec` against `policy`. Pure: file digests come in through `facts`. */
export function evaluatePolicy(spec: TaskSpec, policy: Policy, facts: PolicyFacts): Finding[] {
  const findings: Finding[] = [];
  const add = (severity: FindingSeverity, code: string, path: string, message: string, hint: string) =>
    findings.push({ severity, code, path, message, hint });

  // A container's argv runs inside its image, so the host-executable rules do not apply to it; the
  // image must be pinned instead. Env rules apply to both kinds.
  if (spec.runtime.kind === 'container') checkImage(spec.runtime.image, policy, add);
  else checkExecutable(spec, policy, facts, add);
  checkNetwork(spec, policy, add);
  checkInputs(spec, policy, facts, add);
  for (const [n, name] of (spec.mounts ?? []).entries()) {
    if (facts.offeredMounts && !facts.offeredMounts.includes(name))
      add(
        'warning',
        'MOUNT_NOT_OFFERED',
        `mounts[${n}]`,
        `no enrolled worker offers the data mount "${name}"; the task would wait for one`,
        `Offered now: ${facts.offeredMounts.join(', ') || 'none'}. An operator declares one with gpu-broker worker --mount ${name}=/path.`,
      );
    else
      add(
        'warning',
        'MOUNT_REQUESTED',
        `mounts[${n}]`,
        `the task reads the data mount "${name}" at /mnt/${name}`,
        'Reviewer: check that the task needs this data set; it is mounted read-only unless the operator allowed writes.',
      );
  }

  for (const name of Object.keys(spec.runtime.env ?? {})) {
    if (RESERVED_ENV.test(name)) {
      add(
        'error',
        'ENV_RESERVED',
        `runtime.env.${name}`,
        `${name} is set by the broker for every task`,
        'Remove it: the worker sets CUDA_VISIBLE_DEVICES/HIP_VISIBLE_DEVICES and GPU_BROKER_* to the leased cards.',
      );
    } else if (ALWAYS_REFUSED_ENV.includes(name) || policy.refused_env.includes(name)) {
      add(
        'error',
        'ENV_REFUSED',
        `runtime.env.${name}`,
        `${name} is refused by policy`,
        `Remove it. Refused names: ${[...new Set([...ALWAYS_REFUSED_ENV, ...policy.refused_env])].join(', ')}.`,
      );
    } else if (SECRET_ENV.test(name)) {
      add(
        'warning',
        'ENV_LOOKS_SECRET',
        `runtime.env.${name}`,
        `${name} looks like a secret`,
        'Specs are stored and shown to reviewers; never put credentials in a spec.',
      );
    }
  }

  const perNode = spec.cards.per_node;
  if (perNode !== undefined && spec.cards.count > perNode && (spec.network ?? 'none') === 'none') {
    add(
      'warning',
      'MULTI_NODE_WITHOUT_NETWORK',
      'network',
      `the task runs on ${spec.cards.count / perNode} nodes without network: each rank's sandbox has only loopback, so ranks on different nodes cannot reach each other`,
      'Set "network": "host" when the ranks talk to each other (torch.distributed, NCCL over sockets); leave it when each node works alone.',
    );
  }
  if (spec.cards.count > policy.max_cards) {
    add(
      'error',
      'TOO_MANY_CARDS',
      'cards.count',
      `${spec.cards.count} cards requested; policy allows at most ${policy.max_cards}`,
      `Use cards.count between 1 and ${policy.max_cards}.`,
    );
  }
  if (spec.time_limit_seconds > policy.max_time_limit_seconds) {
    add(
      'error',
      'TIME_LIMIT_TOO_LONG',
      'time_limit_seconds',
      `${spec.time_limit_seconds} s requested; policy allows at most ${policy.max_time_limit_seconds} s`,
      `Use time_limit_seconds between 1 and ${policy.max_time_limit_seconds}.`,
    );
  }
  if (spec.outputs.length === 0) {
    add(
      'warning',
      'NO_OUTPUTS',
      'outputs',
      'no outputs declared; only logs will come back',
      'Declare files the run writes under $GPU_BROKER_OUTPUT_DIR, e.g. [{"path":"result.json","required":true}].',
    );
  }
  if (!spec.notes || spec.notes.trim().length === 0) {
    add(
      'warning',
      'NO_NOTES',
      'notes',
      'no notes for the reviewer',
      'Explain in notes why the run needs GPUs, what could go wrong and what the reviewer should check.',
    );
  }
  return findings;
}

type Add = (s: FindingSeverity, code: string, path: string, message: string, hint: string) => void;

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

/**
 * A container image must be pinned by digest (`name@sha256:<64 hex>`), or be listed by its exact
 * reference in `policy.images` (where the operator may pin the digest it must resolve to).
 */
function checkImage(image: string, policy: Policy, add: Add): void {
  if (PINNED_IMAGE.test(image)) return;
  if (policy.images.some((i) => i.ref === image)) return;
  const name = image.replace(/@.*$/, '').replace(/:[^/:]*$/, '');
  const listed = policy.images.map((i) => i.ref);
  const choose = listed.length > 0 ? ` or use an image the policy lists (${listed.join(', ')}).` : '.';
  add(
    'error',
    'IMAGE_NOT_PINNED',
    'runtime.image',
    `image "${image}" is neither pinned by digest nor listed in policy.images`,
    `Pin it by digest, e.g. "${name}@sha256:<64 hex digest>" (podman image inspect --format '{{.Digest}}' ${image}),` +
      `${choose} An operator can allow a reference in the config's policy.images, e.g. {"ref": "${image}", "digest": "sha256:…"}.`,
  );
}

function checkExecutable(spec: TaskSpec, policy: Policy, facts: PolicyFacts, add: Add): void {
  const argv = spec.runtime.argv;
  const exe = argv[0] ?? '';
  if (!exe.startsWith('/')) {
    add(
      'error',
      'EXECUTABLE_NOT_ABSOLUTE',
      'runtime.argv[0]',
      `"${exe}" is not an absolute path`,
      'argv[0] must be an allowed absolute path such as "/usr/bin/python3"; no shell runs the command.',
    );
    return;
  }
  const script = argv[1];
  if (inputInterpreters(policy.scripts).includes(exe) && script !== undefined) {
    const fromInputs = (spec.inputs ?? []).find((i) => i.path === script.replace(/^\.\//, ''));
    if (fromInputs) {
      add(
        'warning',
        'SCRIPT_FROM_INPUTS',
        'runtime.argv[1]',
        `${exe} runs ${fromInputs.path} from the inputs (sha256 ${fromInputs.sha256})`,
        'Reviewer: read the script and what it imports (get_input); it runs exactly as approved.',
      );
      return;
    }
  }
  const scriptRule = pinnedScripts(policy.scripts).find((s) => s.interpreter === exe && s.script === script);
  if (scriptRule) {
    const actual = facts.fileDigests[scriptRule.script];
    if (actual !== scriptRule.sha256) {
      add(
        'error',
        'SCRIPT_DIGEST_MISMATCH',
        'runtime.argv[1]',
        actual == null
          ? `${scriptRule.script} cannot be read on the master to check its pin`
          : `${scriptRule.script} has sha256 ${actual}, policy pins ${scriptRule.sha256}`,
        'The pinned script changed or is missing; ask an operator to update the pin.',
      );
    }
    return;
  }
  const exeRule = policy.executables.find((e) => e.path === exe);
  if (!exeRule) {
    const allowed = [
      ...policy.executables.map((e) => e.path),
      ...policy.scripts.map((s) =>
        'script' in s ? `${s.interpreter} ${s.script}` : `${s.interpreter} <a script from inputs>`,
      ),
    ];
    add(
      'error',
      'EXECUTABLE_NOT_ALLOWED',
      'runtime.argv[0]',
      `${exe} is not an allowed executable`,
      allowed.length > 0
        ? `Allowed: ${allowed.join('; ')}. An operator can allow more in the config's policy.executables, e.g. {"path": "${exe}"}.`
        : `No executables are allowed yet. An operator adds {"path": "${exe}"} to policy.executables in the master config (--config FILE).`,
    );
    return;
  }
  if (exeRule.sha256 !== undefined) {
    const actual = facts.fileDigests[exe];
    if (actual == null) {
      add(
        'warning',
        'EXECUTABLE_PIN_UNVERIFIED',
        'runtime.argv[0]',
        `${exe} is pinned but cannot be read on the master`,
        'The worker checks the pin again before running it.',
      );
    } else if (actual !== exeRule.sha256) {
      add(
        'error',
        'EXECUTABLE_DIGEST_MISMATCH',
        'runtime.argv[0]',
        `${exe} has sha256 ${actual}, policy pins ${exeRule.sha256}`,
        'The pinned executable changed; ask an operator to update the pin.',
      );
    }
  }
}

/**
 * Inputs: within the policy's count and byte limits, and every blob already uploaded with the size the
 * spec says. A missing blob blocks confirmation until it is uploaded and the spec revised.
 */
function checkInputs(spec: TaskSpec, policy: Policy, facts: PolicyFacts, add: Add): void {
  const inputs = spec.inputs ?? [];
  if (inputs.length > policy.max_input_files) {
    add(
      'error',
      'INPUTS_TOO_MANY',
      'inputs',
      `${inputs.length} input files; policy allows at most ${policy.max_input_files}`,
      'Ship fewer files: drop generated files and data (use a named mount for data sets), or pack them into one archive the task unpacks into /tmp.',
    );
  }
  const total = inputs.reduce((sum, i) => sum + i.size, 0);
  if (total > policy.max_input_bytes) {
    add(
      'error',
      'INPUTS_TOO_LARGE',
      'inputs',
      `inputs total ${total} bytes; policy allows at most ${policy.max_input_bytes}`,
      'Ship only code and small files; large data sets belong on a named mount ("mounts": ["name"]) the operator declares on the worker.',
    );
  }
  const stored = facts.storedBlobs ?? {};
  for (const [n, input] of inputs.entries()) {
    const size = stored[input.sha256];
    if (size === undefined) {
      add(
        'error',
        'INPUT_UNKNOWN',
        `inputs[${n}].sha256`,
        `${input.path}: no uploaded content has sha256 ${input.sha256}`,
        'Upload it with upload_inputs (or PUT /api/v1/blobs/{sha256}) first, then revise with the sha256 and size it returns.',
      );
    } else if (size !== input.size) {
      add(
        'error',
        'INPUT_SIZE_MISMATCH',
        `inputs[${n}].size`,
        `${input.path}: the content with sha256 ${input.sha256} is ${size} bytes, not ${input.size}`,
        `Use "size": ${size}, as upload_inputs returned it.`,
      );
    }
  }
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
