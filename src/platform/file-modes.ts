import {
  chmodSync,
  closeSync,
  constants,
  fchmodSync,
  fstatSync,
  lstatSync,
  mkdirSync,
  openSync,
  realpathSync,
  type Stats,
  statSync,
  writeSync,
} from 'node:fs';
import { dirname, join, sep } from 'node:path';
import { BrokerError } from '../contracts/errors.js';

/**
 * File modes of the master's and the worker's data dirs (attack rows 6 and 7).
 *
 * A data dir holds secrets: the database (every token hash, every output, the audit chain), bootstrap
 * tokens and TLS keys. At start each process makes its dir 0700 (0711 where unsandboxed tasks must pass
 * through it) and each secret file in it 0600, or refuses when it does not own them and so cannot. It
 * never loosens a mode an operator set. New secret files are created 0600 and their contents written
 * only after the mode is set on the open descriptor, so no reader can open them in between.
 */

/** What `secureDataDir` had to change, for a warning that names each path. */
export interface Tightened {
  readonly path: string;
  readonly from: number;
  readonly to: number;
}

/** Inputs of `secureDataDir`. */
export interface DataDirModes {
  /** The data dir; created with `dirMode` when missing. */
  readonly dir: string;
  /** The most the dir may allow: 0o700, or 0o711 when unsandboxed tasks traverse it. */
  readonly dirMode: 0o700 | 0o711;
  /** Secret files (absolute, or relative to `dir`); missing ones are skipped. */
  readonly files: readonly string[];
  /** Sub-directories holding secrets (e.g. `tls`): made 0700 when present (their files go in `files`). */
  readonly secretDirs?: readonly string[];
  /** This process's uid; default process.geteuid(). */
  readonly uid?: number;
}

/** Formats a mode as `0755`. */
export function octal(mode: number): string {
  return `0${(mode & 0o7777).toString(8).padStart(3, '0')}`;
}

/**
 * Creates or tightens `dir` and the secret files in it (see the module comment). Throws a BrokerError
 * naming the path, its owner and what to run when a path is not owned by this process (it could
 * loosen the mode again or swap the file) or is a symbolic link where a file belongs.
 */
export function secureDataDir(opts: DataDirModes): Tightened[] {
  const uid = opts.uid ?? process.geteuid?.() ?? 0;
  const changed: Tightened[] = [];
  // A dir made here is exactly dirMode (the umask may have taken the x bits tasks need).
  if (mkdirSync(opts.dir, { recursive: true, mode: opts.dirMode }) !== undefined)
    chmodSync(opts.dir, opts.dirMode);
  // A data dir given through a symbolic link is secured where it really is.
  const dir = realpathSync(opts.dir);
  tighten(dir, statSync(dir), opts.dirMode, uid, changed);
  for (const sub of opts.secretDirs ?? []) {
    const path = join(opts.dir, sub);
    const st = lstatIfExists(path);
    if (st === null) continue;
    if (!st.isDirectory()) throw notOurs(path, st, uid, 'is not a directory');
    tighten(path, st, 0o700, uid, changed);
  }
  for (const path of opts.files.map((f) => (f.startsWith(sep) ? f : join(opts.dir, f)))) {
    const st = lstatIfExists(path);
    if (st === null) continue;
    if (!st.isFile()) throw notOurs(path, st, uid, 'is not a regular file');
    tighten(path, st, 0o600, uid, changed);
  }
  return changed;
}

/** Makes one secret file outside a data dir (e.g. `--token-file`) at most 0600; see `secureDataDir`. */
export function secureFile(file: string, uid: number = process.geteuid?.() ?? 0): Tightened[] {
  const changed: Tightened[] = [];
  // Token files are often links into a secrets mount: check and tighten the file itself.
  const path = realpathSync(file);
  const st = lstatSync(path);
  if (!st.isFile()) throw notOurs(path, st, uid, 'is not a regular file');
  tighten(path, st, 0o600, uid, changed);
  return changed;
}

