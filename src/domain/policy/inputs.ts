import type { Policy } from '../../contracts/policy.js';
import type { InputFile, TaskSpec } from '../../contracts/task-spec.js';
import { implicitCodeIn } from './implicit-code.js';
import { isSourcePath, MAX_INSPECT_FILE_BYTES, MAX_INSPECT_REVISION_BYTES } from './text-inspection.js';
import type { Add, PolicyFacts } from './types.js';
import { quoteUntrusted as q, quoteList } from './untrusted.js';

/** Policy checks of the inputs: limits, uploads, implicit code and text that displays otherwise. */

/**
 * Inputs: within the policy's count and byte limits, and every blob already uploaded with the size the
 * spec says. A missing blob blocks confirmation until it is uploaded and the spec revised.
 */
export function checkInputs(spec: TaskSpec, policy: Policy, facts: PolicyFacts, add: Add): void {
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
        `the input ${q(input.path)}: no uploaded content has sha256 ${input.sha256}`,
        'Upload it with upload_inputs (or PUT /api/v1/blobs/{sha256}) first, then revise with the sha256 and size it returns.',
      );
    } else if (size !== input.size) {
      add(
        'error',
        'INPUT_SIZE_MISMATCH',
        `inputs[${n}].size`,
        `the input ${q(input.path)}: the content with sha256 ${input.sha256} is ${size} bytes, not ${input.size}`,
        `Use "size": ${size}, as upload_inputs returned it.`,
      );
    }
  }
  checkImplicitCode(spec, policy, add);
  checkText(inputs, facts, add);
}

/**
 * Inputs an interpreter loads on its own (src/domain/policy/implicit-code.ts, one table of path rows and rows over
 * the whole input set): an error unless the policy allows them, then a warning.
 */
function checkImplicitCode(spec: TaskSpec, policy: Policy, add: Add): void {
  const inputs = spec.inputs ?? [];
  const paths = inputs.map((i) => i.path);
  for (const { index: n, entry, detail } of implicitCodeIn(paths, spec.runtime.argv)) {
    const what = `the input ${q(paths[n]!)} is code that ${entry.family} loads on its own (${entry.why})${detail ? `: ${detail}` : ''}`;
    if (policy.allow_implicit_code)
      add(
        'warning',
        'IMPLICIT_CODE_ALLOWED',
        `inputs[${n}].path`,
        `${what}; the policy allows it`,
        'Reviewer: this file runs without the script naming it; read it (get_input) or ask for it to be removed.',
      );
    else
      add(
        'error',
        'IMPLICIT_CODE',
        `inputs[${n}].path`,
        what,
        entry.scope === 'path'
          ? 'Remove it from the inputs (gpu-broker propose --dir leaves such files out); an operator who needs them sets policy.allow_implicit_code to true.'
          : 'Rename or remove one of the inputs so that each name is what runs (a package needs its __init__.py for its modules to be submodules); an operator who needs them sets policy.allow_implicit_code to true.',
      );
  }
}

/** Text that displays other than it runs (warnings), and inputs too large to inspect. */
function checkText(inputs: readonly InputFile[], facts: PolicyFacts, add: Add): void {
  const inspected = facts.inputText;
  if (inspected === undefined) return;
  const stored = facts.storedBlobs ?? {};
  const notInspected: string[] = [];
  for (const [n, input] of inputs.entries()) {
    if (stored[input.sha256] === undefined) continue; // INPUT_UNKNOWN already
    const result = inspected[input.sha256];
    if (result === undefined) {
      notInspected.push(input.path);
      continue;
    }
    if (result.count === 0) continue;
    const places = result.oddities.map((o) => `line ${o.line}: ${o.what}`).join('; ');
    const more =
      result.count > result.oddities.length ? `; ${result.count - result.oddities.length} more` : '';
    add(
      'warning',
      'TEXT_DISPLAYS_DIFFERENTLY',
      `inputs[${n}]`,
      `the input ${q(input.path)} may display other than it runs: ${places}${more}`,
      'Reviewer: a viewer may hide or reorder these characters; ask for plain UTF-8 without control, bidi or zero-width characters, or read the bytes (get_input shows them escaped).',
    );
  }
  if (notInspected.length > 0)
    add(
      'warning',
      'INPUTS_NOT_INSPECTED',
      'inputs',
      `${notInspected.length} input file(s) not inspected for hidden characters or non-text content: too large (${quoteList(notInspected)})`,
      `The broker inspects files up to ${MAX_INSPECT_FILE_BYTES} bytes and ${MAX_INSPECT_REVISION_BYTES} bytes per revision; reviewer: read these files yourself or ask for smaller ones.`,
    );
}

/**
 * The digests the broker should read and inspect for `spec`: stored blobs of at most
 * MAX_INSPECT_FILE_BYTES, in manifest order, each once, until MAX_INSPECT_REVISION_BYTES.
 */
export function digestsToInspect(spec: TaskSpec, storedBlobs: Readonly<Record<string, number>>): string[] {
  const chosen = new Set<string>();
  let budget = MAX_INSPECT_REVISION_BYTES;
  for (const input of spec.inputs ?? []) {
    const size = storedBlobs[input.sha256];
    if (size === undefined || chosen.has(input.sha256) || size > MAX_INSPECT_FILE_BYTES || size > budget)
      continue;
    chosen.add(input.sha256);
    budget -= size;
  }
  return [...chosen];
}

/**
 * For each digest of `inputs`, the path its one inspection reads it under: a source path when any input
 * with those bytes has one (inspectText reports bytes that are not UTF-8 only in a source file, and the
 * findings of every input with the digest come from that one inspection), else the first. Taking the
 * last path, as before, let the same bytes listed again as `zz.bin` hide helper.py's warning.
 */
export function inspectionPaths(inputs: readonly InputFile[]): Map<string, string> {
  const paths = new Map<string, string>();
  for (const i of inputs) {
    const seen = paths.get(i.sha256);
    if (seen === undefined || (!isSourcePath(seen) && isSourcePath(i.path))) paths.set(i.sha256, i.path);
  }
  return paths;
}
