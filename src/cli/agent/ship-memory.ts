import { createHash, randomUUID } from 'node:crypto';
import {
  existsSync,
  mkdirSync,
  readFileSync,
  realpathSync,
  renameSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { homedir } from 'node:os';
import { isAbsolute, join } from 'node:path';

/**
 * What `gpu-broker run` and `propose --dir` remember about a directory they shipped (ADR 0026 §1
 * as amended): which proposal it last ran per master URL, and which paths it shipped (so the
 * first run of a directory lists every file, and later runs name the files that are new).
 *
 * Kept per user, outside the project: `$XDG_STATE_HOME/gpu-broker/runs/<sha256 of DIR's real path>.json`
 * (default `~/.local/state/…`; directory 0700, files 0600), holding DIR's real path and its device and
 * inode. Not in DIR: a `DIR/.gpu-broker/run.json` can come with a cloned repository or an archive, and a
 * planted one could pick which proposal `run` revises or cancels (another one of the user's own, if its
 * id is guessed or leaked) and, with a "seen" marker, suppress the listing of what is about to be
 * shipped. What lives in the user's own state directory only this user's earlier runs wrote. A memory
 * whose device or inode differ from DIR's (the directory was deleted and another cloned at the same
 * path) is not used: that run is a first run again. The old in-project file is never read; `run` says
 * once that it ignores it.
 */

/** What is remembered about one directory. */
export interface DirMemory {
  /** The proposal the directory last ran, per master URL. */
  proposals: Record<string, string>;
  /** The paths it shipped last time. */
  shipped: string[];
}

/** The environment the memory's location comes from. */
type Env = Readonly<Record<string, string | undefined>>;

/** The old, in-project memory file (ADR 0026 before its amendment), now ignored. */
export const LEGACY_MEMORY = join('.gpu-broker', 'run.json');

/** The folder of per-directory memories: `$XDG_STATE_HOME/gpu-broker/runs` (relative values ignored, per XDG). */
export function memoryRoot(env: Env): string {
  const state = env['XDG_STATE_HOME'];
  const base = state && isAbsolute(state) ? state : join(env['HOME'] || homedir(), '.local', 'state');
  return join(base, 'gpu-broker', 'runs');
}

/** DIR's identity: its real path and what tells a re-created directory at that path apart. */
function identity(dir: string): { path: string; dev: number; ino: number } {
  const path = realpathSync(dir);
  const st = statSync(path);
  return { path, dev: st.dev, ino: st.ino };
}

/** The memory file of `dir`. */
export function memoryFile(env: Env, dir: string): string {
  const key = createHash('sha256').update(realpathSync(dir)).digest('hex').slice(0, 40);
  return join(memoryRoot(env), `${key}.json`);
}

/** What this user's earlier runs remember of `dir`; undefined for a first run. */
export function readDirMemory(env: Env, dir: string): DirMemory | undefined {
  const file = memoryFile(env, dir);
  if (!existsSync(file)) return undefined;
  try {
    const m = JSON.parse(readFileSync(file, 'utf8')) as Partial<
      DirMemory & { dir: string; dev: number; ino: number }
    >;
    const id = identity(dir);
    if (m.dir !== id.path || m.dev !== id.dev || m.ino !== id.ino) return undefined;
    const proposals: Record<string, string> = {};
    for (const [url, p] of Object.entries(m.proposals ?? {})) if (typeof p === 'string') proposals[url] = p;
    const shipped = Array.isArray(m.shipped) ? m.shipped.filter((p) => typeof p === 'string') : [];
    return { proposals, shipped };
  } catch {
    return undefined; // a damaged memory only costs a new proposal and a listing
  }
}

/**
 * Records a run of `dir` (atomically: a crash leaves the old file or the new): the paths shipped and,
 * given a URL, the proposal it ran there.
 */
export function rememberRun(
  env: Env,
  dir: string,
  run: { shipped: readonly string[]; url?: string; proposalId?: string },
): void {
  const before = readDirMemory(env, dir);
  const proposals = { ...(before?.proposals ?? {}) };
  if (run.url !== undefined && run.proposalId !== undefined) proposals[run.url] = run.proposalId;
  const file = memoryFile(env, dir);
  mkdirSync(memoryRoot(env), { recursive: true, mode: 0o700 });
  const id = identity(dir);
  const body = { version: 2, dir: id.path, dev: id.dev, ino: id.ino, proposals, shipped: [...run.shipped] };
  const tmp = `${file}.${randomUUID()}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(body, null, 2)}\n`, { mode: 0o600 });
  renameSync(tmp, file);
}

/** Whether `dir` holds the old in-project memory file, which is no longer read. */
export function hasLegacyMemory(dir: string): boolean {
  return existsSync(join(dir, LEGACY_MEMORY));
}
