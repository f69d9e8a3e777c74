/**
 * Canonical JSON: object keys sorted by code point, no insignificant whitespace, `undefined` members
 * dropped. Digests of specs, audit rows and evidence documents are sha256 over this form, so the same
 * value always hashes the same on every process.
 */

/** Serialises `value` canonically. Throws on values JSON cannot represent (NaN, Infinity, bigint). */
export function canonicalJson(value: unknown): string {
  if (value === null) return 'null';
  switch (typeof value) {
    case 'boolean':
      return value ? 'true' : 'false';
    case 'number':
      if (!Number.isFinite(value)) throw new TypeError('canonicalJson: non-finite number');
      return JSON.stringify(value);
    case 'string':
      return JSON.stringify(value);
    case 'object': {
      if (Array.isArray(value))
        return `[${value.map((v) => canonicalJson(v === undefined ? null : v)).join(',')}]`;
      const obj = value as Record<string, unknown>;
      const keys = Object.keys(obj)
        .filter((k) => obj[k] !== undefined)
        .sort();
      return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(obj[k])}`).join(',')}}`;
    }
    default:
      throw new TypeError(`canonicalJson: cannot serialise ${typeof value}`);
  }
}

/**
 * canonicalJson of object `value` whose members named in `serialised` are already in canonical form
 * (each the canonicalJson of that member): the same text, without serialising those members again.
 */
export function canonicalJsonWith(
  value: Readonly<Record<string, unknown>>,
  serialised: Readonly<Record<string, string>>,
): string {
  const keys = Object.keys(value)
    .filter((k) => value[k] !== undefined)
    .sort();
  const member = (k: string) => (Object.hasOwn(serialised, k) ? serialised[k] : canonicalJson(value[k]));
  return `{${keys.map((k) => `${JSON.stringify(k)}:${member(k)}`).join(',')}}`;
}
