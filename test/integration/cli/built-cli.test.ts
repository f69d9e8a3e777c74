import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { spawnCli } from '../../support/cli.js';
import { makeTempDir, removeTempDirs } from '../../support/temp.js';

/** The built program (`node dist/src/cli/main.js`, from `npm run build`) as users run it. */

afterAll(() => removeTempDirs());

describe('gpu-broker (built)', () => {
  it('prints usage, and exits 2 on an unknown command', async () => {
    const help = await spawnCli(['--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('gpu-broker');
    expect(help.stdout).toContain('audit verify');
    const bad = await spawnCli(['frobnicate']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('unknown command "frobnicate"');
  });

  it('creates, lists and revokes tokens, and verifies the audit chain, with --json', async () => {
    const dataDir = join(makeTempDir('built-cli'), 'data');
    const created = await spawnCli([
      'token',
      'create',
      '--data-dir',
      dataDir,
      '--name',
      'ci',
      '--role',
      'submitter',
      '--json',
    ]);
    expect(created.code).toBe(0);
    expect(JSON.parse(created.stdout)).toMatchObject({ name: 'ci', roles: ['submitter'] });
    const revoked = await spawnCli(['token', 'revoke', 'ci', '--data-dir', dataDir, '--json']);
    expect(revoked.code).toBe(0);
    const list = await spawnCli(['token', 'list', '--data-dir', dataDir, '--json']);
    expect(JSON.parse(list.stdout)).toMatchObject({ principals: [{ name: 'ci', revoked: true }] });
    const verify = await spawnCli(['audit', 'verify', '--data-dir', dataDir, '--json']);
    expect(verify.code).toBe(0);
    expect(JSON.parse(verify.stdout)).toMatchObject({ ok: true, events: 2 });
  });
});
