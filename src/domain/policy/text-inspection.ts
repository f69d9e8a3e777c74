import { quoteUntrusted } from './untrusted.js';

/**
 * Display versus run (docs/security.md "Code the reviewer did not read"): an input whose bytes a viewer shows as one thing while the
 * interpreter runs another. A lone CR that a viewer renders as a line break (or nothing) while Python
 * reads one line, bidi controls that reorder what is shown (Trojan Source, CVE-2021-42574), zero-width
 * characters inside identifiers, other control characters, and a source encoding other than UTF-8 (a
 * Python coding cookie, or bytes that are not UTF-8 in a source file) all let a reviewer approve code
 * that is not what runs. This inspection is pure over the file's bytes; the broker reads the blobs and
 * the policy turns the result into `TEXT_DISPLAYS_DIFFERENTLY` warnings and `SCRIPT_NOT_TEXT` errors.
 */

/** Largest file inspected; larger inputs are reported as not inspected. */
export const MAX_INSPECT_FILE_BYTES = 2 * 1024 * 1024;
/** Most bytes inspected for one revision; the files past it are reported as not inspected. */
export const MAX_INSPECT_REVISION_BYTES = 64 * 1024 * 1024;
/** Places reported per file. */
export const MAX_REPORTED_PLACES = 5;

/** One place where the file displays other than it runs. */
export interface TextOddity {
  /** 1-based line, counting line feeds. */
  line: number;
  what: string;
}

/** What the inspection found in one file. */
export interface TextInspection {
  /** Valid UTF-8 without NUL bytes: text a reviewer can read. */
  text: boolean;
  /** The first MAX_REPORTED_PLACES places (server-written descriptions). */
  oddities: TextOddity[];
  /** How many places there are in all. */
  count: number;
}

/** Extensions of files that are source or configuration: non-UTF-8 bytes in them are worth a warning. */
const SOURCE_EXT =
  /\.(py|pyw|pyi|sh|bash|zsh|pl|pm|rb|js|mjs|cjs|ts|lua|r|jl|c|cc|cpp|cxx|h|hpp|cu|cuh|java|go|rs|toml|ya?ml|json|cfg|ini|conf|txt|md)$/i;

/** Whether inspectText treats `path` as source, where bytes that are not UTF-8 are a finding. */
export function isSourcePath(path: string): boolean {
  return SOURCE_EXT.test(path);
}

/** Encodings that decode the same bytes as the UTF-8 a reviewer's view shows. */
const SAME_AS_UTF8: ReadonlySet<string> = new Set(['utf-8', 'utf8', 'utf-8-sig', 'ascii', 'us-ascii']);

/** Python's coding cookie (PEP 263), valid on line 1 or 2. */
const CODING_COOKIE = /^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)/;

