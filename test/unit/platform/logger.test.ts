import { spawn, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { createLogger, prettyLine } from '../../../src/platform/logger.js';
import { packageRoot } from '../../../src/platform/package-root.js';
import { ensureBuilt } from '../../support/build.js';
import { waitFor } from '../../support/wait.js';

/** The process logger: JSON lines for machines, one readable line per event on a terminal. */

function capture() {
  const lines: string[] = [];
  return { lines, destination: { write: (t: string) => lines.push(...t.split('\n').filter(Boolean)) } };
}

describe('createLogger', () => {
  it('writes one readable line per event when pretty', () => {
    const c = capture();
    const log = createLogger('info', { pretty: true, destination: c.destination });
    log.info({ worker_id: 'w1', cards: 2, note: 'two words' }, 'worker connected');
    log.debug('not at info');
    expect(c.lines).toHaveLength(1);
    expect(c.lines[0]).toMatch(
      /^\d\d:\d\d:\d\d INFO {2}worker connected {2}worker_id=w1 cards=2 note="two words"$/,
    );
  });

  it('writes pino JSON otherwise', () => {
    const c = capture();
    createLogger('info', { pretty: false, destination: c.destination }).warn({ a: 1 }, 'careful');
    expect(JSON.parse(c.lines[0]!)).toMatchObject({ level: 40, msg: 'careful', a: 1, service: 'gpu-broker' });
  });

  it('leaves out null fields on a terminal ("error=null" read as an error)', () => {
    const line = prettyLine(
      JSON.stringify({ level: 30, time: 0, msg: 'probed', python: '/usr/bin/python3', error: null }),
    );
    expect(line).toBe('00:00:00 INFO  probed  python=/usr/bin/python3');
  });

  it('passes a line that is not JSON through', () => {
    expect(prettyLine('plain text\n')).toBe('plain text');
  });
});

describe('createLogger({ buffered: true }) (the master)', () => {
  beforeAll(() => ensureBuilt(), 120_000);

  // Lines are gathered and written in chunks; a normal stop must not lose what is still buffered.
  it.each([
    ['process.exit right after the last line', 'process.exit(0);'],
    ['an uncaught error right after the last line', "throw new Error('boom');"],
    ['the event loop running out', ''],
  ])(
    'writes every line before the process ends: %s',
    (_name, end) => {
      expect(linesOf(20000, end)).toHaveLength(20000);
    },
    60_000,
  );

  it('writes a few lines (less than a chunk) on exit', () => {
    expect(linesOf(3, 'process.exit(0);')).toHaveLength(3);
  }, 60_000);

  it('writes a lone line within its flush interval while the process lives on', async () => {
    const child = spawn(process.execPath, [
      '--input-type=module',
      '-e',
      `${importLogger()} log.info('lone line'); setTimeout(() => {}, 30_000);`,
    ]);
    onTestFinished(() => {
      child.kill('SIGKILL');
    });
    let err = '';
    child.stderr.setEncoding('utf8').on('data', (d: string) => {
      err += d;
    });
    await waitFor(() => (err.includes('lone line') ? true : null), { timeoutMs: 5000, what: 'the line' });
  }, 60_000);
});

function importLogger(): string {
  const logger = pathToFileURL(join(packageRoot(), 'dist', 'src', 'platform', 'logger.js')).href;
  return `import { createLogger } from ${JSON.stringify(logger)};
      const log = createLogger('info', { buffered: true, pretty: false });`;
}

/** The JSON lines of a child that logs `n` lines to stderr and then runs `end`. */
function linesOf(n: number, end: string): string[] {
  const script = `${importLogger()}
      for (let i = 0; i < ${n}; i++) log.info({ i }, 'line ' + 'x'.repeat(100));
      ${end}`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
    encoding: 'utf8',
    maxBuffer: 64 * 1024 * 1024,
  });
  const lines = r.stderr.split('\n').filter((l) => l.startsWith('{'));
  if (lines.length > 0) expect(JSON.parse(lines[lines.length - 1]!).i).toBe(n - 1);
  return lines;
}
