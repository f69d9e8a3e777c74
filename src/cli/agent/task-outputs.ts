import { createHash, type Hash, randomUUID } from 'node:crypto';
import { closeSync, mkdirSync, openSync, renameSync, rmSync, writeSync } from 'node:fs';
import { dirname, join, resolve, sep } from 'node:path';
import { BrokerError } from '../../contracts/errors.js';
import { MAX_OUTPUT_FILE_BYTES } from '../../contracts/execution-plan.js';
import type { MasterClient } from '../common/master-client.js';
import { escapeField } from '../common/output.js';

/**
 * Downloading a task's declared outputs (ADR 0026) into DIR/gpu-broker-outputs/TASK/PATH, page by page
 * through get_task_outputs, each file checked against the size and sha256 the master recorded before it
 * is renamed into place. A path that would leave that directory is refused, whatever the master says.
 *
 * The listing bounds what is read (docs/security.md "What a reviewer must read, and what the broker guarantees"), so a lying master cannot grow the CLI's memory or disk:
 * at most MAX_LISTED_OUTPUTS entries, each at most MAX_OUTPUT_FILE_BYTES (what a worker can upload), so
 * at most 512 MiB on disk per task; each page asks for no more than the file has left and its body is
 * read up to a bound derived from that (`pageBodyBytes`); a page that brings more bytes than are left is
 * DIGEST_MISMATCH at once; bytes go to a temporary file as they arrive, one page in memory at a time.
 */

/** The folder under the project dir that downloads go to (left out of what `run` ships). */
export const OUTPUTS_DIR = 'gpu-broker-outputs';

/** One output as the master lists it. */
export interface OutputEntry {
  path: string;
  size: number;
  sha256: string;
}

interface OutputsPage {
  outputs: OutputEntry[];
  outputs_pruned_at: string | null;
  file: { next_offset: number; size: number; encoding: 'utf8' | 'base64'; content: string } | null;
}

/** Bytes one page asks for: get_task_outputs' maximum. */
const PAGE_BYTES = 8 * 1024 * 1024;

/** Most outputs a task declares (the spec's `outputs` maximum), so most a listing may hold. */
export const MAX_LISTED_OUTPUTS = 64;

/** Bytes of a listing's body: 64 entries of a 512-character path, every character escaped, and room. */
const LISTING_BODY_BYTES = 1024 * 1024;

/**
 * Bytes of the body of a page that asks for `want` bytes: the content as JSON can take 6 characters per
 * byte (`\u0001` in a utf8 page; base64 takes 4 per 3), plus the listing each page repeats.
 */
export function pageBodyBytes(want: number): number {
  return 6 * want + LISTING_BODY_BYTES;
}

const SHA256 = /^[0-9a-f]{64}$/;

/** A task id safe as one directory name. */
const TASK_ID = /^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$/;

/**
 * Where an output lands under `root`; throws for a path that is absolute, has `.`/`..`/empty segments or
 * a backslash, or would resolve outside `root`.
 */
export function outputTarget(root: string, path: string): string {
  const segments = path.split('/');
  const bad =
    path.length === 0 ||
    path.startsWith('/') ||
    path.includes('\\') ||
    path.includes('\0') ||
    segments.some((s) => s === '' || s === '.' || s === '..');
  const target = resolve(root, path);
  if (bad || !target.startsWith(resolve(root) + sep))
    throw new BrokerError(
      'INVALID_INPUT',
      `refusing to write output ${JSON.stringify(path)} outside ${root}`,
      'Output paths are relative, without "." or ".." segments.',
    );
  return target;
}

/** Lists a task's outputs (its body read up to LISTING_BODY_BYTES). */
export async function listOutputs(c: MasterClient, taskId: string): Promise<OutputsPage> {
  return c.get<OutputsPage>(`/api/v1/tasks/${encodeURIComponent(taskId)}/outputs`, {
    maxBytes: LISTING_BODY_BYTES,
  });
}

/** Refuses a listing no honest master sends: too many entries, a size out of range, a malformed digest. */
function checkListing(taskId: string, outputs: unknown): asserts outputs is OutputEntry[] {
  if (!Array.isArray(outputs) || outputs.length > MAX_LISTED_OUTPUTS)
    throw new BrokerError(
      'PAYLOAD_TOO_LARGE',
      `the master lists ${Array.isArray(outputs) ? outputs.length : 'no array of'} outputs for ${taskId}; a task declares at most ${MAX_LISTED_OUTPUTS}`,
      "Nothing was downloaded. Tell the master's operator: it answered with a listing no task can have.",
    );
  for (const o of outputs as Array<Partial<OutputEntry>>) {
    const path = typeof o?.path === 'string' ? escapeField(o.path) : '(no path)';
    if (
      !Number.isSafeInteger(o?.size) ||
      (o?.size ?? -1) < 0 ||
      typeof o?.sha256 !== 'string' ||
      !SHA256.test(o.sha256)
    )
      throw new BrokerError(
        'DIGEST_MISMATCH',
        `the master lists output ${path} of ${taskId} without a valid size and sha256`,
        "Nothing was downloaded. Tell the master's operator.",
      );
    if ((o.size ?? 0) > MAX_OUTPUT_FILE_BYTES)
      throw new BrokerError(
        'PAYLOAD_TOO_LARGE',
        `the master lists output ${path} of ${taskId} at ${o.size} bytes; a worker uploads at most ${MAX_OUTPUT_FILE_BYTES}`,
        "Nothing was downloaded. Tell the master's operator: it answered with a size no output can have.",
      );
  }
}

