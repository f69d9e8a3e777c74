import { BrokerError, toErrorBody } from '../../contracts/errors.js';
import { invisibleClass } from '../../domain/policy/invisible-chars.js';
import type { CliIo } from './io.js';

/**
 * Everything the CLI prints for a person goes through here, so text that others control (titles,
 * names, reasons, findings, comments, diffs, a task's log lines) cannot drive the reader's terminal
 * (docs/security.md "Terminal escapes"). Control characters are rendered visibly:
 * C0 as `\xNN` (`\n`, `\r`, `\t` by name), DEL, C1, the bidirectional formatting characters and the
 * zero-width ones (docs/security.md "Code the reviewer did not read") as `\uNNNN`. So the stream guard in src/cli/main.ts can run over `--json` output and `mcp-stdio` frames
 * without changing a single value: JSON.stringify never leaves a C0 character raw (the guard keeps the
 * line feeds that lay it out), and `\uNNNN` is JSON's own escape for the others. Backslashes are left
 * as they are: a literal `\x1b` typed by someone reads the same as an escaped ESC, harmlessly.
 */

/**
 * Every character src/domain/policy/invisible-chars.ts lists: C0, DEL, C1, the bidi marks, embeddings,
 * overrides and isolates, and the zero-width and filler characters that hide text.
 */
const CONTROLS = new RegExp(invisibleClass(), 'gu');
/** The same set less line feed and tab, for multi-line text. */
const CONTROLS_BUT_LINES = new RegExp(invisibleClass(['\n', '\t']), 'gu');

/** What can still be raw inside JSON.stringify's output (it escapes every C0 character itself). */
const JSON_RAW_CONTROLS = new RegExp(invisibleClass([], 0x20), 'gu');

const NAMED: Readonly<Record<string, string>> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' };

/** `\xNN` for C0, `\uNNNN` (per UTF-16 unit, as JSON writes it) for the rest. */
function visible(c: string): string {
  const named = NAMED[c];
  if (named) return named;
  const code = c.charCodeAt(0);
  if (code < 0x20) return `\\x${code.toString(16).padStart(2, '0')}`;
  let out = '';
  for (let i = 0; i < c.length; i++) out += `\\u${c.charCodeAt(i).toString(16).padStart(4, '0')}`;
  return out;
}

/**
 * One value on one line (a table cell, a title, a name, a reason): every control character, line
 * feeds and tabs included, is rendered visibly, so the value can neither move the cursor nor fake a line.
 */
export function escapeField(value: string): string {
  return value.replace(CONTROLS, visible);
}

/**
 * Multi-line text (notes, a log tail, a whole command's output): as escapeField, but line feeds and
 * tabs stay as they are.
 */
export function escapeText(text: string): string {
  return text.replace(CONTROLS_BUT_LINES, visible);
}

/**
 * An io whose stdout and stderr pass through escapeText. src/cli/main.ts wraps the process's streams in
 * it, so a command that prints with io.stdout directly is guarded too.
 */
export function terminalSafeIo(io: CliIo): CliIo {
  return {
    ...io,
    stdout: (t) => io.stdout(escapeText(t)),
    stderr: (t) => io.stderr(escapeText(t)),
  };
}

/**
 * JSON text of a value. JSON.stringify escapes C0 itself; DEL, C1 and the bidi characters are escaped
 * as `\uNNNN` too (they can only occur inside strings), so the document means exactly the same.
 */
export function jsonText(value: unknown): string {
  return JSON.stringify(value, null, 2).replace(JSON_RAW_CONTROLS, visible);
}

/** Prints a value as JSON (with --json) or as text from `human`, escaped for a terminal either way. */
export function emit(io: CliIo, json: boolean | undefined, value: unknown, human: () => string): void {
  io.stdout(json ? `${jsonText(value)}\n` : `${escapeText(human())}\n`);
}

/** Prints an error (JSON with --json) and returns the exit code for it. */
export function reportError(io: CliIo, json: boolean | undefined, err: unknown): number {
  const body = toErrorBody(err);
  if (json) io.stdout(`${jsonText({ error: body })}\n`);
  else {
    const message = err instanceof BrokerError ? body.message : ((err as Error)?.message ?? body.message);
    io.stderr(
      `error: ${body.code}: ${escapeText(message)}\n${body.hint ? `hint: ${escapeText(body.hint)}\n` : ''}`,
    );
  }
  return body.code === 'INVALID_INPUT' ? 2 : 1;
}

/** A fixed-width text table; every cell is escaped with escapeField. */
export function table(headers: string[], rows: Array<Array<string | number | null | undefined>>): string {
  const cells = rows.map((r) => r.map((c) => (c === null || c === undefined ? '-' : escapeField(String(c)))));
  const widths = headers.map((h, i) => Math.max(h.length, ...cells.map((r) => (r[i] ?? '').length)));
  const line = (r: string[]) =>
    r
      .map((c, i) => c.padEnd(widths[i] ?? 0))
      .join('  ')
      .trimEnd();
  return [line(headers), ...cells.map(line)].join('\n');
}
