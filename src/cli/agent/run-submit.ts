import { existsSync, statSync } from 'node:fs';
import { basename } from 'node:path';
import { canonicalJson } from '../../contracts/canonical-json.js';
import { BrokerError } from '../../contracts/errors.js';
import { type TaskSpecInput, TaskSpecSchema } from '../../contracts/task-spec.js';
import type { FlagValues } from '../../platform/args.js';
import type { MasterClient } from '../common/master-client.js';
import { type CollectedInputs, collectInputs, type LocalInput, uploadUnknown } from './propose-files.js';
import type { RUN } from './task-command-specs.js';
import { OUTPUTS_DIR } from './task-outputs.js';

/**
 * The submitting half of `gpu-broker run` (ADR 0026): DIR's files → blobs the master lacks → a new
 * proposal or a new revision of the one this DIR ran last → confirm_revision. Which proposal a DIR ran
 * last is kept per master URL in this user's state directory, never in DIR (ship-memory.ts; ADR 0026 §1
 * as amended; docs/security.md "gpu-broker run on the submitter’s machine"): it needs no listing call and survives a renamed title.
 */

/** The flags of `gpu-broker run`, as parsed. */
export type RunFlags = FlagValues<typeof RUN.flags>;

/** Directories `run` never ships: VCS, dependencies, its own memory and its downloads. */
export const RUN_SKIP_DIRS = ['.git', 'node_modules', '.gpu-broker', OUTPUTS_DIR] as const;

/** What create_proposal / revise_proposal answer. */
export interface RevisionResult {
  proposal_id: string;
  revision_id: string;
  revision_number: number;
  findings: Array<{ severity: string; code: string; path: string; message: string; hint: string }>;
  confirmable: boolean;
}

/** What confirm_revision answers; `grant` and `task_id` come from standing grants (ADR 0029). */
export interface ConfirmAnswer {
  proposal_id: string;
  revision_id: string;
  state: string;
  next_action: string;
  task_id?: string | null;
  grant?: {
    covered: boolean;
    grant_id?: string | null;
    failing?: { clause: string; message: string } | null;
  };
}

/** The part of a proposal view `run` reads. */
export interface ProposalLike {
  proposal_id: string;
  state: string;
  spec: { inputs?: Array<{ sha256: string }> } & Record<string, unknown>;
  task_id: string | null;
  current_revision: { revision_id: string; number: number };
  reviews: Array<{ revision_id: string; reviewer: string; decision: string; comments: string }>;
  next_action: string;
}

/** How a submission ended. */
export type Submitted =
  | { kind: 'findings'; r: RevisionResult }
  | { kind: 'confirmed'; r: RevisionResult; answer: ConfirmAnswer }
  | { kind: 'attached'; proposal: ProposalLike };

/** What `submitRun` tells the person as it goes (one line each). */
export type Say = (line: string) => void;

/** The task's argv from the words after `--`: a bare program name becomes /usr/bin/NAME. */
export function taskArgv(command: readonly string[]): string[] {
  const [exe = '', ...args] = command;
  return [exe.includes('/') ? exe : `/usr/bin/${exe}`, ...args];
}

/** The spec `run` proposes. */
export function runSpec(
  values: RunFlags,
  command: readonly string[],
  files: readonly LocalInput[],
  dir: string,
): TaskSpecInput {
  const title = values.title ?? `run ${command.slice(0, 3).join(' ')}`;
  return {
    title,
    objective: values.objective ?? title,
    success_criteria: values['success-criteria'] ?? 'the command exits 0',
    cards: { count: Number(values.cards ?? 1) },
    runtime: { kind: 'process', argv: taskArgv(command) },
    inputs: files.map((f) => ({
      path: f.path,
      sha256: f.sha256,
      size: f.size,
      ...(f.executable ? { executable: true } : {}),
    })),
    outputs: (values.output ?? []).map((path) => ({ path, required: true })),
    time_limit_seconds: Number(values['time-limit'] ?? 3600),
    notes: values.notes ?? `gpu-broker run from ${basename(dir)}/: ${files.length} file(s)`,
  };
}

/** Whether a proposal's current spec is exactly `spec` (after the schema's defaults). */
function sameSpec(spec: TaskSpecInput, current: unknown): boolean {
  const mine = TaskSpecSchema.safeParse(spec);
  const theirs = TaskSpecSchema.safeParse(current);
  return mine.success && theirs.success && canonicalJson(mine.data) === canonicalJson(theirs.data);
}

