import { BrokerError } from '../../contracts/errors.js';
import { applyTransition, type TransitionTable } from '../../domain/machines/state-machine.js';
import {
  type MachineEvents,
  type MachineKind,
  machineAuditAction,
} from '../../domain/retention/audit-action.js';
import type { BrokerDeps } from '../deps.js';

/**
 * The one way a stored state machine moves (proposals, tasks, leases, qualification runs, executions on
 * the master): the table decides, the row is
 * written with compare-and-set on its previous state, an audit row records the transition in the same
 * transaction, and notifications go out only after commit.
 */
export interface Move<K extends MachineKind, S extends string, R extends { id: string; state: S }> {
  /** Names the audit subject type and action prefix (`task.started`). */
  kind: K;
  table: TransitionTable<S, MachineEvents[K]>;
  record: R;
  event: MachineEvents[K];
  actor: string;
  /** Builds the new row for the target state. */
  next: (to: S, now: number) => R;
  /** Writes it if the stored state is still `expected`; false when another writer moved it first. */
  save: (next: R, expected: S) => boolean;
  /** Extra audit data besides `from` and `to`. */
  data?: Record<string, unknown>;
  /** Topics notified after commit; by the state moved to, where that decides. */
  topics: string[] | ((to: S) => string[]);
}

/** Applies a move; throws INVALID_STATE (with the events allowed from here) or CONFLICT. */
export function applyMove<K extends MachineKind, S extends string, R extends { id: string; state: S }>(
  deps: Pick<BrokerDeps, 'store' | 'clock' | 'notifier'>,
  m: Move<K, S, R>,
): R {
  const from = m.record.state;
  const t = applyTransition(m.table, from, m.event);
  if (!t.ok)
    throw new BrokerError(
      'INVALID_STATE',
      `${m.kind} ${m.record.id} is ${from}; "${m.event}" is not allowed there`,
      t.allowed.length ? `From ${from} you may: ${t.allowed.join(', ')}.` : `${from} is final.`,
      { state: from },
    );
  const now = deps.clock.now();
  const next = m.next(t.to, now);
  if (!m.save(next, from))
    throw new BrokerError(
      'CONFLICT',
      `${m.kind} ${m.record.id} changed concurrently`,
      'Read it again and retry.',
    );
  deps.store.audit.append({
    at: now,
    actor: m.actor,
    action: machineAuditAction(m.kind, m.event),
    subject_type: m.kind,
    subject_id: m.record.id,
    data: { from, to: t.to, ...m.data },
  });
  const topics = typeof m.topics === 'function' ? m.topics(t.to) : m.topics;
  deps.store.afterCommit(() => {
    for (const topic of topics) deps.notifier.notify(topic);
  });
  return next;
}
