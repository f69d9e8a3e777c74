import { BrokerError } from '../../contracts/errors.js';
import type { TaskSpecInput } from '../../contracts/task-spec.js';
import type { FlagValues } from '../../platform/args.js';
import { parseCommand } from '../common/args.js';
import type { CommandRunner } from '../common/io.js';
import { type MasterClient, withMaster } from '../common/master-client.js';
import { emit, escapeField, reportError } from '../common/output.js';
import { PROPOSE } from './proposal-command-specs.js';
import { type CollectedInputs, collectInputs, type LocalInput, uploadUnknown } from './propose-files.js';
import { leftOutLines, shipListing, shipNotice } from './ship-listing.js';
import { readDirMemory, rememberRun } from './ship-memory.js';

/**
 * `gpu-broker propose --dir DIR --entry 'python3 train.py --epochs 1' [--include GLOB…] [--cards N] …`
 * (ADR 0012), for people and agents with a shell: ships DIR's files as the task's inputs and creates a
 * proposal (or, with `--proposal ID`, a new revision of it), then prints the ids and the findings.
 *
 *   1. collect DIR's files (propose-files.ts, the rules `run` ships by: every .gitignore and
 *      .gpu-brokerignore, no symlinks, no implicit code such as __pycache__/ — left out and counted —,
 *      credentials and private keys refused unless `--include-secret`) and their sha256; the first time
 *      this user ships DIR, every file is listed on stderr (`--dry-run` lists them and stops);
 *   2. PUT each blob the proposal's current revision does not already name to /api/v1/blobs/{sha256}
 *      (the master recomputes the digest; storing is idempotent);
 *   3. write the spec: `--entry` split on spaces (quotes group words), a bare interpreter name becomes
 *      /usr/bin/NAME, the inputs manifest, `--output` paths;
 *   4. create_proposal or revise_proposal; with `--confirm`, confirm_revision when it has no error finding.
 */

interface RevisionResult {
  proposal_id: string;
  revision_id: string;
  revision_number: number;
  digest: string;
  findings: Array<{ severity: string; code: string; path: string; message: string; hint: string }>;
  confirmable: boolean;
  state: string;
  next_action: string;
}

/** Splits an entry command on spaces; single or double quotes group words. No shell runs it. */
export function splitEntry(entry: string): string[] {
  const words: string[] = [];
  for (const m of entry.matchAll(/"([^"]*)"|'([^']*)'|(\S+)/g)) words.push(m[1] ?? m[2] ?? m[3] ?? '');
  return words;
}

/** The flags of `gpu-broker propose`, as parsed. */
type ProposeFlags = FlagValues<typeof PROPOSE.flags>;

/** Step 3: the spec from the flags and the collected files (`--entry`'s program under /usr/bin unless absolute). */
function proposalSpec(values: ProposeFlags, entry: string, files: readonly LocalInput[]): TaskSpecInput {
  const words = splitEntry(entry);
  const exe = words[0] ?? '';
  const argvOfTask = [exe.startsWith('/') ? exe : `/usr/bin/${exe}`, ...words.slice(1)];
  const title = values.title ?? `run ${words.slice(0, 3).join(' ')}`;
  return {
    title,
    objective: values.objective ?? title,
    success_criteria: values['success-criteria'] ?? 'the entry command exits 0',
    cards: { count: Number(values.cards ?? 1) },
    runtime: { kind: 'process', argv: argvOfTask },
    inputs: files.map((f) => ({
      path: f.path,
      sha256: f.sha256,
      size: f.size,
      ...(f.executable ? { executable: true } : {}),
    })),
    outputs: (values.output ?? []).map((path) => ({ path, required: true })),
    time_limit_seconds: Number(values['time-limit'] ?? 3600),
    ...(values.notes ? { notes: values.notes } : {}),
  };
}

/** Step 2: uploads each blob the proposal's current revision does not already name; returns how many. */
async function uploadMissing(
  c: MasterClient,
  proposalId: string | undefined,
  files: readonly LocalInput[],
): Promise<number> {
  const known = new Set<string>();
  if (proposalId) {
    const p = await c.get<{ proposal: { spec?: { inputs?: Array<{ sha256: string }> } } }>(
      `/api/v1/proposals/${encodeURIComponent(proposalId)}`,
    );
    for (const i of p.proposal.spec?.inputs ?? []) known.add(i.sha256);
  }
  return uploadUnknown(c, files, known);
}

