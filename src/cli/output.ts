import { BrokerError, toErrorBody } from '../contracts/errors.js';
import type { CliIo } from './io.js';

/** Prints a value as JSON (with --json) or as text from `human`. */
export function emit(io: CliIo, json: boolean | undefined, value: unknown, human: () => string): void {
  io.stdout(json ? `${JSON.stringify(value, null, 2)}\n` : `${human()}\n`);
}

/** Prints an error (JSON with --json) and returns the exit code for it. */
export function reportError(io: CliIo, json: boolean | undefined, err: unknown): number {
  const body = toErrorBody(err);
  if (json) io.stdout(`${JSON.stringify({ error: body }, null, 2)}\n`);
  else
    io.stderr(
      `error: ${body.code}: ${err instanceof BrokerError ? body.message : ((err as Error)?.message ?? body.message)}\n${body.hint ? `hint: ${body.hint}\n` : ''}`,
    );
  return body.code === 'INVALID_INPUT' ? 2 : 1;
}

/** A fixed-width text table. */
export function table(headers: string[], rows: Array<Array<string | number | null | undefined>>): string {
  const cells = rows.map((r) => r.map((c) => (c === null || c === undefined ? '-' : String(c))));
  const widths = headers.map((h, i) => Math.max(h.length, ...cells.map((r) => (r[i] ?? '').length)));
  const line = (r: string[]) =>
    r
      .map((c, i) => c.padEnd(widths[i] ?? 0))
      .join('  ')
      .trimEnd();
  return [line(headers), ...cells.map(line)].join('\n');
}
