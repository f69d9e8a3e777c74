import { createHash } from 'node:crypto';
import { constants } from 'node:fs';
import { lstat, open, realpath } from 'node:fs/promises';
import { join, sep } from 'node:path';
import type { TaskSpec } from '../src/contracts/task-spec.js';
import type { OutputRecord } from '../src/contracts/worker-protocol.js';
import { MAX_OUTPUT_FILE_BYTES } from '../src/contracts/worker-protocol.js';

/**
 * Collects a task's declared outputs (DESIGN §9). Only declared paths are read, each must resolve to a
 * regular file beneath the output dir after following every symlink, and each is capped at
 * MAX_OUTPUT_FILE_BYTES. The spec schema already refuses absolute paths and `..`; they are refused again
 * here because the plan arrives over the network and the file system is the task's to shape.
 *
 * Collection runs after the task's process group is dead, so nothing in the group can swap a file between
 * the checks and the read; the final component is opened with O_NOFOLLOW all the same.
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

type Outcome =
  | { kind: 'found'; output: CollectedOutput }
  | { kind: 'missing' }
  | { kind: 'refused'; why: string };

/** Reads the declared outputs beneath `outputDir`. Never throws. */
export async function collectOutputs(
  outputDir: string,
  declared: TaskSpec['outputs'],
): Promise<OutputCollection> {
  const outputs: CollectedOutput[] = [];
  const errors: string[] = [];
  let requiredMissing = false;
  let root: string | null;
  try {
    root = await realpath(outputDir);
  } catch (err) {
    root = null;
    errors.push(`output dir unreadable: ${describe(err)}`);
  }
  for (const { path, required } of declared) {
    const outcome: Outcome = root === null ? { kind: 'missing' } : await collectOne(root, path);
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

async function collectOne(root: string, path: string): Promise<Outcome> {
  if (path.startsWith('/') || path.startsWith('\\') || path.includes('\0')) {
    return { kind: 'refused', why: 'must be a relative path beneath the output dir' };
  }
  if (path.split(/[\\/]/).some((seg) => seg === '..' || seg === '')) {
    return { kind: 'refused', why: 'must not contain ".." or empty segments' };
  }
  const candidate = join(root, path);
  try {
    await lstat(candidate);
  } catch {
    return { kind: 'missing' }; // ENOENT, or a parent is not a directory: not produced
  }
  let real: string;
  try {
    real = await realpath(candidate);
  } catch (err) {
    return { kind: 'refused', why: `cannot be resolved (dangling symlink?): ${describe(err)}` };
  }
  if (!real.startsWith(root + sep)) {
    return { kind: 'refused', why: 'resolves outside the output dir (symlink or symlinked parent)' };
  }
  let handle: Awaited<ReturnType<typeof open>>;
  try {
    // O_NONBLOCK: opening a FIFO the task left behind must not hang the worker.
    handle = await open(real, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (err) {
    return { kind: 'refused', why: `cannot be opened: ${describe(err)}` };
  }
  try {
    const st = await handle.stat();
    if (!st.isFile()) return { kind: 'refused', why: 'is not a regular file' };
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
    return { kind: 'refused', why: `cannot be read: ${describe(err)}` };
  } finally {
    await handle.close().catch(() => undefined);
  }
}

function describe(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
