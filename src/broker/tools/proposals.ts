import { BrokerError } from '../../contracts/errors.js';
import type { HostReserve } from '../../contracts/task-limits.js';
import { MAX_SPEC_BYTES, type TaskSpec } from '../../contracts/task-spec.js';
import type { ProposalView } from '../../contracts/views.js';
import type { ProposalState } from '../../domain/machines/proposal.js';
import { evaluatePolicy, type Finding, filesToDigest, isConfirmable } from '../../domain/policy/evaluate.js';
import { digestsToInspect, inspectionPaths } from '../../domain/policy/inputs.js';
import { type HostAsk, hostAllowance } from '../../domain/policy/task-limits.js';
import type { TextInspection } from '../../domain/policy/text-inspection.js';
import { revisionQuotaBreach } from '../../domain/retention/proposal-quota.js';
import { type CanonicalForm, canonicalForm } from '../../platform/digest.js';
import { fileSha256 } from '../../platform/file-digest.js';
import type { Principal } from '../../store/principals-repo.js';
import type { ProposalRecord, RevisionRecord } from '../../store/proposals-repo.js';
import type { WorkerRecord } from '../../store/workers-repo.js';
import type { BrokerDeps } from '../deps.js';
import { inspectedInput, isInspected } from '../inspection-memo.js';
import { moveProposal } from '../machines/proposal.js';
import { canReadAll } from '../principals.js';
import { proposalTopic } from '../topics.js';
import { fetchPage } from './paging.js';
import { proposalNextAction, proposalSummary, proposalView } from './views.js';
import { waitUntil } from './wait-until.js';

/** Use cases of proposals: create, revise, confirm, cancel, read, list, wait, expire. */

/** The result of adding a revision. */
export interface RevisionResult {
  proposal_id: string;
  revision_id: string;
  revision_number: number;
  digest: string;
  state: ProposalState;
  findings: Finding[];
  confirmable: boolean;
  next_action: string;
}

/**
 * Refuses (QUOTA_EXCEEDED, nothing written) a revision that would take `principal` over a cap of
 * `quotas` (src/domain/retention/proposal-quota.ts): open proposals, revisions per proposal and per hour, stored
 * revision bytes. Every count is an index seek or one row, so the check costs the same at any usage.
 */
function checkRevisionQuota(
  deps: BrokerDeps,
  principal: Principal,
  opensProposal: boolean,
  revisionNumber: number,
  specBytes: number,
): void {
  const proposals = deps.store.proposals;
  const breach = revisionQuotaBreach(
    {
      opens_proposal: opensProposal,
      open_proposals: opensProposal ? proposals.openCountByOwner(principal.id) : 0,
      revision_number: revisionNumber,
      revisions_last_hour: proposals.revisionsWrittenSince(principal.id, deps.clock.now() - HOUR_MS),
      stored_bytes: proposals.revisionUsage(principal.id).bytes,
      new_bytes: specBytes,
    },
    deps.config.quotas,
  );
  if (breach)
    throw new BrokerError('QUOTA_EXCEEDED', breach.message, breach.hint, {
      cap: `quotas.${breach.cap}`,
      limit: breach.limit,
      used: breach.used,
    });
}

const HOUR_MS = 3_600_000;

/**
 * Refuses a spec over MAX_SPEC_BYTES; returns its size. Measured on the canonical form, which is as
 * long as JSON.stringify's (the same members and values, keys sorted), so the one serialisation serves.
 */
function checkSize(serialised: CanonicalForm): number {
  const bytes = Buffer.byteLength(serialised.canonical);
  if (bytes > MAX_SPEC_BYTES)
    throw new BrokerError(
      'PAYLOAD_TOO_LARGE',
      `spec is ${bytes} bytes; the limit is ${MAX_SPEC_BYTES}`,
      'Keep specs small: put data in files the task reads, not in argv, env or notes.',
    );
  return bytes;
}

