import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  AUDIT_ARCHIVE_DIR,
  verifyArchiveFiles,
  verifyWholeChain,
} from '../../../../src/broker/loops/audit-archive.js';
import { AuditMonitor, type AuditMonitorOptions } from '../../../../src/broker/loops/audit-monitor.js';
import { ManualClock } from '../../../../src/platform/clock.js';
import { GENESIS_HASH } from '../../../../src/store/audit-repo.js';
import { Store } from '../../../../src/store/store.js';
import { appendChain, dropAuditTriggers } from '../../../fixtures/audit-chain.js';
import { makeTempDir, removeTempDirs } from '../../../support/temp.js';

/**
 * The background audit monitor (docs/operations.md "Audit retention"): incremental checks read only new rows and re-check their
 * anchor, a full pass catches a tampered row anywhere, results are served without walking, and
 * retention moves old rows to archive files that verify with the live table as one chain.
 */

let dataDir: string;
let store: Store;
let clock: ManualClock;
let yields: number;

function monitor(over: Partial<AuditMonitorOptions> = {}): AuditMonitor {
  return new AuditMonitor(store, clock, {
    dataDir,
    batch_size: 100,
    full_interval_ms: 3600_000,
    retention: {
      enabled: false,
      keep_events: 50,
      min_age_seconds: 0,
      max_segment_events: 1000,
      max_segments_per_run: 1,
    },
    retention_interval_ms: 0,
    yieldToLoop: async () => {
      yields++;
    },
    ...over,
  });
}

function tamper(sql: string): void {
  dropAuditTriggers(store);
  store.db.prepare(sql).run();
}

beforeEach(() => {
  dataDir = makeTempDir('audit-monitor');
  store = Store.open(join(dataDir, 'broker.db'));
  clock = new ManualClock();
  yields = 0;
});

afterEach(() => store.close());
afterAll(() => removeTempDirs());

describe('audit monitor', () => {
  it('walks in batches, yielding between them, and then checks only what was appended', async () => {
    appendChain(store, 1000);
    const m = monitor();
    expect(m.status()).toMatchObject({ ok: true, detail: 'verification pending' });
    await m.tick();
    expect(m.status()).toEqual({ ok: true, events: 1000 });
    expect(yields).toBe(10);
    appendChain(store, 150);
    yields = 0;
    await m.tick();
    expect(m.status()).toEqual({ ok: true, events: 1150 });
    expect(yields).toBe(1);
    expect(m.verifiedThrough().seq).toBe(1150);
  });

  it('an old tampered row escapes the incremental check but not the full pass', async () => {
    appendChain(store, 500);
    const m = monitor();
    await m.tick();
    tamper("UPDATE audit_events SET actor = 'mallory' WHERE seq = 17");
    appendChain(store, 5);
    await m.checkNew();
    expect(m.status().ok).toBe(true);
    const full = await m.verifyAll();
    expect(full).toMatchObject({ ok: false, detail: 'seq 17: hash does not match the row contents' });
    // A broken result stays until a full pass succeeds, whatever incremental passes say.
    await m.checkNew();
    expect(m.status().ok).toBe(false);
  });

  it('catches a tampered new row and a tampered anchor row incrementally', async () => {
    appendChain(store, 300);
    const m = monitor();
    await m.tick();
    appendChain(store, 20);
    tamper('UPDATE audit_events SET data = \'{"x":1}\' WHERE seq = 310');
    await m.checkNew();
    expect(m.status()).toMatchObject({ ok: false, detail: 'seq 310: hash does not match the row contents' });

    store.close();
    store = Store.open(join(makeTempDir('audit-anchor'), 'broker.db'));
    appendChain(store, 300);
    const m2 = monitor();
    await m2.tick();
    tamper("UPDATE audit_events SET actor = 'mallory' WHERE seq = 300");
    await m2.checkNew();
    expect(m2.status()).toMatchObject({ ok: false, detail: 'seq 300: hash does not match the row contents' });
  });

  it('notices verified rows that disappeared', async () => {
    appendChain(store, 100);
    const m = monitor();
    await m.tick();
    tamper('DELETE FROM audit_events WHERE seq > 90');
    await m.checkNew();
    expect(m.status()).toMatchObject({ ok: false, detail: 'seq 100: verified row 100 is missing' });
  });

  it('a restart continues from the saved checkpoint; the full pass is remembered too', async () => {
    appendChain(store, 400);
    await monitor().tick();
    appendChain(store, 10);
    const again = monitor();
    expect(again.verifiedThrough().seq).toBe(400);
    expect(again.status()).toMatchObject({ ok: true, events: 400 });
    yields = 0;
    await again.tick();
    expect(yields).toBe(0);
    expect(again.status()).toEqual({ ok: true, events: 410 });
    clock.advance(3600_000);
    await again.tick();
    expect(yields).toBe(4);
  });

  it('a second tick while one runs does not start another pass', async () => {
    appendChain(store, 1000);
    const m = monitor({ yieldToLoop: () => new Promise((r) => setImmediate(r)) });
    const a = m.tick();
    expect(m.busy()).toBe(true);
    const b = m.tick();
    await Promise.all([a, b]);
    expect(m.busy()).toBe(false);
    expect(m.status()).toEqual({ ok: true, events: 1000 });
  });
});

describe('audit monitor stop', () => {
  it('ends a pass at the next batch without a result, and later ticks do nothing', async () => {
    appendChain(store, 1000);
    const m = monitor({ yieldToLoop: () => new Promise((r) => setImmediate(r)) });
    const pass = m.tick();
    await m.stop();
    await pass;
    expect(m.status()).toMatchObject({ ok: true, detail: 'verification pending' });
    expect(store.audit.checkpoint()).toBeNull();
    await m.tick();
    expect(m.busy()).toBe(false);
    expect(store.audit.checkpoint()).toBeNull();
  });
});

