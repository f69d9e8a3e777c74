import { inputScriptRules, type Policy, pinnedScripts } from '../../contracts/policy.js';
import { PINNED_IMAGE, type TaskSpec } from '../../contracts/task-spec.js';
import { runArgv, scriptInput } from './run-argv.js';
import type { Add, PolicyFacts } from './types.js';
import { quoteUntrusted as q, quoteList } from './untrusted.js';

/** Policy checks of what runs: the container image, or the host executable and its script. */

/**
 * A container image must be pinned by digest (`name@sha256:<64 hex>`), or be listed by its exact
 * reference in `policy.images` (where the operator may pin the digest it must resolve to).
 */
export function checkImage(image: string, policy: Policy, add: Add): void {
  if (PINNED_IMAGE.test(image)) return;
  if (policy.images.some((i) => i.ref === image)) return;
  const name = image.replace(/@.*$/, '').replace(/:[^/:]*$/, '');
  const listed = policy.images.map((i) => i.ref);
  const choose = listed.length > 0 ? ` or use an image the policy lists (${quoteList(listed, 10)}).` : '.';
  add(
    'error',
    'IMAGE_NOT_PINNED',
    'runtime.image',
    `the image ${q(image)} is neither pinned by digest nor listed in policy.images`,
    `Pin it by digest, e.g. ${q(`${name}@sha256:<64 hex digest>`)} (podman image inspect --format '{{.Digest}}' IMAGE),` +
      `${choose} An operator can allow a reference in the config's policy.images, e.g. {"ref": ${q(image)}, "digest": "sha256:…"}.`,
  );
}

/** A script from the inputs runs: the reviewer is told which and how; it must be text they can read. */
function checkInputScript(
  spec: TaskSpec,
  policy: Policy,
  facts: PolicyFacts,
  add: Add,
  fromInputs: NonNullable<ReturnType<typeof scriptInput>>,
): void {
  const runs = runArgv(spec, policy);
  add(
    'warning',
    'SCRIPT_FROM_INPUTS',
    'runtime.argv[1]',
    `the input ${q(fromInputs.path)} (sha256 ${fromInputs.sha256}) runs as the script; the argv that runs is ${quoteList(runs, 8, 120)}`,
    'Reviewer: read the script and every input it imports (get_input); it runs exactly as approved.',
  );
  const inspection = facts.inputText?.[fromInputs.sha256];
  if (inspection && !inspection.text)
    add(
      'error',
      'SCRIPT_NOT_TEXT',
      'runtime.argv[1]',
      `the script ${q(fromInputs.path)} is not UTF-8 text (it holds NUL bytes or invalid UTF-8), so no reviewer can read what runs`,
      'Ship the script as UTF-8 source; compiled or binary code cannot be reviewed.',
    );
}

/** A pinned script must have the pinned sha256 on the master. */
function checkScriptPin(
  scriptRule: ReturnType<typeof pinnedScripts>[number],
  facts: PolicyFacts,
  add: Add,
): void {
  const actual = facts.fileDigests[scriptRule.script];
  if (actual !== scriptRule.sha256) {
    add(
      'error',
      'SCRIPT_DIGEST_MISMATCH',
      'runtime.argv[1]',
      actual == null
        ? `${q(scriptRule.script)} cannot be read on the master to check its pin`
        : `${q(scriptRule.script)} has sha256 ${actual}, policy pins ${scriptRule.sha256}`,
      'The pinned script changed or is missing; ask an operator to update the pin.',
    );
  }
}

/** argv[0] is allowed by no rule: says what is allowed, and how an operator would allow it. */
function addNotAllowed(exe: string, policy: Policy, forInputsOnly: boolean, add: Add): void {
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
    forInputsOnly
      ? `${q(exe)} may run only a script from the inputs, and argv names none`
      : `${q(exe)} is not an allowed executable`,
    allowed.length > 0
      ? `Allowed: ${allowed.join('; ')}. An operator can allow more in the config's policy.executables, e.g. {"path": ${q(exe)}}.`
      : `No executables are allowed yet. An operator adds {"path": ${q(exe)}} to policy.executables in the master config (--config FILE).`,
  );
}

/** An allowed executable the policy pins must have that sha256 (unread on the master: the worker checks it). */
function checkExecutablePin(
  exe: string,
  exeRule: Policy['executables'][number],
  facts: PolicyFacts,
  add: Add,
): void {
  if (exeRule.sha256 === undefined) return;
  const actual = facts.fileDigests[exe];
  if (actual == null) {
    add(
      'warning',
      'EXECUTABLE_PIN_UNVERIFIED',
      'runtime.argv[0]',
      `${q(exe)} is pinned but cannot be read on the master`,
      'The worker checks the pin again before running it.',
    );
  } else if (actual !== exeRule.sha256) {
    add(
      'error',
      'EXECUTABLE_DIGEST_MISMATCH',
      'runtime.argv[0]',
      `${q(exe)} has sha256 ${actual}, policy pins ${exeRule.sha256}`,
      'The pinned executable changed; ask an operator to update the pin.',
    );
  }
}

/**
 * A process: argv[0] absolute and allowed (as an executable, a pinned script's interpreter, or an
 * interpreter of scripts from the inputs), pins matching. An interpreter allowed only for input scripts
 * must be given exactly one input file as argv[1], never an option such as `-c`, `-m` or `-`.
 * The first rule that applies decides: not absolute, a script from the inputs, an input-only
 * interpreter given something else, a pinned script, not allowed, an allowed (maybe pinned) executable.
 */
export function checkExecutable(spec: TaskSpec, policy: Policy, facts: PolicyFacts, add: Add): void {
  const argv = spec.runtime.argv;
  const exe = argv[0] ?? '';
  if (!exe.startsWith('/')) {
    add(
      'error',
      'EXECUTABLE_NOT_ABSOLUTE',
      'runtime.argv[0]',
      `argv[0] ${q(exe)} is not an absolute path`,
      'argv[0] must be an allowed absolute path such as "/usr/bin/python3"; no shell runs the command.',
    );
    return;
  }
  const script = argv[1];
  const fromInputs = scriptInput(spec, policy);
  if (fromInputs) {
    checkInputScript(spec, policy, facts, add, fromInputs);
    return;
  }
  const scriptRule = pinnedScripts(policy.scripts).find((s) => s.interpreter === exe && s.script === script);
  const exeRule = policy.executables.find((e) => e.path === exe);
  const forInputsOnly = inputScriptRules(policy.scripts).some((r) => r.interpreter === exe);
  if (!scriptRule && !exeRule && forInputsOnly && script !== undefined) {
    add(
      'error',
      'SCRIPT_NOT_AN_INPUT',
      'runtime.argv[1]',
      script.startsWith('-')
        ? `${q(exe)} may run only a script from the inputs, and argv[1] ${q(script)} is an option, not an input file`
        : `${q(exe)} may run only a script from the inputs, and argv[1] ${q(script)} is not an input path of this spec`,
      'Put the code in an input file (upload_inputs) and give its path as argv[1], e.g. ["/usr/bin/python3", "train.py", "--epochs", "1"]; inline code (-c), modules (-m) and stdin (-) are not allowed.',
    );
    return;
  }
  if (scriptRule) checkScriptPin(scriptRule, facts, add);
  else if (!exeRule) addNotAllowed(exe, policy, forInputsOnly, add);
  else checkExecutablePin(exe, exeRule, facts, add);
}
