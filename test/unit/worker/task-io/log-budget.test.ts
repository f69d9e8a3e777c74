import { existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterAll, describe, expect, it } from 'vitest';
import { logTruncatedMarker } from '../../../../src/contracts/worker-protocol.js';
import { LogBudget } from '../../../../worker/task-io/log-budget.js';
import { startLogPump } from '../../../../worker/task-io/logs.js';

// The worker's per-task log cap (docs/performance.md "Noisy neighbours"): the budget's arithmetic, then a real pump over a real file.

const dir = mkdtempSync(join(tmpdir(), 'gpu-broker-log-budget-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('LogBudget', () => {
  it('shares the cap between the two streams and cuts the piece that crosses it', () => {
    const b = new LogBudget(100);
    expect(b.take('stdout', 60)).toEqual({ keep: 60, marker: false });
    expect(b.take('stderr', 30)).toEqual({ keep: 30, marker: false });
    expect(b.take('stdout', 25)).toEqual({ keep: 10, marker: true });
    expect(b.dropped('stdout')).toBe(15);
    expect(b.dropped('stderr')).toBe(0);
  });

  it('marks each stream once, at its first dropped byte, and counts everything after', () => {
    const b = new LogBudget(10);
    expect(b.take('stdout', 10)).toEqual({ keep: 10, marker: false });
    expect(b.take('stdout', 5)).toEqual({ keep: 0, marker: true });
    expect(b.take('stdout', 5)).toEqual({ keep: 0, marker: false });
    expect(b.take('stderr', 1)).toEqual({ keep: 0, marker: true });
    expect(b.take('stderr', 1_000_000)).toEqual({ keep: 0, marker: false });
    expect(b.dropped('stdout')).toBe(10);
    expect(b.dropped('stderr')).toBe(1_000_001);
  });

  it('never marks a stream that stays within the cap, even when it fills it exactly', () => {
    const b = new LogBudget(10);
    expect(b.take('stdout', 10)).toEqual({ keep: 10, marker: false });
    expect(b.take('stdout', 0)).toEqual({ keep: 0, marker: false });
    expect(b.dropped('stdout')).toBe(0);
  });
});

describe('a pump under the cap', () => {
  it('keeps the cap and one marker on disk and in chunks, and drains the rest of the pipe', async () => {
    const cap = 1000;
    const budget = new LogBudget(cap);
    const source = new PassThrough();
    const file = join(dir, 'flood.log');
    const chunks: Array<{ offset: number; data: string }> = [];
    const pump = startLogPump(
      'stdout',
      source,
      file,
      (_s, offset, data) => chunks.push({ offset, data }),
      budget,
    );
    // Far more than the PassThrough buffers: the pump must keep reading for `finished` to settle.
    const piece = Buffer.alloc(64 * 1024, 'x');
    for (let i = 0; i < 200; i++) if (!source.write(piece)) await new Promise((r) => source.once('drain', r));
    source.end();
    const summary = await pump.finished;
    const marker = logTruncatedMarker(cap);
    expect(summary.bytes).toBe(200 * piece.length);
    expect(summary.dropped).toBe(200 * piece.length - cap);
    expect(summary.errors).toEqual([
      `stdout: ${summary.dropped} bytes past the task's log cap of ${cap} bytes dropped`,
    ]);
    expect(readFileSync(file, 'utf8')).toBe('x'.repeat(cap) + marker);
    expect(chunks.map((c) => c.data).join('')).toBe('x'.repeat(cap) + marker);
    expect(chunks[0]!.offset).toBe(0);
    expect(chunks.at(-1)!.data.endsWith(marker)).toBe(true);
  });

  it('delivers a character cut by the cap as it is, then the marker at its byte offset', async () => {
    const budget = new LogBudget(4);
    const source = new PassThrough();
    const chunks: Array<{ offset: number; data: string }> = [];
    const pump = startLogPump(
      'stderr',
      source,
      join(dir, 'cut.log'),
      (_s, offset, data) => chunks.push({ offset, data }),
      budget,
    );
    source.end(Buffer.from('ab€€')); // 2 + 3 + 3 bytes: the cap falls inside the first €
    await pump.finished;
    const text = chunks.map((c) => c.data).join('');
    expect(text.startsWith('ab\uFFFD')).toBe(true);
    expect(text.endsWith(logTruncatedMarker(4))).toBe(true);
    expect(readFileSync(join(dir, 'cut.log')).subarray(0, 4)).toEqual(Buffer.from('ab€').subarray(0, 4));
  });

  it('leaves a task within the cap untouched', async () => {
    const source = new PassThrough();
    const pump = startLogPump('stdout', source, join(dir, 'quiet.log'), () => undefined, new LogBudget(1024));
    source.end('quiet\n');
    expect(await pump.finished).toEqual({ bytes: 6, dropped: 0, errors: [] });
    expect(readFileSync(join(dir, 'quiet.log'), 'utf8')).toBe('quiet\n');
  });
});

describe("a pump's log file", () => {
  it('is not made for a stream that carries nothing', async () => {
    const source = new PassThrough();
    const file = join(dir, 'silent.log');
    const pump = startLogPump('stdout', source, file, () => undefined);
    source.end();
    expect(await pump.finished).toEqual({ bytes: 0, dropped: 0, errors: [] });
    expect(existsSync(file)).toBe(false);
  });

  it('is made new on the first byte: a link or file already at its path is neither followed nor written', async () => {
    const victim = join(dir, 'victim.txt');
    writeFileSync(victim, 'precious\n');
    const planted = join(dir, 'planted.log');
    symlinkSync(victim, planted);
    const chunks: string[] = [];
    const source = new PassThrough();
    const pump = startLogPump('stderr', source, planted, (_s, _o, data) => chunks.push(data));
    source.end('hello\n');
    const summary = await pump.finished;
    expect(readFileSync(victim, 'utf8')).toBe('precious\n');
    expect(summary.errors.join('\n')).toContain('stderr.log: EEXIST');
    // The pipe is still read and streamed: a failed file never disturbs the task.
    expect(summary.bytes).toBe(6);
    expect(chunks.join('')).toBe('hello\n');
  });
});

describe('a pump over a pipe that closed before it listened', () => {
  it('finishes instead of waiting for a close that already happened', async () => {
    const source = new PassThrough();
    source.destroy();
    await new Promise((r) => source.once('close', r));
    const pump = startLogPump('stdout', source, join(dir, 'closed-before.log'), () => {});
    const summary = await pump.finished;
    expect(summary).toMatchObject({ bytes: 0, dropped: 0 });
  });

  it('finishes for a stream that already ended', async () => {
    const source = new PassThrough();
    source.end();
    source.resume();
    await new Promise((r) => source.once('end', r));
    const pump = startLogPump('stderr', source, join(dir, 'ended-before.log'), () => {});
    expect((await pump.finished).bytes).toBe(0);
  });
});