/** The error for bytes that are not the ones listed; nothing of that file is kept. */
function mismatch(taskId: string, o: OutputEntry, what: string): BrokerError {
  return new BrokerError(
    'DIGEST_MISMATCH',
    `output ${escapeField(o.path)} of ${taskId}: ${what}, the master listed ${o.size} bytes with ${o.sha256}`,
    'Download again with gpu-broker task outputs TASK --dir DIR.',
  );
}

/**
 * Streams one output's bytes into the open file `fd`, page by page, hashing as it goes; throws
 * DIGEST_MISMATCH the moment a page brings more than the listing has left, PAYLOAD_TOO_LARGE for a body
 * past its bound. Returns how many bytes it wrote.
 */
async function readOutput(
  c: MasterClient,
  taskId: string,
  o: OutputEntry,
  fd: number,
  hash: Hash,
): Promise<number> {
  let offset = 0;
  while (offset < o.size) {
    const want = Math.min(PAGE_BYTES, o.size - offset);
    const p = await c.get<OutputsPage>(
      `/api/v1/tasks/${encodeURIComponent(taskId)}/outputs?path=${encodeURIComponent(o.path)}&offset=${offset}&max_bytes=${want}`,
      { maxBytes: pageBodyBytes(want) },
    );
    const f = p.file;
    if (!f || typeof f.content !== 'string' || f.content.length === 0) break;
    const bytes = Buffer.from(f.content, f.encoding === 'base64' ? 'base64' : 'utf8');
    if (bytes.length > want || f.next_offset !== offset + bytes.length)
      throw mismatch(
        taskId,
        o,
        `a page at offset ${offset} brought ${bytes.length} bytes where ${want} were left`,
      );
    writeSync(fd, bytes);
    hash.update(bytes);
    offset += bytes.length;
  }
  return offset;
}

/** Downloads one output into `target`: a temporary file beside it, renamed into place once checked. */
async function downloadOne(c: MasterClient, taskId: string, o: OutputEntry, target: string): Promise<void> {
  mkdirSync(dirname(target), { recursive: true });
  const tmp = `${target}.part-${randomUUID()}`;
  const fd = openSync(tmp, 'wx', 0o644);
  let done = false;
  try {
    const hash = createHash('sha256');
    const got = await readOutput(c, taskId, o, fd, hash);
    const sha256 = hash.digest('hex');
    if (got !== o.size || sha256 !== o.sha256)
      throw mismatch(taskId, o, `got ${got} bytes with sha256 ${sha256}`);
    closeSync(fd);
    done = true;
    renameSync(tmp, target);
  } finally {
    if (!done) {
      closeSync(fd);
      rmSync(tmp, { force: true });
    }
  }
}

/**
 * Downloads every output of a task into `<dir>/gpu-broker-outputs/<task>/`; returns what it wrote.
 * Throws DIGEST_MISMATCH (leaving nothing of that file) when the bytes are not the ones the master
 * listed, PAYLOAD_TOO_LARGE for a listing or a body past its bound.
 */
export async function downloadOutputs(
  c: MasterClient,
  taskId: string,
  dir: string,
): Promise<{ root: string; files: OutputEntry[] }> {
  if (!TASK_ID.test(taskId))
    throw new BrokerError('INVALID_INPUT', `not a task id: ${JSON.stringify(taskId)}`, 'e.g. task_01J…');
  const root = join(dir, OUTPUTS_DIR, taskId);
  const listing = await listOutputs(c, taskId);
  if (listing.outputs.length > 0 && listing.outputs_pruned_at !== null)
    throw new BrokerError(
      'NOT_FOUND',
      `the outputs of ${taskId} were deleted by retention at ${listing.outputs_pruned_at}`,
      'The master keeps output files storage.retention.outputs_days days after a task ends.',
    );
  checkListing(taskId, listing.outputs);
  const targets = listing.outputs.map((o) => outputTarget(root, o.path)); // every path checked first
  for (const [i, o] of listing.outputs.entries()) await downloadOne(c, taskId, o, targets[i]!);
  return { root, files: listing.outputs };
}
