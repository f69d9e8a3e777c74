import { createHash } from 'node:crypto';
import {
  closeSync,
  constants,
  existsSync,
  fstatSync,
  lstatSync,
  openSync,
  readdirSync,
  readSync,
  realpathSync,
  statSync,
} from 'node:fs';
import { join } from 'node:path';
import { BrokerError } from '../../contracts/errors.js';
import { MAX_INPUT_FILE_BYTES } from '../../contracts/task-spec.js';
import { implicitCodeOf } from '../../domain/policy/implicit-code.js';
import type { MasterClient } from '../common/master-client.js';
import { escapeField } from '../common/output.js';
import { PRIVATE_KEY_MARKER_MAX, privateKeyMarkerIn, secretRowOf } from './secret-files.js';
import { enterDirectory, type IgnoreStacks, isIgnored, outerStacks } from './ship-ignore.js';

/**
 * The files `gpu-broker run` and `gpu-broker propose --dir` ship (35 §6); both select through
 * `collectInputs`, so one set of rules holds for both:
 *
 *   1. every regular file under DIR, skipping `.git/` and the caller's `skipDirs`;
 *   2. less what any `.gitignore`, `.git/info/exclude` or `.gpu-brokerignore` leaves out (ship-ignore.ts:
 *      git's semantics, one rule set per directory);
 *   3. with `--include`, only files matching one of those globs;
 *   4. never a symbolic link, to a file or a directory (an input is bytes, never a pointer to elsewhere
 *      on the proposer's machine): left out and said so;
 *   5. files an interpreter loads on its own (`__pycache__/`, `*.pyc`, `*.pth`, …; the table in
 *      src/domain/policy/implicit-code.ts) are always left out, `--include` or not: the policy refuses them
 *      (IMPLICIT_CODE), and a reviewer could not read them anyway;
 *   6. credential files by name and private keys by content (secret-files.ts) are refused, all named in
 *      one INVALID_INPUT, unless `--include-secret` names that exact path; no ignore file can include one;
 *   7. a file larger than an input may be is refused (PAYLOAD_TOO_LARGE) before it is read.
 *
 * Files are read in bounded chunks (hashing and looking for a private key as they go); their bytes are
 * not kept: `uploadUnknown` reads each again and checks it still has the digest that was listed.
 */

/** One file to ship. */
export interface LocalInput {
  path: string;
  sha256: string;
  size: number;
  executable: boolean;
  /** Where it is on this machine, read again at upload. */
  abs: string;
}

/** A file left out, and why (an implicit-code row, or a symbolic link). */
export interface LeftOutInput {
  path: string;
  /** Why, in words. */
  why: string;
}

/** What `collectInputs` found. */
export interface CollectedInputs {
  files: LocalInput[];
  leftOut: LeftOutInput[];
  /** The sum of the files' sizes. */
  totalBytes: number;
}

/** What to select. */
export interface SelectOptions {
  /** `--include` globs: only files matching one ship. */
  includes?: readonly string[] | undefined;
  /** Directory names never entered, at any depth. */
  skipDirs?: readonly string[] | undefined;
  /** `--include-secret` paths (exact, relative to DIR; a leading `./` is dropped). */
  includeSecrets?: readonly string[] | undefined;
}

/** Why a left-out symbolic link was left out. */
export const SYMLINK_WHY =
  'a symbolic link (never followed: an input is bytes, not a pointer to elsewhere on this machine)';

/** Bytes one read takes while hashing and looking for a private key. */
const READ_CHUNK = 1024 * 1024;

