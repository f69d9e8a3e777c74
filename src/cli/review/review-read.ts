import { BrokerError } from '../../contracts/errors.js';
import type { CliIo } from '../common/io.js';
import type { MasterClient } from '../common/master-client.js';
import { escapeText, jsonText } from '../common/output.js';
import type { RevisionDocument } from './review-format.js';

/**
 * What `gpu-broker review show` and `review input` read (docs/security.md "Code the reviewer did not read"): every byte a reviewer is
 * asked to approve. `show` reads get_revision and pages every truncated file diff to its end, so the
 * changes it prints are whole; `input` prints one page of one input file (stdout: exactly the text,
 * escaped for the terminal; stderr: where the next page starts).
 */

/** Lines of one file's diff asked per page while completing it. */
const DIFF_PAGE_LINES = 5000;

/** get_revision at `base`, with every file diff paged to its end. */
export async function readWholeRevision(c: MasterClient, base: string): Promise<RevisionDocument> {
  const doc = await c.get<RevisionDocument>(base);
  for (const change of doc.input_changes ?? []) {
    const diff = change.text_diff;
    if (!diff) continue;
    const lines = diff.unified === '' ? [] : diff.unified.split('\n');
    while (lines.length < diff.total_lines) {
      const q = new URLSearchParams({
        diff_path: change.path,
        diff_offset: String(lines.length),
        diff_lines: String(DIFF_PAGE_LINES),
      });
      const page = (await c.get<RevisionDocument>(`${base}?${q}`)).input_changes?.find(
        (x) => x.path === change.path,
      )?.text_diff;
      if (!page || page.unified === '') break;
      lines.push(...page.unified.split('\n'));
    }
    diff.unified = lines.join('\n');
    diff.truncated = lines.length < diff.total_lines;
    if (!diff.truncated && change.note?.startsWith('not shown')) delete change.note;
  }
  return doc;
}

interface InputPage {
  path: string;
  sha256: string;
  size: number;
  offset: number;
  next_offset: number;
  complete: boolean;
  encoding: 'utf8' | 'base64';
  content: string;
}

function byteCount(flag: string, text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  if (!/^\d+$/.test(text))
    throw new BrokerError('INVALID_INPUT', `--${flag} must be a whole number of bytes`, `e.g. --${flag} 0`);
  return Number(text);
}

/** `review input`: one page of one input's content; returns the exit code. */
export async function printInput(
  c: MasterClient,
  io: CliIo,
  values: {
    path?: string | undefined;
    offset?: string | undefined;
    'max-bytes'?: string | undefined;
    json?: boolean | undefined;
  },
  base: string,
  ids: { proposalId: string; revisionId: string },
): Promise<number> {
  if (!values.path)
    throw new BrokerError(
      'INVALID_INPUT',
      '--path is required',
      `gpu-broker review input ${ids.proposalId} --path PATH (review show lists the inputs)`,
    );
  const offset = byteCount('offset', values.offset);
  const maxBytes = byteCount('max-bytes', values['max-bytes']);
  const q = new URLSearchParams({ path: values.path });
  if (offset !== undefined) q.set('offset', String(offset));
  if (maxBytes !== undefined) q.set('max_bytes', String(maxBytes));
  const page = await c.get<InputPage>(`${base}/input?${q}`);
  if (values.json) {
    io.stdout(`${jsonText(page)}\n`);
    return 0;
  }
  if (page.encoding !== 'utf8') {
    io.stdout(`binary, ${page.size} bytes, sha256 ${page.sha256} (--json gives its bytes as base64)\n`);
    return 0;
  }
  io.stdout(escapeText(page.content));
  const range = `bytes ${page.offset}–${page.next_offset} of ${page.size}`;
  io.stderr(
    page.complete
      ? `-- ${range}: the end\n`
      : `-- ${range}; next page: gpu-broker review input ${ids.proposalId} --revision ${ids.revisionId} --path ${JSON.stringify(values.path)} --offset ${page.next_offset}\n`,
  );
  return 0;
}
