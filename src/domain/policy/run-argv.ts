import { inputScriptRules, type Policy } from '../../contracts/policy.js';
import type { InputFile, TaskSpec } from '../../contracts/task-spec.js';

/**
 * The argv that really runs (docs/security.md "Code the reviewer did not read"), computed in one place: the policy finding shows it to
 * the reviewer, and the master puts it into the execution plan (`ExecutionPlan.argv`) that the worker
 * executes. It differs from `spec.runtime.argv` only for an interpreter running a script from the
 * inputs under a rule with `isolated` (the default): the interpreter's isolated-mode flags go before the
 * script.
 */

/**
 * Flags that put an interpreter in its isolated mode, by the interpreter's file name. Python: `-E`
 * (ignore every PYTHON* variable) and `-s` (no user site dir, which with HOME at the task dir would be
 * an inputs dir). Not `-I`: since Python 3.11 it also implies `-P`, which drops the script's own
 * directory from sys.path, so a reviewed project could no longer import its sibling modules; those
 * modules are reviewed inputs, so keeping that directory loads nothing the reviewer did not read.
 * Bash: `-p` (privileged mode: no BASH_ENV/ENV file, no functions imported from the environment,
 * SHELLOPTS, BASHOPTS, CDPATH and GLOBIGNORE ignored). Interpreters without such a mode (perl, node,
 * ruby, dash) get nothing; the env-control findings cover them.
 */
export function isolatedFlags(interpreter: string): string[] {
  const name = interpreter.slice(interpreter.lastIndexOf('/') + 1);
  if (/^python[0-9.]*$/.test(name)) return ['-E', '-s'];
  if (name === 'bash') return ['-p'];
  return [];
}

/**
 * The input an allowed interpreter runs as its script: `argv[1]` names an input path (`./` allowed) and
 * does not start with `-` (which the interpreter would read as an option such as `-c`). Undefined when
 * the spec does not run a script from its inputs.
 */
export function scriptInput(spec: TaskSpec, policy: Policy): InputFile | undefined {
  if (spec.runtime.kind !== 'process') return undefined;
  const [exe, script] = spec.runtime.argv;
  if (exe === undefined || script === undefined || script.startsWith('-')) return undefined;
  if (!inputScriptRules(policy.scripts).some((r) => r.interpreter === exe)) return undefined;
  const path = script.replace(/^\.\//, '');
  return (spec.inputs ?? []).find((i) => i.path === path);
}

/** The argv the worker executes for `spec` under `policy`. */
export function runArgv(spec: TaskSpec, policy: Policy): string[] {
  const argv = spec.runtime.argv;
  const [exe, ...rest] = argv;
  if (exe === undefined || scriptInput(spec, policy) === undefined) return [...argv];
  const rule = inputScriptRules(policy.scripts).find((r) => r.interpreter === exe);
  if (!rule?.isolated) return [...argv];
  return [exe, ...isolatedFlags(exe), ...rest];
}
