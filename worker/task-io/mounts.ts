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
