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
