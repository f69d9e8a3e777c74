import { join } from 'node:path';

/**
 * Reading /proc/self/mountinfo and /proc/self/cgroup: where the cgroup hierarchies are mounted and where
 * this process sits in them. Pure text parsing, used by the cgroup probe (cgroups.ts) and the container
 * OOM watch (container-oom.ts).
 */

/** Whether memory is a cgroup v1 controller on this host (v1 or hybrid), from mountinfo text. Pure. */
export function memoryIsV1(mountinfo: string): boolean {
  return parseMountinfo(mountinfo).some(
    (m) => m.fstype === 'cgroup' && m.superOptions.split(',').includes('memory'),
  );
}

export interface Mount {
  readonly root: string;
  readonly point: string;
  readonly fstype: string;
  readonly superOptions: string;
}

export function parseMountinfo(text: string): Mount[] {
  const out: Mount[] = [];
  for (const line of text.split('\n')) {
    const [left, right] = line.split(' - ');
    if (left === undefined || right === undefined) continue;
    const f = left.split(' ');
    const [fstype = '', , superOptions = ''] = right.split(' ');
    out.push({ root: unescapeMount(f[3] ?? '/'), point: unescapeMount(f[4] ?? ''), fstype, superOptions });
  }
  return out;
}

/** mountinfo writes space, tab, newline and backslash as octal escapes. */
function unescapeMount(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(Number.parseInt(o, 8)));
}

/** `/proc/self/cgroup`: controller list (empty for v2) → path. */
export function parseSelfCgroup(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of text.split('\n')) {
    const m = line.match(/^[0-9]+:([^:]*):(.*)$/);
    if (m) out.set(m[1]!, m[2]!);
  }
  return out;
}

/**
 * The host directory of cgroup `path` under mount `m`. A worker in a container without a cgroup
 * namespace sees its host path, which is not below the mount's root: its own cgroup is then the mount.
 */
export function below(m: Mount, path: string): string {
  const root = m.root === '/' ? '' : m.root;
  if (root !== '' && !(path === root || path.startsWith(`${root}/`))) return m.point;
  const rest = path.slice(root.length).replace(/^\/+|\/+$/g, '');
  return rest === '' ? m.point : join(m.point, rest);
}
