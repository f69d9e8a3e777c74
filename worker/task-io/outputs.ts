import { createHash } from 'node:crypto';
import { constants } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import { open } from 'node:fs/promises';
import type { TaskSpec } from '../../src/contracts/task-spec.js';
import type { OutputRecord } from '../../src/contracts/worker-protocol.js';
import { MAX_OUTPUT_FILE_BYTES } from '../../src/contracts/worker-protocol.js';
import { errorMessage } from '../../src/platform/error-message.js';

/**
 * Collects a task's declared outputs (docs/worker-protocol.md). Only declared paths are read; each
 * is walked from a directory the task cannot write (the execution root) down through the task's dir and
 * output dir with no symlink followed at any component, must be a regular file with one link owned by the
 * task's uid, and is capped at MAX_OUTPUT_FILE_BYTES. Paths must be canonical (no `.`, `..`, empty segments)
 * and declared once.
 *
 * Collection runs after every process of the task is gone (in a sandbox, its PID namespace is dead), so
 * nothing can swap a component between the walk and the read; the walk does not rely on that.
 */

/** One collected output: its record and its bytes. */
export type CollectedOutput = OutputRecord & { content: Buffer };

/** What collection found. */
export interface OutputCollection {
  /** Declared outputs that were found and read, in declaration order. */
  readonly outputs: CollectedOutput[];
  /** One line per output that was refused or is required but missing, saying why. */
  readonly errors: string[];
  /** Whether a required output is missing (refused ones count as missing). */
  readonly requiredMissing: boolean;
}

/** Where the outputs are: a trusted base dir and the components from it down to the output dir. */
export interface OutputLocation {
  /** A directory only the worker can write (the execution root). */
  readonly base: string;
  /** Components below `base` to the output dir, e.g. `['task', 'out']`; each is walked like the path. */
  readonly below: readonly string[];
  /** The uid that must own every output (the task's); null to skip the check. */
  readonly owner: number | null;
}

type Outcome =
  | { kind: 'found'; output: CollectedOutput }
  | { kind: 'missing' }
  | { kind: 'refused'; why: string };

/** Reads the declared outputs at `where`. Never throws. */
export async function collectOutputs(
  where: OutputLocation,
  declared: TaskSpec['outputs'],
): Promise<OutputCollection> {
  const outputs: CollectedOutput[] = [];
  const errors: string[] = [];
  let requiredMissing = false;
  const seen = new Set<string>();
  for (const { path, required } of declared) {
    const outcome: Outcome = seen.has(path)
      ? { kind: 'refused', why: 'is declared twice' }
      : await collectOne(where, path);
    seen.add(path);
    if (outcome.kind === 'found') {
      outputs.push(outcome.output);
      continue;
    }
    if (outcome.kind === 'refused') errors.push(`output ${JSON.stringify(path)} refused: ${outcome.why}`);
    if (required) {
      requiredMissing = true;
      if (outcome.kind === 'missing') errors.push(`required output ${JSON.stringify(path)} was not produced`);
    }
  }
  return { outputs, errors, requiredMissing };
}

/** Open flags of a directory on the walk: never through a symlink, never anything but a directory. */
const DIR_FLAGS = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW;
/** O_NONBLOCK: opening a FIFO the task left behind must not hang the worker. */
const FILE_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;

/**
 * One declared output, walked one component at a time the way `openat` would: each directory is opened
 * with O_NOFOLLOW|O_DIRECTORY relative to the descriptor of its parent (through /proc/self/fd, which
 * resolves to the open directory itself, not to its name), so swapping a parent for a symlink — even
 * during the walk, by a process that escaped — makes the open fail instead of leading elsewhere. The
 * file must be a regular file with one link, owned by the task's uid when one is given.
 */
async function collectOne(where: OutputLocation, path: string): Promise<Outcome> {
  const problem = outputPathProblem(path);
  if (problem !== null) return { kind: 'refused', why: problem };
  const segments = [...where.below, ...path.split('/')];
  const root = where.base;
  const handles: FileHandle[] = [];
  try {
    let dir: FileHandle;
    try {
      dir = await open(root, DIR_FLAGS);
    } catch (err) {
      return { kind: 'refused', why: `output dir cannot be opened: ${errorMessage(err)}` };
    }
    handles.push(dir);
    for (const segment of segments.slice(0, -1)) {
      try {
        dir = await open(`/proc/self/fd/${dir.fd}/${segment}`, DIR_FLAGS);
      } catch (err) {
        return walkFailure(err, `directory ${JSON.stringify(segment)}`);
      }
      handles.push(dir);
    }
    let file: FileHandle;
    try {
      file = await open(`/proc/self/fd/${dir.fd}/${segments.at(-1)}`, FILE_FLAGS);
    } catch (err) {
      return walkFailure(err, 'file');
    }
    handles.push(file);
    return await readCollected(file, path, where.owner);
  } finally {
    await Promise.all(handles.map((h) => h.close().catch(() => undefined)));
  }
}

/** ENOENT means not produced; a symlink (ELOOP) or a non-directory parent (ENOTDIR) is refused. */
function walkFailure(err: unknown, what: string): Outcome {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'ENOENT') return { kind: 'missing' };
  if (code === 'ELOOP' || code === 'ENOTDIR' || code === 'EMLINK')
    return { kind: 'refused', why: `${what} on the path is a symlink or not a directory` };
  return { kind: 'refused', why: `cannot be opened: ${errorMessage(err)}` };
}

async function readCollected(handle: FileHandle, path: string, owner: number | null): Promise<Outcome> {
  try {
    const st = await handle.stat();
    if (!st.isFile()) return { kind: 'refused', why: 'is not a regular file' };
    if (st.nlink !== 1) return { kind: 'refused', why: `has ${st.nlink} hard links; outputs must have one` };
    if (owner !== null && st.uid !== owner)
      return { kind: 'refused', why: `is owned by uid ${st.uid}, not by the task's uid ${owner}` };
    if (st.size > MAX_OUTPUT_FILE_BYTES) {
      return { kind: 'refused', why: `is ${st.size} bytes, over the ${MAX_OUTPUT_FILE_BYTES}-byte limit` };
    }
    // Read one byte past the stat size so a file that changed after stat is caught, not truncated.
    const buf = Buffer.alloc(st.size + 1);
    let filled = 0;
    for (;;) {
      const { bytesRead } = await handle.read(buf, filled, buf.length - filled, filled);
      if (bytesRead === 0) break;
      filled += bytesRead;
      if (filled === buf.length) break;
    }
    if (filled > st.size) return { kind: 'refused', why: 'grew while being read' };
    const content = Buffer.from(buf.subarray(0, filled));
    const sha256 = createHash('sha256').update(content).digest('hex');
    return { kind: 'found', output: { path, size: filled, sha256, content } };
  } catch (err) {
    return { kind: 'refused', why: `cannot be read: ${errorMessage(err)}` };
  }
}

/**
 * Why `path` is not a canonical relative output path; null when it is. The spec schema refuses the same
 * shapes; they are refused again here because the plan arrives over the network.
 */
export function outputPathProblem(path: string): string | null {
  if (path.startsWith('/') || path.includes('\\') || path.includes('\0')) {
    return 'must be a relative path beneath the output dir, with "/" separators';
  }
  if (path.split('/').some((seg) => seg === '..' || seg === '.' || seg === '')) {
    return 'must not contain ".", ".." or empty segments (write it as "a/b.json")';
  }
  return null;
}
