import { HOST_ASKS, type HostAsk } from '../policy/task-limits.js';
import type { QueuedTaskView } from './types.js';

/** A queued task's card requirement, normalised once per pass, and how a card's model is matched. */

/** A task's card requirement, normalised once. Tasks with the same `key` are placed identically. */
export interface Requirement {
  key: string;
  need: number;
  /** The model as the task gave it (for messages), or null. */
  model: string | null;
  /** The model as padded lower-case words, or null when any model will do. */
  modelWords: string | null;
  minMemoryMib: number | null;
  /** Pinned worker id, or null. */
  worker: string | null;
  /** The qualification run the task belongs to, or null: it matches only cards reserved for that run. */
  run: string | null;
  /** A container task: only workers with a container engine may take it. */
  container: boolean;
  /** Named data mounts, sorted: only workers offering all of them may take it. */
  mounts: string[];
  /** Multi-node (`cards.per_node`): only Slurm pool workers may take it; null for one host. */
  perNode: number | null;
  /**
   * MIG slices (docs/decisions/0046-mig-slices-as-cards.md): `never` whole cards only (every spec that
   * does not ask), `allowed` a slice or a whole card, the smallest first (`cards.allow_mig`), or slices of
   * one profile only (`cards.mig_profile`).
   */
  mig: 'never' | 'allowed' | { profile: string };
  /** What the spec asks of the host-bound limits: only a host that can give them may take it. */
  hostAsks: Partial<Record<HostAsk, number>>;
  /**
   * Padded model words of the cards it may not take this pass: the models whose quota its account line
   * has filled (ADR 0048, `withoutModels`); null: none.
   */
  excluded: readonly string[] | null;
}

/**
 * Requirements already read, by task view object. The caller owns it (the scheduler keeps one across
 * passes and hands the same view of an unchanged queued task to each), so a pass over a long queue does
 * not rebuild every key, and this module keeps no state: a view is never mutated, so its requirement is
 * the same whenever it is read.
 */
export type RequirementCache = WeakMap<QueuedTaskView, Requirement>;

/** Reads a queued task's requirement, through `cache` when given; treat it as read-only. */
export function requirementOf(task: QueuedTaskView, cache?: RequirementCache): Requirement {
  let req = cache?.get(task);
  if (req === undefined) {
    req = readRequirement(task);
    cache?.set(task, req);
  }
  return req;
}

function readRequirement(task: QueuedTaskView): Requirement {
  const model = task.cards.model ?? null;
  const minMemoryMib = task.cards.min_memory_mib ?? null;
  const worker = task.worker ?? null;
  const run = task.run_id ?? null;
  const container = task.runtime === 'container';
  const mounts = [...(task.mounts ?? [])].sort();
  const perNode = task.cards.per_node ?? null;
  const profile = task.cards.mig_profile;
  const mig: Requirement['mig'] =
    profile !== undefined ? { profile } : task.cards.allow_mig === true ? 'allowed' : 'never';
  const hostAsks: Partial<Record<HostAsk, number>> = {};
  for (const name of HOST_ASKS) {
    const ask = task.limits?.[name];
    if (ask !== undefined) hostAsks[name] = ask;
  }
  return {
    key: JSON.stringify([
      task.cards.count,
      model,
      minMemoryMib,
      worker,
      run,
      container,
      mounts,
      perNode,
      typeof mig === 'string' ? mig : `mig:${mig.profile}`,
      HOST_ASKS.map((n) => hostAsks[n] ?? null),
    ]),
    need: task.cards.count,
    model,
    modelWords: model === null ? null : modelWords(model),
    minMemoryMib,
    worker,
    run,
    container,
    mounts,
    perNode,
    mig,
    hostAsks,
    excluded: null,
  };
}

/**
 * `req` kept off the cards whose model words hold any of `full.words` (padded model-quota keys, ADR 0048): a
 * shape of its own, so the pool's per-shape caches stay right. `cache` is the pass's (decide.ts), so a
 * queue of like tasks builds each narrowed shape once.
 */
export function withoutModels(
  req: Requirement,
  full: { readonly words: readonly string[]; readonly key: string },
  cache: NarrowedCache,
): Requirement {
  // By the set of models and then the shape: no key is built for a task whose pair was seen before.
  let byShape = cache.get(full.key);
  if (byShape === undefined) {
    byShape = new Map();
    cache.set(full.key, byShape);
  }
  let narrowed = byShape.get(req.key);
  if (narrowed === undefined) {
    narrowed = {
      ...req,
      key: `${req.key}|without|${full.key}`,
      excluded: [...(req.excluded ?? []), ...full.words],
    };
    byShape.set(req.key, narrowed);
  }
  return narrowed;
}

/** One pass's narrowed requirements (`withoutModels`), by the excluded models' key, then by shape. */
export type NarrowedCache = Map<string, Map<string, Requirement>>;

/**
 * Whether a card's model satisfies a wanted model: case-insensitive, on whole words, ignoring
 * punctuation. "a100" and "A100-SXM4" match "NVIDIA A100-SXM4-80GB", "A10" does not (a plain substring
 * test would hand an A100 to a task that asked for an A10); "K100" matches Hygon's "DCU K100_AI".
 */
export function modelMatches(cardModel: string, wanted: string): boolean {
  const needle = modelWords(wanted);
  return needle !== '' && modelWords(cardModel).includes(needle);
}

/** Lower-case letter/digit words joined by single spaces and padded with one space each side. */
export function modelWords(model: string): string {
  const words = model
    .toLowerCase()
    .split(/[^\p{L}\p{N}]+/u)
    .filter((w) => w !== '');
  return words.length === 0 ? '' : ` ${words.join(' ')} `;
}
