import { closeSync, constants, fstatSync, lstatSync, openSync, readSync } from 'node:fs';
import { dirname, join, relative, sep } from 'node:path';
import ignore, { type Ignore } from 'ignore';

/**
 * Which paths `gpu-broker run` and `propose --dir` leave out by ignore file (docs/security.md "gpu-broker run on the submitter’s machine"), as git does:
 * one rule set per directory that holds a `.gitignore`, each matching paths relative to its own
 * directory, a deeper one overriding a shallower one (so a nested `!x` re-includes), `.git/info/exclude`
 * below them all, and a directory git ignores never entered (nothing under it can be re-included). The
 * rules themselves are the `ignore` package's (negation, anchoring, `dir/`, `**`, escapes), not ours.
 *
 * `.gpu-brokerignore` (same syntax, at any level) is a second, separate stack whose verdict is OR-ed in:
 * it can only leave out more. Its `!` lines re-include only what another `.gpu-brokerignore` left out,
 * never what `.gitignore` did, and no ignore file can ever include a credential (secret-files.ts).
 *
 * When DIR lies inside a git work tree, the `.gitignore` files from that tree's root down to DIR apply too
 * (paths relative to each), unless they ignore DIR itself: a directory the user named is shipped as its
 * own root. Patterns match case-sensitively, as git on Linux does. An ignore file that is a symbolic
 * link is not read (git refuses those too), and at most MAX_IGNORE_FILE_BYTES of one are.
 */

/** The names of the two kinds of ignore file. */
export const GITIGNORE = '.gitignore';
export const BROKERIGNORE = '.gpu-brokerignore';

/** Bytes read of one ignore file: a rule file larger than this is a mistake or an attack. */
const MAX_IGNORE_FILE_BYTES = 1024 * 1024;

/**
 * One directory's rules. Inside DIR, `base` is that directory relative to DIR ('' for DIR itself) and
 * `prefix` is ''; above DIR, `prefix` is DIR relative to that directory plus `/` (`proj/`), put before
 * every path.
 */
interface Level {
  base: string;
  prefix: string;
  rules: Ignore;
}

/** The rule stacks in force in one directory, outermost first. */
export interface IgnoreStacks {
  git: readonly Level[];
  broker: readonly Level[];
}

/** The text of a regular file at `path`, at most MAX_IGNORE_FILE_BYTES; undefined when there is none. */
function readRuleFile(path: string): string | undefined {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch {
    return undefined; // absent, a symbolic link, unreadable: no rules
  }
  try {
    if (!fstatSync(fd).isFile()) return undefined;
    const buf = Buffer.alloc(MAX_IGNORE_FILE_BYTES);
    const n = readSync(fd, buf, 0, buf.length, 0);
    return buf.subarray(0, n).toString('utf8');
  } finally {
    closeSync(fd);
  }
}

function level(base: string, text: string | undefined, prefix = ''): Level[] {
  return text === undefined ? [] : [{ base, prefix, rules: ignore({ ignorecase: false }).add(text) }];
}

/**
 * Whether a stack ignores `path` (relative to DIR; a directory ends in `/`): the last level with a
 * verdict decides, as a deeper `.gitignore` overrides a shallower one.
 */
function stackIgnores(levels: readonly Level[], path: string): boolean {
  let ignored = false;
  for (const l of levels) {
    const rel = relativeTo(l, path);
    if (rel === undefined) continue;
    const r = l.rules.test(rel);
    if (r.ignored) ignored = true;
    else if (r.unignored) ignored = false;
  }
  return ignored;
}

/** `path` (relative to DIR) as the level's rules see it; undefined when it is not under the level. */
function relativeTo(l: Level, path: string): string | undefined {
  if (l.prefix !== '') return `${l.prefix}${path}`;
  if (l.base === '') return path;
  return path.startsWith(`${l.base}/`) ? path.slice(l.base.length + 1) : undefined;
}

/** Whether either stack leaves `path` out (a directory's path ends in `/`). */
export function isIgnored(stacks: IgnoreStacks, path: string): boolean {
  return stackIgnores(stacks.git, path) || stackIgnores(stacks.broker, path);
}

/** The stacks for directory `rel` (relative to `root`): the parent's plus this directory's own files. */
export function enterDirectory(stacks: IgnoreStacks, root: string, rel: string): IgnoreStacks {
  const at = (name: string) => readRuleFile(join(root, rel, name));
  return {
    git: [...stacks.git, ...level(rel, at(GITIGNORE))],
    broker: [...stacks.broker, ...level(rel, at(BROKERIGNORE))],
  };
}

/** The git work tree `dir` lies in (the nearest ancestor holding `.git`), if any; at most 64 levels up. */
function workTreeOf(dir: string): string | undefined {
  let at = dir;
  for (let i = 0; i < 64; i++) {
    try {
      lstatSync(join(at, '.git'));
      return at;
    } catch {
      const up = dirname(at);
      if (up === at) return undefined;
      at = up;
    }
  }
  return undefined;
}

/**
 * The stacks in force at DIR itself (`root`, a real path): `.git/info/exclude` and every `.gitignore` /
 * `.gpu-brokerignore` from the work tree's root down to DIR's parent; none when DIR is in no work tree
 * or when they ignore DIR itself (the user named it: it is shipped as its own root).
 */
export function outerStacks(root: string): IgnoreStacks {
  const top = workTreeOf(root);
  if (top === undefined) return { git: [], broker: [] };
  const exclude = readRuleFile(join(top, '.git', 'info', 'exclude'));
  if (top === root) return { git: level('', exclude), broker: [] };
  const prefixFrom = (d: string) => `${relative(d, root).split(sep).join('/')}/`;
  const git: Level[] = level('', exclude, prefixFrom(top));
  const broker: Level[] = [];
  const above: string[] = [];
  for (let d = dirname(root); ; d = dirname(d)) {
    above.unshift(d);
    if (d === top || dirname(d) === d) break;
  }
  for (const d of above) {
    git.push(...level('', readRuleFile(join(d, GITIGNORE)), prefixFrom(d)));
    broker.push(...level('', readRuleFile(join(d, BROKERIGNORE)), prefixFrom(d)));
  }
  if (stackIgnores(git, '') || stackIgnores(broker, '')) return { git: [], broker: [] };
  return { git, broker };
}
