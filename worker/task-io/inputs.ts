import { createHash } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { InputFile } from '../../src/contracts/task-spec.js';
import type { InputCache } from './input-cache.js';
import type { FetchBlob } from './input-fetch.js';

/**
 * Step 1b of an execution (issue 13): the spec's inputs, fetched by sha256 (from the cache, else from
 * the master), verified, and written under `dir` before the task starts. Every byte that lands in `dir`
 * has been hashed here and matched the sha256 the reviewer approved; a mismatch fails the execution with
 * SETUP_FAILED naming the file, and a damaged cache entry is removed so that the next run fetches again.
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

/** Places every input under `dir`; returns null, or why it could not (the SETUP_FAILED detail). */
export async function placeInputs(
  inputs: readonly InputFile[],
  dir: string,
  executionId: string,
  source: InputSource,
): Promise<string | null> {
  const blobs = new Map<string, Buffer>();
  for (const input of inputs) {
    const segments = input.path.split('/');
    if (
      input.path.startsWith('/') ||
      segments.some((s) => s === '' || s === '.' || s === '..' || s.includes('\\'))
    )
      return `input ${JSON.stringify(input.path)}: not a plain relative path`;
    let bytes = blobs.get(input.sha256);
    if (bytes === undefined) {
      const got = await obtain(input, executionId, source);
      if (typeof got === 'string') return got;
      bytes = got;
      blobs.set(input.sha256, bytes);
    }
    try {
      await mkdir(dirname(join(dir, input.path)), { recursive: true, mode: 0o755 });
      await writeFile(join(dir, input.path), bytes, { flag: 'wx', mode: input.executable ? 0o555 : 0o444 });
    } catch (err) {
      return `input ${input.path}: cannot place it: ${err instanceof Error ? err.message : String(err)}`;
    }
  }
  return null;
}

async function obtain(input: InputFile, executionId: string, source: InputSource): Promise<Buffer | string> {
  const cached = await source.cache.read(input.sha256);
  if (cached !== null) {
    const actual = sha256(cached);
    if (actual === input.sha256 && cached.length === input.size) return cached;
    await source.cache.remove(input.sha256);
    return `input ${input.path}: the worker's cached copy of sha256 ${input.sha256} has sha256 ${actual} (${cached.length} bytes); the cache was changed outside the worker, the entry is removed, the task did not run`;
  }
  let fetched: Buffer;
  try {
    fetched = await source.fetch(executionId, input.sha256, input.size);
  } catch (err) {
    return `input ${input.path}: cannot fetch sha256 ${input.sha256} from the master: ${err instanceof Error ? err.message : String(err)}`;
  }
  const actual = sha256(fetched);
  if (actual !== input.sha256 || fetched.length !== input.size)
    return `input ${input.path}: the master sent ${fetched.length} bytes with sha256 ${actual}, the approved spec names ${input.sha256} (${input.size} bytes); the task did not run`;
  await source.cache.write(input.sha256, fetched).catch(() => undefined);
  return fetched;
}

function sha256(bytes: Buffer): string {
  return createHash('sha256').update(bytes).digest('hex');
}
