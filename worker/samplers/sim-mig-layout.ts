import { BrokerError } from '../../src/contracts/errors.js';
import {
  findMigProfile,
  MIG_COMPUTE_SLICES,
  MIG_MEMORY_SLOTS,
  MIG_PROFILES,
  type MigCardModel,
  type MigProfile,
} from './mig-profiles.js';
import { SIM_MAX_CARDS } from './sim-sampler.js';

/**
 * `--gpus sim:N:mig=<layout>` (ADR 0046): N simulated cards, each split into the MIG instances the
 * layout names, e.g. `sim:2:mig=3g.40gb+2g.20gb+1g.10gb` or `sim:1:mig=1g.10gb*7`. Parsing and
 * validation: a layout is checked against a card model's profiles and placement rules exactly as
 * `nvidia-smi mig -cgi` would accept it, so a simulated layout is one a real card can have.
 * `parseGpusOption` (select-sampler.ts) reads it and the sim sampler reports the slices (ADR 0046).
 */

/** The model whose profiles a simulated card takes: an 80 GB seven-slice board, like `SIM_MEMORY_TOTAL_MIB`. */
export const SIM_MIG_MODEL: MigCardModel = 'H100-80GB';

/** Longest layout text accepted (seven instances of the longest names fit well within it). */
const MAX_LAYOUT_CHARS = 200;

/** One instance of a simulated layout: a GPU instance with one compute instance spanning it. */
export interface SimMigInstance {
  profile: string;
  profile_id: number;
  compute_slices: number;
  memory_mib: number;
  /** GPU-instance id given to it (1, 2, … in layout order); its compute instance is 0. */
  gpu_instance: number;
  /** Where it sits, in eighths of the card's memory (a placement `nvidia-smi mig -lgipp` offers). */
  placement: { start: number; size: number };
}

/** A parsed `sim:N:mig=<layout>`. */
export interface SimMigOption {
  count: number;
  model: MigCardModel;
  /** The same layout on every simulated card. */
  layout: SimMigInstance[];
}

/**
 * Why a layout was refused (`details.reason` of the `INVALID_INPUT` error):
 * - `SYNTAX`: not `sim:N:mig=<profile>[+<profile>|*K]…`.
 * - `COUNT`: N outside 1..SIM_MAX_CARDS.
 * - `UNKNOWN_PROFILE`: a profile the model does not have.
 * - `TOO_MANY_OF_PROFILE`: more instances of one profile than the model allows (e.g. three 3g.40gb).
 * - `TOO_MANY_INSTANCES`: more than 7 instances.
 * - `TOO_MANY_SLICES`: more than the card's 7 compute slices.
 * - `NO_PLACEMENT`: within every count, but no placement holds them all (e.g. 3g+3g+1g).
 */
export type SimMigLayoutReason =
  | 'SYNTAX'
  | 'COUNT'
  | 'UNKNOWN_PROFILE'
  | 'TOO_MANY_OF_PROFILE'
  | 'TOO_MANY_INSTANCES'
  | 'TOO_MANY_SLICES'
  | 'NO_PLACEMENT';

function refuse(reason: SimMigLayoutReason, message: string, hint: string, value: string): BrokerError {
  return new BrokerError('INVALID_INPUT', message, hint, { reason, value: value.slice(0, MAX_LAYOUT_CHARS) });
}

function profileNames(model: MigCardModel): string {
  return MIG_PROFILES[model].map((profile) => profile.name).join(', ');
}

/** True when `value` asks for simulated MIG cards (`sim:N:mig=…`), whether or not it is valid. */
export function isSimMigOption(value: string): boolean {
  return /^sim:[^:]*:mig=/.test(value);
}

/** Parses `sim:N:mig=<layout>`; throws `INVALID_INPUT` (`details.reason`, a hint) when it cannot be had. */
export function parseSimMigOption(value: string, model: MigCardModel = SIM_MIG_MODEL): SimMigOption {
  const match = /^sim:(\d{1,3}):mig=(.*)$/s.exec(value);
  if (!match?.[1] || match[2] === undefined) {
    throw refuse(
      'SYNTAX',
      `--gpus "${value.slice(0, 80)}" is not sim:N:mig=<layout>`,
      'write e.g. sim:2:mig=3g.40gb+2g.20gb+1g.10gb (profiles joined by +, a repeat as 1g.10gb*7)',
      value,
    );
  }
  const count = Number(match[1]);
  if (count < 1 || count > SIM_MAX_CARDS) {
    throw refuse(
      'COUNT',
      `sim:${count} is not 1..${SIM_MAX_CARDS} cards`,
      `use sim:1 to sim:${SIM_MAX_CARDS}`,
      value,
    );
  }
  return { count, model, layout: parseSimMigLayout(match[2], model) };
}

