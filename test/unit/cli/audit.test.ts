import { join } from 'node:path';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { run as audit } from '../../../src/cli/audit.js';
import { run as token } from '../../../src/cli/token.js';
import { openDb } from '../../../src/store/db.js';
import { runCli } from '../../support/cli.js';
import { makeTempDir, removeTempDirs } from '../../support/temp.js';

/** `gpu-broker audit verify`: exit 0 on an intact chain, 1 naming the first bad row otherwise. */

let dataDir: string;

beforeEach(async () => {
  dataDir = join(makeTempDir('cli-audit'), 'data');
  for (const name of ['a', 'b', 'c', 'd'])
    expect(
      (await runCli(token, ['create', '--data-dir', dataDir, '--name', name, '--role', 'viewer'])).code,
    ).toBe(0);
});

afterAll(() => removeTempDirs());

describe('audit verify', () => {
  it('reports an intact chain with its head', async () => {
    const r = await runCli(audit, ['verify', '--data-dir', dataDir, '--json']);
    expect(r.code).toBe(0);
    const out = r.json<{ ok: boolean; events: number; head: string }>();
    expect(out).toMatchObject({ ok: true, events: 4 });
    expect(out.head).toMatch(/^[0-9a-f]{64}$/);
    const text = await runCli(audit, ['verify', '--data-dir', dataDir]);
    expect(text.code).toBe(0);
    expect(text.stdout).toBe(`audit chain intact: 4 events, head ${out.head}\n`);
  });

  it('exits 1 and names the first bad row after tampering (append-only trigger dropped)', async () => {
    const db = openDb(join(dataDir, 'broker.db'));
    db.exec('DROP TRIGGER audit_events_append_only_update');
    db.prepare(
      `UPDATE audit_events SET data = '{"name":"mallory","roles":["operator"]}' WHERE seq = 2`,
    ).run();
    db.close();
    const r = await runCli(audit, ['verify', '--data-dir', dataDir, '--json']);
    expect(r.code).toBe(1);
    expect(r.json()).toEqual({
      ok: false,
      events: 2,
      first_bad_seq: 2,
      problem: 'hash does not match the row contents',
    });
    const text = await runCli(audit, ['verify', '--data-dir', dataDir]);
    expect(text.code).toBe(1);
    expect(text.stdout).toContain('BROKEN at seq 2');
  });

  it('refuses an unknown subcommand with exit 2', async () => {
    expect((await runCli(audit, ['check', '--data-dir', dataDir])).code).toBe(2);
  });
});
