import { type FairSimOptions, type FairSimResult, simulateFairShare } from './fair-sim.js';
import { type BenchSection, type OpResult, summarise } from './stats.js';
import { decideBackfillRow, decideFairRow } from './test-bounds.js';

/**
 * `npm run bench -- --only fairness` (docs/performance.md "Fair share"): three
 * accounts weighted 1:1:2 submitting without pause (each keeps 6 tasks queued, 1/2/4/8 cards, 2-10
 * minutes each) onto 16 simulated cards on two workers, 24 simulated hours through decide() as the
 * master drives it (bench/fair-sim.ts), usage decayed with the default half-life (6 h). Measured from
 * the first pass at which all three accounts have held cards, and a quarter of the run is past.
 *
 * Rows: fair share (the order of src/domain/scheduling/fair-order.ts), first come (one queue, the order
 * before accounts) and fair share without reservations (what the reservations for aged tasks cost in
 * busy cards, and what they buy in 8-card waits), then the pass time at 64 workers × 8 cards and 10,000
 * queued tasks across 50 accounts against one account. The latencies are the 8-card tasks' waits in
 * simulated minutes (p50/p99/max columns, as ms × 60,000 would be unreadable). An error is a target
 * missed: a share more than 5 % off its weight's, an 8-card task past its bound once it leads its
 * account's 8-card tasks (reservation age + 2 × the longest time limit and the backfill margin: 52 min;
 * without limits, reservation age + 2 × the longest task: 30 min), or fewer than 95 % of the cards busy.
 * Tasks ask twice their run as `time_limit_seconds`, rounded up to a minute (`limitFactor`), so tasks
 * that end in time backfill into reservations (ADR 0049); a row without limits shows the pool without.
 */

const WORKLOAD: FairSimOptions = {
  accounts: { a: 1, b: 1, c: 2 },
  hours: 24,
  sizes: [1, 2, 4, 8],
  halfLifeSeconds: 6 * 3600,
  reservationAfterSeconds: 600,
  durationSeconds: [120, 600],
};
const TARGET: Record<string, number> = { a: 0.25, b: 0.25, c: 0.5 };
/** Reservation age + 2 × (the longest task's limit, twice its 10 min, + the 60 s margin), in ms. */
const LEAD_BOUND_MS = (600 + 2 * (1200 + 60)) * 1000;
/** Without time limits: reservation age + 2 × the longest task, in ms. */
const BARE_BOUND_MS = (600 + 2 * 600) * 1000;

const pct = (x: number) => `${(x * 100).toFixed(1)} %`;
const minutes = (ms: number) => (ms / 60_000).toFixed(1);

function row(
  label: string,
  r: FairSimResult,
  seconds: number,
  fair: boolean,
  bound = LEAD_BOUND_MS,
  busyTarget = 0.95,
): OpResult {
  const shareErrors = Object.entries(r.shares).filter(([a, s]) => Math.abs(s / TARGET[a]! - 1) > 0.05);
  const lead = [...r.leadWaits].sort((a, b) => a - b);
  const late = lead.filter((w) => w > bound).length;
  const errors = fair ? shareErrors.length + late + (r.utilisation < busyTarget ? 1 : 0) : 0;
  const result = summarise(
    'fairness',
    label,
    r.widestWaits.map((w) => w / 60_000),
    errors,
    seconds,
    [
      `shares ${Object.entries(r.shares)
        .map(([a, s]) => `${a} ${pct(s)}`)
        .join(' / ')} (target 25 / 25 / 50)`,
      `busy ${pct(r.utilisation)} (target ≥ ${pct(busyTarget)}), idle: reserved ${pct(r.reservedIdle)} (of it beside a whole 8-card task ${pct(r.reservedBesideWide)}), other ${pct(r.otherIdle)}`,
      `8-card wait in min (columns: since approval); since leading its account's 8-card tasks p50 ${minutes(lead[lead.length >> 1] ?? 0)} max ${minutes(lead.at(-1) ?? 0)} (bound ${minutes(bound)})`,
      `small tasks' wait p50/max min: ${[1, 2, 4]
        .map((n) => {
          const w = [...(r.waits[n] ?? [])].sort((a, b) => a - b);
          return `${n}: ${minutes(w[w.length >> 1] ?? 0)}/${minutes(w.at(-1) ?? 0)}`;
        })
        .join(', ')}`,
    ].join('; '),
  );
  return result;
}

function timedSim(opts: FairSimOptions): { r: FairSimResult; seconds: number } {
  const started = performance.now();
  const r = simulateFairShare(opts);
  return { r, seconds: (performance.now() - started) / 1000 };
}

/** See the module note. */
export const fairnessSection: BenchSection = {
  name: 'fairness',
  description:
    'three accounts 1:1:2 on 16 simulated cards, 24 simulated hours: shares, busy cards, 8-card waits (min); the pass across 50 accounts',
  async run() {
    const fair = timedSim(WORKLOAD);
    const bare = timedSim({ ...WORKLOAD, limitFactor: null });
    const fifo = timedSim({ ...WORKLOAD, fair: false });
    const noReservations = timedSim({ ...WORKLOAD, reservationAfterSeconds: 1e9 });
    return [
      row('fair share, limits 2× the run (backfill)', fair.r, fair.seconds, true),
      // Without limits nothing backfills: the bound is tighter and 95 % busy is not expected.
      row('fair share, no time limits', bare.r, bare.seconds, true, BARE_BOUND_MS, 0.9),
      row('first come (before accounts)', fifo.r, fifo.seconds, false),
      row('fair share, no reservations', noReservations.r, noReservations.seconds, false),
      decideFairRow('fairness'),
      decideFairRow('fairness', true),
      decideBackfillRow(),
    ];
  },
};