/**
 * The text inspections `findingsFor` will need for `spec` that the memo does not hold yet, one step per
 * input blob, so a heavy call can run each as a part of its own before its handler (the dispatcher's
 * `prepare`): a spec naming 12 MiB of new text inputs was one 45 ms block of the event loop, now a dozen
 * of ~4 ms (docs/security.md "Fair share between principals"). A step that fails leaves the blob to
 * findingsFor, which reports it as it always did.
 */
export function inspectionSteps(deps: BrokerDeps, ownerId: string, spec: TaskSpec): Array<() => void> {
  const inputs = spec.inputs ?? [];
  if (inputs.length === 0) return [];
  const storedBlobs = deps.store.blobs.sizesUploadedBy(
    ownerId,
    inputs.map((i) => i.sha256),
  );
  const pathOf = inspectionPaths(inputs);
  return digestsToInspect(spec, storedBlobs)
    .filter((sha256) => !isInspected(deps, ownerId, sha256, pathOf.get(sha256) ?? ''))
    .map((sha256) => () => {
      try {
        inspectedInput(deps, ownerId, sha256, pathOf.get(sha256) ?? '');
      } catch {
        // findingsFor meets it again and reports it
      }
    });
}

/**
 * Gathers the facts the pure policy check needs for a spec in `ownerId`'s proposal (pinned files'
 * digests, the sizes of blobs the owner uploaded, offered mounts, the text inspection of input blobs
 * within the inspection budget), then evaluates. Inputs count only if the owner uploaded them.
 */
export function findingsFor(deps: BrokerDeps, ownerId: string, spec: TaskSpec): Finding[] {
  const fileDigests: Record<string, string | null> = {};
  for (const f of filesToDigest(spec, deps.config.policy)) fileDigests[f] = fileSha256(f);
  const storedBlobs = deps.store.blobs.sizesUploadedBy(
    ownerId,
    (spec.inputs ?? []).map((i) => i.sha256),
  );
  const workers = deps.store.workers.list();
  const offeredMounts = [...new Set(workers.flatMap((w) => w.mounts.map((m) => m.name)))];
  const largestHost = largestHostOf(workers, deps.config.policy.task_limits.host_reserve);
  const inputText: Record<string, TextInspection> = {};
  const pathOf = inspectionPaths(spec.inputs ?? []);
  for (const sha256 of digestsToInspect(spec, storedBlobs)) {
    try {
      inputText[sha256] = inspectedInput(deps, ownerId, sha256, pathOf.get(sha256) ?? '');
    } catch {
      // A blob that fails its re-hash is not inspected (verifiedBlob logged it); it is reported as such,
      // and no worker will ever be served it.
    }
  }
  const owner = deps.store.principals.findById(ownerId);
  const account = owner ? deps.store.accounts.get(owner.account) : undefined;
  return evaluatePolicy(spec, deps.config.policy, {
    fileDigests,
    storedBlobs,
    offeredMounts,
    inputText,
    ...(account ? { account: { name: account.name, max_priority: account.max_priority } } : {}),
    ...(largestHost === null ? {} : { largestHost }),
  });
}

/** What one task may take on the largest enrolled host, limit by limit; null: no worker reports its host. */
function largestHostOf(
  workers: ReadonlyArray<Pick<WorkerRecord, 'host' | 'cards'>>,
  reserve: HostReserve,
): Record<HostAsk, number> | null {
  let most: Record<HostAsk, number> | null = null;
  for (const w of workers) {
    if (w.host === null) continue;
    const { total } = hostAllowance(w.host, w.cards.length, reserve);
    most =
      most === null
        ? { ...total }
        : {
            memory_mib: Math.max(most.memory_mib, total.memory_mib),
            tmp_mib: Math.max(most.tmp_mib, total.tmp_mib),
            shm_mib: Math.max(most.shm_mib, total.shm_mib),
            disk_mib: Math.max(most.disk_mib, total.disk_mib),
            cpus: Math.max(most.cpus, total.cpus),
          };
  }
  return most;
}

