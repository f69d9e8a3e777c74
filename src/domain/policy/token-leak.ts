import { invisibleClass } from './invisible-chars.js';

/**
 * Whether a piece of free text carries a gpu-broker bearer token (ADR 0041): an agent reviewer's
 * `reasons` become a review comment its submitter reads, so a model talked into finding the reviewer
 * token could hand it over there. The model sandbox (src/cli/review/model-sandbox.ts, ADR 0041) is what keeps
 * the token out of the model's reach; this check is the net behind it, run twice: by the agent loop
 * before it submits (with the reviewer's own token as a known secret) and by the master on every review
 * comment (token shapes only: the master keeps no token in clear).
 *
 * What it looks at, each as it is written, with every space and invisible character removed (a token
 * split across lines), and reversed: the token shape (`gpb_` and base64url characters), any 12
 * consecutive characters of a known token's body, and the same two in what base64 or hex runs of the
 * text decode to (at every alignment, so a token encoded inside a longer string is found too). A model
 * can always find an encoding this misses (ROT13, one character per line of prose…): the guarantee is
 * the sandbox; this only catches the easy ways, and stays cheap (linear in the text).
 */

/** The prefix of every token gpu-broker issues (TOKEN_PREFIX in src/broker/principals.ts, test-tied). */
const PREFIX = 'gpb_';
/** Base64url characters a token's body is made of (32 random bytes: 43 characters). */
const BODY = '[A-Za-z0-9_-]';
/** A token as written: the prefix and 20 body characters at least (a cut-off token is still a leak). */
const SHAPE = new RegExp(`${PREFIX}${BODY}{20,}`);
/**
 * A token in text squeezed of its spaces: a whole body, so that prose about tokens ("gpb_ prefixes
 * are…") squeezed together is not mistaken for one as easily.
 */
const WHOLE_SHAPE = new RegExp(`${PREFIX}${BODY}{43}`);
/** Characters removed for the squeezed view: white space and everything invisible-chars.ts lists. */
const SPACING = new RegExp(`\\s|${invisibleClass()}`, 'gu');
/** Runs long enough to hold 20 bytes of a token, encoded. */
const BASE64_RUN = /[A-Za-z0-9+/_-]{28,}/g;
const HEX_RUN = /[0-9a-fA-F]{40,}/g;
/** How many consecutive characters of a known token's body count as that token. */
const PIECE = 12;

/** How a leak was written, for the error or the loop's outcome (never the leaked text itself). */
export type LeakForm =
  | 'a token as written'
  | 'a token split by spaces'
  | 'a reversed token'
  | 'a base64-encoded token'
  | 'a hex-encoded token'
  | 'a disguised token';

/** The first way `text` carries a gpu-broker token, or a piece of one of `known`; null when none. */
export function tokenLeakIn(text: string, known: readonly string[] = []): LeakForm | null {
  const squeezed = text.replace(SPACING, '');
  const reversed = [...squeezed].reverse().join('');
  const pieces = known.flatMap(piecesOf);
  const holds = (s: string, shape: RegExp) => shape.test(s) || pieces.some((p) => s.includes(p));
  if (holds(text, SHAPE)) return 'a token as written';
  if (holds(squeezed, WHOLE_SHAPE)) return 'a token split by spaces';
  if (holds(reversed, WHOLE_SHAPE)) return 'a reversed token';
  // Percent-encoded, fullwidth or other compatibility forms: what they stand for, as written.
  const plain = percentDecoded(text.normalize('NFKC'));
  if (holds(plain, SHAPE) || holds(plain.replace(SPACING, ''), WHOLE_SHAPE)) return 'a disguised token';
  // A known token's letters and digits, in order, whatever is between them or their case: dotted
  // (`g.p.b._.x`), bulleted one per line, upper-cased. 12 of them in a row stand for 60+ random bits,
  // so ordinary text never matches by chance; unknown tokens get no such view (prose would).
  if (pieces.length > 0) {
    const skeleton = alnumLower(plain);
    const loose = known.flatMap((t) => piecesOf(alnumLower(t)));
    if (loose.some((p) => skeleton.includes(p) || [...skeleton].reverse().join('').includes(p)))
      return 'a disguised token';
  }
  for (const view of [squeezed, reversed]) {
    if (decodedRuns(view, BASE64_RUN, 4, 'base64').some((d) => holds(d, SHAPE)))
      return 'a base64-encoded token';
    if (decodedRuns(view, HEX_RUN, 2, 'hex').some((d) => holds(d, SHAPE))) return 'a hex-encoded token';
  }
  return null;
}

/** `text` with each `%XX` replaced by the byte it names (as latin1; UTF-8 sequences stay split). */
function percentDecoded(text: string): string {
  return text.replace(/%([0-9a-fA-F]{2})/g, (_m, hex: string) =>
    String.fromCharCode(Number.parseInt(hex, 16)),
  );
}

/** Only the ASCII letters and digits of `text`, lower-cased. */
function alnumLower(text: string): string {
  return text.replace(/[^A-Za-z0-9]/g, '').toLowerCase();
}

/** Every run of `run` in `text`, decoded from each of its first `alignments` offsets (as latin1 text). */
function decodedRuns(text: string, run: RegExp, alignments: number, encoding: 'base64' | 'hex'): string[] {
  const out: string[] = [];
  for (const m of text.matchAll(run))
    for (let offset = 0; offset < alignments; offset++) {
      // Node's base64 decoder reads both alphabets (+/ and -_); hex needs an even length.
      const chars = m[0].slice(offset);
      const even = encoding === 'hex' ? chars.slice(0, chars.length - (chars.length % 2)) : chars;
      out.push(Buffer.from(even, encoding).toString('latin1'));
    }
  return out;
}

/** Every PIECE-long window of a token's body (what follows the prefix), so a stripped prefix still counts. */
function piecesOf(token: string): string[] {
  const body = token.startsWith(PREFIX) ? token.slice(PREFIX.length) : token;
  // A body too short to cut (never one gpu-broker issued) counts only whole, prefix included.
  if (body.length < PIECE) return token.length > 0 ? [token] : [];
  const out: string[] = [];
  for (let i = 0; i + PIECE <= body.length; i++) out.push(body.slice(i, i + PIECE));
  return out;
}