describe('audit retention', () => {
  const retention = {
    enabled: true,
    keep_events: 100,
    min_age_seconds: 60,
    max_segment_events: 300,
    max_segments_per_run: 2,
  };

  it('archives old verified rows in bounded segments that verify with the live table as one chain', async () => {
    // Rows 1..1000 are an hour old; 1001..1050 are new.
    appendChain(store, 1000, () => clock.now() - 3600_000);
    appendChain(store, 50, () => clock.now());
    const m = monitor({ retention });
    for (let i = 0; i < 5; i++) await m.tick();
    const segments = store.audit.segments();
    // Segments of at most 300 rows, never the newest 100 nor anything younger than a minute.
    expect(segments.map((s) => [s.first_seq, s.last_seq])).toEqual([
      [1, 300],
      [301, 600],
      [601, 900],
      [901, 950],
    ]);
    expect(segments[0]?.first_prev_hash).toBe(GENESIS_HASH);
    expect(store.audit.count()).toBe(100);
    expect(m.status()).toEqual({ ok: true, events: 100 });
    expect(readdirSync(join(dataDir, AUDIT_ARCHIVE_DIR)).sort()).toEqual(segments.map((s) => s.file));
    expect(verifyWholeChain(store, dataDir)).toMatchObject({ ok: true, events: 1050, head_seq: 1050 });
    // Each file verifies offline on its own, saying what it continues from.
    const second = join(dataDir, AUDIT_ARCHIVE_DIR, segments[1]!.file);
    expect(verifyArchiveFiles([second])).toMatchObject({
      ok: true,
      events: 300,
      first_seq: 301,
      first_prev_hash: segments[0]?.last_hash,
      head: segments[1]?.last_hash,
    });
    // Appends continue the chain; a full pass starts at the archive boundary.
    store.transaction(() =>
      store.audit.append({
        at: clock.now(),
        actor: 'a',
        action: 'worker.connected',
        subject_type: 's',
        subject_id: 'i',
      }),
    );
    expect(await m.verifyAll()).toEqual({ ok: true, events: 101 });
    // Rows no segment covers still cannot be deleted.
    expect(() => store.db.prepare('DELETE FROM audit_events WHERE seq = 1000').run()).toThrow(/append-only/);
  });

  it('audit verify catches a tampered row in an archive file and in the live table', async () => {
    appendChain(store, 600, () => clock.now() - 3600_000);
    const m = monitor({ retention });
    await m.tick();
    const [seg] = store.audit.segments();
    const path = join(dataDir, AUDIT_ARCHIVE_DIR, seg!.file);
    const original = readFileSync(path, 'utf8');
    writeFileSync(path, original.replace('"task_42"', '"task_43"'));
    expect(verifyWholeChain(store, dataDir)).toMatchObject({
      ok: false,
      file: path,
      first_bad_seq: 42,
      problem: 'hash does not match the row contents',
    });
    expect(verifyArchiveFiles([path])).toMatchObject({ ok: false, first_bad_seq: 42 });
    writeFileSync(path, original);
    expect(verifyWholeChain(store, dataDir).ok).toBe(true);
    tamper("UPDATE audit_events SET actor = 'mallory' WHERE seq = 550");
    expect(verifyWholeChain(store, dataDir)).toMatchObject({ ok: false, first_bad_seq: 550 });
  });

  it('never archives past the anchor, and refuses a segment with a bad row (nothing deleted)', async () => {
    appendChain(store, 400, () => clock.now() - 3600_000);
    const m = monitor({ retention: { ...retention, keep_events: 1 } });
    await m.checkNew();
    tamper("UPDATE audit_events SET actor = 'mallory' WHERE seq = 5");
    await m.tick();
    expect(store.audit.segments()).toEqual([]);
    expect(store.audit.count()).toBe(400);
    expect(m.status()).toMatchObject({ ok: false, detail: 'seq 5: hash does not match the row contents' });
  });

  it('keeps up (docs/performance.md "Noisy neighbours"): several segments a run, and a run stopped at its cap continues on the next tick', async () => {
    // Retention runs at most hourly, yet a backlog of 10 segments drains in a few checks, not 10 hours.
    const fast = { ...retention, keep_events: 1, min_age_seconds: 0, max_segments_per_run: 4 };
    const m = monitor({ retention: fast, retention_interval_ms: 3600_000 });
    appendChain(store, 3000, () => clock.now());
    clock.advance(1000);
    await m.tick(); // segments 1..4
    expect(store.audit.segments()).toHaveLength(4);
    expect(m.retentionIsBehind()).toBe(true);
    await m.tick(); // 5..8, with no interval passed
    await m.tick(); // 9..10 and the rest up to the anchor
    expect(m.retentionIsBehind()).toBe(false);
    expect(store.audit.liveStart().seq).toBe(2999);
    // Sustained writes: 3,000 rows an interval, 2.5 runs' worth, drain within 3 checks every time.
    for (let round = 0; round < 3; round++) {
      appendChain(store, 3000, () => clock.now());
      clock.advance(3600_000);
      for (let check = 0; check < 3; check++) {
        await m.tick();
        clock.advance(5000);
      }
      expect(m.retentionIsBehind()).toBe(false);
      expect(store.audit.count()).toBe(1);
    }
    expect(verifyWholeChain(store, dataDir)).toMatchObject({ ok: true, events: 12000 });
  });
});