/** Loads a proposal the principal may see; others' proposals are NOT_FOUND (no existence leak). */
export function loadVisibleProposal(deps: BrokerDeps, principal: Principal, id: string): ProposalRecord {
  const p = deps.store.proposals.get(id);
  if (!p || (p.owner_id !== principal.id && !canReadAll(principal)))
    throw new BrokerError('NOT_FOUND', `no proposal ${id}`, 'Check the id; list_proposals shows yours.');
  return p;
}

function loadOwnProposal(deps: BrokerDeps, principal: Principal, id: string): ProposalRecord {
  const p = loadVisibleProposal(deps, principal, id);
  if (p.owner_id !== principal.id && !principal.roles.includes('operator'))
    throw new BrokerError(
      'FORBIDDEN',
      'only the proposal’s owner may change it',
      'Reviewers judge with submit_review.',
    );
  return p;
}

function insertRevision(
  deps: BrokerDeps,
  principal: Principal,
  proposal: Pick<ProposalRecord, 'id' | 'owner_id'>,
  number: number,
  spec: TaskSpec,
  serialised: CanonicalForm,
) {
  checkRevisionQuota(deps, principal, false, number, checkSize(serialised));
  const revision: RevisionRecord = {
    id: deps.ids('rev'),
    proposal_id: proposal.id,
    number,
    spec,
    digest: serialised.digest,
    findings: findingsFor(deps, proposal.owner_id, spec),
    created_by: principal.id,
    created_at: deps.clock.now(),
    confirmed_at: null,
  };
  deps.store.proposals.insertRevision(revision);
  return revision;
}

function revisionResult(p: ProposalRecord, r: RevisionRecord, next_action: string): RevisionResult {
  return {
    proposal_id: p.id,
    revision_id: r.id,
    revision_number: r.number,
    digest: r.digest,
    state: p.state,
    findings: r.findings,
    confirmable: isConfirmable(r.findings),
    next_action,
  };
}

/**
 * create_proposal: a new DRAFT with revision 1. Call inside a transaction. `serialised`: the spec's
 * canonical form if the caller already made it (runMutating does), so it is not serialised again.
 */
export function createProposal(
  deps: BrokerDeps,
  principal: Principal,
  spec: TaskSpec,
  serialised: CanonicalForm = canonicalForm(spec),
): RevisionResult {
  const now = deps.clock.now();
  const id = deps.ids('prop');
  const revisionId = deps.ids('rev');
  const p: ProposalRecord = {
    id,
    owner_id: principal.id,
    state: 'DRAFT',
    current_revision_id: revisionId,
    task_id: null,
    created_at: now,
    updated_at: now,
    expires_at: now + deps.config.timing.proposal_ttl_seconds * 1000,
  };
  checkRevisionQuota(deps, principal, true, 1, checkSize(serialised));
  deps.store.proposals.insert(p);
  const revision: RevisionRecord = {
    id: revisionId,
    proposal_id: id,
    number: 1,
    spec,
    digest: serialised.digest,
    findings: findingsFor(deps, principal.id, spec),
    created_by: principal.id,
    created_at: now,
    confirmed_at: null,
  };
  deps.store.proposals.insertRevision(revision);
  deps.store.audit.append({
    at: now,
    actor: principal.name,
    action: 'proposal.created',
    subject_type: 'proposal',
    subject_id: id,
    data: { revision_id: revisionId, digest: revision.digest },
  });
  deps.store.afterCommit(() => deps.notifier.notify(proposalTopic(id)));
  return revisionResult(p, revision, proposalNextAction(p, revision));
}

/**
 * revise_proposal: a new immutable revision; CHANGES_REQUESTED goes back to DRAFT. `serialised` as for
 * createProposal.
 */
export function reviseProposal(
  deps: BrokerDeps,
  principal: Principal,
  proposalId: string,
  spec: TaskSpec,
  serialised: CanonicalForm = canonicalForm(spec),
): RevisionResult {
  const p = loadOwnProposal(deps, principal, proposalId);
  const current = deps.store.proposals.revision(p.current_revision_id)!;
  const revision = insertRevision(deps, principal, p, current.number + 1, spec, serialised);
  const next = moveProposal(
    deps,
    p,
    'revise',
    principal.name,
    { current_revision_id: revision.id },
    {
      revision_id: revision.id,
      digest: revision.digest,
    },
  );
  return revisionResult(next, revision, proposalNextAction(next, revision));
}

