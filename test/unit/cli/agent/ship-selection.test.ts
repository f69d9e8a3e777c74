import { execFileSync } from 'node:child_process';
import { closeSync, linkSync, mkdirSync, openSync, symlinkSync, writeFileSync, writeSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { run as proposeCommand } from '../../../../src/cli/agent/propose.js';
import { collectInputs } from '../../../../src/cli/agent/propose-files.js';
import { run as runCommand } from '../../../../src/cli/agent/run.js';
import { secretRowOf } from '../../../../src/cli/agent/secret-files.js';
import { runCli } from '../../../support/cli.js';
import { makeTempDir, removeTempDirs } from '../../../support/temp.js';

/**
 * docs/security.md "gpu-broker run on the submitter’s machine": what `gpu-broker run` and `propose --dir` ship. Every `.gitignore` in the tree (git's
 * semantics, one rule set per directory), `.gpu-brokerignore` (can only leave out more), `.git/info/exclude`;
 * credential files and private keys refused by name and by content unless named with --include-secret;
 * symbolic links never followed. Each attack from the issue is one test here.
 */

afterAll(() => removeTempDirs());

/** A project dir holding `files` (path → content). */
function tree(files: Record<string, string>): string {
  const dir = makeTempDir('ship');
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    writeFileSync(join(dir, path), content);
  }
  return dir;
}

const shipped = (dir: string, opts: Parameters<typeof collectInputs>[1] = {}) =>
  collectInputs(dir, opts).files.map((f) => f.path);

/** The error collectInputs throws, for asserting on its code, message and details. */
function refusal(fn: () => unknown): { code: string; message: string; hint: string; details: unknown } {
  try {
    fn();
  } catch (err) {
    return err as { code: string; message: string; hint: string; details: unknown };
  }
  throw new Error('expected a refusal');
}

const PRIVATE_KEY = [
  '-----BEGIN OPENSSH PRIVATE KEY-----',
  'b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW',
  '-----END OPENSSH PRIVATE KEY-----',
  '',
].join('\n');

describe('every .gitignore, with git semantics', () => {
  it('applies a nested .gitignore to its own subtree only', () => {
    const dir = tree({
      'train.py': '',
      'data.csv': 'root data ships',
      'sub/.gitignore': 'data.csv\n',
      'sub/data.csv': 'ignored by the nested file',
      'sub/model.py': '',
    });
    expect(shipped(dir)).toEqual(['data.csv', 'sub/.gitignore', 'sub/model.py', 'train.py']);
  });

  it('honours negation, anchoring, directory-only patterns and **', () => {
    const dir = tree({
      '.gitignore': ['*.log', '!keep.log', '/top.txt', 'cache/', 'deep/**/x.bin', ''].join('\n'),
      'a.log': '',
      'keep.log': '',
      'top.txt': '',
      'sub/top.txt': 'not anchored here: ships',
      'cache/c': '',
      'sub/cache': 'a file named cache: ships',
      'deep/a/b/x.bin': '',
      'deep/x.bin': '',
    });
    expect(shipped(dir)).toEqual(['.gitignore', 'keep.log', 'sub/cache', 'sub/top.txt']);
  });

  it('lets a deeper .gitignore re-include what a shallower one ignored, as git does', () => {
    const dir = tree({
      '.gitignore': '*.csv\n',
      'a.csv': '',
      'sub/.gitignore': '!wanted.csv\n',
      'sub/wanted.csv': '',
      'sub/other.csv': '',
    });
    expect(shipped(dir)).toEqual(['.gitignore', 'sub/.gitignore', 'sub/wanted.csv']);
  });

  it('honours .git/info/exclude', () => {
    const dir = tree({ '.git/info/exclude': 'scratch/\n', 'scratch/s.py': '', 'train.py': '' });
    expect(shipped(dir)).toEqual(['train.py']);
  });

  it('honours the .gitignore files above DIR up to the enclosing repository', () => {
    const repo = tree({ '.git/HEAD': '', '.gitignore': '*.ckpt\n', 'proj/train.py': '', 'proj/w.ckpt': '' });
    expect(shipped(join(repo, 'proj'))).toEqual(['train.py']);
  });

  it('ships a directory the enclosing repository ignores as a whole (the user named it)', () => {
    const repo = tree({ '.git/HEAD': '', '.gitignore': 'scratch/\n', 'scratch/train.py': '' });
    expect(shipped(join(repo, 'scratch'))).toEqual(['train.py']);
  });
});

