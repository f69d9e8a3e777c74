/**
 * Typed GPU GRES: which of a node's GPUs are MIG slices and which device files Slurm gives a job for
 * each (docs/decisions/0046-mig-slices-as-cards.md §6, docs/slurm.md "MIG slices"). Pure: text in, values
 * out; golden tests in test/unit/worker/slurm/cli/gres.test.ts.
 *
 * What Slurm says and where:
 *  - `scontrol show node`: `Gres=gpu:h100:1,gpu:3g.40gb:1,gpu:1g.10gb:2` — the node's GPUs by type, in
 *    slurm.conf's order. A job's `GRES=gpu:1g.10gb:1(IDX:2)` and the step's `SLURM_STEP_GPUS=2` name a
 *    GPU by its position on the node (IDX), not by a device number.
 *  - gres.conf (the operator's, beside slurm.conf): `Name=gpu Type=1g.10gb
 *    MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap21,/dev/nvidia-caps/nvidia-cap22` — the files
 *    of each GPU: a whole card's `File=/dev/nvidia<N>`, a slice's parent node and its GPU-instance and
 *    compute-instance capability nodes. With `AutoDetect=nvml` the types read
 *    `nvidia_a100_80gb_pcie_1g.10gb` (the model, `_`, the profile) and the files may be absent here.
 *
 * The positions, as Slurm 22.05.8 numbers them (seen on the local test cluster, `slurmd -G` and
 * `scontrol show job -d`): grouped by type in the order of the node's `Gres=`, and within one type in
 * gres.conf's order. So position k of a node is the k-th record of that order, and its files are the
 * record's files.
 */
import { expandHostlist } from './hostlist.js';

/** One GPU record of gres.conf: one device (a `File=` range is one record per file). */
export interface GresConfRecord {
  /** The nodes the line names (`NodeName=`); null when the line names none (every node). */
  nodes: string[] | null;
  /** `Type=`; null when untyped. */
  type: string | null;
  /** The device files of this GPU: one for `File=`, all of them for `MultipleFiles=`. */
  files: string[];
}

/** One typed item of a node's `Gres=`: `gpu:3g.40gb:2` → {type: '3g.40gb', count: 2}. */
export interface GresTypeCount {
  type: string | null;
  count: number;
}

/** One GPU of a node at its position (IDX): its type and, where gres.conf says, its files. */
export interface GresPosition {
  type: string | null;
  /** The MIG profile the type names (`1g.10gb`), null for a whole card. */
  profile: string | null;
  /** The files gres.conf gives it; null when gres.conf does not say (unread, AutoDetect, no line). */
  files: string[] | null;
}

/**
 * A MIG profile name: `1g.10gb`, `1g.10gb+me`, `1c.3g.40gb` (the names worker/samplers/mig-profiles.ts
 * `parseMigProfileName` takes apart; that module ranks beside this one, so the shape is repeated here and
 * a test holds the two together).
 */
const MIG_PROFILE = /^(?:([1-8])c\.)?([1-8])g\.\d{1,4}gb(?:[+-][a-z][a-z.,]{0,15})?$/;

/** The MIG profile a GRES type names: `1g.10gb`, `nvidia_a100_80gb_pcie_1g.10gb` → `1g.10gb`; else null. */
export function migProfileOfType(type: string | null): string | null {
  if (type === null) return null;
  const tail = type.slice(type.lastIndexOf('_') + 1).toLowerCase();
  const m = MIG_PROFILE.exec(tail);
  // A compute instance is never larger than its GPU instance (`3c.1g.10gb` is no profile).
  return m === null || Number(m[1] ?? 0) > Number(m[2]) ? null : tail;
}

/** `/dev/nvidia[0-3]` → four paths; `/dev/nvidia[0,2]`, a plain path → itself. Null on a bad range. */
function expandFileRange(path: string): string[] | null {
  const m = /^(.*)\[([0-9,-]+)\]$/.exec(path);
  if (m === null) return [path];
  const out: string[] = [];
  for (const part of (m[2] as string).split(',')) {
    const r = /^(\d+)(?:-(\d+))?$/.exec(part);
    if (r === null) return null;
    const a = Number(r[1]);
    const b = Number(r[2] ?? r[1]);
    if (b < a || b - a > 1024) return null;
    for (let i = a; i <= b; i++) out.push(`${m[1]}${i}`);
  }
  return out;
}

