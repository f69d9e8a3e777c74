import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { authenticate } from '../../../../src/broker/principals.js';
import { run as token } from '../../../../src/cli/operator/token.js';
import type { ErrorBody } from '../../../../src/contracts/errors.js';
import { openStore } from '../../../../src/master/data-dir.js';
import { runCli } from '../../../support/cli.js';
import { makeTempDir, removeTempDirs } from '../../../support/temp.js';

/** `gpu-broker token create|list|revoke` on a data dir, in-process with captured output. */

let dataDir: string;

beforeEach(() => {
  dataDir = join(makeTempDir('cli-token'), 'data');
});

afterAll(() => removeTempDirs());

/** Authenticates a token against the data dir's store (null when refused). */
function whoIs(t: string): string | null {
  const store = openStore(dataDir);
  try {
    return authenticate({ store }, t).name;
  } catch {
    return null;
  } finally {
    store.close();
  }
}

describe('token create', () => {
  it('--json prints name, roles and the token once; the token authenticates; only its hash is stored', async () => {
    const r = await runCli(token, [
      'create',
      '--data-dir',
      dataDir,
      '--name',
      'alice',
      '--role',
      'submitter',
      '--role',
      'viewer',
      '--json',
    ]);
    expect(r.code).toBe(0);
    const out = r.json<{ name: string; roles: string[]; token: string; worker_id: string | null }>();
    expect(out).toMatchObject({ name: 'alice', roles: ['submitter', 'viewer'], worker_id: null });
    expect(out.token).toMatch(/^gpb_[A-Za-z0-9_-]{43}$/);
    expect(whoIs(out.token)).toBe('alice');
    expect(statSync(dataDir).mode & 0o777).toBe(0o700);

    const store = openStore(dataDir);
    try {
      const raw = JSON.stringify(store.db.prepare('SELECT * FROM principals').all());
      expect(raw).not.toContain(out.token);
      expect(raw).not.toContain(out.token.slice(4));
    } finally {
      store.close();
    }
  });

  it('prints the token on its own first line without --json', async () => {
    const r = await runCli(token, ['create', '--data-dir', dataDir, '--name', 'bob', '--role', 'reviewer']);
    expect(r.code).toBe(0);
    const [first, second] = r.stdout.split('\n');
    expect(first).toMatch(/^gpb_/);
    expect(second).toContain('shown once');
    expect(whoIs(first!)).toBe('bob');
  });

  it('binds worker tokens to a worker id, and only worker tokens', async () => {
    const ok = await runCli(token, [
      'create',
      '--data-dir',
      dataDir,
      '--name',
      'w1',
      '--role',
      'worker',
      '--worker-id',
      'gpu-host-1',
      '--json',
    ]);
    expect(ok.code).toBe(0);
    expect(ok.json()).toMatchObject({ roles: ['worker'], worker_id: 'gpu-host-1' });
    for (const argv of [
      ['--name', 'w2', '--role', 'worker'],
      ['--name', 'w3', '--role', 'submitter', '--worker-id', 'x'],
      ['--name', 'w4', '--role', 'worker', '--role', 'operator', '--worker-id', 'x'],
    ]) {
      const r = await runCli(token, ['create', '--data-dir', dataDir, ...argv, '--json']);
      expect({ argv, code: r.code }).toEqual({ argv, code: 2 });
      expect(r.json<{ error: ErrorBody }>().error.code).toBe('INVALID_INPUT');
    }
  });

  it('refuses a worker id that hello would refuse: one usage line naming the rule, exit 2, nothing created (docs/state-machines.md)', async () => {
    for (const id of ['gpu\u001b[2K\u0007host', 'gpu\nhost', '../../etc', 'w'.repeat(200), '', '.hidden']) {
      const argv = ['create', '--data-dir', dataDir, '--name', 'w', '--role', 'worker', '--worker-id', id];
      const r = await runCli(token, argv);
      expect({ id, code: r.code, stdout: r.stdout }).toEqual({ id, code: 2, stdout: '' });
      expect(r.stderr.trimEnd().split('\n')).toHaveLength(1);
      expect(r.stderr).toContain('a worker id is 1 to 128 letters, digits, ".", "_" or "-"');
      expect(r.stderr).not.toMatch(/[\u0000-\u0009\u000b-\u001f]/);
      expect(existsSync(dataDir)).toBe(false);
      const j = await runCli(token, [...argv, '--json']);
      expect(j.code).toBe(2);
      expect(j.json<{ error: ErrorBody }>().error).toMatchObject({ code: 'INVALID_INPUT' });
      expect(existsSync(dataDir)).toBe(false);
    }
    // The longest id the rule allows connects; so it is accepted here.
    const max = await runCli(token, [
      'create',
      '--data-dir',
      dataDir,
      '--name',
      'w',
      '--role',
      'worker',
      '--worker-id',
      'w'.repeat(128),
      '--json',
    ]);
    expect(max.code).toBe(0);
  });

  it('refuses bad input with exit 2 and a duplicate name with exit 1 (CONFLICT)', async () => {
    const cases: Array<[string[], number, string]> = [
      [['--role', 'submitter'], 2, 'INVALID_INPUT'],
      [['--name', 'x'], 2, 'INVALID_INPUT'],
      [['--name', 'x', '--role', 'admin'], 2, 'INVALID_INPUT'],
      [['--name', '../etc', '--role', 'viewer'], 2, 'INVALID_INPUT'],
    ];
    for (const [argv, code, err] of cases) {
      const r = await runCli(token, ['create', '--data-dir', dataDir, ...argv, '--json']);
      expect({ argv, code: r.code, err: r.json<{ error: ErrorBody }>().error.code }).toEqual({
        argv,
        code,
        err,
      });
    }
    expect(
      (await runCli(token, ['create', '--data-dir', dataDir, '--name', 'dup', '--role', 'viewer'])).code,
    ).toBe(0);
    const dup = await runCli(token, ['create', '--data-dir', dataDir, '--name', 'dup', '--role', 'viewer']);
    expect(dup.code).toBe(1);
    expect(dup.stderr).toContain('CONFLICT');
  });

  it('takes the data dir from GPU_BROKER_HOME', async () => {
    const r = await runCli(token, ['create', '--name', 'env', '--role', 'viewer', '--json'], {
      GPU_BROKER_HOME: dataDir,
    });
    expect(r.code).toBe(0);
    expect(whoIs(r.json<{ token: string }>().token)).toBe('env');
  });
});

