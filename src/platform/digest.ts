import { createHash } from 'node:crypto';
import { canonicalJson } from '../contracts/canonical-json.js';

/** sha256 of a string or bytes, as lowercase hex. */
export function sha256Hex(data: string | Uint8Array): string {
  return createHash('sha256').update(data).digest('hex');
}

/** sha256 of the canonical JSON of `value`: the digest of specs, requests and evidence. */
export function digestOf(value: unknown): string {
  return sha256Hex(canonicalJson(value));
}

/** A value's canonical JSON and its sha256, for a caller that needs both (one serialisation). */
export interface CanonicalForm {
  canonical: string;
  digest: string;
}

/** The canonical JSON of `value` and its sha256 (`digestOf(value)`), serialised once. */
export function canonicalForm(value: unknown): CanonicalForm {
  const canonical = canonicalJson(value);
  return { canonical, digest: sha256Hex(canonical) };
}
