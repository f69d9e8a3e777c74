import { inspectText, type TextInspection } from '../domain/policy/text-inspection.js';
import type { BrokerDeps } from './deps.js';
import { verifiedBlob } from './verified-blob.js';

/**
 * The text inspection of an input blob, remembered per (owner, sha256, path) (docs/security.md "Fair share between principals"): a
 * spec's findings re-read, re-hashed and re-inspected every input it names, up to 64 MiB a call, so a
 * flood of explain_grant calls on a spec naming large inputs held the event loop ~200 ms a call (other
 * clients' p50 ×300). An inspection is a function of the bytes (fixed by the sha256) and the path, so a
 * remembered one is the answer; the bytes are read and re-hashed once, when first inspected.
 *
 * The key includes the owner: whether a call is fast never says whether another principal inspected the
 * same bytes (docs/security.md "Fair share between principals"). Bounded by entries, least recently
 * used first out; an entry is a few hundred bytes (at most MAX_REPORTED_PLACES places).
 */

/** Most remembered inspections per master (its runtime's `inspections`, src/broker/runtime.ts). */
export const INSPECTION_MEMO_ENTRIES = 8192;

/** Whether the inspection of `sha256` as `ownerId`'s input at `path` is remembered (nothing is read). */
export function isInspected(deps: BrokerDeps, ownerId: string, sha256: string, path: string): boolean {
  return deps.runtime.inspections.has(`${ownerId}\0${sha256}\0${path}`);
}

/** The inspection of `sha256` as `ownerId`'s input at `path`; throws as verifiedBlob when not stored. */
export function inspectedInput(
  deps: BrokerDeps,
  ownerId: string,
  sha256: string,
  path: string,
): TextInspection {
  const memo = deps.runtime.inspections;
  const key = `${ownerId}\0${sha256}\0${path}`;
  const known = memo.get(key);
  if (known) {
    // Map order is insertion order: re-inserting makes it the most recently used.
    memo.delete(key);
    memo.set(key, known);
    return known;
  }
  const inspection = inspectText(path, verifiedBlob(deps, ownerId, sha256));
  memo.set(key, inspection);
  if (memo.size > INSPECTION_MEMO_ENTRIES) memo.delete(memo.keys().next().value!);
  return inspection;
}