/** confirm_revision: the current, error-free revision of a DRAFT goes IN_REVIEW. */
export function confirmRevision(
  deps: BrokerDeps,
  principal: Principal,
  proposalId: string,
  revisionId: string,
): { proposal_id: string; revision_id: string; state: ProposalState; next_action: string } {
  const p = loadOwnProposal(deps, principal, proposalId);
  if (revisionId !== p.current_revision_id)
    throw new BrokerError(
      'STALE_REVISION',
      `revision ${revisionId} is not the current revision`,
      `Confirm the current revision ${p.current_revision_id} (get_proposal shows it).`,
      { current_revision_id: p.current_revision_id },
    );
  const revision = deps.store.proposals.revision(revisionId)!;
  if (!isConfirmable(revision.findings)) {
    const errors = revision.findings.filter((f) => f.severity === 'error');
    throw new BrokerError(
      'POLICY_VIOLATION',
      `revision has ${errors.length} error finding(s): ${errors.map((f) => f.code).join(', ')}`,
      errors.map((f) => `${f.path}: ${f.hint}`).join(' '),
      { findings: errors },
    );
  }
  const next = moveProposal(
    deps,
    p,
    'confirm',
    principal.name,
    {},
    { revision_id: revisionId, digest: revision.digest },
  );
  deps.store.proposals.confirmRevision(revisionId, deps.clock.now());
  return {
    proposal_id: p.id,
    revision_id: revisionId,
    state: next.state,
    next_action: proposalNextAction(next, revision),
  };
}

/** cancel_proposal. */
export function cancelProposal(deps: BrokerDeps, principal: Principal, proposalId: string) {
  const p = loadOwnProposal(deps, principal, proposalId);
  // An approved proposal is final, but its task is not: point there instead of a bare "final".
  if (p.state === 'APPROVED' && p.task_id !== null)
    throw new BrokerError(
      'INVALID_STATE',
      `proposal ${p.id} is APPROVED; its task ${p.task_id} is what runs`,
      `To stop the run, call cancel_task with task_id ${p.task_id}.`,
      { state: p.state, task_id: p.task_id },
    );
  const next = moveProposal(deps, p, 'cancel', principal.name);
  return {
    proposal_id: next.id,
    state: next.state,
    next_action: 'Withdrawn; nothing will run. To run something, create a new proposal.',
  };
}

/** get_proposal. */
export function getProposal(deps: BrokerDeps, principal: Principal, proposalId: string): ProposalView {
  return proposalView(deps.store, loadVisibleProposal(deps, principal, proposalId));
}

/** list_proposals. */
export function listProposals(
  deps: BrokerDeps,
  principal: Principal,
  q: { state?: ProposalState | undefined; limit?: number | undefined; cursor?: string | undefined },
) {
  const { page, next_cursor } = fetchPage(q.limit, (limit) =>
    deps.store.proposals.list({
      limit,
      ...(canReadAll(principal) ? {} : { owner_id: principal.id }),
      ...(q.state ? { state: q.state } : {}),
      ...(q.cursor ? { before_id: q.cursor } : {}),
    }),
  );
  return { proposals: page.map((p) => proposalSummary(deps.store, p)), next_cursor };
}

/** wait_for_proposal: returns when the proposal leaves IN_REVIEW or after the timeout. */
export async function waitForProposal(
  deps: BrokerDeps,
  principal: Principal,
  proposalId: string,
  timeoutSeconds: number,
  signal?: AbortSignal,
): Promise<{ proposal: ProposalView; timed_out: boolean }> {
  const { value, timed_out } = await waitUntil(
    deps,
    proposalTopic(proposalId),
    timeoutSeconds * 1000,
    () => loadVisibleProposal(deps, principal, proposalId),
    (p) => p.state !== 'IN_REVIEW',
    signal,
  );
  return { proposal: proposalView(deps.store, value), timed_out };
}
