/**
 * Characters that display other than they are (docs/security.md "Code the reviewer did not read"): controls that drive a terminal,
 * bidirectional formatting that reorders what a reviewer sees, and zero-width or filler characters that
 * hide text. Every reviewer view renders them visibly — the CLI as `\uNNNN` (src/cli/common/output.ts), the
 * dashboard as `⟨U+NNNN⟩` markers (served to the page as /assets/invisible.js, built from this list) — so
 * code that reads one way and runs another is seen before Approve.
 */

/** Inclusive code point ranges. */
export const INVISIBLE_RANGES: ReadonlyArray<readonly [number, number]> = [
  [0x0000, 0x001f], // C0 controls (the views keep line feed and tab where text has lines)
  [0x007f, 0x009f], // DEL and C1 controls
  [0x00ad, 0x00ad], // soft hyphen
  [0x034f, 0x034f], // combining grapheme joiner
  [0x061c, 0x061c], // Arabic letter mark
  [0x115f, 0x1160], // Hangul fillers
  [0x17b4, 0x17b5], // Khmer invisible vowels
  [0x180b, 0x180f], // Mongolian variation selectors and vowel separator
  [0x200b, 0x200f], // zero-width space, non-joiner, joiner; LRM, RLM
  [0x2028, 0x202e], // line and paragraph separators; bidi embeddings and overrides
  [0x2060, 0x206f], // word joiner, invisible operators, bidi isolates, deprecated format characters
  [0x3164, 0x3164], // Hangul filler
  [0xfeff, 0xfeff], // zero-width no-break space (BOM)
  [0xffa0, 0xffa0], // halfwidth Hangul filler
  [0xfff9, 0xfffb], // interlinear annotation
  [0x1d173, 0x1d17a], // musical format characters
  [0xe0000, 0xe007f], // tags (invisible ASCII look-alikes)
];

const hex = (cp: number) => `\\u{${cp.toString(16)}}`;

/**
 * A regular expression character class (for the `u` flag) of every invisible character but those in
 * `keep` (e.g. line feed and tab for multi-line text), and below `from` code points left out.
 */
export function invisibleClass(keep: readonly string[] = [], from = 0): string {
  const kept = new Set(keep.map((c) => c.codePointAt(0)!));
  const parts: string[] = [];
  for (const [lo, hi] of INVISIBLE_RANGES) {
    let start: number | null = null;
    for (let cp = Math.max(lo, from); cp <= hi + 1; cp++) {
      const inside = cp <= hi && !kept.has(cp);
      if (inside && start === null) start = cp;
      if (!inside && start !== null) {
        parts.push(start === cp - 1 ? hex(start) : `${hex(start)}-${hex(cp - 1)}`);
        start = null;
      }
    }
  }
  return `[${parts.join('')}]`;
}