describe('.gpu-brokerignore', () => {
  it('leaves out more at any level', () => {
    const dir = tree({
      '.gpu-brokerignore': 'data/\n',
      'data/big.bin': '',
      'sub/.gpu-brokerignore': '*.tmp\n',
      'sub/x.tmp': '',
      'x.tmp': 'only sub/ ignores *.tmp',
      'train.py': '',
    });
    expect(shipped(dir)).toEqual(['.gpu-brokerignore', 'sub/.gpu-brokerignore', 'train.py', 'x.tmp']);
  });

  it('can never include what .gitignore left out, nor a credential', () => {
    const dir = tree({
      '.gitignore': 'secret.txt\n.env\n',
      '.gpu-brokerignore': '!secret.txt\n!.env\n!id_rsa\n',
      'secret.txt': 'x',
      '.env': 'TOKEN=x',
      'train.py': '',
    });
    expect(shipped(dir)).toEqual(['.gitignore', '.gpu-brokerignore', 'train.py']);
    writeFileSync(join(dir, 'id_rsa'), PRIVATE_KEY);
    expect(refusal(() => shipped(dir)).message).toContain('id_rsa');
  });
});

describe('credential files and private keys', () => {
  it.each([
    '.env',
    '.env.local',
    'prod.env',
    '.envrc',
    'id_rsa',
    'id_ed25519',
    'id_ecdsa',
    'id_dsa',
    'server.key',
    'cert.p12',
    'cert.pfx',
    '.aws/credentials',
    '.aws/config',
    '.netrc',
    '_netrc',
    '.npmrc',
    '.pypirc',
    '.docker/config.json',
    '.kube/config',
    '.git-credentials',
    '.ssh/config',
    '.gnupg/pubring.kbx',
    '.azure/msal_token_cache.json',
    'user/.config/gcloud/credentials.db',
    'application_default_credentials.json',
    'credentials.json',
    'client_secret_123.apps.googleusercontent.com.json',
    '.htpasswd',
    'infra/terraform.tfstate',
    '.pgpass',
    '.huggingface/token',
    'user/.cache/huggingface/token',
    'kaggle.json',
    'secrets.yaml',
    // Fresh-eyes review: credential files the first table missed.
    'passwords.kdbx',
    '.terraform.d/credentials.tfrc.json',
    '.terraformrc',
    'terraform.rc',
    '.m2/settings.xml',
    '.gradle/gradle.properties',
    'rclone.conf',
    '.dockercfg',
    '.databrickscfg',
    '.oci/config',
  ])('refuses %s by name, naming it', (path) => {
    const dir = tree({ 'train.py': '', [path]: 'x' });
    const e = refusal(() => shipped(dir));
    expect(e.code).toBe('INVALID_INPUT');
    expect(e.message).toContain(path);
    expect(e.hint).toContain('--include-secret');
    expect(secretRowOf(path)).toBeDefined();
  });

  it.each(['.env.example', '.env.sample', 'id_rsa.pub', 'environment.yml', 'keys.py', 'ca.pem', 'token.py'])(
    'ships %s (public by convention)',
    (path) => {
      const dir = tree({ 'train.py': '', [path]: 'x' });
      expect(shipped(dir)).toContain(path);
    },
  );

  it('refuses whatever the case of the name (.ENV, ID_RSA, SUB/.AWS/CREDENTIALS)', () => {
    const dir = tree({ '.ENV': 'x', ID_RSA: 'x', 'Sub/.AWS/Credentials': 'x', 'train.py': '' });
    const e = refusal(() => shipped(dir));
    for (const p of ['.ENV', 'ID_RSA', 'Sub/.AWS/Credentials']) expect(e.message).toContain(p);
    expect(e.details).toMatchObject({
      refused: expect.arrayContaining([expect.objectContaining({ path: 'ID_RSA' })]),
    });
  });

  it('refuses a credential in a nested directory', () => {
    const dir = tree({ 'sub/deeper/.aws/credentials': 'x', 'train.py': '' });
    expect(refusal(() => shipped(dir)).message).toContain('sub/deeper/.aws/credentials');
  });

  it('still refuses .env when a committed .gitignore un-ignores it with !.env', () => {
    const dir = tree({ '.gitignore': '.env*\n!.env\n', '.env': 'TOKEN=x', 'train.py': '' });
    expect(refusal(() => shipped(dir)).message).toContain('.env');
  });

  it('refuses a private key by content, whatever its name', () => {
    const dir = tree({ 'notes.txt': `my key, do not lose:\n${PRIVATE_KEY}`, 'train.py': '' });
    const e = refusal(() => shipped(dir));
    expect(e.message).toContain('notes.txt');
    expect(e.message).toContain('PRIVATE KEY');
  });

  it.each([
    '-----BEGIN RSA PRIVATE KEY-----',
    '-----BEGIN EC PRIVATE KEY-----',
    '-----BEGIN PRIVATE KEY-----',
    '-----BEGIN ENCRYPTED PRIVATE KEY-----',
    '-----BEGIN PGP PRIVATE KEY BLOCK-----',
    'PuTTY-User-Key-File-3: ssh-ed25519',
  ])('recognises %s', (marker) => {
    const dir = tree({ 'a.json': `{"k": "${marker}\\nMIIE"}`, 'train.py': '' });
    expect(refusal(() => shipped(dir)).message).toContain('a.json');
  });

  // Fresh-eyes review: a key shipped under another name or another encoding.
  it('refuses a hard link to a private key outside the tree (symlinks are refused; a hard link is a file)', () => {
    const outside = tree({ id_rsa: PRIVATE_KEY });
    const dir = tree({ 'train.py': '' });
    linkSync(join(outside, 'id_rsa'), join(dir, 'notes.txt'));
    expect(refusal(() => shipped(dir)).message).toContain('notes.txt');
  });

  it('refuses a private key base64-encoded, as a Kubernetes Secret or a CI variable holds one', () => {
    const b64 = Buffer.from(PRIVATE_KEY).toString('base64');
    const dir = tree({
      'k8s/tls.yaml': `apiVersion: v1\nkind: Secret\ndata:\n  tls.key: ${b64}\n`,
      'train.py': '',
    });
    expect(refusal(() => shipped(dir)).message).toContain('k8s/tls.yaml');
  });

  it('ships a base64-encoded certificate (public)', () => {
    const cert = Buffer.from('-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n').toString(
      'base64',
    );
    const dir = tree({ 'ca.yaml': `ca.crt: ${cert}\n`, 'train.py': '' });
    expect(shipped(dir)).toContain('ca.yaml');
  });

  it('finds a key deep in a large file, across the boundary of the bounded reads', () => {
    const dir = makeTempDir('ship-large');
    const fd = openSync(join(dir, 'log.txt'), 'w');
    // 1 MiB reads: the marker straddles the first boundary.
    writeSync(fd, Buffer.alloc(1024 * 1024 - 10, 'a'));
    writeSync(fd, PRIVATE_KEY);
    closeSync(fd);
    expect(refusal(() => shipped(dir)).message).toContain('log.txt');
  });

  it('refuses every refused file in one error, and --include-secret ships exactly the paths named', () => {
    const dir = tree({ '.env': 'A=1', 'keys/deploy': PRIVATE_KEY, 'train.py': '' });
    const e = refusal(() => shipped(dir));
    expect(e.message).toMatch(/2 file\(s\)/);
    expect(e.message).toContain('.env');
    expect(e.message).toContain('keys/deploy');
    expect(refusal(() => shipped(dir, { includeSecrets: ['.env'] })).message).toContain('keys/deploy');
    expect(shipped(dir, { includeSecrets: ['.env', './keys/deploy'] })).toEqual([
      '.env',
      'keys/deploy',
      'train.py',
    ]);
  });

  it('refuses an --include-secret that names no refused file (a typo must not pass silently)', () => {
    const dir = tree({ '.env': 'A=1', 'train.py': '' });
    const e = refusal(() => shipped(dir, { includeSecrets: ['.env', '.ENV.local'] }));
    expect(e.code).toBe('INVALID_INPUT');
    expect(e.message).toContain('.ENV.local');
  });

  it('needs no --include-secret for a credential that .gitignore already leaves out', () => {
    const dir = tree({ '.gitignore': '.env\n', '.env': 'A=1', 'train.py': '' });
    expect(shipped(dir)).toEqual(['.gitignore', 'train.py']);
  });
});

