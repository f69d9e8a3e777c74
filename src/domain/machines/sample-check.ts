/**
 * What makes a worker's card list unusable as a whole (docs/state-machines.md): two cards with one index or one
 * uuid. Scheduling, leases (`lease_cards` is unique per worker and index) and the sandbox's device nodes
 * all name a card by its index, so such a sample is treated as a sampler error for that worker — its
 * cards UNKNOWN, an alert raised — rather than half-trusted.
 */

/** The first defect of a sample's card list, as a sentence; null when every index and uuid is unique. */
export function sampleDefect(cards: ReadonlyArray<{ index: number; uuid: string }>): string | null {
  const indexes = new Set<number>();
  const uuids = new Set<string>();
  for (const c of cards) {
    if (indexes.has(c.index))
      return `the card list names index ${c.index} twice (${cards.length} cards sampled); cards UNKNOWN until the sampler reports each card once`;
    if (uuids.has(c.uuid))
      return `the card list names uuid ${c.uuid} twice (${cards.length} cards sampled); cards UNKNOWN until the sampler reports each card once`;
    indexes.add(c.index);
    uuids.add(c.uuid);
  }
  return null;
}
