import { type Logger, pino } from 'pino';

/** The process logger: pino JSON on stderr, so stdout stays free for command output and MCP stdio. */
export function createLogger(level: string = 'info'): Logger {
  return pino({ level, base: { service: 'gpu-broker' } }, pino.destination(2));
}

/** A logger that drops everything (tests, benchmarks). */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}

export type { Logger };
