import { afterEach, describe, expect, it } from 'vitest';
import { MAX_STORED_CHUNK_BYTES } from '../../../src/store/logs-repo.js';
import { type BrokerFixture, makeBrokerDeps } from '../../support/deps.js';

let f: BrokerFixture;
afterEach(() => f?.close());

/** The definition `total` must keep: the end of the furthest-reaching chunk of the stream. */
function scannedTotal(f: BrokerFixture, e: string, s: string): number {
  const row = f.deps.store.db
    .prepare('SELECT max(offset + length(data)) AS t FROM task_logs WHERE execution_id = ? AND stream = ?')
    .get(e, s) as { t: number | null };
  return row.t ?? 0;
}

describe('LogsRepo.total reads only the last window of a stream (docs/performance.md "Noisy neighbours")', () => {
  it('is 0 for a stream without chunks and ignores other executions and streams', () => {
    f = makeBrokerDeps();
    const logs = f.deps.store.logs;
    expect(logs.total('ex-1', 'stdout')).toBe(0);
    logs.putChunk('ex-2', 'stdout', 0, Buffer.alloc(500));
    logs.putChunk('ex-1', 'stderr', 0, Buffer.alloc(700));
    expect(logs.total('ex-1', 'stdout')).toBe(0);
    expect(logs.total('ex-1', 'stderr')).toBe(700);
    expect(logs.total('ex-2', 'stdout')).toBe(500);
  });

  it('counts an earlier chunk that reaches past the last one (binary output decodes longer)', () => {
    f = makeBrokerDeps();
    const logs = f.deps.store.logs;
    logs.putChunk('ex', 'stdout', 0, Buffer.alloc(3 * 1000)); // 1,000 raw bytes, all invalid UTF-8
    logs.putChunk('ex', 'stdout', 1000, Buffer.alloc(10));
    expect(logs.total('ex', 'stdout')).toBe(3000);
    // The largest chunk a worker can send, ending beyond many small chunks after it.
    logs.putChunk('ex', 'stdout', 3000, Buffer.alloc(MAX_STORED_CHUNK_BYTES));
    for (let i = 1; i <= 50; i++) logs.putChunk('ex', 'stdout', 3000 + i * 100, Buffer.alloc(5));
    expect(logs.total('ex', 'stdout')).toBe(3000 + MAX_STORED_CHUNK_BYTES);
    expect(logs.total('ex', 'stdout')).toBe(scannedTotal(f, 'ex', 'stdout'));
  });

  it('equals the full scan on random streams whose chunks respect the size bound', () => {
    f = makeBrokerDeps();
    const logs = f.deps.store.logs;
    let seed = 7;
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    for (let k = 0; k < 20; k++) {
      const e = `ex-${k}`;
      let held = 0;
      const n = 1 + rand(40);
      for (let i = 0; i < n; i++) {
        // A chunk starts at or before what is held (the master refuses gaps), sometimes a resend.
        const offset = rand(4) === 0 ? rand(held + 1) : held;
        const len = 1 + rand(rand(3) === 0 ? MAX_STORED_CHUNK_BYTES : 70_000);
        logs.putChunk(e, 'stdout', offset, Buffer.alloc(len));
        held = logs.total(e, 'stdout');
        expect(held).toBe(scannedTotal(f, e, 'stdout'));
      }
    }
  });
});

describe('LogsRepo.putChunk: a chunk resent at the same offset', () => {
  it('replaces the stored one when longer (a restarted worker reads its file again from 0 in one chunk), never when shorter', () => {
    f = makeBrokerDeps();
    const logs = f.deps.store.logs;
    logs.putChunk('ex', 'stdout', 0, Buffer.from('before\n'));
    // Before: INSERT OR IGNORE dropped this whole chunk, and with it every byte after "before\n".
    logs.putChunk('ex', 'stdout', 0, Buffer.from('before\nafter\n'));
    expect(logs.read('ex', 'stdout', 0, 1000).data.toString()).toBe('before\nafter\n');
    expect(logs.total('ex', 'stdout')).toBe(13);
    logs.putChunk('ex', 'stdout', 0, Buffer.from('bef'));
    expect(logs.read('ex', 'stdout', 0, 1000).data.toString()).toBe('before\nafter\n');
    // A later chunk that overlaps the longer one reads once, trimmed.
    logs.putChunk('ex', 'stdout', 7, Buffer.from('after\nmore\n'));
    expect(logs.read('ex', 'stdout', 0, 1000).data.toString()).toBe('before\nafter\nmore\n');
    expect(logs.total('ex', 'stdout')).toBe(18);
  });
});
