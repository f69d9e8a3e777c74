/**
 * The usage ledger's rows for one lease (docs/operations.md "Accounts and usage"): written once, when the
 * lease's cards stop being its task's, one row per card model (and whether those cards were simulated),
 * with cards × whole seconds held. Pure: the broker passes the lease, the models of its cards, and when
 * it ended.
 */

/** A card in sevenths: a MIG card has 7 compute slices. */
const SEVENTHS = 7;

/** A card of the lease with what its worker last said it is. */
export interface ChargedCard {
  model: string;
  simulated: boolean;
  /** A MIG slice: its compute slices, k of a card's 7, so it is k/7 of a card (ADR 0046); absent: a card. */
  mig_slices?: number;
}

/** One ledger row, as written. */
export interface UsageRow {
  model: string;
  simulated: boolean;
  cards: number;
  started_at: number;
  ended_at: number;
  card_seconds: number;
}

/**
 * The rows of a lease that held `cards` from `startedAt` to `endedAt` (ms): one per (model, simulated),
 * each with card-seconds = its cards × the whole seconds held (rounded up: a started second counts, so a
 * lease is never free). A clock that went backwards charges nothing rather than a negative amount. A
 * MIG slice of k compute slices counts as k/7 of a card: its row's card-seconds are the sevenths summed
 * × seconds / 7, rounded up to a whole card-second (in integers: whole cards stay exact).
 */
export function usageRows(cards: readonly ChargedCard[], startedAt: number, endedAt: number): UsageRow[] {
  const ended = Math.max(startedAt, endedAt);
  const seconds = Math.ceil((ended - startedAt) / 1000);
  const groups = new Map<string, { row: UsageRow; sevenths: number }>();
  for (const c of cards) {
    const key = `${c.simulated ? 1 : 0}\0${c.model}`;
    const group = groups.get(key);
    const sevenths = c.mig_slices ?? SEVENTHS;
    if (group) {
      group.row.cards++;
      group.sevenths += sevenths;
    } else
      groups.set(key, {
        row: {
          model: c.model,
          simulated: c.simulated,
          cards: 1,
          started_at: startedAt,
          ended_at: ended,
          card_seconds: 0,
        },
        sevenths,
      });
  }
  return [...groups.values()].map(({ row, sevenths }) => ({
    ...row,
    card_seconds: Math.ceil((sevenths * seconds) / SEVENTHS),
  }));
}
