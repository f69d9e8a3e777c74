import { statSync } from 'node:fs';
import { delimiter, isAbsolute, join } from 'node:path';

/**
 * The programs the local worker runs itself (bwrap, setpriv, env, podman, runc, docker, mknod): each is
 * looked up once, at worker start, on a fixed search path of system directories, and every one of them
 * runs with HELPER_ENV. Neither the PATH the daemon was started with nor anything a spec says takes part:
 * a program a task left behind, or a directory a spec's PATH names, can never be what the worker runs
 * as root (issue 20).
 */

/** Where helpers are looked for: the system directories first, the site's /usr/local last. */
export const HELPER_PATH = '/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/sbin:/usr/local/bin';

/** The whole environment of every helper the worker runs: nothing inherited, nothing from a spec. */
export const HELPER_ENV: Readonly<Record<string, string>> = Object.freeze({
  PATH: HELPER_PATH,
  LANG: 'C.UTF-8',
});

/** The absolute path of `name` in the first directory of `path` that has it as a regular file. */
export function findOnPath(name: string, path: string): string | null {
  for (const dir of path.split(delimiter)) {
    // A relative entry (or an empty one, which means the cwd) would make the answer depend on where
    // the worker was started.
    if (dir === '' || !isAbsolute(dir)) continue;
    const candidate = join(dir, name);
    try {
      if (statSync(candidate).isFile()) return candidate;
    } catch {
      // not here
    }
  }
  return null;
}

/** `name` on HELPER_PATH (or `path` where a test points elsewhere); null when it is not installed. */
export function findHelper(name: string, path: string = HELPER_PATH): string | null {
  return findOnPath(name, path);
}
