/**
 * The difference between two revisions' specs, as a flat list of changed paths, so a reviewer sees what
 * moved since the last review without reading both specs.
 */

/** One changed leaf. `before`/`after` are absent when the path was added/removed. */
export interface SpecChange {
  path: string;
  before?: unknown;
  after?: unknown;
}

/** Lists the changed leaves between `before` and `after` (plain JSON values), sorted by path. */
export function diffSpecs(before: unknown, after: unknown): SpecChange[] {
  const a = flatten(before);
  const b = flatten(after);
  const paths = [...new Set([...a.keys(), ...b.keys()])].sort();
  const changes: SpecChange[] = [];
  for (const path of paths) {
    const hasA = a.has(path);
    const hasB = b.has(path);
    const va = a.get(path);
    const vb = b.get(path);
    if (hasA && hasB && JSON.stringify(va) === JSON.stringify(vb)) continue;
    const change: SpecChange = { path };
    if (hasA) change.before = va;
    if (hasB) change.after = vb;
    changes.push(change);
  }
  return changes;
}

function flatten(value: unknown, prefix = '', out = new Map<string, unknown>()): Map<string, unknown> {
  if (Array.isArray(value)) {
    if (value.length === 0) out.set(prefix, []);
    for (const [i, v] of value.entries()) flatten(v, `${prefix}[${i}]`, out);
  } else if (value !== null && typeof value === 'object') {
    const keys = Object.keys(value);
    if (keys.length === 0 && prefix) out.set(prefix, {});
    for (const k of keys) flatten((value as Record<string, unknown>)[k], prefix ? `${prefix}.${k}` : k, out);
  } else if (value !== undefined) {
    out.set(prefix, value);
  }
  return out;
}