describe('what is never read', () => {
  it('follows no symbolic link, to a file or a directory outside the tree, and says so', () => {
    const outside = tree({ id_rsa: PRIVATE_KEY, shadow: 'root:x' });
    const dir = tree({ 'train.py': '' });
    symlinkSync(join(outside, 'id_rsa'), join(dir, 'key.txt'));
    symlinkSync(outside, join(dir, 'home'));
    symlinkSync('/etc/shadow', join(dir, 'shadow'));
    const got = collectInputs(dir, {});
    expect(got.files.map((f) => f.path)).toEqual(['train.py']);
    expect(got.leftOut.map((l) => l.path).sort()).toEqual(['home', 'key.txt', 'shadow']);
    expect(got.leftOut[0]?.why).toContain('symbolic link');
  });

  it('neither blocks on a FIFO (as a file or as .gitignore) nor reads an ignore file through a link', () => {
    const outside = tree({ rules: 'train.py\n' });
    const dir = tree({ 'train.py': '', 'sub/x.py': '' });
    execFileSync('mkfifo', [join(dir, 'pipe')]);
    execFileSync('mkfifo', [join(dir, 'sub', '.gitignore')]);
    symlinkSync(join(outside, 'rules'), join(dir, '.gitignore'));
    expect(shipped(dir)).toEqual(['sub/x.py', 'train.py']);
  });

  it('refuses a file over the largest input before reading it (a sparse 1 GiB + 1 file)', () => {
    const dir = tree({ 'train.py': '' });
    execFileSync('truncate', ['-s', String(1024 * 1024 * 1024 + 1), join(dir, 'huge.bin')]);
    const e = refusal(() => shipped(dir));
    expect(e.code).toBe('PAYLOAD_TOO_LARGE');
    expect(e.message).toContain('huge.bin');
    expect(e.hint).toContain('.gpu-brokerignore');
  });
});