/** Parses and places one layout (`3g.40gb+2g.20gb+1g.10gb`, `1g.10gb*7`) on one card of `model`. */
export function parseSimMigLayout(layout: string, model: MigCardModel = SIM_MIG_MODEL): SimMigInstance[] {
  if (layout.length === 0 || layout.length > MAX_LAYOUT_CHARS || !/^[a-z0-9.+*]+$/.test(layout)) {
    throw refuse(
      'SYNTAX',
      `MIG layout "${layout.slice(0, 80)}" is not <profile>[+<profile>]… (at most ${MAX_LAYOUT_CHARS} characters)`,
      `profiles of ${model}: ${profileNames(model)}; e.g. 3g.40gb+2g.20gb+1g.10gb or 1g.10gb*7`,
      layout,
    );
  }
  const profiles: MigProfile[] = [];
  for (const term of splitTerms(layout)) {
    const [name = '', times = '1'] = term.split('*');
    const profile = findMigProfile(model, name);
    if (!profile) {
      throw refuse(
        'UNKNOWN_PROFILE',
        `${model} has no MIG profile "${name.slice(0, 40)}"`,
        `profiles of ${model}: ${profileNames(model)}`,
        layout,
      );
    }
    if (!/^[1-9]$/.test(times)) {
      throw refuse(
        'SYNTAX',
        `"${term.slice(0, 40)}" repeats a profile ${times.slice(0, 8)} times`,
        'repeat a profile 1 to 7 times: 1g.10gb*7',
        layout,
      );
    }
    for (let i = 0; i < Number(times); i += 1) profiles.push(profile);
  }
  checkCounts(profiles, model, layout);
  const starts = place(profiles);
  if (!starts) {
    throw refuse(
      'NO_PLACEMENT',
      `${layout} does not fit on one ${model}: no placement holds all ${profiles.length} instances`,
      'each profile has fixed start slots (3g at 0 or 4, 4g at 0, 2g at 0/2/4, 1g anywhere in 0..6); drop or shrink an instance, e.g. 3g+3g leaves no room for a 1g',
      layout,
    );
  }
  return profiles.map((profile, i) => ({
    profile: profile.name,
    profile_id: profile.id,
    compute_slices: profile.compute_slices,
    memory_mib: profile.memory_mib,
    gpu_instance: i + 1,
    placement: { start: starts[i] ?? 0, size: profile.placement_size },
  }));
}

/** Terms joined by `+`, keeping a media-extension suffix (`1g.10gb+me`) with its profile. */
function splitTerms(layout: string): string[] {
  const terms: string[] = [];
  for (const part of layout.split('+')) {
    const previous = terms.length - 1;
    if (/^me/.test(part) && previous >= 0) terms[previous] = `${terms[previous]}+${part}`;
    else terms.push(part);
  }
  if (terms.some((term) => term === '' || (term.match(/\*/g)?.length ?? 0) > 1)) {
    throw refuse(
      'SYNTAX',
      `MIG layout "${layout.slice(0, 80)}" has an empty or doubled term`,
      'join profiles with single +, e.g. 3g.40gb+1g.10gb',
      layout,
    );
  }
  return terms;
}

function checkCounts(profiles: readonly MigProfile[], model: MigCardModel, layout: string): void {
  if (profiles.length > MIG_COMPUTE_SLICES) {
    throw refuse(
      'TOO_MANY_INSTANCES',
      `${layout} has ${profiles.length} instances; a card has at most ${MIG_COMPUTE_SLICES}`,
      'use at most 7 instances per card',
      layout,
    );
  }
  const slices = profiles.reduce((sum, profile) => sum + profile.compute_slices, 0);
  if (slices > MIG_COMPUTE_SLICES) {
    throw refuse(
      'TOO_MANY_SLICES',
      `${layout} takes ${slices} compute slices; a ${model} has ${MIG_COMPUTE_SLICES}`,
      'the Ng of the profiles must add up to 7 or less',
      layout,
    );
  }
  for (const profile of new Set(profiles)) {
    const n = profiles.filter((p) => p === profile).length;
    if (n > profile.max_instances) {
      throw refuse(
        'TOO_MANY_OF_PROFILE',
        `${layout} has ${n} × ${profile.name}; a ${model} allows ${profile.max_instances}`,
        `at most ${profile.max_instances} × ${profile.name} per card`,
        layout,
      );
    }
  }
}

/** A start slot per instance such that none overlap, largest first (at most 7 instances: tiny search). */
function place(profiles: readonly MigProfile[]): number[] | null {
  const order = profiles
    .map((_, i) => i)
    .sort((a, b) => (profiles[b]?.placement_size ?? 0) - (profiles[a]?.placement_size ?? 0));
  const starts: number[] = new Array(profiles.length).fill(-1);
  const fill = (k: number, used: number): boolean => {
    if (k === order.length) return true;
    const i = order[k] as number;
    const profile = profiles[i] as MigProfile;
    for (const start of profile.placements) {
      const mask = ((1 << profile.placement_size) - 1) << start;
      if (start + profile.placement_size > MIG_MEMORY_SLOTS || (used & mask) !== 0) continue;
      starts[i] = start;
      if (fill(k + 1, used | mask)) return true;
    }
    return false;
  };
  return fill(0, 0) ? starts : null;
}
