import type { GrantEvent } from '../grants/grant.js';
import type { ExecutionEvent } from '../machines/execution.js';
import type { LeaseEvent } from '../machines/lease.js';
import type { ProposalEvent } from '../machines/proposal.js';
import type { QualificationRunEvent } from '../machines/qualification-run.js';
import type { TaskEvent } from '../machines/task.js';

/**
 * The audit log's vocabulary: every `action` the master appends (src/store/audit-repo.ts). The strings
 * are the ones on disk; a new action is added here before it can be written. Rows read back (and
 * archive files) keep `action: string`, since older rows are whatever was written then.
 */

/** The events of each stored state machine, by the kind that names its audit subject type. */
export interface MachineEvents {
  proposal: ProposalEvent;
  task: TaskEvent;
  lease: LeaseEvent;
  qualification_run: QualificationRunEvent;
  execution: ExecutionEvent;
  standing_grant: GrantEvent;
}

/** A stored state machine (src/broker/machines/apply-move.ts). */
export type MachineKind = keyof MachineEvents;

/** What a machine's move writes: `<kind>.<event>`, e.g. `task.started`. */
export type MachineAuditAction = { [K in MachineKind]: `${K}.${MachineEvents[K]}` }[MachineKind];

/** The actions written outside the machines' moves, one call site (or two) each. */
export const AUDIT_ACTIONS = [
  'account.changed',
  'account.created',
  'account.deleted',
  'card.cordoned',
  'card.uncordoned',
  'execution.slurm_bound',
  'input.uploaded',
  'lease.granted',
  'principal.created',
  'principal.revoked',
  'proposal.created',
  'proposal.pruned',
  'proposal.revisions_pruned',
  'qualification.cancel_requested',
  'qualification.started',
  'review.auto_approved',
  'review.escalated',
  'standing_grant.budget_alert',
  'standing_grant.requested',
  'standing_grant.run_settled',
  'task.cancel_requested',
  'task.preempt_requested',
  'task.created',
  'task.reconciled',
  'worker.connected',
  'worker.drained',
  'worker.removed',
  'worker.undrained',
] as const;

/** An audit action: one of AUDIT_ACTIONS or a machine's move. */
export type AuditAction = (typeof AUDIT_ACTIONS)[number] | MachineAuditAction;

/** The action of `kind`'s move by `event`. */
export function machineAuditAction<K extends MachineKind>(
  kind: K,
  event: MachineEvents[K],
): MachineAuditAction {
  // `${K}.${MachineEvents[K]}` for a generic K does not reduce to the mapped union; the signature is the check.
  return `${kind}.${event}` as MachineAuditAction;
}
