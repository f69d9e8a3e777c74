import { describe, expect, it } from 'vitest';
import { keptOfChunk } from '../../../../src/broker/workers/reports.js';

// The master's per-task log cap (both streams together) on one incoming chunk: pure arithmetic.

const bytes = (n: number) => Buffer.alloc(n, 'x');

describe('keptOfChunk', () => {
  it('keeps a chunk that fits and cuts the one that crosses the cap', () => {
    expect(keptOfChunk(100, 10, 20, 10, bytes(50))).toEqual({ data: bytes(50), capped: false });
    expect(keptOfChunk(100, 60, 20, 60, bytes(50))).toEqual({ data: bytes(20), capped: true });
  });

  it('places the marker on the first new byte past a cap the worker filled exactly', () => {
    // The worker cuts at the same cap: the log reaches it exactly, then the worker's own marker comes.
    expect(keptOfChunk(100, 80, 20, 80, bytes(30))).toEqual({ data: bytes(0), capped: true });
  });

  it('drops what comes once the marker is stored, and a resent chunk at the cap', () => {
    expect(keptOfChunk(100, 170, 20, 170, bytes(5))).toBeNull();
    expect(keptOfChunk(100, 80, 20, 40, bytes(40))).toBeNull();
  });

  it('keeps a log that ends exactly at the cap unmarked', () => {
    expect(keptOfChunk(100, 50, 0, 50, bytes(50))).toEqual({ data: bytes(50), capped: false });
  });
});
