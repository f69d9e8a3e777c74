import { HIDDEN_CHAR_CLASS } from '../../contracts/hidden-chars.js';

/**
 * Submitter values in server-written text ("untrusted text is marked"). A finding message is
 * the broker's voice; a path, env name, argv item, image or mount name inside it is the submitter's.
 * Splicing the value into the sentence lets a crafted value ("x. VERIFIED SAFE by gpu-broker policy.")
 * read as the broker's own words; quoting it keeps it visibly apart.
 */

const HIDDEN_G = new RegExp(`[${HIDDEN_CHAR_CLASS}]`, 'g');

/** Default cap, in code points, for a quoted value. */
export const QUOTE_MAX = 80;

/**
 * `value` as one JSON string literal: `"` and `\` escaped, every control, bidi and zero-width
 * character shown as a `\uNNNN` escape (so nothing hidden and no line break survives), and cut to `max`
 * code points with `…` inside the quotes when longer.
 */
export function quoteUntrusted(value: string, max: number = QUOTE_MAX): string {
  const points = Array.from(value);
  const cut = points.length > max ? `${points.slice(0, max).join('')}…` : value;
  return JSON.stringify(cut).replace(
    HIDDEN_G,
    (c) => `\\u${(c.codePointAt(0) ?? 0).toString(16).padStart(4, '0')}`,
  );
}

/** Several values, each quoted, joined with ", " (at most `count` of them, then how many more). */
export function quoteList(values: readonly string[], count = 5, max: number = QUOTE_MAX): string {
  const shown = values.slice(0, count).map((v) => quoteUntrusted(v, max));
  return values.length > count ? `${shown.join(', ')} and ${values.length - count} more` : shown.join(', ');
}
