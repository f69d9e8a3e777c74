import {
  type ComputeInstanceRow,
  type GpuInstanceRow,
  type MigDeviceRow,
  type MigMinors,
  type MigModeRow,
  type MigProblem,
  migMinorKey,
  type NvidiaList,
} from './mig-parse.js';
import { findMigProfile, type MigCardModel, migCardModel, parseMigProfileName } from './mig-profiles.js';

/**
 * Joins the parsed MIG outputs into slices: one per compute instance, each to become a card of its own
 * (docs/decisions/0046-mig-slices-as-cards.md). Pure; every gap is a `MigProblem` and a `null`
 * field, never a guessed value. The nvidia sampler calls it, and mig-cards.ts makes the cards.
 */

/** Largest card index a sample carries (CardSampleSchema). */
const MAX_GPU_INDEX = 255;
/** Largest GPU-instance and compute-instance ids the driver hands out (mig-minors runs gi0..gi14, ci0..ci7). */
const MAX_GPU_INSTANCE = 14;
const MAX_COMPUTE_INSTANCE = 7;

/** One compute instance of a card in MIG mode. */
export interface MigSlice {
  /** `<gpu-index>:mig:<gi>/<ci>`. */
  id: string;
  parent_index: number;
  parent_uuid: string;
  /** The parent's name as `nvidia-smi -L` prints it. */
  parent_name: string;
  /** The MIG table the parent takes (`mig-profiles.ts`), or null for a model without one. */
  parent_model: MigCardModel | null;
  gpu_instance: number;
  compute_instance: number;
  /** The compute instance's profile as printed (`3g.40gb`, or `1c.3g.40gb` for part of a GPU instance). */
  profile: string;
  /** The GPU instance's profile (`3g.40gb`). */
  gpu_instance_profile: string;
  /** Compute slices of this compute instance (1..7). */
  compute_slices: number;
  /** Memory of the GPU instance (shared by its compute instances), MiB; null when nothing says. */
  memory_total_mib: number | null;
  memory_used_mib: number | null;
  /** Where `memory_total_mib` came from: the tool's per-instance figure, or the model's -lgip table. */
  memory_source: 'instance' | 'profile-table' | null;
  /** What `CUDA_VISIBLE_DEVICES` takes: `MIG-<uuid>`, or `MIG-GPU-<uuid>/<gi>/<ci>` on R450; null if unknown. */
  mig_uuid: string | null;
  /** Minor of `/dev/nvidia-caps/nvidia-cap<N>` for GPU-instance access; null if unknown. */
  gi_access_minor: number | null;
  /** Minor of `/dev/nvidia-caps/nvidia-cap<N>` for compute-instance access; null if unknown. */
  ci_access_minor: number | null;
}

/** Everything the join reads; `devices` and `minors` may be absent (their fields are then null). */
export interface MigDiscovery {
  list: NvidiaList;
  modes: MigModeRow[];
  gpuInstances: GpuInstanceRow[];
  computeInstances: ComputeInstanceRow[];
  /** The `MIG devices:` table of plain `nvidia-smi` (maps current-format device numbers to GI/CI). */
  devices?: MigDeviceRow[] | null;
  minors?: MigMinors | null;
  /** A card's total memory by index (from the core query), to tell A100-40GB from -80GB. */
  memoryTotalMib?: ReadonlyMap<number, number | null>;
  /**
   * The `gpu<N>` of the capability names for a card index. The driver names them by the card's minor
   * number; the identity is the same assumption worker/sandbox/devices.ts makes (index = minor).
   */
  gpuMinor?: (index: number) => number;
}

/** The slices, the indexes of cards in MIG mode (never leased whole), and what could not be read. */
export interface MigJoin {
  slices: MigSlice[];
  migCards: number[];
  problems: MigProblem[];
}

function joinProblem(code: MigProblem['code'], message: string): MigProblem {
  return { code, source: 'join', message };
}

