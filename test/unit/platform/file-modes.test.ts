import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  createPrivateFile,
  firstUntraversable,
  secureDataDir,
  secureFile,
  writeSecretFile,
} from '../../../src/platform/file-modes.js';
import { isRoot, requireOrSkip } from '../../support/require-or-skip.js';
import { makeTempDir, removeTempDirs } from '../../support/temp.js';

afterAll(() => removeTempDirs());

const mode = (path: string) => statSync(path).mode & 0o7777;
const rootOnly = requireOrSkip('root', isRoot, 'run the tests as root: task uids, chown and setpriv need it');

describe('secureDataDir', () => {
  it('creates a missing dir with exactly the mode asked, whatever the umask', () => {
    const dir = join(makeTempDir('modes'), 'new', 'data');
    const old = process.umask(0o077);
    try {
      expect(secureDataDir({ dir, dirMode: 0o711, files: [] })).toEqual([]);
    } finally {
      process.umask(old);
    }
    expect(mode(dir)).toBe(0o711);
  });

  it('tightens a loose dir, secret files and secret sub-dirs, and says what it changed', () => {
    const dir = makeTempDir('modes');
    chmodSync(dir, 0o755);
    writeFileSync(join(dir, 'broker.db'), '');
    chmodSync(join(dir, 'broker.db'), 0o644);
    writeFileSync(join(dir, 'ok.token'), 'x', { mode: 0o600 });
    mkdirSync(join(dir, 'tls'), { mode: 0o755 });
    chmodSync(join(dir, 'tls'), 0o755);
    writeFileSync(join(dir, 'tls', 'k.pem'), 'k');
    chmodSync(join(dir, 'tls', 'k.pem'), 0o640);
    const changed = secureDataDir({
      dir,
      dirMode: 0o700,
      files: ['broker.db', 'ok.token', 'missing.token', 'tls/k.pem'],
      secretDirs: ['tls'],
    });
    expect(changed.map((c) => [c.path, c.from, c.to])).toEqual([
      [dir, 0o755, 0o700],
      [join(dir, 'tls'), 0o755, 0o700],
      [join(dir, 'broker.db'), 0o644, 0o600],
      [join(dir, 'tls', 'k.pem'), 0o640, 0o600],
    ]);
    expect(mode(dir)).toBe(0o700);
    expect(mode(join(dir, 'broker.db'))).toBe(0o600);
    expect(mode(join(dir, 'tls', 'k.pem'))).toBe(0o600);
    // Nothing left to do on a second start.
    expect(secureDataDir({ dir, dirMode: 0o700, files: ['broker.db'] })).toEqual([]);
  });

  it('never loosens: a 0700 dir stays 0700 when 0711 is allowed', () => {
    const dir = makeTempDir('modes');
    chmodSync(dir, 0o700);
    expect(secureDataDir({ dir, dirMode: 0o711, files: [] })).toEqual([]);
    expect(mode(dir)).toBe(0o700);
  });

  it('secures a data dir given through a symbolic link where it really is', () => {
    const base = makeTempDir('modes');
    const real = join(base, 'real');
    mkdirSync(real, { mode: 0o755 });
    chmodSync(real, 0o755);
    symlinkSync(real, join(base, 'link'));
    expect(secureDataDir({ dir: join(base, 'link'), dirMode: 0o700, files: [] })).toEqual([
      { path: real, from: 0o755, to: 0o700 },
    ]);
    expect(mode(real)).toBe(0o700);
  });

  it('refuses a symbolic link where a secret file belongs', () => {
    const dir = makeTempDir('modes');
    symlinkSync('/etc/hostname', join(dir, 'broker.db'));
    expect(() => secureDataDir({ dir, dirMode: 0o700, files: ['broker.db'] })).toThrow(/not a regular file/);
  });

  it.runIf(rootOnly)('refuses, naming the owner, a loose file another user owns', () => {
    const dir = makeTempDir('modes');
    const file = join(dir, 'operator.token');
    writeFileSync(file, 'secret');
    chmodSync(file, 0o644);
    chownSync(file, 65534, 65534);
    expect(() => secureDataDir({ dir, dirMode: 0o700, files: ['operator.token'] })).toThrow(
      /operator\.token is mode 0644 but owned by uid 65534/,
    );
    expect(mode(file)).toBe(0o644);
  });
});

describe('creating secret files', () => {
  it('writeSecretFile makes an existing 0644 file 0600 before writing the secret', () => {
    const dir = makeTempDir('modes');
    const file = join(dir, 'agent.token');
    writeFileSync(file, 'old');
    chmodSync(file, 0o644);
    writeSecretFile(file, 'new-secret\n');
    expect(mode(file)).toBe(0o600);
    expect(readFileSync(file, 'utf8')).toBe('new-secret\n');
  });

  it('writeSecretFile refuses to follow a symbolic link', () => {
    const dir = makeTempDir('modes');
    const target = join(dir, 'target');
    writeFileSync(target, 'keep');
    symlinkSync(target, join(dir, 'agent.token'));
    expect(() => writeSecretFile(join(dir, 'agent.token'), 'x')).toThrow(/ELOOP/);
    expect(readFileSync(target, 'utf8')).toBe('keep');
  });

  it('createPrivateFile makes a 0600 empty file and leaves an existing one alone', () => {
    const dir = makeTempDir('modes');
    const file = join(dir, 'worker.sqlite');
    createPrivateFile(file);
    expect(mode(file)).toBe(0o600);
    writeFileSync(file, 'data');
    createPrivateFile(file);
    expect(readFileSync(file, 'utf8')).toBe('data');
  });

  it('secureFile tightens a token file outside a data dir', () => {
    const file = join(makeTempDir('modes'), 'w.token');
    writeFileSync(file, 't');
    chmodSync(file, 0o640);
    expect(secureFile(file).map((c) => c.to)).toEqual([0o600]);
    expect(mode(file)).toBe(0o600);
  });
});

describe('firstUntraversable', () => {
  it('names the first dir a user cannot search, using the class the kernel applies', () => {
    const base = makeTempDir('modes');
    chmodSync(base, 0o711);
    const a = join(base, 'a');
    const b = join(a, 'b');
    mkdirSync(b, { recursive: true });
    chmodSync(a, 0o711);
    chmodSync(b, 0o700);
    const nobody = { uid: 65534, gid: 65534 };
    expect(firstUntraversable(b, nobody)).toMatchObject({ path: b, mode: 0o700 });
    chmodSync(b, 0o711);
    expect(firstUntraversable(b, nobody)).toBeNull();
    expect(firstUntraversable(b, { uid: 0, gid: 0 })).toBeNull();
    if (!rootOnly) return;
    // Owner class wins: "other" may search, the owner may not.
    chownSync(b, 65534, 65534);
    chmodSync(b, 0o011);
    expect(firstUntraversable(b, nobody)).toMatchObject({ path: b, owner: 65534 });
    expect(firstUntraversable(b, { uid: 1234, gid: 1234 })).toBeNull();
  });

  it.runIf(rootOnly)('agrees with what a real process of that user can do', () => {
    const base = makeTempDir('modes');
    const deep = join(base, 'x', 'y');
    mkdirSync(deep, { recursive: true });
    for (const m of [0o700, 0o711]) {
      chmodSync(base, m);
      chmodSync(join(base, 'x'), 0o711);
      const real = spawnSync('/bin/sh', ['-c', `cd '${deep}'`], { uid: 65534, gid: 65534 }).status === 0;
      expect(firstUntraversable(deep, { uid: 65534, gid: 65534 }) === null).toBe(real);
    }
  });
});
