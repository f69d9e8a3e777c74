import { tokenLeakIn } from '../../domain/policy/token-leak.js';
import { escapeText } from '../common/output.js';

/**
 * What an agent reviewer's review comment says (ADR 0041). The model's `reasons` are untrusted
 * text — a proposal may have steered every word — and the comment is read by the submitter, so:
 *
 *   - capped at MAX_REASONS characters (code points), the cut said;
 *   - marked as the model's own words on a first line gpu-broker writes, and every line of them quoted
 *     with `> `, so no line of the model's can pass for gpu-broker's;
 *   - invisible and control characters shown as escapes (escapeText: `\u202e`, `\x1b`…);
 *   - never a carrier of a token: reasons holding the reviewer's token, a piece of it, or anything
 *     token-shaped, as written, split, reversed, base64 or hex (src/domain/policy/token-leak.ts), are not
 *     redacted and sent on but withheld with the whole verdict. A model that tried to hand over a
 *     token was steered by the proposal it read; its decision is no decision, and a person decides.
 */

/** Most characters of the model's reasons a comment quotes. */
export const MAX_REASONS = 2000;

/** The comment's first line, written by gpu-broker. */
export const COMMENT_HEAD =
  "agent reviewer verdict; the model's own words follow, quoted (untrusted, not gpu-broker's):";

/** The comment to submit, or why none may be. `shown` is the reasons as the loop may print them. */
export type AgentComment = { ok: true; comment: string; shown: string } | { ok: false; reason: string };

/** Builds the review comment from a verdict's reasons; `secrets` are tokens the loop holds. */
export function agentComment(reasons: string, secrets: readonly string[]): AgentComment {
  const leak = tokenLeakIn(reasons, secrets);
  if (leak !== null)
    return {
      ok: false,
      reason: `the model's reasons held ${leak}: verdict withheld, a person decides (revoke the reviewer token if the model could read it)`,
    };
  const chars = [...reasons.replace(/\r\n?/g, '\n')];
  const cut = chars.length > MAX_REASONS;
  const shown = escapeText(chars.slice(0, MAX_REASONS).join(''));
  const quoted = shown
    .split('\n')
    .map((line) => `> ${line}`)
    .join('\n');
  const note = cut ? `\n(cut at ${MAX_REASONS} of ${chars.length} characters)` : '';
  return { ok: true, comment: `${COMMENT_HEAD}\n${quoted}${note}`, shown };
}