/** The slices of every card in MIG mode, joined from the parsed outputs (see `MigDiscovery`). */
export function joinMigSlices(input: MigDiscovery): MigJoin {
  const problems: MigProblem[] = [];
  const slices: MigSlice[] = [];
  const gpuMinor = input.gpuMinor ?? ((index: number) => index);
  const migCards = input.modes.filter((row) => row.mode === 'enabled').map((row) => row.index);

  for (const ci of input.computeInstances) {
    const where = `GPU ${ci.gpu_index} instance ${ci.gpu_instance}/${ci.compute_instance}`;
    const mode = input.modes.find((row) => row.index === ci.gpu_index);
    const listed = input.list.gpus.find((gpu) => gpu.index === ci.gpu_index);
    if (mode?.mode !== 'enabled') {
      problems.push(joinProblem('NO_PARENT', `${where}: the card is not listed in MIG mode`));
      continue;
    }
    const gi = input.gpuInstances.find(
      (row) => row.gpu_index === ci.gpu_index && row.gpu_instance === ci.gpu_instance,
    );
    if (!gi) {
      problems.push(
        joinProblem('NO_GPU_INSTANCE', `${where}: GPU instance ${ci.gpu_instance} is not in -lgi`),
      );
      continue;
    }
    if (
      ci.gpu_index > MAX_GPU_INDEX ||
      ci.gpu_instance > MAX_GPU_INSTANCE ||
      ci.compute_instance > MAX_COMPUTE_INSTANCE
    ) {
      problems.push(joinProblem('BAD_VALUE', `${where}: outside GPU 0..255, GI 0..14, CI 0..7`));
      continue;
    }
    const name = parseMigProfileName(ci.profile);
    if (!name || !parseMigProfileName(gi.profile)) {
      const bad = name ? gi.profile : ci.profile;
      problems.push(
        joinProblem('UNKNOWN_PROFILE', `${where}: "${bad.slice(0, 40)}" is not a MIG profile name`),
      );
      continue;
    }
    const parentName = listed?.name ?? '';
    const model = migCardModel(parentName, input.memoryTotalMib?.get(ci.gpu_index) ?? null);
    const profile = model ? findMigProfile(model, gi.profile) : null;
    if (model && !profile) {
      problems.push(joinProblem('UNKNOWN_PROFILE', `${where}: ${model} has no profile ${gi.profile}`));
    }

    const device = findDevice(input, ci);
    if (device.problem)
      problems.push(joinProblem(device.problem.code, `${where}: ${device.problem.message}`));
    const instance = input.devices?.find(
      (row) =>
        row.gpu_index === ci.gpu_index &&
        row.gpu_instance === ci.gpu_instance &&
        row.compute_instance === ci.compute_instance,
    );
    let memory: number | null = instance?.memory_total_mib ?? null;
    let source: MigSlice['memory_source'] = memory === null ? null : 'instance';
    if (memory === null && profile) {
      memory = profile.memory_mib;
      source = 'profile-table';
    }
    if (memory === null)
      problems.push(joinProblem('NO_MEMORY', `${where}: no memory figure for ${gi.profile}`));

    const minorGpu = gpuMinor(ci.gpu_index);
    const giMinor = input.minors?.get(migMinorKey(minorGpu, ci.gpu_instance)) ?? null;
    const ciMinor = input.minors?.get(migMinorKey(minorGpu, ci.gpu_instance, ci.compute_instance)) ?? null;
    if (giMinor === null || ciMinor === null) {
      problems.push(joinProblem('NO_MINOR', `${where}: no capability minor for its GPU or compute instance`));
    }

    slices.push({
      id: `${ci.gpu_index}:mig:${ci.gpu_instance}/${ci.compute_instance}`,
      parent_index: ci.gpu_index,
      parent_uuid: mode.uuid,
      parent_name: parentName,
      parent_model: model,
      gpu_instance: ci.gpu_instance,
      compute_instance: ci.compute_instance,
      profile: ci.profile,
      gpu_instance_profile: gi.profile,
      compute_slices: name.compute_slices,
      memory_total_mib: memory,
      memory_used_mib: instance?.memory_used_mib ?? null,
      memory_source: source,
      mig_uuid: device.uuid,
      gi_access_minor: giMinor,
      ci_access_minor: ciMinor,
    });
  }

  for (const device of input.list.migDevices) {
    if (!slices.some((slice) => slice.mig_uuid === device.uuid)) {
      problems.push(
        joinProblem(
          'NO_DEVICE',
          `GPU ${device.gpu_index} MIG device ${device.device} (${device.uuid}) matches no compute instance`,
        ),
      );
    }
  }
  slices.sort(
    (a, b) =>
      a.parent_index - b.parent_index ||
      a.gpu_instance - b.gpu_instance ||
      a.compute_instance - b.compute_instance,
  );
  return { slices, migCards, problems };
}

/**
 * The MIG device of a compute instance: by the R450 UUID's own /gi/ci, else by the MIG devices table's
 * device number, else — only when the card has exactly one compute instance and one MIG device — that one.
 */
function findDevice(
  input: MigDiscovery,
  ci: ComputeInstanceRow,
): { uuid: string | null; problem?: { code: MigProblem['code']; message: string } } {
  const ofCard = input.list.migDevices.filter((device) => device.gpu_index === ci.gpu_index);
  const legacy = ofCard.find(
    (device) =>
      device.legacy?.gpu_instance === ci.gpu_instance &&
      device.legacy.compute_instance === ci.compute_instance,
  );
  if (legacy) return { uuid: legacy.uuid };
  const row = input.devices?.find(
    (d) =>
      d.gpu_index === ci.gpu_index &&
      d.gpu_instance === ci.gpu_instance &&
      d.compute_instance === ci.compute_instance,
  );
  if (row) {
    const listed = ofCard.find((device) => device.device === row.device && device.legacy === null);
    if (listed) return { uuid: listed.uuid };
    return {
      uuid: null,
      problem: { code: 'NO_DEVICE', message: `MIG device ${row.device} is not in nvidia-smi -L` },
    };
  }
  const cisOfCard = input.computeInstances.filter((other) => other.gpu_index === ci.gpu_index);
  if (cisOfCard.length === 1 && ofCard.length === 1 && ofCard[0]?.legacy === null)
    return { uuid: ofCard[0].uuid };
  return {
    uuid: null,
    problem: {
      code: 'UNMAPPED_DEVICE',
      message: 'no MIG devices table row, so its MIG- uuid cannot be told',
    },
  };
}