describe('through the commands', () => {
  /** An environment with a master that is never reached (nothing listens on port 9). */
  const env = () => ({
    XDG_STATE_HOME: makeTempDir('state'),
    GPU_BROKER_URL: 'http://127.0.0.1:9',
    GPU_BROKER_TOKEN: 'tok',
  });

  it('run --dry-run lists every file, its size and the total, and stops: no master, no token', async () => {
    const dir = tree({ 'train.py': 'print(1)\n', 'lib/a.py': 'x' });
    symlinkSync('/etc/shadow', join(dir, 'shadow'));
    const r = await runCli(runCommand, ['--dir', dir, '--dry-run'], { XDG_STATE_HOME: makeTempDir('state') });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`2 file(s), 10 B (10 bytes) from ${dir}:`);
    expect(r.stdout).toMatch(/ {6}1 B {2}lib\/a\.py\n/);
    expect(r.stdout).toContain('1 symbolic link(s) left out, never followed: shadow');
    const j = await runCli(runCommand, ['--dir', dir, '--dry-run', '--json'], {});
    expect(j.json()).toMatchObject({ count: 2, total_bytes: 10, files: [{ path: 'lib/a.py', size: 1 }, {}] });
  });

  it('propose --dir --dry-run lists the same files and needs no --entry', async () => {
    const dir = tree({ 'train.py': 'print(1)\n', '.env': 'A=1' });
    const r = await runCli(proposeCommand, ['--dir', dir, '--dry-run', '--include-secret', '.env'], {});
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('2 file(s)');
    expect(r.stdout).toContain('.env');
  });

  it('run and propose refuse a credential before contacting the master, naming it', async () => {
    const dir = tree({ 'train.py': '', 'sub/.aws/credentials': '[default]' });
    const ran = await runCli(runCommand, ['--dir', dir, '--', 'python3', 'train.py'], env());
    expect(ran.code).toBe(2); // bad input, as a bad flag
    expect(ran.stderr).toMatch(
      /^error: INVALID_INPUT: refusing to ship 1 file\(s\).*sub\/\.aws\/credentials/,
    );
    expect(ran.stderr).toContain('--include-secret');
    expect(ran.stderr).not.toContain('cannot reach');
    const proposed = await runCli(proposeCommand, ['--dir', dir, '--entry', 'python3 train.py'], env());
    expect(proposed.code).toBe(2);
    expect(proposed.stderr).toContain('sub/.aws/credentials');
    expect(proposed.stderr).not.toContain('cannot reach');
  });

  it('run lists what ships before the first run of a directory, on stderr, before contacting the master', async () => {
    const dir = tree({ 'train.py': 'print(1)\n' });
    const r = await runCli(runCommand, ['--dir', dir, '--', 'python3', 'train.py'], env());
    expect(r.code).toBe(1); // the master is unreachable, after the listing
    expect(r.stderr).toContain('gpu-broker: first run from this directory');
    expect(r.stderr).toMatch(/gpu-broker: +9 B {2}train\.py\n/);
    expect(r.stderr).toContain('cannot reach');
  });
});
