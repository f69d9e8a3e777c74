import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { createLogger, prettyLine } from '../../../src/platform/logger.js';
import { packageRoot } from '../../../src/platform/package-root.js';
import { ensureBuilt } from '../../support/build.js';

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

  it('leaves out null fields on a terminal (issue 23: "error=null" read as an error)', () => {
    const line = prettyLine(
      JSON.stringify({ level: 30, time: 0, msg: 'probed', python: '/usr/bin/python3', error: null }),
    );
    expect(line).toBe('00:00:00 INFO  probed  python=/usr/bin/python3');
  });

  it('passes a line that is not JSON through', () => {
    expect(prettyLine('plain text\n')).toBe('plain text');
  });
});

describe('createLogger({ buffered: true }) (the master, issue 21)', () => {
  beforeAll(() => ensureBuilt(), 120_000);

  // Lines leave the event loop asynchronously; a normal stop must not lose what is still buffered.
  it.each([
    ['process.exit right after the last line', 'process.exit(0);'],
    ['an uncaught error right after the last line', "throw new Error('boom');"],
    ['the event loop running out', ''],
  ])(
    'writes every line before the process ends: %s',
    (_name, end) => {
      const logger = pathToFileURL(join(packageRoot(), 'dist', 'src', 'platform', 'logger.js')).href;
      const script = `import { createLogger } from ${JSON.stringify(logger)};
      const log = createLogger('info', { buffered: true, pretty: false });
      for (let i = 0; i < 20000; i++) log.info({ i }, 'line ' + 'x'.repeat(100));
      ${end}`;
      const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
        encoding: 'utf8',
        maxBuffer: 64 * 1024 * 1024,
      });
      const lines = r.stderr.split('\n').filter((l) => l.startsWith('{'));
      expect(lines).toHaveLength(20000);
      expect(JSON.parse(lines[19999]!).i).toBe(19999);
    },
    60_000,
  );
});
