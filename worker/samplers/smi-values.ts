/**
 * Reading single values printed by nvidia-smi and hy-smi. The rule everywhere: a value the tool did not
 * measure (`[N/A]`, `[Not Supported]`, `N/A`, `[Unknown Error]`, empty) is `null`, never 0 — a 0 ECC count
 * or 0 % VRAM would claim a clean, free card when nothing was measured.
 */

/** True when the tool printed "not measured" rather than a value. */
export function isUnmeasured(raw: string): boolean {
  const value = raw.trim();
  if (value === '') return true;
  // nvidia-smi brackets every non-value ([N/A], [Not Supported], [Unknown Error], [Insufficient Permissions]).
  if (value.startsWith('[') && value.endsWith(']')) return true;
  return /^(n\/a|na|not supported|unknown|none|-)$/i.test(value);
}

/**
 * A number, tolerating the unit suffixes the tools print (`49.0C`, `118.0W`, `0.0%`, `81559 MiB`).
 * Null when unmeasured or not a number.
 */
export function parseNumber(raw: string): number | null {
  if (isUnmeasured(raw)) return null;
  const match = /^(-?\d+(?:\.\d+)?)\s*(?:%|c|°c|w|mib|mb|gib|mhz)?$/i.exec(raw.trim());
  if (!match?.[1]) return null;
  const value = Number(match[1]);
  return Number.isFinite(value) ? value : null;
}

/** A non-negative integer (index, pid), or null. */
export function parseIndex(raw: string): number | null {
  const value = raw.trim();
  return /^\d+$/.test(value) ? Number(value) : null;
}

/**
 * A yes/no flag (`Yes`, `No`, `True`, `False`, or a count where > 0 means yes), or null when unmeasured.
 * nvidia-smi prints `remapped_rows.pending` as Yes/No on most drivers and as a count on some.
 */
export function parseFlag(raw: string): boolean | null {
  if (isUnmeasured(raw)) return null;
  const value = raw.trim().toLowerCase();
  if (value === 'yes' || value === 'true' || value === 'enabled') return true;
  if (value === 'no' || value === 'false' || value === 'disabled') return false;
  const count = parseNumber(value);
  return count === null ? null : count > 0;
}

/** Text cut to the schema's limit, so one odd card name cannot make a whole sample invalid. */
export function clip(text: string, max: number): string {
  return text.length > max ? text.slice(0, max) : text;
}
