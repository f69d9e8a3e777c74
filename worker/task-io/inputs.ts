import { createHash } from 'node:crypto';
import { constants, createReadStream } from 'node:fs';
import { chmod, copyFile, mkdir, unlink } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { InputFile } from '../../src/contracts/task-spec.js';
import { errorMessage } from '../../src/platform/error-message.js';
import type { InputCache } from './input-cache.js';
import type { FetchBlob } from './input-fetch.js';

/**
 * Step 1b of an execution (ADR 0012): the spec's inputs, fetched by sha256 (from the cache, else from
 * the master), verified, and written under `dir` before the task starts. Every file that lands in `dir`
 * is hashed there, after it landed, and must match the sha256 and size the reviewer approved; a mismatch
 * fails the execution with SETUP_FAILED naming the file, and a damaged cache entry is removed so that
 * the next run fetches again.
 *
 * Nothing is held whole in memory (docs/performance.md "Noisy neighbours"): a fetch streams the master's body into the file, a cache
 * hit is a kernel copy, and the hash reads the file back in stream-sized pieces, so a 1 GiB input costs
 * the worker a buffer and lets its event loop turn between pieces. A blob named at several paths is
 * fetched or copied from the cache once and copied from its first verified place after that.
 *
 * Layout: `dir/<path>` as the spec says, files 0444 (0555 when `executable`), directories 0755, all
 * owned by the worker. Paths are checked again here (the schema already refuses them): no absolute path,
 * no `.`/`..`/empty segment. `dir` is fresh and only this function writes into it, so no symlink can be
 * waiting there; files are created with O_EXCL.
 */

/** Where inputs come from. */
export interface InputSource {
  readonly cache: InputCache;
  readonly fetch: FetchBlob;
}

/**
 * Places every input under `dir`; returns null, or why it could not (the SETUP_FAILED detail). `signal`
 * stops a fetch part-way and places nothing more.
 */
export async function placeInputs(
  inputs: readonly InputFile[],
  dir: string,
  executionId: string,
  source: InputSource,
  signal?: AbortSignal,
): Promise<string | null> {
  for (const input of inputs) {
    const segments = input.path.split('/');
    if (
      input.path.startsWith('/') ||
      segments.some((s) => s === '' || s === '.' || s === '..' || s.includes('\\'))
    )
      return `input ${JSON.stringify(input.path)}: not a plain relative path`;
  }
  // The first verified place of each digest in `dir`.
  const placed = new Map<string, string>();
  for (const input of inputs) {
    const dest = join(dir, input.path);
    try {
      await mkdir(dirname(dest), { recursive: true, mode: 0o755 });
    } catch (err) {
      return `input ${input.path}: cannot place it: ${errorMessage(err)}`;
    }
    if (signal?.aborted === true) return `input ${input.path}: not placed: setup was stopped`;
    const problem = await placeOne(input, dest, placed.get(input.sha256), executionId, source, signal);
    if (problem !== null) {
      await unlink(dest).catch(() => undefined);
      return problem;
    }
    try {
      await chmod(dest, input.executable ? 0o555 : 0o444);
    } catch (err) {
      return `input ${input.path}: cannot place it: ${errorMessage(err)}`;
    }
    if (!placed.has(input.sha256)) placed.set(input.sha256, dest);
  }
  return null;
}

/** `input`'s bytes into `dest` (created here, O_EXCL): copied from `verified`, the cache or the master. */
async function placeOne(
  input: InputFile,
  dest: string,
  verified: string | undefined,
  executionId: string,
  source: InputSource,
  signal: AbortSignal | undefined,
): Promise<string | null> {
  const copy = async (from: string): Promise<string | null> => {
    try {
      await copyFile(from, dest, constants.COPYFILE_EXCL);
      return null;
    } catch (err) {
      return `input ${input.path}: cannot place it: ${errorMessage(err)}`;
    }
  };
  // Already placed and verified at another path of this execution.
  if (verified !== undefined) return copy(verified);
  const cached = await source.cache.lookup(input.sha256);
  // A cache entry can go between the lookup and the copy (another execution's add trims the cache, or
  // removes a damaged entry): the cache only saves a fetch, so a copy that fails falls back to the master.
  if (cached !== null && (await copy(cached)) !== null) await unlink(dest).catch(() => undefined);
  else if (cached !== null) {
    const got = await hashFile(dest);
    if (got.sha256 === input.sha256 && got.size === input.size) return null;
    await source.cache.remove(input.sha256);
    return `input ${input.path}: the worker's cached copy of sha256 ${input.sha256} has sha256 ${got.sha256} (${got.size} bytes); the cache was changed outside the worker, the entry is removed, the task did not run`;
  }
  try {
    await source.fetch(executionId, input.sha256, input.size, dest, signal);
  } catch (err) {
    return `input ${input.path}: cannot fetch sha256 ${input.sha256} from the master: ${errorMessage(err)}`;
  }
  const got = await hashFile(dest);
  if (got.sha256 !== input.sha256 || got.size !== input.size)
    return `input ${input.path}: the master sent ${got.size} bytes with sha256 ${got.sha256}, the approved spec names ${input.sha256} (${input.size} bytes); the task did not run`;
  await source.cache.add(input.sha256, dest).catch(() => undefined);
  return null;
}

/** sha256 and size of a file, read in stream-sized pieces. */
async function hashFile(path: string): Promise<{ sha256: string; size: number }> {
  const hash = createHash('sha256');
  let size = 0;
  for await (const piece of createReadStream(path)) {
    hash.update(piece as Buffer);
    size += (piece as Buffer).length;
  }
  return { sha256: hash.digest('hex'), size };
}