/** Inspects one input file's bytes. */
export function inspectText(path: string, bytes: Uint8Array): TextInspection {
  const oddities: TextOddity[] = [];
  let count = 0;
  const note = (line: number, what: string) => {
    count++;
    if (oddities.length < MAX_REPORTED_PLACES) oddities.push({ line, what });
  };
  // The native decoder validates (same rules: no overlongs, surrogates or code points past U+10FFFF);
  // the byte-by-byte walk runs only to find where a file that is not UTF-8 goes wrong (the
  // walk cost ~40 ns a byte, seconds for a revision's 64 MiB, inside create_proposal's transaction).
  const decoded = decodeUtf8(bytes);
  const invalid = decoded === null ? firstInvalidUtf8(bytes) : -1;
  const nul = bytes.indexOf(0);
  if (invalid >= 0 || nul >= 0) {
    const looksLikeSource = isSourcePath(path) || (bytes[0] === 0x23 && bytes[1] === 0x21); // "#!"
    if (looksLikeSource) {
      const at = invalid >= 0 && (nul < 0 || invalid < nul) ? invalid : nul;
      note(
        lineAt(bytes, at),
        at === nul
          ? 'a NUL byte in a source file'
          : 'bytes that are not valid UTF-8 (the view shows replacement characters; the interpreter may decode them otherwise)',
      );
    }
    return { text: false, oddities, count };
  }
  const text = decoded ?? '';
  let line = 1;
  let index = 0;
  // Nothing hidden anywhere (the usual case): one native scan instead of a walk over every character.
  for (const c of MAYBE_HIDDEN.test(text) ? text : '') {
    const cp = c.codePointAt(0) ?? 0;
    if (c === '\n') line++;
    else if (c === '\r') {
      if (text[index + 1] !== '\n')
        note(line, 'a lone carriage return (U+000D): viewers break the line or hide what precedes it');
    } else if (c !== '\t') {
      const what = hiddenKind(cp, index);
      if (what !== null) note(line, `${what} U+${cp.toString(16).toUpperCase().padStart(4, '0')}`);
    }
    index += c.length;
  }
  const lines = text.split('\n', 2);
  for (const [n, l] of lines.entries()) {
    const cookie = CODING_COOKIE.exec(l);
    if (cookie) {
      const enc = (cookie[1] ?? '').toLowerCase().replace(/_/g, '-');
      if (!SAME_AS_UTF8.has(enc))
        note(
          n + 1,
          `a source encoding declaration ${quoteUntrusted(cookie[1] ?? '', 40)}: Python decodes the file with it, not as the UTF-8 shown`,
        );
      break;
    }
  }
  return { text: true, oddities, count };
}

/**
 * Every character the walk below may report: controls but tab and line feed (CR included, a CRLF is
 * then checked there), the bidi, zero-width, separator and invisible format ranges of `hiddenKind`.
 */
const MAYBE_HIDDEN =
  /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]/;

/** The text of `bytes` when they are well-formed UTF-8, else null. */
function decodeUtf8(bytes: Uint8Array): string | null {
  try {
    return new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    return null;
  }
}

/** What kind of hidden character `cp` is, or null for an ordinary one. */
function hiddenKind(cp: number, index: number): string | null {
  if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f)) return 'a control character';
  if (
    cp === 0x061c ||
    cp === 0x200e ||
    cp === 0x200f ||
    (cp >= 0x202a && cp <= 0x202e) ||
    (cp >= 0x2066 && cp <= 0x2069)
  )
    return 'a bidi control (reorders what is shown)';
  if ((cp >= 0x200b && cp <= 0x200d) || (cp >= 0x2060 && cp <= 0x2064) || (cp === 0xfeff && index > 0))
    return 'a zero-width character';
  if (cp === 0x2028 || cp === 0x2029)
    return 'a line separator (some viewers break the line, interpreters may not)';
  if (cp >= 0x206a && cp <= 0x206f) return 'an invisible format character';
  return null;
}

/** 1-based line of byte offset `at`. */
function lineAt(bytes: Uint8Array, at: number): number {
  let line = 1;
  for (let i = 0; i < at && i < bytes.length; i++) if (bytes[i] === 0x0a) line++;
  return line;
}

/**
 * Offset of the first byte that does not start or continue a well-formed UTF-8 sequence (no overlong
 * forms, no surrogates, nothing above U+10FFFF), or -1 when all of `bytes` is valid UTF-8.
 */
export function firstInvalidUtf8(bytes: Uint8Array): number {
  let i = 0;
  while (i < bytes.length) {
    const b = bytes[i] ?? 0;
    if (b < 0x80) {
      i++;
      continue;
    }
    let need: number;
    let min: number;
    let cp: number;
    if (b >= 0xc2 && b <= 0xdf) [need, min, cp] = [1, 0x80, b & 0x1f];
    else if (b >= 0xe0 && b <= 0xef) [need, min, cp] = [2, 0x800, b & 0x0f];
    else if (b >= 0xf0 && b <= 0xf4) [need, min, cp] = [3, 0x10000, b & 0x07];
    else return i;
    for (let k = 1; k <= need; k++) {
      const c = bytes[i + k];
      if (c === undefined || (c & 0xc0) !== 0x80) return i;
      cp = (cp << 6) | (c & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += need + 1;
  }
  return -1;
}
