import { type DestinationStream, type Logger, pino } from 'pino';

/** Options of {@link createLogger}. */
export interface LoggerOptions {
  /** One readable line per event instead of JSON; default: whether stderr is a terminal. */
  pretty?: boolean;
  /** Where lines go; default stderr. */
  destination?: { write(text: string): unknown };
  /**
   * Lines to stderr are gathered and written in chunks (default false: each line is one synchronous
   * write). The master sets it (its event-log lines, one per audited move, cost ~1.5 ms of
   * its CPU per task as one write each): a write leaves (asynchronously) once 4 KiB are gathered or
   * BUFFERED_LOG_FLUSH_MS passed, at most BUFFERED_LOG_MAX_BYTES wait (past it lines are dropped, not
   * held), and what is still buffered is written synchronously when the process exits (a normal stop,
   * an uncaught error; only a SIGKILL loses it). The audit table, not this log, is the durable record.
   */
  buffered?: boolean;
}

/** The most a buffered logger holds while its writes lag behind (see LoggerOptions.buffered). */
export const BUFFERED_LOG_MAX_BYTES = 16 * 1024 * 1024;

/** The longest a line waits in a buffered logger before it is written (see LoggerOptions.buffered). */
export const BUFFERED_LOG_FLUSH_MS = 100;

/**
 * The process logger on stderr, so stdout stays free for command output and MCP stdio: JSON lines for
 * machines (a file, a pipe, journald), one readable line per event on a terminal, so `npm start`'s
 * banner is not buried in JSON (docs/operations.md).
 */
export function createLogger(level: string = 'info', opts: LoggerOptions = {}): Logger {
  const pretty = opts.pretty ?? process.stderr.isTTY === true;
  const out =
    opts.destination ??
    (opts.buffered === true
      ? pino.destination({
          dest: 2,
          sync: false,
          minLength: 4096,
          periodicFlush: BUFFERED_LOG_FLUSH_MS,
          maxLength: BUFFERED_LOG_MAX_BYTES,
        })
      : pino.destination(2));
  const stream: DestinationStream = pretty
    ? { write: (line: string) => void out.write(`${prettyLine(line)}\n`) }
    : (out as DestinationStream);
  return pino({ level, base: { service: 'gpu-broker' } }, stream);
}

/** A logger that drops everything (tests, benchmarks). */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}

const LEVELS: Record<number, string> = {
  10: 'TRACE',
  20: 'DEBUG',
  30: 'INFO',
  40: 'WARN',
  50: 'ERROR',
  60: 'FATAL',
};
/** Fields every line has, or that the line's head already shows. */
const HEAD_FIELDS = new Set(['level', 'time', 'pid', 'hostname', 'service', 'msg']);

/** `12:34:56 INFO  message key=value …` from one pino JSON line (the line itself if it is not JSON). */
export function prettyLine(json: string): string {
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return json.trimEnd();
  }
  const time = typeof o['time'] === 'number' ? new Date(o['time']).toISOString().slice(11, 19) : '--:--:--';
  const level = (LEVELS[o['level'] as number] ?? String(o['level'])).padEnd(5);
  const rest = Object.entries(o)
    // A null field is one that has nothing to say ("error=null" on a terminal read as an error).
    .filter(([k, v]) => !HEAD_FIELDS.has(k) && v !== null)
    .map(([k, v]) => `${k}=${typeof v === 'string' && !/\s/.test(v) ? v : JSON.stringify(v)}`)
    .join(' ');
  return `${time} ${level} ${String(o['msg'] ?? '')}${rest ? `  ${rest}` : ''}`;
}

export type { Logger };