describe('token list and revoke', () => {
  it('lists principals without tokens, revokes by name, and a revoked token stops authenticating', async () => {
    const created = (
      await runCli(token, [
        'create',
        '--data-dir',
        dataDir,
        '--name',
        'carol',
        '--role',
        'submitter',
        '--json',
      ])
    ).json<{ token: string }>().token;
    await runCli(token, ['create', '--data-dir', dataDir, '--name', 'dave', '--role', 'reviewer']);

    const list = await runCli(token, ['list', '--data-dir', dataDir, '--json']);
    expect(list.code).toBe(0);
    const principals = list.json<{ principals: Array<{ name: string; roles: string[]; revoked: boolean }> }>()
      .principals;
    expect(principals.map((p) => [p.name, p.roles, p.revoked])).toEqual([
      ['carol', ['submitter'], false],
      ['dave', ['reviewer'], false],
    ]);
    expect(list.stdout).not.toContain('gpb_');

    const revoked = await runCli(token, ['revoke', 'carol', '--data-dir', dataDir, '--json']);
    expect(revoked.code).toBe(0);
    expect(revoked.json()).toEqual({ name: 'carol', revoked: true });
    expect(whoIs(created)).toBeNull();

    const text = await runCli(token, ['list', '--data-dir', dataDir]);
    expect(text.stdout.split('\n')[0]).toMatch(/^NAME\s+ROLES/);
    expect(text.stdout).toMatch(/carol\s+submitter.*yes/);

    const again = await runCli(token, ['revoke', 'carol', '--data-dir', dataDir, '--json']);
    expect(again.code).toBe(1);
    expect(again.json<{ error: ErrorBody }>().error.code).toBe('NOT_FOUND');
    expect((await runCli(token, ['revoke', 'nobody', '--data-dir', dataDir])).code).toBe(1);
    expect((await runCli(token, ['revoke', '--data-dir', dataDir])).code).toBe(2);
    expect((await runCli(token, ['frobnicate', '--data-dir', dataDir])).code).toBe(2);
  });
});
