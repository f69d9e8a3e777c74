import { findOnPath } from '../../src/platform/find-on-path.js';

export { findOnPath };

/**
 * The programs the local worker runs itself (bwrap, setpriv, env, podman, runc, docker, mknod): each is
 * looked up once, at worker start, on a fixed search path of system directories, and every one of them
 * runs with HELPER_ENV. Neither the PATH the daemon was started with nor anything a spec says takes part:
 * a program a task left behind, or a directory a spec's PATH names, can never be what the worker runs
 * as root (docs/security.md "Code the reviewer did not read").
 */

/** Where helpers are looked for: the system directories first, the site's /usr/local last. */
export const HELPER_PATH = '/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/sbin:/usr/local/bin';

/** The whole environment of every helper the worker runs: nothing inherited, nothing from a spec. */
export const HELPER_ENV: Readonly<Record<string, string>> = Object.freeze({
  PATH: HELPER_PATH,
  LANG: 'C.UTF-8',
});

/** `name` on HELPER_PATH (or `path` where a test points elsewhere); null when it is not installed. */
export function findHelper(name: string, path: string = HELPER_PATH): string | null {
  return findOnPath(name, path);
}