/**
 * Step 4: create_proposal or revise_proposal, then confirm_revision when asked and it has no error
 * finding. The state and next_action are the last call's, so they describe the proposal as it is now.
 */
async function submitSpec(
  c: MasterClient,
  values: ProposeFlags,
  spec: TaskSpecInput,
): Promise<RevisionResult> {
  const r = values.proposal
    ? await c.post<RevisionResult>(`/api/v1/proposals/${encodeURIComponent(values.proposal)}/revisions`, {
        spec,
      })
    : await c.post<RevisionResult>('/api/v1/proposals', { spec });
  if (!values.confirm || !r.confirmable) return r;
  const confirmed = await c.post<{ state: string; next_action: string }>(
    `/api/v1/proposals/${r.proposal_id}/confirm`,
    { revision_id: r.revision_id },
  );
  return { ...r, state: confirmed.state, next_action: confirmed.next_action };
}

/** What `propose` prints without `--json`: the ids and state, the files, each finding, and what next. */
function proposeText(
  r: RevisionResult,
  files: number,
  uploaded: number,
  leftOut: ReadonlyArray<{ path: string; why: string }>,
): string {
  return [
    `proposal ${r.proposal_id} revision ${r.revision_number} (${r.revision_id}) ${r.state}`,
    `${files} input file(s), ${uploaded} uploaded`,
    ...leftOutLines(leftOut),
    ...r.findings.map(
      (f) =>
        `${f.severity}: ${f.code} at ${escapeField(f.path)}: ${escapeField(f.message)} — ${escapeField(f.hint)}`,
    ),
    `next: ${r.next_action}`,
  ].join('\n');
}

/** `--dry-run`: every file that would ship, and nothing sent. */
function dryRun(
  io: Parameters<CommandRunner>[1],
  values: ProposeFlags,
  dir: string,
  c: CollectedInputs,
): number {
  emit(
    io,
    values.json,
    {
      dir,
      count: c.files.length,
      total_bytes: c.totalBytes,
      files: c.files.map((f) => ({ path: f.path, size: f.size, sha256: f.sha256 })),
      left_out: c.leftOut,
    },
    () => [...shipListing(dir, c), ...leftOutLines(c.leftOut)].join('\n'),
  );
  return 0;
}

/** `gpu-broker propose`: see the module comment. */
export const run: CommandRunner = async (argv, io) => {
  const parsed = parseCommand(PROPOSE, argv, io);
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  try {
    if (!values.dir || (!values.entry && !values['dry-run']))
      throw new BrokerError(
        'INVALID_INPUT',
        '--dir and --entry are required',
        "gpu-broker propose --dir ./project --entry 'python3 train.py --epochs 1' --cards 1 --title 'what it shows'",
      );
    const dir = values.dir;
    const collected = collectInputs(dir, {
      includes: values.include,
      includeSecrets: values['include-secret'],
    });
    if (values['dry-run']) return dryRun(io, values, dir, collected);
    const { files, leftOut } = collected;
    if (files.length === 0)
      throw new BrokerError('INVALID_INPUT', `no files to ship under ${dir}`, 'Check --dir and --include.');
    const spec = proposalSpec(values, values.entry ?? '', files);
    const memory = readDirMemory(io.env, dir);
    for (const line of shipNotice(dir, collected, memory)) io.stderr(`gpu-broker: ${line}\n`);
    return await withMaster(values, io, async (c) => {
      const uploaded = await uploadMissing(c, values.proposal, files);
      const r = await submitSpec(c, values, spec);
      rememberRun(io.env, dir, { shipped: files.map((f) => f.path) });
      const result = { ...r, files: files.length, uploaded, left_out: leftOut };
      emit(io, values.json, result, () => proposeText(r, files.length, uploaded, leftOut));
      return r.confirmable ? 0 : 1;
    });
  } catch (err) {
    return reportError(io, values.json, err);
  }
};