/**
 * The files to ship (propose-files.ts's rules, less RUN_SKIP_DIRS), or a clear error: not a directory,
 * nothing to ship, a refused credential or private key, a file too large.
 */
export function collectRunFiles(
  dir: string,
  values: Pick<RunFlags, 'include' | 'include-secret'>,
): CollectedInputs {
  if (!existsSync(dir) || !statSync(dir).isDirectory())
    throw new BrokerError(
      'INVALID_INPUT',
      `${dir} is not a directory`,
      'Pass --dir with your project directory.',
    );
  const collected = collectInputs(dir, {
    includes: values.include,
    skipDirs: RUN_SKIP_DIRS,
    includeSecrets: values['include-secret'],
  });
  if (collected.files.length === 0)
    throw new BrokerError('INVALID_INPUT', `no files to ship under ${dir}`, 'Check --dir and --include.');
  return collected;
}

/** The proposal to continue from: `--proposal` (must exist) or the remembered one (if it still does). */
async function previousProposal(
  c: MasterClient,
  explicit: string | undefined,
  remembered: string | undefined,
): Promise<ProposalLike | undefined> {
  const id = explicit ?? remembered;
  if (!id) return undefined;
  try {
    return (await c.get<{ proposal: ProposalLike }>(`/api/v1/proposals/${encodeURIComponent(id)}`)).proposal;
  } catch (err) {
    if (explicit || !(err instanceof BrokerError) || err.code !== 'NOT_FOUND') throw err;
    return undefined;
  }
}

/** States in which a proposal takes a new revision. */
const REVISABLE = new Set(['DRAFT', 'CHANGES_REQUESTED']);

/** Everything `submitRun` needs. */
export interface SubmitInput {
  values: RunFlags;
  files: readonly LocalInput[];
  spec: TaskSpecInput;
  /** The proposal this user's last run of DIR made against this master (ship-memory.ts). */
  remembered: string | undefined;
  /** Records the proposal this run made or revised, once the master has it. */
  remember: (proposalId: string) => void;
}

/**
 * Uploads, proposes or revises, and confirms. A remembered proposal still IN_REVIEW with exactly this
 * spec is attached to; with another spec it is withdrawn (superseded) and a new proposal made.
 */
export async function submitRun(
  c: MasterClient,
  say: Say,
  input: SubmitInput,
): Promise<Submitted & { uploaded: number }> {
  const { values, files, spec } = input;
  const prev = await previousProposal(c, values.proposal, input.remembered);
  if (prev?.state === 'IN_REVIEW' && sameSpec(spec, prev.spec)) {
    input.remember(prev.proposal_id);
    return { kind: 'attached', proposal: prev, uploaded: 0 };
  }
  if (prev?.state === 'IN_REVIEW') {
    await c.post(`/api/v1/proposals/${encodeURIComponent(prev.proposal_id)}/cancel`, {});
    say(`withdrew proposal ${prev.proposal_id} (it was in review with other code; this run supersedes it)`);
  }
  // Blobs the previous revision names are on the master already; a pruned one shows up as INPUT_UNKNOWN.
  const known = new Set((prev?.spec.inputs ?? []).map((i) => i.sha256));
  let uploaded = await uploadUnknown(c, files, known);
  const revise = prev && REVISABLE.has(prev.state) ? prev.proposal_id : undefined;
  const send = (id: string | undefined) =>
    id
      ? c.post<RevisionResult>(`/api/v1/proposals/${encodeURIComponent(id)}/revisions`, { spec })
      : c.post<RevisionResult>('/api/v1/proposals', { spec });
  let r = await send(revise);
  if (r.findings.some((f) => f.code === 'INPUT_UNKNOWN')) {
    uploaded += await uploadUnknown(c, files, new Set());
    r = await send(r.proposal_id);
  }
  input.remember(r.proposal_id);
  say(
    `${revise ? 'revised' : 'proposed'} ${r.proposal_id} revision ${r.revision_number}: ${files.length} file(s), ${uploaded} uploaded`,
  );
  if (!r.confirmable) return { kind: 'findings', r, uploaded };
  const answer = await c.post<ConfirmAnswer>(
    `/api/v1/proposals/${encodeURIComponent(r.proposal_id)}/confirm`,
    {
      revision_id: r.revision_id,
    },
  );
  return { kind: 'confirmed', r, answer, uploaded };
}
