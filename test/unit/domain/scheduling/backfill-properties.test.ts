import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { BACKFILL_MARGIN_SECONDS, decide } from '../../../../src/domain/scheduling/decide.js';
import type {
  QueuedTaskView,
  SchedulingSnapshot,
  WorkerView,
} from '../../../../src/domain/scheduling/types.js';
import { SCHEDULING_CONFIG, simWorkerView } from '../../../support/scheduling-views.js';

/**
 * Backfill's promise as a property (ADR 0049): whatever the leases' ends (some unknown), cordons, limits
 * and shapes, an aged task's start bound never moves. The aged task goes first (higher priority), so its
 * reservation is made before any grant; its shadow is then the (need − held)-th earliest end of the
 * worker's uncordoned leased cards. After the pass, with the backfilled grants counted at their limits
 * plus the margin, the same (need − held now)-th earliest end is never later. A claimant's reservation and
 * a Slurm pool's are never backfilled at all, and no card is ever granted twice or granted and held.
 */

const NOW = 1_000;
const MIN = 60_000;
const MARGIN = BACKFILL_MARGIN_SECONDS;

/** The k-th (1-based) smallest of `ends`, or +Infinity where there are fewer. */
function kth(ends: number[], k: number): number {
  if (k <= 0) return Number.NEGATIVE_INFINITY;
  const sorted = [...ends].sort((a, b) => a - b);
  return sorted[k - 1] ?? Number.POSITIVE_INFINITY;
}

/** Mostly leased with a known end and uncordoned, so that most runs reserve with a shadow. */
const card = fc.record({
  leased: fc.constantFrom(true, true, false),
  // Minutes from now its lease ends by; null: not known; negative: stuck past its limit.
  endsIn: fc.option(fc.integer({ min: -10, max: 240 }), { nil: null, freq: 8 }),
  cordoned: fc.constantFrom(false, false, false, false, true),
});
const rarely = fc.constantFrom(false, false, false, true);

const small = fc.record({
  count: fc.integer({ min: 1, max: 4 }),
  limit: fc.option(fc.constantFrom(1, 60, 60, 600, 600, 1800, 3600, 14_400, 604_800), { nil: undefined }),
});

describe('backfill property', () => {
  it('never moves an aged task’s start bound, never into a claimant’s or Slurm reservation, never shares a card', () => {
    fc.assert(
      fc.property(
        fc.array(card, { minLength: 2, maxLength: 8 }),
        fc.integer({ min: 2, max: 8 }),
        fc.array(small, { minLength: 0, maxLength: 10 }),
        rarely,
        rarely,
        (cards, need, smalls, claimant, slurm) => {
          const base = simWorkerView('w0', [], cards.length);
          const worker: WorkerView = {
            ...base,
            ...(slurm ? { backend: 'slurm' as const } : {}),
            cards: base.cards.map((c, i) => ({
              ...c,
              leased: cards[i]!.leased,
              cordoned: cards[i]!.cordoned,
              ...(cards[i]!.leased && cards[i]!.endsIn !== null
                ? { lease_ends_by: NOW + cards[i]!.endsIn! * MIN }
                : {}),
            })),
          };
          const aged: QueuedTaskView = {
            task_id: 'aged',
            owner: 'alice',
            priority: 10,
            approved_at: NOW - 60 * MIN,
            cards: { count: need },
          };
          const tasks = smalls.map(
            (s, i): QueuedTaskView => ({
              task_id: `s${i}`,
              owner: 'bob',
              priority: 0,
              approved_at: NOW - MIN + i,
              cards: { count: s.count },
              ...(s.limit === undefined ? {} : { time_limit_seconds: s.limit }),
            }),
          );
          const snap = (queue: QueuedTaskView[]): SchedulingSnapshot => ({
            workers: [worker],
            tasks: queue,
            running_cards_by_owner: {},
            config: SCHEDULING_CONFIG,
            ...(claimant ? { reclaiming: ['aged'] } : {}),
          });
          const alone = decide(snap([aged]), NOW);
          const d = decide(snap([aged, ...tasks]), NOW);

          // No card granted twice, or granted and held.
          const seen = new Set<number>();
          for (const g of [...d.grants, ...d.reservations])
            for (const i of g.card_indexes) {
              expect(seen.has(i)).toBe(false);
              seen.add(i);
              expect(worker.cards[i]!.leased || worker.cards[i]!.cordoned).toBe(false);
            }

          const before = alone.reservations[0];
          if (before === undefined) return; // placed, or nothing to hold: nothing promised
          const after = d.reservations.find((r) => r.task_id === 'aged');
          expect(after).toBeDefined();
          const leasedEnds = worker.cards
            .filter((c) => c.leased && !c.cordoned)
            .map((c) => c.lease_ends_by ?? Number.POSITIVE_INFINITY);
          const shadow = kth(leasedEnds, need - before.card_indexes.length);
          if (claimant || slurm || shadow === Number.POSITIVE_INFINITY) {
            expect(after!.card_indexes).toEqual(before.card_indexes);
            return;
          }
          const limitOf = new Map(tasks.map((t) => [t.task_id, t.time_limit_seconds]));
          const grantedEnds = d.grants.flatMap((g) => {
            const limit = limitOf.get(g.task_id);
            const end = limit === undefined ? Number.POSITIVE_INFINITY : NOW + (limit + MARGIN) * 1000;
            return g.card_indexes.map(() => end);
          });
          const bound = kth([...leasedEnds, ...grantedEnds], need - after!.card_indexes.length);
          expect(bound).toBeLessThanOrEqual(shadow);
        },
      ),
      { numRuns: 400 },
    );
  });
});
