import { afterEach, describe, expect, it } from 'vitest';
import { readLogPage } from '../../../../src/broker/tools/task-results.js';
import { Store } from '../../../../src/store/store.js';

/**
 * get_task_logs pages by byte offset; a page must not split a multi-byte UTF-8 character (the page's text
 * would carry U+FFFD for bytes the log never had), and `next_offset` must stay the store's exact position.
 * Real SQLite store; chunks split on character boundaries, as the worker sends its text.
 */

const SOURCE = Buffer.from('aé€😀\nπ≈ok 日本語 😀😀 ß\né€\n', 'utf8');
const EXEC = 'exec_1';
let store: Store | undefined;

function logOf(chunks: { offset: number; text: string }[]): Store {
  store = Store.open(':memory:');
  for (const c of chunks) store.logs.putChunk(EXEC, 'stdout', c.offset, Buffer.from(c.text, 'utf8'));
  return store;
}

/** SOURCE in chunks of a few characters each, at their byte offsets. */
function chunked(): { offset: number; text: string }[] {
  const chars = [...SOURCE.toString('utf8')];
  const out: { offset: number; text: string }[] = [];
  let offset = 0;
  for (let i = 0; i < chars.length; i += 3) {
    const text = chars.slice(i, i + 3).join('');
    out.push({ offset, text });
    offset += Buffer.byteLength(text);
  }
  return out;
}

afterEach(() => {
  store?.close();
  store = undefined;
});

describe('log pages end on a character boundary', () => {
  it('reassembles the log exactly at every page size, with no U+FFFD and exact next offsets', () => {
    const s = logOf(chunked());
    for (let max = 1; max <= SOURCE.length + 1; max++) {
      const pages: Buffer[] = [];
      let from = 0;
      while (from < SOURCE.length) {
        const p = readLogPage(s.logs, EXEC, 'stdout', from, max);
        expect(p.offset).toBe(from);
        expect(p.data.length).toBeGreaterThan(0);
        expect(p.data.length).toBeLessThanOrEqual(Math.max(max, 4)); // a character longer than max comes whole
        expect(p.data.toString('utf8')).not.toContain('\uFFFD');
        expect(p.next).toBe(p.offset + p.data.length);
        pages.push(p.data);
        from = p.next;
      }
      expect(Buffer.concat(pages).equals(SOURCE)).toBe(true);
    }
  });

  it('starts a page asked for inside a character at the next character, and says so in offset', () => {
    const s = logOf(chunked());
    for (let from = 0; from <= SOURCE.length; from++) {
      for (const max of [1, 2, 5, 64]) {
        const p = readLogPage(s.logs, EXEC, 'stdout', from, max);
        expect(p.offset - from).toBeGreaterThanOrEqual(0);
        expect(p.offset - from).toBeLessThanOrEqual(3);
        expect(p.data.toString('utf8')).not.toContain('\uFFFD');
        expect(p.data.equals(SOURCE.subarray(p.offset, p.next))).toBe(true);
      }
    }
  });

  it('keeps the store positions across a gap between chunks (offsets of raw bytes, binary output)', () => {
    // The worker's offsets count raw bytes; text of invalid UTF-8 can be shorter, leaving a gap.
    const s = logOf([
      { offset: 0, text: 'ab€' },
      { offset: 9, text: 'é😀z' },
    ]);
    const whole = Buffer.from('ab€é😀z', 'utf8');
    for (let max = 1; max <= 12; max++) {
      const pages: Buffer[] = [];
      let from = 0;
      for (let guard = 0; guard < 20; guard++) {
        const p = readLogPage(s.logs, EXEC, 'stdout', from, max);
        if (p.data.length === 0) break;
        expect(p.data.toString('utf8')).not.toContain('\uFFFD');
        pages.push(p.data);
        from = p.next;
      }
      expect(Buffer.concat(pages).equals(whole)).toBe(true);
      expect(from).toBe(9 + Buffer.byteLength('é😀z'));
    }
  });
});
