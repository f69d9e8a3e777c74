import { chmodSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run as propose, splitEntry } from '../../../../src/cli/agent/propose.js';
import { collectInputs, globToRegExp } from '../../../../src/cli/agent/propose-files.js';
import { runCli } from '../../../support/cli.js';
import { startTestMaster, type TestMaster } from '../../../support/master.js';
import { makeTempDir } from '../../../support/temp.js';

/** `gpu-broker propose --dir` against a real master over HTTPS. */

let m: TestMaster;
let remote: string[];
let dir: string;
/** What the commands remember lives in a state dir of the test's own (never the real home). */
let env: Record<string, string>;
const proposeCli = (args: string[]) => runCli(propose, args, env);

beforeAll(async () => {
  m = await startTestMaster({
    config: { policy: { scripts: [{ interpreter: '/usr/bin/python3', script_from_inputs: true }] } },
  });
  remote = ['--url', m.url, '--token', m.createToken('alice', ['submitter']), '--ca-file', m.caCertPath!];
  env = { XDG_STATE_HOME: makeTempDir('state') };
  dir = makeTempDir('project');
  mkdirSync(join(dir, 'src'));
  mkdirSync(join(dir, 'build'));
  mkdirSync(join(dir, '.git'));
  writeFileSync(join(dir, 'train.py'), 'import src.model\n');
  writeFileSync(join(dir, 'src/model.py'), 'X = 1\n');
  writeFileSync(join(dir, 'run.sh'), '#!/bin/sh\n');
  chmodSync(join(dir, 'run.sh'), 0o755);
  writeFileSync(join(dir, 'build/out.o'), 'binary');
  writeFileSync(join(dir, 'notes.log'), 'log');
  writeFileSync(join(dir, '.git/HEAD'), 'ref');
  writeFileSync(join(dir, '.gitignore'), 'build/\n*.log\n');
  symlinkSync('/etc/passwd', join(dir, 'passwd'));
  // Code Python loads on its own (docs/security.md "Code the reviewer did not read"): left out, and said so.
  mkdirSync(join(dir, 'src/__pycache__'));
  writeFileSync(join(dir, 'src/__pycache__/model.cpython-311.pyc'), 'bytecode');
  writeFileSync(join(dir, 'evil.pth'), 'import os; os.system("id")\n');
});

afterAll(async () => {
  await m?.close();
});

describe('propose --dir', () => {
  it('ships the project (gitignore-aware, no symlinks) and creates a confirmed proposal', async () => {
    const r = await proposeCli([
      '--dir',
      dir,
      '--entry',
      "python3 train.py --name 'a b'",
      '--title',
      'train from a dir',
      '--notes',
      'runs train.py',
      '--output',
      'metrics.json',
      '--confirm',
      '--json',
      ...remote,
    ]);
    const j = r.json<{
      proposal_id: string;
      state: string;
      files: number;
      uploaded: number;
      left_out: Array<{ path: string }>;
    }>();
    expect(r.code, r.stdout).toBe(0);
    expect(j).toMatchObject({ state: 'IN_REVIEW', files: 4, uploaded: 4 });
    // The symbolic link to /etc/passwd is left out and said so (docs/security.md "gpu-broker run on the submitter’s machine").
    expect(j.left_out.map((l) => l.path)).toEqual([
      'evil.pth',
      'passwd',
      'src/__pycache__/model.cpython-311.pyc',
    ]);
    const spec = m.store.proposals.revision(m.store.proposals.get(j.proposal_id)!.current_revision_id)!.spec;
    expect(spec.runtime.argv).toEqual(['/usr/bin/python3', 'train.py', '--name', 'a b']);
    expect(spec.inputs!.map((i) => [i.path, i.executable ?? false])).toEqual([
      ['.gitignore', false],
      ['run.sh', true],
      ['src/model.py', false],
      ['train.py', false],
    ]);
  });

  it('revises with --proposal, uploading only what changed', async () => {
    const first = (
      await proposeCli(['--dir', dir, '--entry', 'python3 train.py', '--notes', 'n', '--json', ...remote])
    ).json<{ proposal_id: string }>();
    writeFileSync(join(dir, 'src/model.py'), 'X = 2\n');
    const r = await proposeCli([
      '--dir',
      dir,
      '--entry',
      'python3 train.py',
      '--proposal',
      first.proposal_id,
      '--json',
      ...remote,
    ]);
    expect(r.json()).toMatchObject({ proposal_id: first.proposal_id, revision_number: 2, uploaded: 1 });
  });

  it('says how many implicit-code files it left out and why, even when --include names them', async () => {
    const r = await proposeCli([
      '--dir',
      dir,
      '--entry',
      'python3 train.py',
      '--include',
      '**/*.py*',
      '--notes',
      'n',
      ...remote,
    ]);
    expect(r.stdout).toContain('1 file(s) left out: an interpreter would load them on its own');
    expect(r.stdout).toContain('src/__pycache__/model.cpython-311.pyc');
    expect(r.stdout).not.toContain('IMPLICIT_CODE');
  });

  it('says what is missing', async () => {
    const r = await proposeCli(['--dir', dir, ...remote]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--dir and --entry are required');
  });
});

describe('propose helpers', () => {
  it('splits the entry without a shell and matches globs like .gitignore', () => {
    expect(splitEntry(`python3 x.py --a "b c" 'd'`)).toEqual(['python3', 'x.py', '--a', 'b c', 'd']);
    expect(globToRegExp('*.py').test('src/a.py')).toBe(true);
    expect(globToRegExp('/top.py').test('src/top.py')).toBe(false);
    expect(globToRegExp('src/**/*.py').test('src/a/b/c.py')).toBe(true);
    expect(globToRegExp('src/**/*.py').test('src/c.py')).toBe(true);
    expect(collectInputs(dir, { includes: ['src/**'] }).files.map((f) => f.path)).toEqual(['src/model.py']);
  });
});