/** One warning line per tightened path: `broker.db 0644→0600, … `. */
export function describeTightened(changed: readonly Tightened[]): string {
  return changed.map((c) => `${c.path} ${octal(c.from)}→${octal(c.to)}`).join(', ');
}

/**
 * Creates `path` mode 0600 if missing (empty: an empty file is a valid empty SQLite database, and
 * SQLite gives its -wal and -shm files the database file's mode), so the database is never readable by
 * others, not even for the moment between creation and a chmod.
 */
export function createPrivateFile(path: string): void {
  const fd = openSync(path, constants.O_CREAT | constants.O_WRONLY | constants.O_NOFOLLOW, 0o600);
  closeSync(fd);
}

/**
 * Writes a secret (a token) to `path`, mode 0600: the mode is set on the open descriptor before any
 * byte is written, also when the file existed with a looser mode (writeFile's `mode` applies only to a
 * new file). A symbolic link at `path` is refused (O_NOFOLLOW).
 */
export function writeSecretFile(path: string, text: string): void {
  const fd = openSync(
    path,
    constants.O_CREAT | constants.O_WRONLY | constants.O_TRUNC | constants.O_NOFOLLOW,
    0o600,
  );
  try {
    if ((fstatSync(fd).mode & 0o777) !== 0o600) fchmodSync(fd, 0o600);
    writeSync(fd, text);
  } finally {
    closeSync(fd);
  }
}

/**
 * The first directory on the way to `dir` (resolved, ancestors included) that `uid`/`gid` cannot
 * search, or null when every one can be passed. Uses the owner/group/other bits the kernel applies
 * (the owner class wins even where "other" would allow more); POSIX ACLs are not read, so a dir that
 * an ACL opens is still reported. Supplementary groups are not considered because a task spawned with
 * a uid/gid drops them (libuv calls setgroups(0)).
 */
export function firstUntraversable(
  dir: string,
  who: { uid: number; gid: number },
): { path: string; mode: number; owner: number; group: number } | null {
  if (who.uid === 0) return null;
  const real = realpathSync(dir);
  const chain: string[] = [];
  for (let p = real; ; p = dirname(p)) {
    chain.unshift(p);
    if (dirname(p) === p) break;
  }
  for (const path of chain) {
    const st = statSync(path);
    const bit = st.uid === who.uid ? 0o100 : st.gid === who.gid ? 0o010 : 0o001;
    if ((st.mode & bit) === 0) return { path, mode: st.mode & 0o7777, owner: st.uid, group: st.gid };
  }
  return null;
}

function tighten(path: string, st: Stats, most: number, uid: number, changed: Tightened[]): void {
  const mode = st.mode & 0o7777;
  const wanted = mode & most;
  if (wanted === mode) return;
  if (st.uid !== uid) throw notOurs(path, st, uid, `is mode ${octal(mode)} but owned by uid ${st.uid}`);
  // Through a descriptor opened without following links: what is chmodded is what was checked.
  const fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  try {
    fchmodSync(fd, wanted);
  } catch (err) {
    // A read-only mount (e.g. a secret volume) cannot be tightened here: say where to fix it.
    throw new BrokerError(
      'INVALID_INPUT',
      `${path} is mode ${octal(mode)} and cannot be tightened (${(err as NodeJS.ErrnoException).code}): refusing to start with secrets others could read`,
      `Make it ${octal(wanted)} where it is provisioned (e.g. a secret volume's defaultMode), or copy it to a private path.`,
    );
  } finally {
    closeSync(fd);
  }
  changed.push({ path, from: mode, to: wanted });
}

function notOurs(path: string, st: Stats, uid: number, what: string): BrokerError {
  const mine = st.uid === uid;
  return new BrokerError(
    'INVALID_INPUT',
    `${path} ${what}: refusing to start with secrets others could read`,
    mine
      ? `Remove or replace ${path}, or choose another --data-dir.`
      : `Run \`chown ${uid} ${path}\` (this process runs as uid ${uid}) or choose another --data-dir; a path another user owns could be loosened or swapped again.`,
  );
}

function lstatIfExists(path: string): Stats | null {
  try {
    return lstatSync(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}
