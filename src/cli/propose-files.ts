import { createHash } from 'node:crypto';
import { existsSync, lstatSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { implicitCodeOf } from '../domain/implicit-code.js';
import type { MasterClient } from './master-client.js';

/**
 * The files `gpu-broker propose --dir` ships (issue 13): every regular file under DIR, skipping `.git/`,
 * what DIR's `.gitignore` ignores, and symbolic links (an input is bytes, never a pointer to elsewhere on
 * the proposer's machine); with `--include`, only files matching one of those globs.
 *
 * Globs and `.gitignore` lines: `*` (within a segment), `**` (any depth), `?`, a leading `/` anchors at
 * DIR, a trailing `/` matches a directory, a pattern without `/` matches a name at any depth. `!`
 * negation is not supported (such lines are ignored).
 *
 * Files an interpreter loads on its own (`__pycache__/`, `*.pyc`, `*.pth`, `sitecustomize.py`, …; the
 * table in src/domain/implicit-code.ts) are always left out, `--include` or not: the policy refuses
 * them (IMPLICIT_CODE), and a reviewer could not read them anyway. The caller says how many it left out.
 */

/** One file to ship. */
export interface LocalInput {
  path: string;
  sha256: string;
  size: number;
  executable: boolean;
  bytes: Buffer;
}

/** A file left out because an interpreter would load it on its own. */
export interface LeftOutInput {
  path: string;
  /** Why, from the implicit-code table. */
  why: string;
}

/** What `collectInputs` found. */
export interface CollectedInputs {
  files: LocalInput[];
  leftOut: LeftOutInput[];
}

/** A glob as a RegExp over `/`-separated relative paths. */
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

/** Whether a `.gitignore` pattern list ignores `path` (a file, or a dir when `dir`). */
function ignored(
  patterns: ReadonlyArray<{ re: RegExp; dirOnly: boolean }>,
  path: string,
  dir: boolean,
): boolean {
  return patterns.some((p) => (!p.dirOnly || dir) && p.re.test(path));
}

/**
 * Collects the files under `root`; throws with a message for what cannot be shipped. Directories named
 * `.git` or one of `skipDirs` (at any depth) are not entered.
 */
export function collectInputs(
  root: string,
  includes: readonly string[],
  skipDirs: readonly string[] = [],
): CollectedInputs {
  if (!existsSync(root) || !statSync(root).isDirectory()) throw new Error(`${root} is not a directory`);
  const gitignore = join(root, '.gitignore');
  const patterns = existsSync(gitignore)
    ? readFileSync(gitignore, 'utf8')
        .split('\n')
        .map((l) => l.trim())
        .filter((l) => l !== '' && !l.startsWith('#') && !l.startsWith('!'))
        .map((l) => ({ re: globToRegExp(l.replace(/\/$/, '')), dirOnly: l.endsWith('/') }))
    : [];
  const wanted = includes.map(globToRegExp);
  const out: LocalInput[] = [];
  const leftOut: LeftOutInput[] = [];
  const walk = (rel: string) => {
    for (const name of readdirSync(join(root, rel)).sort()) {
      const path = rel === '' ? name : `${rel}/${name}`;
      const st = lstatSync(join(root, path));
      if (st.isDirectory()) {
        if (name === '.git' || skipDirs.includes(name) || ignored(patterns, path, true)) continue;
        walk(path);
      } else if (st.isFile()) {
        if (ignored(patterns, path, false)) continue;
        if (wanted.length > 0 && !wanted.some((re) => re.test(path))) continue;
        const implicit = implicitCodeOf(path);
        if (implicit !== undefined) {
          leftOut.push({ path, why: `${implicit.family} loads ${implicit.pattern} on its own` });
          continue;
        }
        const bytes = readFileSync(join(root, path));
        out.push({
          path,
          bytes,
          size: bytes.length,
          sha256: createHash('sha256').update(bytes).digest('hex'),
          executable: (st.mode & 0o111) !== 0,
        });
      }
    }
  };
  walk('');
  return { files: out, leftOut };
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
    await c.putBytes(`/api/v1/blobs/${f.sha256}`, f.bytes);
    n++;
  }
  return n;
}
