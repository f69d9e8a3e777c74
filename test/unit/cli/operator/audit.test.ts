import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { AuditMonitor } from '../../../../src/broker/loops/audit-monitor.js';
import { run as audit } from '../../../../src/cli/operator/audit.js';
import { run as token } from '../../../../src/cli/operator/token.js';
import { ManualClock } from '../../../../src/platform/clock.js';
import { openDb } from '../../../../src/store/db.js';
import { Store } from '../../../../src/store/store.js';
import { appendChain } from '../../../fixtures/audit-chain.js';
import { runCli } from '../../../support/cli.js';
import { makeTempDir, removeTempDirs } from '../../../support/temp.js';

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

  it('verifies archive segments and the live table as one chain; --archive checks a file offline', async () => {
    const store = Store.open(join(dataDir, 'broker.db'));
    // Times in append order, as a clock gives them (the retention's age cut-off searches by seq).
    const at = Date.now();
    appendChain(store, 300, () => at);
    const monitor = new AuditMonitor(store, new ManualClock(at + 1000), {
      dataDir,
      batch_size: 50,
      full_interval_ms: 3600_000,
      retention: {
        enabled: true,
        keep_events: 10,
        min_age_seconds: 0,
        max_segment_events: 100,
        max_segments_per_run: 1,
      },
      retention_interval_ms: 0,
    });
    for (let i = 0; i < 3; i++) await monitor.tick();
    const segments = store.audit.segments();
    store.close();
    expect(segments.length).toBe(3);
    const r = await runCli(audit, ['verify', '--data-dir', dataDir, '--json']);
    expect(r.code).toBe(0);
    expect(r.json()).toMatchObject({ ok: true, events: 304, head_seq: 304, segments: 3 });

    const file = join(dataDir, 'audit-archive', segments[1]!.file);
    const offline = await runCli(audit, ['verify', '--archive', file]);
    expect(offline.code).toBe(0);
    expect(offline.stdout).toContain(
      `archive intact: 100 events, seq 101..200, continues from ${segments[0]!.last_hash}`,
    );

    const lines = readFileSync(file, 'utf8').split('\n');
    lines[5] = lines[5]!.replace('"actor":"prin_bench"', '"actor":"mallory"');
    writeFileSync(file, lines.join('\n'));
    const broken = await runCli(audit, ['verify', '--data-dir', dataDir]);
    expect(broken.code).toBe(1);
    expect(broken.stdout).toContain(`BROKEN at seq 106 in ${file}: hash does not match the row contents`);
    expect((await runCli(audit, ['verify', '--archive', file])).code).toBe(1);
  });

  it('refuses an unknown subcommand with exit 2', async () => {
    expect((await runCli(audit, ['check', '--data-dir', dataDir])).code).toBe(2);
  });
});