/** A glob as a RegExp over `/`-separated relative paths (for `--include`). */
export function globToRegExp(glob: string): RegExp {
  let g = glob.trim();
  const anchored = g.startsWith('/') || g.slice(0, -1).includes('/');
  g = g.replace(/^\//, '');
  let re = '';
  for (let i = 0; i < g.length; i++) {
    const c = g[i]!;
    if (c === '*' && g[i + 1] === '*') {
      re += g[i + 2] === '/' ? '(?:.*/)?' : '.*';
      i += g[i + 2] === '/' ? 2 : 1;
    } else if (c === '*') re += '[^/]*';
    else if (c === '?') re += '[^/]';
    else re += c.replace(/[.+^${}()|[\]\\]/g, '\\$&');
  }
  return new RegExp(`^${anchored ? '' : '(?:.*/)?'}${re}$`);
}

/**
 * Opens a regular file without following a symbolic link (nor blocking on a FIFO swapped in); undefined
 * when it is no longer a regular file there (it vanished, or became a link or something else).
 */
function openRegular(abs: string): { fd: number; size: number; mode: number } | undefined {
  let fd: number;
  try {
    fd = openSync(abs, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ELOOP') return undefined;
    throw new BrokerError(
      'INVALID_INPUT',
      `cannot read ${escapeField(abs)}: ${code}`,
      'Check its permissions, or leave it out with a line in .gpu-brokerignore.',
    );
  }
  const st = fstatSync(fd);
  if (st.isFile()) return { fd, size: st.size, mode: st.mode };
  closeSync(fd);
  return undefined;
}

/** A file's sha256 and the private-key marker in it, if any, read in chunks of READ_CHUNK. */
function scanFile(fd: number): { sha256: string; size: number; marker: string | undefined } {
  const hash = createHash('sha256');
  const buf = Buffer.alloc(READ_CHUNK);
  let carry = Buffer.alloc(0);
  let marker: string | undefined;
  let size = 0;
  for (;;) {
    const n = readSync(fd, buf, 0, buf.length, null);
    if (n === 0) break;
    const chunk = buf.subarray(0, n);
    hash.update(chunk);
    size += n;
    // The tail of the previous chunk goes in front, so a marker split across two reads is still seen.
    const window = Buffer.concat([carry, chunk]);
    marker ??= privateKeyMarkerIn(window);
    carry = Buffer.from(window.subarray(Math.max(0, window.length - PRIVATE_KEY_MARKER_MAX)));
  }
  return { sha256: hash.digest('hex'), size, marker };
}

/** What the walk finds besides the files. */
interface Findings {
  leftOut: LeftOutInput[];
  refused: LeftOutInput[];
  /** Every path that is a secret, refused or shipped on purpose. */
  secrets: Set<string>;
  tooLarge: Array<{ path: string; size: number }>;
}

/** The error naming every refused credential or key; `--include-secret` is how to ship one anyway. */
function secretsError(refused: readonly LeftOutInput[]): BrokerError {
  return new BrokerError(
    'INVALID_INPUT',
    `refusing to ship ${refused.length} file(s) that look like credentials or private keys: ${refused
      .map((r) => `${escapeField(r.path)} (${r.why})`)
      .join('; ')}`,
    'Leave them out with a line in .gpu-brokerignore (or .gitignore), or ship one on purpose with --include-secret PATH (its exact path under the directory; repeatable). The reviewer and the task then see it.',
    { refused },
  );
}

/** Checks what the walk found against `--include-secret`; throws for a refusal or a path that matched none. */
function settle(f: Findings, includeSecrets: ReadonlySet<string>): void {
  const blocked = f.refused.filter((r) => !includeSecrets.has(r.path));
  if (blocked.length > 0) throw secretsError(blocked);
  const unmatched = [...includeSecrets].filter((p) => !f.secrets.has(p));
  if (unmatched.length > 0)
    throw new BrokerError(
      'INVALID_INPUT',
      `--include-secret ${unmatched.map((p) => escapeField(p)).join(', ')}: no file of that exact path would be refused`,
      'Name the exact path (relative to the directory) of a file the refusal listed; an ignored or absent file is not shipped anyway.',
    );
  if (f.tooLarge.length > 0)
    throw new BrokerError(
      'PAYLOAD_TOO_LARGE',
      `${f.tooLarge.map((t) => `${escapeField(t.path)} (${t.size} bytes)`).join(', ')}: larger than an input may be (${MAX_INPUT_FILE_BYTES} bytes)`,
      'Leave it out with a line in .gpu-brokerignore (or .gitignore) and have the task read it from a mount.',
    );
}

/**
 * Collects the files under `root` (see the module comment). Throws INVALID_INPUT for a refused
 * credential or private key (each named), PAYLOAD_TOO_LARGE for a file over MAX_INPUT_FILE_BYTES, and
 * a plain Error for a `root` that is not a directory.
 */
export function collectInputs(root: string, opts: SelectOptions = {}): CollectedInputs {
  if (!existsSync(root) || !statSync(root).isDirectory()) throw new Error(`${root} is not a directory`);
  const real = realpathSync(root);
  const skipDirs = opts.skipDirs ?? [];
  const wanted = (opts.includes ?? []).map(globToRegExp);
  const includeSecrets = new Set((opts.includeSecrets ?? []).map((p) => p.replace(/^(?:\.\/)+/, '')));
  const files: LocalInput[] = [];
  const f: Findings = { leftOut: [], refused: [], secrets: new Set(), tooLarge: [] };
  const visitFile = (path: string, abs: string) => {
    const implicit = implicitCodeOf(path);
    if (implicit !== undefined) {
      f.leftOut.push({ path, why: `${implicit.family} loads ${implicit.pattern} on its own` });
      return;
    }
    /** Whether a secret at `path` stops here (refused) or ships on purpose. */
    const refuse = (why: string) => {
      f.secrets.add(path);
      if (!includeSecrets.has(path)) f.refused.push({ path, why });
      return !includeSecrets.has(path);
    };
    const row = secretRowOf(path);
    if (row !== undefined && refuse(`${row.pattern}: ${row.why}`)) return;
    const file = openRegular(abs);
    if (file === undefined) return;
    try {
      if (file.size > MAX_INPUT_FILE_BYTES) {
        f.tooLarge.push({ path, size: file.size });
        return;
      }
      const scan = scanFile(file.fd);
      if (scan.marker !== undefined && refuse(`holds a private key (${scan.marker})`)) return;
      files.push({ path, abs, sha256: scan.sha256, size: scan.size, executable: (file.mode & 0o111) !== 0 });
    } finally {
      closeSync(file.fd);
    }
  };
  const walk = (rel: string, stacks: IgnoreStacks) => {
    const here = enterDirectory(stacks, real, rel);
    for (const name of readdirSync(join(real, rel)).sort()) {
      const path = rel === '' ? name : `${rel}/${name}`;
      const abs = join(real, path);
      const st = lstatSync(abs);
      if (st.isSymbolicLink()) {
        if (!isIgnored(here, path)) f.leftOut.push({ path, why: SYMLINK_WHY });
      } else if (st.isDirectory()) {
        if (name === '.git' || skipDirs.includes(name) || isIgnored(here, `${path}/`)) continue;
        walk(path, here);
      } else if (st.isFile()) {
        if (isIgnored(here, path)) continue;
        if (wanted.length > 0 && !wanted.some((re) => re.test(path))) continue;
        visitFile(path, abs);
      }
    }
  };
  walk('', outerStacks(real));
  settle(f, includeSecrets);
  return { files, leftOut: f.leftOut, totalBytes: files.reduce((n, x) => n + x.size, 0) };
}

/**
 * Uploads each file whose digest is not in `known` (adding it there) with PUT /api/v1/blobs/<sha256>;
 * returns how many it sent. `propose` and `run` share it: a digest the master already names is never
 * sent again.
 */
export async function uploadUnknown(
  c: MasterClient,
  files: readonly LocalInput[],
  known: Set<string>,
): Promise<number> {
  let n = 0;
  for (const f of files) {
    if (known.has(f.sha256)) continue;
    known.add(f.sha256);
    await c.putBytes(`/api/v1/blobs/${f.sha256}`, readListed(f));
    n++;
  }
  return n;
}

/**
 * A listed file's bytes, read again (no symbolic link followed) and checked against the digest taken
 * when it was listed: what is sent is exactly what was scanned for secrets and shown.
 */
export function readListed(f: LocalInput): Buffer {
  const file = openRegular(f.abs);
  if (file === undefined) throw changedError(f);
  try {
    if (file.size !== f.size) throw changedError(f);
    const bytes = Buffer.alloc(f.size);
    let at = 0;
    while (at < f.size) {
      const n = readSync(file.fd, bytes, at, f.size - at, at);
      if (n === 0) break;
      at += n;
    }
    if (at !== f.size || createHash('sha256').update(bytes).digest('hex') !== f.sha256) throw changedError(f);
    return bytes;
  } finally {
    closeSync(file.fd);
  }
}

function changedError(f: LocalInput): BrokerError {
  return new BrokerError(
    'CONFLICT',
    `${escapeField(f.path)} changed after it was listed`,
    'Run the command again once nothing writes to the directory.',
  );
}
