import { type CardSample, migCardIndex } from '../../src/contracts/sample.js';
import type { MigProblem } from './mig-parse.js';
import type { MigJoin, MigSlice } from './mig-slices.js';

/**
 * Turns the MIG join (mig-slices.ts) into cards of a sample (docs/decisions/0046-mig-slices-as-cards.md):
 * each card in MIG mode keeps its row with `mig_mode: 'enabled'` (it is never leased whole), and each
 * of its compute instances follows as a card of its own, with the encoded index, the parent's model,
 * the instance's memory and a `mig` block. Pure.
 *
 * A slice whose `MIG-` uuid or capability minors could not be read is still reported, so an operator
 * sees it, but with health `unknown` and the join's problem as its reason, and a uuid that is no
 * `MIG-` uuid: the scheduler never grants such a slice (slots.ts), since the sandbox could not bind it.
 */

/** The uuid of a slice whose `MIG-` uuid is unknown: never a `MIG-` uuid, so never bindable. */
export function unresolvedSliceUuid(
  slice: Pick<MigSlice, 'parent_uuid' | 'gpu_instance' | 'compute_instance'>,
): string {
  return `unresolved:${slice.parent_uuid}/${slice.gpu_instance}/${slice.compute_instance}`.slice(0, 128);
}

/**
 * The sample with every MIG card marked and its slices appended after all cards. Slices of a card the
 * core query did not list are dropped (the join's `NO_PARENT` covers that); `problems` of the join that
 * name a slice become its health reasons.
 */
export function withMigSlices(cards: readonly CardSample[], join: MigJoin): CardSample[] {
  const byIndex = new Map(cards.map((card) => [card.index, card]));
  const out = cards.map((card) =>
    join.migCards.includes(card.index) ? { ...card, mig_mode: 'enabled' as const } : card,
  );
  for (const slice of join.slices) {
    const parent = byIndex.get(slice.parent_index);
    if (parent === undefined) continue;
    out.push(sliceCard(slice, parent, problemsOf(slice, join.problems)));
  }
  return out;
}

function sliceCard(slice: MigSlice, parent: CardSample, problems: string[]): CardSample {
  const missing: string[] = [];
  if (slice.mig_uuid === null) missing.push('its MIG- uuid is unknown');
  if (slice.gi_access_minor === null || slice.ci_access_minor === null)
    missing.push('a capability minor is unknown');
  const reasons = [...missing, ...problems].slice(0, 32).map((r) => r.slice(0, 256));
  return {
    index: migCardIndex(slice.parent_index, slice.gpu_instance, slice.compute_instance),
    uuid: slice.mig_uuid ?? unresolvedSliceUuid(slice),
    model: parent.model,
    memory_used_mib: slice.memory_used_mib,
    memory_total_mib: slice.memory_total_mib,
    // nvidia-smi reports no utilisation, temperature or power per instance.
    utilization_pct: null,
    temperature_c: null,
    power_w: null,
    health: missing.length > 0 ? 'unknown' : parent.health,
    health_reasons: missing.length > 0 ? reasons : parent.health_reasons,
    processes: [],
    simulated: parent.simulated,
    mig: {
      parent_index: slice.parent_index,
      parent_uuid: slice.parent_uuid,
      profile: slice.profile.slice(0, 64),
      gpu_instance_profile: slice.gpu_instance_profile.slice(0, 64),
      gpu_instance: slice.gpu_instance,
      compute_instance: slice.compute_instance,
      compute_slices: slice.compute_slices,
      gi_access_minor: slice.gi_access_minor,
      ci_access_minor: slice.ci_access_minor,
      memory_source: slice.memory_source,
    },
  };
}

/** The join's messages that name this slice (`GPU 0 instance 2/0: …`). */
function problemsOf(slice: MigSlice, problems: readonly MigProblem[]): string[] {
  const where = `GPU ${slice.parent_index} instance ${slice.gpu_instance}/${slice.compute_instance}:`;
  return problems.filter((p) => p.message.startsWith(where)).map((p) => p.message);
}
