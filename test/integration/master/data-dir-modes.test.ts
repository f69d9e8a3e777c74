import { spawnSync } from 'node:child_process';
import { chmodSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { MASTER_SECRET_FILES } from '../../../src/master/data-dir.js';
import { startTestMaster } from '../../support/master.js';
import { isRoot, requireOrSkip } from '../../support/require-or-skip.js';
import { makeTempDir, removeTempDirs } from '../../support/temp.js';

// docs/security.md "The task sandbox": the master's data dir and secrets, checked on real files of a real master.

afterAll(() => removeTempDirs());

const mode = (path: string) => statSync(path).mode & 0o7777;
const rootOnly = requireOrSkip('root', isRoot, 'run the tests as root: task uids, chown and setpriv need it');

/** A pino logger whose lines the test can read. */
function capturingLogger() {
  const lines: Array<{ level: number; msg: string }> = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      for (const l of String(chunk).split('\n')) if (l) lines.push(JSON.parse(l));
      done();
    },
  });
  return { logger: pino({ level: 'warn' }, stream), lines };
}

/** Every secret of the master that exists, with its mode. */
function secretModes(dataDir: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const f of MASTER_SECRET_FILES) {
    try {
      out[f] = mode(join(dataDir, f));
    } catch {
      // not made by this start
    }
  }
  return out;
}

describe('master data dir modes', () => {
  it('a fresh data dir: dir and tls 0700, database, WAL, token and keys 0600 from the start', async () => {
    const dataDir = join(makeTempDir('modes'), 'fresh');
    const m = await startTestMaster({ dataDir, removeDataDirOnClose: true });
    try {
      expect(mode(dataDir)).toBe(0o700);
      expect(mode(join(dataDir, 'tls'))).toBe(0o700);
      const modes = secretModes(dataDir);
      expect(Object.keys(modes)).toEqual(
        expect.arrayContaining(['broker.db', 'broker.db-wal', 'operator.token', 'tls/server-key.pem']),
      );
      for (const [file, m] of Object.entries(modes)) expect([file, m]).toEqual([file, 0o600]);
    } finally {
      await m.close();
    }
  });

  it('row 7: a master started on a pre-existing 0755 data dir tightens it and broker.db, and says so', async () => {
    const parent = makeTempDir('modes');
    chmodSync(parent, 0o711);
    const dataDir = join(parent, 'loose');
    const first = await startTestMaster({ dataDir });
    await first.close({ keepDataDir: true });
    // What an operator's `mkdir` + an older version left: everything readable by any local user.
    chmodSync(dataDir, 0o755);
    chmodSync(join(dataDir, 'tls'), 0o755);
    for (const f of readdirSync(dataDir)) if (f.startsWith('broker.db')) chmodSync(join(dataDir, f), 0o644);
    chmodSync(join(dataDir, 'operator.token'), 0o644);
    chmodSync(join(dataDir, 'tls', 'server-key.pem'), 0o644);
    if (rootOnly) {
      // Before: another local user (a task, when unsandboxed) reads the database.
      const before = spawnSync('/bin/cat', [join(dataDir, 'broker.db')], { uid: 65534, gid: 65534 });
      expect(before.status).toBe(0);
    }

    const { logger, lines } = capturingLogger();
    const second = await startTestMaster({ dataDir, logger, removeDataDirOnClose: true });
    try {
      expect(mode(dataDir)).toBe(0o700);
      expect(mode(join(dataDir, 'tls'))).toBe(0o700);
      for (const [file, m] of Object.entries(secretModes(dataDir))) expect([file, m]).toEqual([file, 0o600]);
      const warning = lines.find((l) => l.msg.includes('tightened'));
      expect(warning?.level).toBe(40);
      expect(warning?.msg).toContain(`${join(dataDir, 'broker.db')} 0644→0600`);
      expect(warning?.msg).toContain(`${dataDir} 0755→0700`);
      if (rootOnly) {
        const after = spawnSync('/bin/cat', [join(dataDir, 'broker.db')], { uid: 65534, gid: 65534 });
        expect(after.status).not.toBe(0);
      }
    } finally {
      await second.close();
    }
  });

  it.runIf(rootOnly)(
    'refuses to start on a loose data dir another user owns, saying what to run',
    async () => {
      const dataDir = makeTempDir('modes');
      chmodSync(dataDir, 0o755);
      const { chownSync } = await import('node:fs');
      chownSync(dataDir, 65534, 65534);
      await expect(startTestMaster({ dataDir })).rejects.toMatchObject({
        code: 'INVALID_INPUT',
        message: expect.stringContaining('is mode 0755 but owned by uid 65534'),
        hint: expect.stringContaining('chown 0'),
      });
      expect(mode(dataDir)).toBe(0o755);
    },
  );
});