/** `a,b[0-1]` → ['a', 'b0', 'b1'] (commas inside brackets stay with their range). */
function splitFileList(value: string): string[] | null {
  const parts: string[] = [];
  let depth = 0;
  let cur = '';
  for (const ch of value) {
    if (ch === '[') depth++;
    if (ch === ']') depth = Math.max(0, depth - 1);
    if (ch === ',' && depth === 0) {
      parts.push(cur);
      cur = '';
    } else cur += ch;
  }
  if (cur !== '') parts.push(cur);
  const out: string[] = [];
  for (const p of parts) {
    const expanded = expandFileRange(p.trim());
    if (expanded === null) return null;
    out.push(...expanded);
  }
  return out;
}

/**
 * The GPU records of gres.conf text. Keys are case-insensitive, `#` starts a comment, lines that name
 * no GPU (`AutoDetect=`, `Name=mps`, a file-less `Count=`) give none; a line that cannot be read is left
 * out, so its GPUs have no files and are never bound (a slice of it is never granted).
 */
export function parseGresConf(text: string): GresConfRecord[] {
  const out: GresConfRecord[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.replace(/#.*$/, '').trim();
    if (line === '') continue;
    const kv = new Map<string, string>();
    for (const token of line.split(/\s+/)) {
      const eq = token.indexOf('=');
      if (eq > 0) kv.set(token.slice(0, eq).toLowerCase(), token.slice(eq + 1));
    }
    if ((kv.get('name') ?? '').toLowerCase() !== 'gpu') continue;
    let nodes: string[] | null = null;
    const nodeName = kv.get('nodename');
    if (nodeName !== undefined) {
      try {
        nodes = expandHostlist(nodeName);
      } catch {
        continue;
      }
    }
    const type = kv.get('type') ?? null;
    const multiple = kv.get('multiplefiles');
    const file = kv.get('file');
    if (multiple !== undefined) {
      const files = splitFileList(multiple);
      if (files !== null && files.length > 0) out.push({ nodes, type, files });
    } else if (file !== undefined) {
      for (const f of splitFileList(file) ?? []) out.push({ nodes, type, files: [f] });
    }
  }
  return out;
}

/** The GPU items of a node's `Gres=` in order (`gpu:8`, `gpu:a100:2(S:0)`, `gpu:1g.10gb:3`); others skipped. */
export function parseGresTypes(value: string | null | undefined): GresTypeCount[] {
  if (value === null || value === undefined) return [];
  const out: GresTypeCount[] = [];
  let depth = 0;
  let cur = '';
  const items: string[] = [];
  for (const ch of value) {
    if (ch === '(') depth++;
    if (ch === ')') depth = Math.max(0, depth - 1);
    if (ch === ',' && depth === 0) {
      items.push(cur);
      cur = '';
    } else cur += ch;
  }
  if (cur !== '') items.push(cur);
  for (const item of items) {
    const head = item.split('(')[0] as string;
    const segs = head.split(':');
    if (segs[0] !== 'gpu' || segs.length < 2) continue;
    const count = Number(segs[segs.length - 1]);
    if (!Number.isInteger(count) || count < 0) continue;
    out.push({ type: segs.length >= 3 ? segs.slice(1, -1).join(':') : null, count });
  }
  return out;
}

/**
 * A node's GPUs by position (IDX): the `Gres=` types in order, each type's positions taking that
 * type's gres.conf records for the node in file order (see the module note). Files are null where
 * gres.conf has fewer records of a type than `Gres=` counts, or none for the node.
 */
export function nodeGresPositions(
  node: string,
  types: readonly GresTypeCount[],
  records: readonly GresConfRecord[],
): GresPosition[] {
  const mine = records.filter((r) => r.nodes === null || r.nodes.includes(node));
  const out: GresPosition[] = [];
  for (const { type, count } of types) {
    // Slurm compares GRES types without regard to case.
    const ofType = mine.filter((r) => type === null || r.type?.toLowerCase() === type.toLowerCase());
    const complete = ofType.length === count;
    for (let k = 0; k < count; k++)
      out.push({
        type,
        profile: migProfileOfType(type),
        files: complete ? [...(ofType[k] as GresConfRecord).files] : null,
      });
  }
  return out;
}

/** What a MIG slice's files say (the driver's numbering, ADR 0046 §6): parent and both capability minors. */
export interface SliceFiles {
  /** The parent card's `/dev/nvidia<N>`. */
  parent: number;
  giAccessMinor: number;
  ciAccessMinor: number;
  /** GPU instance and compute instance, from the minors: `gpu<G>/gi<I>/access` = 3 + 135·G + 9·I, `ci<C>` = that + 1 + C. */
  gpuInstance: number;
  computeInstance: number;
}

/**
 * A slice's files taken apart: exactly one `…/nvidia<N>` and two `…/nvidia-caps/nvidia-cap<M>` whose
 * minors are a GPU instance of card N and a compute instance of it (never the config or monitor caps,
 * 1 and 2). Null for anything else: such a slice is never granted and never bound.
 */
export function sliceOfFiles(files: readonly string[]): SliceFiles | null {
  const cards: number[] = [];
  const caps: number[] = [];
  for (const f of files) {
    const card = /\/nvidia(\d{1,3})$/.exec(f);
    const cap = /\/nvidia-caps\/nvidia-cap(\d{1,7})$/.exec(f);
    if (card !== null) cards.push(Number(card[1]));
    else if (cap !== null) caps.push(Number(cap[1]));
    else return null;
  }
  if (cards.length !== 1 || caps.length !== 2) return null;
  const parent = cards[0] as number;
  const [giMinor, ciMinor] = [...caps].sort((a, b) => a - b) as [number, number];
  const giOffset = giMinor - 3 - 135 * parent;
  if (giOffset < 0 || giOffset % 9 !== 0) return null;
  const gpuInstance = giOffset / 9;
  const computeInstance = ciMinor - giMinor - 1;
  if (gpuInstance > 14 || computeInstance < 0 || computeInstance > 7 || parent > 255) return null;
  return { parent, giAccessMinor: giMinor, ciAccessMinor: ciMinor, gpuInstance, computeInstance };
}

/** Where a GRES device file is bound in a rank's sandbox: `/dev/nvidia<N>`, `/dev/nvidia-caps/nvidia-cap<M>`; null for any other file. */
export function sandboxDevicePath(file: string): string | null {
  const card = /\/(nvidia\d{1,3})$/.exec(file);
  if (card !== null) return `/dev/${card[1]}`;
  const cap = /\/nvidia-caps\/(nvidia-cap\d{1,7})$/.exec(file);
  if (cap !== null) return `/dev/nvidia-caps/${cap[1]}`;
  return null;
}

/** One card of a pool as Slurm knows it: its node, position (IDX) and GRES type. */
export interface PoolGresCard {
  node: string;
  /** The GPU's position on its node (`SLURM_STEP_GPUS`, a job's IDX). */
  position: number;
  /** Its GRES type (`h100`, `1g.10gb`); null when untyped. */
  type: string | null;
  /** The MIG profile the type names; null for a whole card. */
  profile: string | null;
}

/**
 * What the latest sample knew of the pool's GRES: each card's node, position and type (so a lease of
 * slices is submitted as `--gres=gpu:<type>:N`), and each node's device files by position, where the
 * operator's gres.conf says them (so each rank binds exactly the files Slurm gave it).
 */
export interface PoolGres {
  cards: ReadonlyMap<number, PoolGresCard>;
  /** Per node, per position, the files; null where gres.conf does not say. */
  files: ReadonlyMap<string, ReadonlyArray<readonly string[] | null>>;
  /** True when any node has a MIG slice: then whole cards are asked for by their type. */
  hasSlices: boolean;
}
