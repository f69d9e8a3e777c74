import { createHash, randomUUID } from 'node:crypto';
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve, sep } from 'node:path';
import { BrokerError } from '../contracts/errors.js';
import type { MasterClient } from './master-client.js';

/**
 * Downloading a task's declared outputs (issue 23 §3) into DIR/gpu-broker-outputs/TASK/PATH, page by page
 * through get_task_outputs, each file checked against the size and sha256 the master recorded before it
 * is renamed into place. A path that would leave that directory is refused, whatever the master says.
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

/** Lists a task's outputs. */
export async function listOutputs(c: MasterClient, taskId: string): Promise<OutputsPage> {
  return c.get<OutputsPage>(`/api/v1/tasks/${encodeURIComponent(taskId)}/outputs`);
}

/** Reads one output's bytes, page by page. */
async function readOutput(c: MasterClient, taskId: string, o: OutputEntry): Promise<Buffer> {
  const parts: Buffer[] = [];
  let offset = 0;
  do {
    const p = await c.get<OutputsPage>(
      `/api/v1/tasks/${encodeURIComponent(taskId)}/outputs?path=${encodeURIComponent(o.path)}&offset=${offset}&max_bytes=${PAGE_BYTES}`,
    );
    if (!p.file || p.file.next_offset <= offset) break;
    parts.push(Buffer.from(p.file.content, p.file.encoding === 'base64' ? 'base64' : 'utf8'));
    offset = p.file.next_offset;
  } while (offset < o.size);
  return Buffer.concat(parts);
}

/**
 * Downloads every output of a task into `<dir>/gpu-broker-outputs/<task>/`; returns what it wrote.
 * Throws DIGEST_MISMATCH (before writing that file) when the bytes are not the ones the master listed.
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
  for (const o of listing.outputs) {
    const target = outputTarget(root, o.path);
    const bytes = await readOutput(c, taskId, o);
    const sha256 = createHash('sha256').update(bytes).digest('hex');
    if (bytes.length !== o.size || sha256 !== o.sha256)
      throw new BrokerError(
        'DIGEST_MISMATCH',
        `output ${o.path} of ${taskId}: got ${bytes.length} bytes with sha256 ${sha256}, the master listed ${o.size} bytes with ${o.sha256}`,
        'Download again with gpu-broker task outputs TASK --dir DIR.',
      );
    mkdirSync(dirname(target), { recursive: true });
    const tmp = `${target}.part-${randomUUID()}`;
    writeFileSync(tmp, bytes, { mode: 0o644 });
    renameSync(tmp, target);
  }
  return { root, files: listing.outputs };
}
