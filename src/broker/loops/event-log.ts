import type { AuditEvent } from '../../store/audit-repo.js';
import type { BrokerDeps } from '../deps.js';

/**
 * The server log tells what happened, not only what workers did (docs/operations.md): every committed
 * audit event — proposals created, confirmed, reviewed or cancelled, tasks created and ended, leases
 * granted and released, cordons, qualification runs, principals — becomes one info line, once its
 * transaction committed (a rolled-back change is never logged). Worker sessions log themselves.
 */

/** Actions already logged where they happen. */
const LOGGED_ELSEWHERE: ReadonlySet<string> = new Set(['worker.connected']);

/** Starts logging audit events through `deps.logger`. */
export function logAuditEvents(deps: Pick<BrokerDeps, 'store' | 'logger'>): void {
  deps.store.audit.observe((e) => {
    if (LOGGED_ELSEWHERE.has(e.action)) return;
    deps.store.afterCommit(() => deps.logger.info(eventFields(e), eventLine(e)));
  });
}

/** `proposal.approve prop_… by rita` and, when there is one, the state change. */
export function eventLine(e: Pick<AuditEvent, 'action' | 'subject_id' | 'actor' | 'data'>): string {
  const d = (e.data ?? {}) as { from?: unknown; to?: unknown };
  const move = typeof d.from === 'string' && typeof d.to === 'string' ? ` (${d.from} → ${d.to})` : '';
  return `${e.action} ${e.subject_id} by ${e.actor}${move}`;
}

function eventFields(e: AuditEvent): Record<string, unknown> {
  return { event: e.action, subject: e.subject_id, actor: e.actor, audit_seq: e.seq };
}
