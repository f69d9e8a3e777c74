import type { TaskSpec } from '../../contracts/task-spec.js';

/**
 * Every field of a task spec, and how a standing grant's coverage decides on it (ADR 0029): the
 * name of the clause of ./standing-grant-coverage.ts that compares it, or `free_text` for what an agent
 * edits between runs and changes nothing about where or how the task runs. A test walks
 * TaskSpecSchema's shape and fails on any key missing here, so a new spec field cannot be added without
 * deciding how a grant treats it.
 *
 * And at run time, fail-closed: the `unchanged` clause compares with the base revision every field this
 * table does not name (a key a newer client sent, a field added without a rule) and refuses any change.
 *
 * Paths: keys joined by `.`, `[]` for every element of an array.
 */
export const SPEC_FIELD_RULES = {
  title: 'free_text',
  objective: 'free_text',
  success_criteria: 'free_text',
  notes: 'free_text',
  'outputs[].path': 'free_text',
  'outputs[].required': 'free_text',
  'cards.count': 'cards',
  'cards.model': 'cards',
  'cards.min_memory_mib': 'cards',
  'cards.mig_profile': 'cards',
  'cards.allow_mig': 'cards',
  'cards.per_node': 'placement',
  mounts: 'placement',
  worker: 'workers',
  priority: 'priority',
  preemptible: 'preemption',
  preemption_grace_seconds: 'preemption',
  'runtime.kind': 'runtime',
  'runtime.image': 'runtime',
  'runtime.argv': 'argv',
  'runtime.env': 'env',
  network: 'network',
  'inputs[].path': 'inputs',
  'inputs[].sha256': 'inputs',
  'inputs[].size': 'inputs',
  'inputs[].executable': 'inputs',
  time_limit_seconds: 'time_limit',
  'limits.memory_mib': 'limits',
  'limits.pids': 'limits',
  'limits.cpu_weight': 'limits',
  'limits.tmp_mib': 'limits',
  'limits.shm_mib': 'limits',
  'limits.disk_mib': 'limits',
  'limits.cpus': 'placement',
} as const satisfies Record<string, string>;

const RULES: Readonly<Record<string, string>> = SPEC_FIELD_RULES;
const PREFIXES: ReadonlySet<string> = new Set(
  Object.keys(RULES).flatMap((p) => {
    const parts = p.split('.');
    return parts.slice(0, -1).map((_, i) => parts.slice(0, i + 1).join('.'));
  }),
);

const isPlainObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/** Canonical JSON (sorted keys) for comparing two values of a field. */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (isPlainObject(v))
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`)
      .join(',')}}`;
  return v === undefined ? 'undefined' : JSON.stringify(v);
}

/**
 * The first path of `spec` that the table names no rule for and that differs from `base`'s, or null.
 * Objects and arrays the table looks into (`cards`, `inputs[]`) are walked; anything else unnamed is
 * compared whole.
 */
export function unnamedChange(base: TaskSpec, spec: TaskSpec): string | null {
  return walk(base, spec, '');
}

function walk(a: unknown, b: unknown, path: string): string | null {
  if (path !== '' && RULES[path] !== undefined) return null;
  if (path === '' || PREFIXES.has(path)) {
    if (isPlainObject(a) || isPlainObject(b)) {
      const x = isPlainObject(a) ? a : {};
      const y = isPlainObject(b) ? b : {};
      for (const k of new Set([...Object.keys(x), ...Object.keys(y)])) {
        const found = walk(x[k], y[k], path === '' ? k : `${path}.${k}`);
        if (found) return found;
      }
      return null;
    }
  }
  if ((Array.isArray(a) || Array.isArray(b)) && PREFIXES.has(`${path}[]`)) {
    const x = Array.isArray(a) ? a : [];
    const y = Array.isArray(b) ? b : [];
    for (let i = 0; i < Math.max(x.length, y.length); i++) {
      const found = walk(x[i], y[i], `${path}[]`);
      if (found) return found;
    }
    return null;
  }
  return canonical(a) === canonical(b) ? null : path;
}
