/**
 * Named data mounts a worker offers (issue 13): its operator declares `--mount NAME=PATH[:rw]`; a spec
 * asks for names (`mounts: ["imagenet-val"]`); the master places the task only on a worker offering all
 * of them; the sandbox binds exactly those at `/mnt/<name>`, read-only unless the operator said `:rw`.
 * Data sets are never uploaded; the host path never leaves the worker.
 */

/** One declared mount. */
export interface DataMount {
  readonly name: string;
  readonly host_path: string;
  readonly read_only: boolean;
}

const NAME = /^[a-z0-9][a-z0-9._-]{0,63}$/;

/** Parses `NAME=/abs/path` or `NAME=/abs/path:rw` (`:ro` is the default); throws saying what is accepted. */
export function parseMount(text: string): DataMount {
  const m = /^([^=]+)=(\/.*?)(?::(ro|rw))?$/.exec(text);
  if (!m || !NAME.test(m[1]!))
    throw new Error(
      `--mount ${JSON.stringify(text)}: expected NAME=/absolute/path[:ro|:rw], NAME lowercase like "imagenet-val"`,
    );
  return { name: m[1]!, host_path: m[2]!, read_only: m[3] !== 'rw' };
}

/** Where a mount appears inside the sandbox. */
export function mountPointOf(name: string): string {
  return `/mnt/${name}`;
}

/** A mount the spec asked for, as bound into its sandbox. */
export interface ResolvedMount {
  readonly hostPath: string;
  readonly inside: string;
  readonly readOnly: boolean;
}

/**
 * The mounts a spec asks for (`wanted`), as this worker's operator declared them (`offered`), or why the
 * task cannot have them: a name this worker does not offer, or any mount without the sandbox.
 */
export function resolveMounts(
  wanted: readonly string[],
  offered: readonly DataMount[],
  sandboxed: boolean,
): ResolvedMount[] | string {
  const mounts: ResolvedMount[] = [];
  for (const name of wanted) {
    const m = offered.find((x) => x.name === name);
    if (m === undefined) return `mount ${JSON.stringify(name)} is not offered by this worker`;
    if (!sandboxed)
      return `mount ${JSON.stringify(name)} needs the sandbox; this worker runs with --isolation none`;
    mounts.push({ hostPath: m.host_path, inside: mountPointOf(name), readOnly: m.read_only });
  }
  return mounts;
}
