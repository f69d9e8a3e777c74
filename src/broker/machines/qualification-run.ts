import type { EvidenceDocument } from '../../../qualification/verify/evidence.js';
import {
  QUALIFICATION_RUN_TABLE,
  type QualificationRunEvent,
  transitionQualificationRun,
  verdictEvent,
} from '../../domain/machines/qualification-run.js';
import type { QualificationRunRecord } from '../../store/qualification-repo.js';
import type { BrokerDeps } from '../deps.js';
import { CARDS_TOPIC, qualificationTopic } from '../topics.js';
import { applyMove } from './apply-move.js';

/** How a run ends: with the runner's evidence (its verdict is the event), or cancelled with a reason. */
export type RunOutcome = { evidence: EvidenceDocument } | { cancelled: string };

/** The event an outcome is. */
export function outcomeEvent(outcome: RunOutcome): QualificationRunEvent {
  return 'evidence' in outcome ? verdictEvent(outcome.evidence.verdict) : 'cancel';
}

/** Whether the run can still take `event` (false once it ended: a late outcome is left alone). */
export function canMoveQualificationRun(run: QualificationRunRecord, event: QualificationRunEvent): boolean {
  return transitionQualificationRun(run.state, event).ok;
}

/**
 * The only place a run's state is assigned: applies the outcome's event through `applyMove`
 * (QUALIFICATION_RUN_TABLE, compare-and-set on the stored state, audit row `qualification_run.<event>`,
 * notifications after commit). The evidence and its digest are written with the verdict and never change
 * afterwards (no move leaves a final state). Throws INVALID_STATE or CONFLICT. Call inside a transaction.
 */
export function moveQualificationRun(
  deps: Pick<BrokerDeps, 'store' | 'clock' | 'notifier'>,
  run: QualificationRunRecord,
  outcome: RunOutcome,
  actor: string,
): QualificationRunRecord {
  const evidence = 'evidence' in outcome ? (outcome.evidence as unknown as Record<string, unknown>) : null;
  const digest = 'evidence' in outcome ? outcome.evidence.digest : null;
  const detail = 'cancelled' in outcome ? outcome.cancelled : null;
  return applyMove(deps, {
    kind: 'qualification_run',
    table: QUALIFICATION_RUN_TABLE,
    record: run,
    event: outcomeEvent(outcome),
    actor,
    next: (to, now) => ({ ...run, state: to, evidence, digest, detail, updated_at: now, finished_at: now }),
    save: (next, expected) => deps.store.qualifications.update(next, expected),
    data: { worker_id: run.worker_id, digest, detail },
    topics: [qualificationTopic(run.id), CARDS_TOPIC],
  });
}
