/**
 * Characters that display other than they are, or not at all: C0 (U+0000–U+001F), DEL, C1
 * (U+0080–U+009F), the Arabic letter mark (U+061C), zero-width and direction marks (U+200B–U+200F),
 * line/paragraph separators and bidi embeddings/overrides (U+2028–U+202E), invisible operators and
 * isolates (U+2060–U+206F) and the zero-width no-break space (U+FEFF). Input and output paths refuse
 * them (docs/security.md "Code the reviewer did not read"), finding messages escape them, and the text inspection of inputs reports them.
 */
export const HIDDEN_CHAR_CLASS =
  '\\u0000-\\u001f\\u007f-\\u009f\\u061c\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\ufeff';

/** Matches one hidden character (see HIDDEN_CHAR_CLASS). */
export const HIDDEN_CHAR = new RegExp(`[${HIDDEN_CHAR_CLASS}]`);

/** `U+202E`-style name of a character's code point, for messages. */
export function codePointName(c: string): string {
  return `U+${(c.codePointAt(0) ?? 0).toString(16).toUpperCase().padStart(4, '0')}`;
}
